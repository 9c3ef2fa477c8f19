"""What a run needs on this machine before ``amlgpu run-local`` starts it, and what of that is missing.

What the run's code imports for sure (:func:`analysis.pyscan.process_group_use`, following the code-folder modules
the command's Python scripts import; imports guarded by ``except ImportError`` left out), the Python package of the
per-node launcher its command starts (torchrun is torch's), and Open MPI's ``mpirun`` under ``distribution: mpi``.
Packages are looked up in the interpreter that stands in for the run's environment (``--python``, else the one
running amlgpu), with the run's own ``PYTHONPATH``; nothing is imported. What cannot be seen (a script the command
builds at run time, a command that installs packages itself) is not required: run-local starts it and the run says.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from analysis import pyscan
from jobs import launchers
from jobs.emulate import mpi
from kernel import bounded
from stack.resolved import ResolvedRun

LAUNCHER_PACKAGES = {
    launchers.TORCHRUN: "torch",
    launchers.TORCH_DISTRIBUTED_LAUNCH: "torch",
    launchers.ACCELERATE: "accelerate",
    launchers.DEEPSPEED: "deepspeed",
    launchers.LIGHTNING: "lightning",
}
"""The Python package a per-node launcher's program comes with (torchrun: torch's console script)."""

PIP_NAMES = {"sklearn": "scikit-learn", "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml",
             "pytorch_lightning": "pytorch-lightning", "skimage": "scikit-image"}
"""Import names that differ from the name pip installs (PyPI); every other package is installed by its name."""

SEPARATE_ENVIRONMENT = frozenset({"tensorflow", "keras", "deepspeed", "horovod"})
"""Packages that cannot join this project's environment: TensorFlow and Keras would break pulumi-policy's
protobuf pin, DeepSpeed and Horovod need CUDA builds (pyproject.toml says the same to mypy)."""

DOCS = "docs/local-emulation.md#what-a-run-needs-on-this-machine"


@dataclass(frozen=True)
class Need:
    """Something the run needs here: a Python package (``kind`` "package") or a program ("program")."""

    name: str
    kind: str
    why: str


@dataclass(frozen=True)
class Missing:
    need: Need
    detail: str
    """What to do about it (for a program, the finder's own words)."""


def needs(run: ResolvedRun, root: Path) -> list[Need]:
    """What ``run`` (resolved, of the project at ``root``) needs on this machine, in the order found."""
    found: dict[str, Need] = {}
    if run.distribution["type"] == "mpi":
        found["mpirun"] = Need("mpirun", "program", "distribution: mpi starts its ranks with Open MPI's mpirun")
    package = LAUNCHER_PACKAGES.get(run.launcher)
    if package is not None and run.launcher_script is None:
        found.setdefault(package, Need(package, "package", f"the command starts {run.launcher}"))
    code = run.spec.get("code")
    if code is None:
        return list(found.values())
    folder = root / code
    reading = launchers.read_command(run.spec["command"], code=folder)
    if reading.installs_packages():
        return list(found.values())  # what it installs at run time is not this machine's to have beforehand
    for ref in reading.scripts:
        if ref.kind != "python" or not (folder / ref.path).is_file():
            continue
        for imported in pyscan.process_group_use(folder, ref.path).packages:
            found.setdefault(imported.package, Need(imported.package, "package",
                                                    f"{imported.file} imports it (line {imported.line})"))
    return list(found.values())


def environment(run: ResolvedRun, environ: Mapping[str, str]) -> dict[str, str]:
    """What the run's processes start with, as far as finding packages and programs goes: the user's environment
    with the run's ``environment_variables`` over it (its PYTHONPATH, its PATH)."""
    return {**environ, **{k: str(v) for k, v in run.spec.get("environment_variables", {}).items()}}


def missing(wanted: list[Need], *, python: str, environ: Mapping[str, str]) -> list[Missing]:
    """Of ``wanted``, what ``python``'s environment (its packages, with ``environ``'s PYTHONPATH) and ``environ``'s
    PATH (its programs) lack; ``environ``: :func:`environment`."""
    packages = [n.name for n in wanted if n.kind == "package"]
    absent = set(absent_packages(packages, python=python, pythonpath=environ.get("PYTHONPATH")))
    out: list[Missing] = []
    for need in wanted:
        if need.kind == "program":
            try:
                mpi.find_mpirun(environ)
            except mpi.MpiUnavailable as err:
                out.append(Missing(need, str(err)))
        elif need.name in absent:
            out.append(Missing(need, f"pip install {PIP_NAMES.get(need.name, need.name)}"))
    return out


def absent_packages(names: list[str], *, python: str, pythonpath: str | None) -> list[str]:
    """The top-level packages of ``names`` that ``python`` cannot import (found by ``importlib.util.find_spec``,
    which imports nothing). This interpreter answers for itself; another one is asked in a process of its own."""
    if not names:
        return []
    if Path(python).absolute() == Path(sys.executable).absolute() and not pythonpath:
        return [name for name in names if importlib.util.find_spec(name) is None]
    probe = ("import importlib.util, json, sys; "
             "print(json.dumps([n for n in sys.argv[1:] if importlib.util.find_spec(n) is None]))")
    env = {"PYTHONPATH": pythonpath} if pythonpath else {}
    try:
        done = subprocess.run([python, "-c", probe, *names], capture_output=True, text=True, timeout=60,
                              check=False, env={"PATH": "/usr/bin:/bin", **env}, stdin=subprocess.DEVNULL)
        answer = bounded.load_json(done.stdout, "an interpreter's list of absent packages") \
            if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, bounded.BoundedInputError):
        answer = None
    if not isinstance(answer, list):
        raise OSError(f"{python} cannot be asked what it can import")
    return [str(name) for name in answer]


def advice(absent: list[Missing], wanted: list[Need], *, python: str) -> str:
    """How to get what is missing (``absent`` of ``wanted``): the commands, and where (a separate environment, with
    every package the run imports, for what cannot join this project's), one line each."""
    lines = [f"  {m.need.name}: {m.need.why}; {m.detail}" for m in absent]
    packages = sorted(PIP_NAMES.get(m.need.name, m.need.name) for m in absent if m.need.kind == "package")
    if not packages:
        return "\n".join(lines)
    apart = sorted(m.need.name for m in absent if m.need.name in SEPARATE_ENVIRONMENT)
    if apart:
        every = sorted(PIP_NAMES.get(n.name, n.name) for n in wanted if n.kind == "package")
        lines.append(f"{', '.join(apart)} cannot be installed in this project's environment ({python}): make a "
                     f"separate one for the run's processes and pass its interpreter with --python:")
        lines.append(f"  python3 -m venv ~/.venvs/run-local && ~/.venvs/run-local/bin/pip install {' '.join(every)}")
        lines.append("  amlgpu run-local ... --python ~/.venvs/run-local/bin/python")
    else:
        lines.append(f"install into {python}'s environment: {python} -m pip install {' '.join(packages)} "
                     "(or pass another environment's interpreter with --python)")
    lines.append(f"(see {DOCS})")
    return "\n".join(lines)
