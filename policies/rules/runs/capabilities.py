"""Run rules on the environment's capabilities: MPI, Horovod, DeepSpeed, InfiniBand libraries and the GPU
vendor a run needs, known present (unknown is advisory), and a pinned base image."""

from __future__ import annotations

from jobs.launchers import (
    DEEPSPEED,
    HOROVOD,
)
from kernel import regex as linear
from policies.rule import run_rule
from policies.rules.runs import DISTRIBUTED_GUIDE
from stack.infrastructure import image_pinned
from stack.resolved import ResolvedRun

_HOROVOD = linear.compile(r"(?i)\bhorovod|\bhvd\b")
_DEEPSPEED = linear.compile(r"(?i)\bdeepspeed\b")
"""What a command that runs Horovod or DeepSpeed says, when its launcher does not."""


def _uses(run: ResolvedRun, launcher: str, pattern: linear.Pattern) -> bool:
    command = str(run.spec.get("command", ""))
    return run.launcher == launcher or pattern.search(command) is not None


def _env_label(run: ResolvedRun) -> str:
    return f"environment {run.environment.name or run.environment.id}"


def _missing(run: ResolvedRun, capability: str) -> bool:
    """The environment is *known* to lack ``capability`` (unknown is not missing: see
    ``run-environment-capability-unknown``)."""
    return run.environment.state(capability) == "absent"


def _needed(run: ResolvedRun) -> list[tuple[str, str]]:
    """(capability, why) for what the run needs from its environment."""
    needs: list[tuple[str, str]] = []
    if run.distribution["type"] == "mpi":
        needs.append(("mpi", "distribution mpi"))
    if _uses(run, HOROVOD, _HOROVOD):
        needs.append(("horovod", "Horovod"))
    if _uses(run, DEEPSPEED, _DEEPSPEED):
        needs.append(("deepspeed", "DeepSpeed"))
        if run.distribution["type"] == "mpi":
            needs.append(("mpi4py", "DeepSpeed under MPI"))
    if run.instance_count > 1 and run.cluster.infiniband:
        needs.append(("infiniband", f"{run.instance_count} nodes on InfiniBand"))
    return needs


def _declare_hint(run: ResolvedRun, capability: str) -> str:
    if run.environment.name is None:
        return f"declare it in the stack's environments with provides: [{capability}] if it has it"
    return f"add {capability} to its provides if it has it"


@run_rule(
    id="run-mpi-environment",
    title="MPI runs use an environment with an MPI library",
    severity="high",
    enforcement="mandatory",
    rationale="Under distribution: mpi Azure ML starts ranks with mpirun from the image; without Open MPI the "
    "job fails before the script starts.",
    remediation="Use an environment that provides mpi (Azure ML openmpi base images, ACPT) and say so in its "
    "provides list.",
    reference=DISTRIBUTED_GUIDE + "#mpi",
    config_key=("environment",),
)
def run_mpi_environment(run: ResolvedRun) -> list[str]:
    if run.distribution["type"] != "mpi" or not _missing(run, "mpi"):
        return []
    return [f"distribution mpi, but {_env_label(run)} is known not to provide MPI"]


@run_rule(
    id="run-horovod-environment",
    title="Horovod runs use MPI distribution and an environment with Horovod",
    severity="high",
    enforcement="mandatory",
    rationale="Horovod on Azure ML runs one MPI rank per GPU (distribution: mpi) and needs Horovod built "
    "against the image's MPI and NCCL; otherwise 'import horovod' fails or every rank trains alone.",
    remediation="Use distribution: mpi with an environment that provides horovod and mpi.",
    reference="https://github.com/Azure/azureml-examples/tree/main/cli/jobs/single-step/tensorflow/mnist-distributed-horovod",
    config_key=("environment",),
)
def run_horovod_environment(run: ResolvedRun) -> list[str]:
    if not _uses(run, HOROVOD, _HOROVOD):
        return []
    out = []
    if run.distribution["type"] != "mpi":
        out.append(f"uses Horovod under distribution {run.distribution['type']}; Horovod needs distribution mpi")
    if _missing(run, "horovod"):
        out.append(f"uses Horovod, but {_env_label(run)} is known not to provide it")
    return out


@run_rule(
    id="run-deepspeed-environment",
    title="DeepSpeed runs use an environment with DeepSpeed (and mpi4py under MPI)",
    severity="high",
    enforcement="mandatory",
    rationale="DeepSpeed must be in the image (it compiles ops against its CUDA); under distribution: mpi it "
    "discovers ranks through mpi4py, without which every rank believes it is alone.",
    remediation="Use an environment that provides deepspeed (ACPT images do), plus mpi4py for MPI runs.",
    reference="https://github.com/Azure/azureml-examples/tree/main/cli/jobs/deepspeed",
    config_key=("environment",),
)
def run_deepspeed_environment(run: ResolvedRun) -> list[str]:
    if not _uses(run, DEEPSPEED, _DEEPSPEED):
        return []
    out = []
    if _missing(run, "deepspeed"):
        out.append(f"uses DeepSpeed, but {_env_label(run)} is known not to provide it")
    if run.distribution["type"] == "mpi" and _missing(run, "mpi4py"):
        out.append(f"runs DeepSpeed under MPI, but {_env_label(run)} is known not to provide mpi4py")
    return out


@run_rule(
    id="run-environment-infiniband",
    title="Multi-node runs on InfiniBand use an environment with InfiniBand user-space libraries",
    severity="medium",
    enforcement="advisory",
    rationale="NCCL reaches InfiniBand through the image's OFED/UCX user-space libraries; an image without "
    "them silently falls back to TCP sockets on an InfiniBand cluster.",
    remediation="Use an Azure ML GPU base image or ACPT (they ship OFED) and list infiniband in provides.",
    reference=DISTRIBUTED_GUIDE + "#accelerate-distributed-gpu-training-with-infiniband",
    config_key=("environment",),
)
def run_environment_infiniband(run: ResolvedRun) -> list[str]:
    if run.instance_count <= 1 or not run.cluster.infiniband or not _missing(run, "infiniband"):
        return []
    return [f"{run.instance_count} nodes on InfiniBand, but {_env_label(run)} is known not to provide "
            "InfiniBand libraries"]


@run_rule(
    id="run-environment-capability-unknown",
    title="What a run needs from its environment can be seen there",
    severity="low",
    enforcement="advisory",
    rationale="A curated or registry environment, an image outside the evidence table or a build context that "
    "installs what cannot be followed may well have MPI, Horovod, DeepSpeed or InfiniBand libraries; the gate "
    "cannot see it. Unknown is not missing: the run is not blocked, and the capability rules block only what is "
    "known to be absent (azurefacts/environment-capabilities.yaml).",
    remediation="Declare the environment in the stack with provides: [...] once you have checked it, or use an "
    "image the evidence table knows.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("environment",),
)
def run_environment_capability_unknown(run: ResolvedRun) -> list[str]:
    unknown = [(cap, why) for cap, why in _needed(run) if run.environment.state(cap) == "unknown"]
    return [f"{why} needs {cap}; whether {_env_label(run)} has it cannot be seen ({_declare_hint(run, cap)})"
            for cap, why in unknown]


@run_rule(
    id="run-gpu-vendor-environment",
    title="The environment's GPU stack matches the cluster's GPU vendor",
    severity="critical",
    enforcement="mandatory",
    rationale="AMD sizes (MI300X) run ROCm/RCCL; a CUDA/NCCL image finds no GPU there, and a ROCm-only image "
    "finds none on NVIDIA sizes.",
    remediation="Pair MI300X clusters with ROCm environments and NVIDIA clusters with CUDA environments.",
    reference="https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/gpu-accelerated/ndmi300xv5-series",
    config_key=("environment",),
)
def run_gpu_vendor_environment(run: ResolvedRun) -> list[str]:
    caps = set(run.environment.capabilities)
    if run.cluster.gpu_vendor == "amd" and caps & {"cuda", "nccl"} and "rocm" not in caps:
        return [f"{_env_label(run)} is CUDA/NCCL, but {run.cluster.size} has AMD GPUs (ROCm/RCCL)"]
    if run.cluster.gpu_vendor == "nvidia" and caps & {"rocm", "rccl"} and "cuda" not in caps:
        return [f"{_env_label(run)} is ROCm, but {run.cluster.size} has NVIDIA GPUs (CUDA/NCCL)"]
    return []


@run_rule(
    id="run-environment-pinned",
    title="Runs use a pinned environment version",
    severity="medium",
    enforcement="advisory",
    hygiene=True,
    rationale="'@latest' or ':latest' resolves at submission: the same run gets different libraries from one "
    "day to the next, and the nodes of one run can disagree.",
    remediation="Reference azureml:<name>:<version> or a registry environment with /versions/<version>.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/concept-environments",
    config_key=("environment",),
)
def run_environment_pinned(run: ResolvedRun) -> list[str]:
    if run.environment.pinned:
        return []
    moving = [b for b in run.environment.bases if not image_pinned(b)]
    if moving:
        return [f"{_env_label(run)} builds FROM {', '.join(moving)}, a moving tag"]
    return [f"environment {run.environment.id} is not pinned to a version"]
