"""The machine checks of ``amlgpu doctor``: what this machine can do with the project, and what to install or run
for the rest; rows of the shared checks registry (:mod:`preflight.checks`).

* python, the project's packages: required for everything (MISSING when absent);
* the project folder: where ``amlgpu plan`` finds ``Pulumi.yaml`` and the stacks (WARN outside one);
* the Pulumi CLI, an Azure login (``az`` or ARM_*/AZURE_* variables for OIDC or a service principal): needed for
  ``pulumi preview/up`` and ``amlgpu submit`` only (WARN);
* Open MPI's ``mpirun``, torch, CUDA GPUs and NCCL: for ``amlgpu run-local`` (WARN). Importing torch takes seconds,
  which is why only this command does it.

Secret values are never read into a row: credentials are reported by variable name only.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from preflight.checks import Check, Entry, Registry

DISTRIBUTION = "aml-gpu-training"
MIN_PYTHON = (3, 11)
_TIMEOUT_S = 20
"""A CLI that hangs longer than this (``az`` refreshing a token offline) is reported, not waited for."""

PULUMI_INSTALL = "install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh (or brew install pulumi/tap/pulumi)"
AZ_LOGIN = "run `az login`, or set ARM_CLIENT_ID, ARM_TENANT_ID, ARM_SUBSCRIPTION_ID with ARM_USE_OIDC=true for OIDC"


def _run(argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, env=dict(env), check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] >= MIN_PYTHON:
        return Check("python", "OK", f"{version} ({sys.executable})", required=True)
    wanted = ".".join(map(str, MIN_PYTHON))
    return Check("python", "MISSING", f"{version} is too old", f"use Python {wanted} or newer", required=True)


def check_packages() -> Check:
    """The project and every runtime dependency it declares, installed at an accepted version."""
    from packaging.requirements import Requirement

    fix = "run `make install` (or: pip install -e .) in the project"
    try:
        own = importlib.metadata.version(DISTRIBUTION)
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return Check("packages", "MISSING", f"{DISTRIBUTION} is not installed in this Python", fix, required=True)
    problems = []
    runtime = [Requirement(line) for line in declared if "extra ==" not in line]
    for requirement in runtime:
        try:
            found = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{requirement.name} not installed")
            continue
        if not requirement.specifier.contains(found, prereleases=True):
            problems.append(f"{requirement.name} {found} (wants {requirement.specifier})")
    if problems:
        return Check("packages", "MISSING", "; ".join(problems), fix, required=True)
    return Check("packages", "OK", f"{DISTRIBUTION} {own} and its {len(runtime)} dependencies", required=True)


def check_project(cwd: Path) -> Check:
    from kernel.errors import UserError
    from stack.project import find_root, stack_names

    try:
        root = find_root(cwd)
    except UserError:
        return Check("project", "WARN", f"no Pulumi.yaml in {cwd} or above", "run amlgpu inside the project folder")
    stacks = stack_names(root)
    if not stacks:
        return Check("project", "WARN", f"{root}: no Pulumi.<stack>.yaml", "add a stack file, e.g. Pulumi.dev.yaml")
    return Check("project", "OK", f"{root} (stacks: {', '.join(stacks)})")


def check_pulumi(env: Mapping[str, str]) -> Check:
    path = shutil.which("pulumi", path=env.get("PATH"))
    if path is None:
        return Check("pulumi", "WARN", "Pulumi CLI not on PATH (amlgpu plan does not need it)", PULUMI_INSTALL)
    result = _run([path, "version"], env)
    if result is None or result.returncode != 0:
        return Check("pulumi", "WARN", f"{path} version failed", PULUMI_INSTALL)
    return Check("pulumi", "OK", f"{_first_line(result.stdout)} ({path})")


def check_azure_login(env: Mapping[str, str]) -> Check:
    """Credentials Pulumi (ARM_*) or azure-identity (AZURE_*) would use, else the az CLI's login."""
    for prefix, reader in (("ARM", "Pulumi's azure-native provider"), ("AZURE", "azure-identity (amlgpu submit)")):
        identity = [f"{prefix}_{name}" for name in ("CLIENT_ID", "TENANT_ID")]
        if not all(env.get(name) for name in identity):
            continue
        if prefix == "ARM" and env.get("ARM_USE_OIDC", "").lower() == "true":
            how = "OIDC (ARM_USE_OIDC=true)"
        elif env.get(f"{prefix}_CLIENT_SECRET"):
            how = f"a client secret ({prefix}_CLIENT_SECRET)"
        elif env.get(f"{prefix}_CLIENT_CERTIFICATE_PATH"):
            how = f"a certificate ({prefix}_CLIENT_CERTIFICATE_PATH)"
        elif prefix == "AZURE" and env.get("AZURE_FEDERATED_TOKEN_FILE"):
            how = "workload identity (AZURE_FEDERATED_TOKEN_FILE)"
        else:
            continue
        subscription = f"{prefix}_SUBSCRIPTION_ID"
        names = ", ".join([*identity, subscription]) if env.get(subscription) else ", ".join(identity)
        if prefix == "ARM" and not env.get(subscription):
            return Check("azure login", "WARN", f"{', '.join(identity)} set for {how} but no {subscription}",
                         f"set {subscription}, or `pulumi config set azure-native:subscriptionId <id>`")
        return Check("azure login", "OK", f"{names} set: {reader} signs in with {how}")
    path = shutil.which("az", path=env.get("PATH"))
    if path is None:
        return Check("azure login", "WARN", "no az CLI and no ARM_*/AZURE_* credentials (amlgpu plan needs none)",
                     "install the Azure CLI (https://aka.ms/installazurecli) and " + AZ_LOGIN.removeprefix("run "))
    result = _run([path, "account", "show", "--output", "none"], env)
    if result is None or result.returncode != 0:
        return Check("azure login", "WARN", "az CLI is not logged in", AZ_LOGIN)
    return Check("azure login", "OK", f"az CLI is logged in ({path})")


def check_mpirun(env: Mapping[str, str], find_mpirun: Callable[[Mapping[str, str]], str],
                 unavailable: type[Exception]) -> Check:
    """Open MPI's ``mpirun`` as run-local finds it (``find_mpirun``, raising ``unavailable`` with the reason: the
    emulator's own finder, handed in by the command, as preflight imports no other feature)."""
    try:
        path = find_mpirun(env)
    except unavailable as err:
        return Check("mpirun", "WARN", f"{err}".split(": ", 1)[0] + " (amlgpu run-local of mpi runs needs it)",
                     "install Open MPI: apt-get install openmpi-bin (macOS: brew install open-mpi)")
    result = _run([path, "--version"], env)
    return Check("mpirun", "OK", f"{_first_line(result.stdout if result else '')} ({path})")


def check_torch() -> list[Check]:
    """torch itself, then the GPUs it sees and NCCL (imported here only: it takes seconds)."""
    fix = "pip install -e '.[emulate]' (CPU is enough for run-local; a CUDA build for GPUs)"
    try:
        import torch
        import torch.distributed
    except ImportError as err:
        return [Check("torch", "WARN", f"not importable ({err}); amlgpu run-local needs it", fix)]
    gloo = "gloo available" if torch.distributed.is_gloo_available() else "no gloo"
    checks = [Check("torch", "OK", f"{torch.__version__}, {gloo}")]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not count:
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        checks.append(Check("gpus", "WARN", f"no CUDA GPU visible ({build}): run-local emulates on CPU with gloo",
                            "on a GPU machine install a CUDA build of torch: make install-dev TORCH=torch"))
        return checks
    names = sorted({torch.cuda.get_device_name(i) for i in range(count)})
    checks.append(Check("gpus", "OK", f"{count} visible: {', '.join(names)}"))
    if torch.distributed.is_nccl_available():
        version = ".".join(map(str, torch.cuda.nccl.version()))
        checks.append(Check("nccl", "OK", f"NCCL {version} in torch"))
    else:
        checks.append(Check("nccl", "WARN", "this torch build has no NCCL: multi-GPU runs fall back to gloo",
                            "install a CUDA build of torch with NCCL (the default Linux wheels have it)"))
    return checks


@dataclass(frozen=True)
class Machine:
    """What the machine checks look at: the environment, the folder the command runs in, and how run-local finds
    ``mpirun``."""

    env: Mapping[str, str]
    cwd: Path
    find_mpirun: Callable[[Mapping[str, str]], str]
    mpi_unavailable: type[Exception]


MACHINE: Registry[Machine, Machine] = Registry([
    Entry("python", lambda m: [check_python()]),
    Entry("packages", lambda m: [check_packages()]),
    Entry("project", lambda m: [check_project(m.cwd)]),
    Entry("pulumi", lambda m: [check_pulumi(m.env)]),
    Entry("azure login", lambda m: [check_azure_login(m.env)]),
    Entry("mpirun", lambda m: [check_mpirun(m.env, m.find_mpirun, m.mpi_unavailable)]),
    Entry("torch", lambda m: check_torch()),
])
"""Every machine check, in the order shown (``torch`` adds the GPU and NCCL rows)."""


def ready(checks: list[Check]) -> dict[str, bool]:
    """What the machine can do, by task."""
    ok = {c.name for c in checks if c.status == "OK"}
    plan = all(c.status == "OK" for c in checks if c.required)
    return {
        "plan": plan and "project" in ok,
        "deploy": plan and {"pulumi", "azure login"} <= ok,
        "run_local": plan and "torch" in ok,
        "run_local_mpi": plan and {"torch", "mpirun"} <= ok,
        "gpus": plan and {"gpus", "nccl"} <= ok,
    }
