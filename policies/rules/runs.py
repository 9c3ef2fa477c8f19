"""Distributed-run rules: runs that would fail, hang or waste an InfiniBand cluster, judged before submission.

No scanner has these: they follow Azure ML's launch contract (see ``azureml-launch-contract.md`` in the
shared reference) and compare each run with the facts of its cluster and environment, which the run
carries (:class:`~stack.resolved.ResolvedRun`). Two stack rules check that those facts are the ones
of the cluster and environment the stack actually plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analysis.contract import LAUNCHER_PREFIXES, LAUNCHER_VARIABLES
from analysis.secret_scan import BUDGET_BYTES
from jobs.launchers import (
    DEEPSPEED,
    HOROVOD,
    PER_GPU_LAUNCHERS,
    PER_NODE_LAUNCHERS,
    TORCH_DISTRIBUTED_LAUNCH,
    TORCHRUN,
    command_scripts,
)
from kernel import regex as linear
from kernel.secrets import secret_variables, secrets_in_definition
from policies.rule import Violation, run_rule, stack_rule
from policies.rules.environments import ENVIRONMENT_COMPONENT
from policies.rules.pipelines import opens_no_gpu
from policies.stack import Owner, Stack
from policies.wire import get, inputs, known, same
from stack.infrastructure import image_pinned
from stack.resolved import ResolvedRun

DISTRIBUTED_GUIDE = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-train-distributed-gpu"
JOB_YAML = "https://learn.microsoft.com/en-us/azure/machine-learning/reference-yaml-job-command"
COMPUTE = "azure-native:machinelearningservices:Compute"
ENVIRONMENT_VERSION = "azure-native:machinelearningservices:EnvironmentVersion"

_DEFAULT_NPROC = {TORCHRUN: 1, TORCH_DISTRIBUTED_LAUNCH: 1}
"""Processes per node a per-node launcher starts when its command gives no count (torchrun's default).
The others (deepspeed, accelerate, Lightning) default to every visible GPU or to their own config."""


def _env(run: ResolvedRun) -> Mapping[str, str]:
    return run.spec.get("environment_variables") or {}


def _gpu_processes_per_node(run: ResolvedRun) -> int | None:
    """GPU processes each node runs: Azure ML's per-process count, or what a per-node launcher starts
    (None for TensorFlow, where one process drives all GPUs, and when only known at run time)."""
    if run.distribution["type"] == "tensorflow":
        return None
    if run.launcher in PER_NODE_LAUNCHERS:
        return run.launcher_nproc_per_node or _DEFAULT_NPROC.get(run.launcher)
    return run.processes_per_node


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
    id="run-counts-valid",
    title="Node, process, worker and parameter-server counts are positive",
    severity="critical",
    enforcement="mandatory",
    rationale="azure-ai-ml does not range-check counts offline: a zero or negative instance_count or "
    "process_count_per_instance is accepted locally and fails (or starts nothing) in Azure.",
    remediation="Use resources.instance_count >= 1, process_count_per_instance >= 1, worker_count >= 1 and "
    "parameter_server_count >= 0.",
    reference=JOB_YAML,
    config_key=("resources", "instance_count"),
)
def run_counts_valid(run: ResolvedRun) -> list[str]:
    dist = run.distribution
    counts = {
        "resources.instance_count": (run.spec.get("resources", {}).get("instance_count", 1), 1),
        "distribution.process_count_per_instance": (dist.get("process_count_per_instance", 1), 1),
        "distribution.worker_count": (dist.get("worker_count", 1), 1),
        "distribution.parameter_server_count": (dist.get("parameter_server_count", 0), 0),
    }
    return [
        f"{key} is {value} (must be an integer >= {least})"
        for key, (value, least) in counts.items()
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < least)
    ]


@run_rule(
    id="run-processes-exceed-gpus",
    title="A node runs no more GPU processes than it has GPUs",
    severity="critical",
    enforcement="mandatory",
    rationale="Two processes on one GPU make NCCL fail with 'Duplicate GPU detected'; the run crashes at "
    "initialisation after waiting for nodes. Judged only when each process is known to drive a GPU (Python "
    "scripts, a per-node launcher with a count): a command that opens no GPU (Microsoft's `echo` hello-world, "
    "`hostname`) may run any number of copies.",
    remediation="Set distribution.process_count_per_instance (per-process launch) or the launcher's "
    "--nproc_per_node / --num_gpus (per-node launch) to the node's GPUs.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("distribution", "process_count_per_instance"),
)
def run_processes_exceed_gpus(run: ResolvedRun) -> list[str]:
    procs = _gpu_processes_per_node(run)
    if procs is None or procs <= run.cluster.gpus or not _one_gpu_per_process(run):
        return []
    who = f"the {run.launcher} launcher starts" if run.launcher in PER_NODE_LAUNCHERS else "Azure ML starts"
    return [f"{who} {procs} processes per node on {run.cluster.size}, which has {run.cluster.gpus} GPU(s)"]


_SPAWNING_FRAMEWORKS = frozenset({"Lightning"})
"""Frameworks a script uses that start the node's GPU processes themselves, whatever launched the script:
Lightning's Trainer/Fabric under MPI or a plain ``python`` launch start one process per device
(``devices``), so Azure ML's per-node count says nothing of the GPUs used."""


def _one_gpu_per_process(run: ResolvedRun) -> bool:
    """Whether each process is known to drive one GPU: a per-node launcher with a known count, or Python
    training scripts started per process. A shell script, a health check (``nvidia-smi``, NCCL tests) or a
    command that only echoes may use the node as it likes: unknown, so not a finding."""
    if run.launcher in PER_NODE_LAUNCHERS:
        return run.launcher_script is None
    if set(run.script_frameworks) & _SPAWNING_FRAMEWORKS:
        return False  # Lightning (and accelerate's notebook_launcher) start their own processes per node
    scripts = command_scripts(str(run.spec.get("command", "")))
    return run.launcher in PER_GPU_LAUNCHERS and bool(scripts) and all(kind == "python" for kind, _ in scripts)


@run_rule(
    id="run-gpus-left-idle",
    title="A node runs one GPU process per GPU",
    severity="high",
    enforcement="mandatory",
    rationale="Fewer processes than GPUs leaves the rest of a reserved (and billed) GPU node idle, e.g. two "
    "processes per node on a four-GPU node. Judged only when the launch is known to drive one GPU per process "
    "(Python scripts started per process, a per-node launcher with a count): a shell script, a health check, "
    "a script that imports Lightning (which starts its own processes per node, under MPI too), a script that "
    "imports nothing that opens a GPU (a data preparation step: run-gpu-nodes-unused) or a command "
    "that only echoes is not. A run that drives several GPUs from one process on purpose (model "
    "parallelism) is waived, with the reason.",
    remediation="Set process_count_per_instance (per-process launch) or the per-node launcher's process count "
    "to the node's GPUs, or pick a size with fewer GPUs.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("distribution", "process_count_per_instance"),
)
def run_gpus_left_idle(run: ResolvedRun) -> list[str]:
    procs = _gpu_processes_per_node(run)
    if procs is None or procs >= run.cluster.gpus or not _one_gpu_per_process(run) or opens_no_gpu(run):
        return []  # a run that opens no GPU leaves them all idle: run-gpu-nodes-unused's (advisory) finding
    return [f"{procs} GPU process(es) per node on {run.cluster.size}: {run.cluster.gpus - procs} of "
            f"{run.cluster.gpus} GPUs stay idle"]


@run_rule(
    id="run-launcher-on-per-process-launch",
    title="Per-node launchers run under one Azure ML process per node",
    severity="critical",
    enforcement="mandatory",
    rationale="torchrun, torch.distributed.launch, Lightning, accelerate and the deepspeed CLI start the GPU "
    "processes themselves, whether the command names them or a shell script of the code folder does. Started "
    "by Azure ML once per GPU, each copy starts its own set: processes multiply, "
    "ranks collide and the run fails ('Duplicate GPU detected') or hangs at rendezvous.",
    remediation="Set distribution.process_count_per_instance: 1 and let the launcher start one process per "
    "GPU, or drop the launcher and let Azure ML start the processes.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("distribution", "process_count_per_instance"),
)
def run_launcher_on_per_process_launch(run: ResolvedRun) -> list[str]:
    if run.launcher not in PER_NODE_LAUNCHERS or run.processes_per_node <= 1:
        return []
    via = f" (from {run.launcher_script})" if run.launcher_script else ""
    return [f"the {run.launcher} launcher{via} is started {run.processes_per_node} times per node "
            f"(process_count_per_instance {run.processes_per_node}); each copy starts its own GPU processes"]


@run_rule(
    id="run-instance-count-exceeds-max-nodes",
    title="A run asks for no more nodes than its cluster can scale to",
    severity="critical",
    enforcement="mandatory",
    rationale="A job asking for more nodes than the cluster's maximum never starts: it waits in the queue "
    "for nodes that cannot exist.",
    remediation="Lower resources.instance_count or raise the cluster's max_instances.",
    reference=JOB_YAML,
    config_key=("resources", "instance_count"),
)
def run_instance_count_exceeds_max_nodes(run: ResolvedRun) -> list[str]:
    if run.instance_count <= run.cluster.max_instances:
        return []
    return [f"asks for {run.instance_count} nodes; cluster {run.cluster.name} scales to at most "
            f"{run.cluster.max_instances}"]


@run_rule(
    id="run-multi-node-without-infiniband",
    title="Multi-node runs use an InfiniBand size",
    severity="medium",
    enforcement="advisory",
    rationale="Without InfiniBand, gradients cross nodes over Ethernet: all-reduce is 10-30x slower and "
    "multi-node GPUs of a large model mostly wait (Standard_NC24s_v3, Standard_NC96ads_A100_v4 and other sizes "
    "without an 'r'). Advisory: a small model (the CIFAR and MNIST examples) trains fine over Ethernet.",
    remediation="Run multi-node jobs on an RDMA size with SR-IOV (e.g. Standard_ND96asr_v4, "
    "Standard_ND96isr_H100_v5), or run on one node.",
    reference=DISTRIBUTED_GUIDE + "#accelerate-distributed-gpu-training-with-infiniband",
    config_key=("resources", "instance_count"),
)
def run_multi_node_without_infiniband(run: ResolvedRun) -> list[str]:
    if run.instance_count <= 1 or run.cluster.rdma:
        return []
    return [f"{run.instance_count} nodes of {run.cluster.size}, which has no InfiniBand"]


@run_rule(
    id="run-multi-node-rdma-without-sriov",
    title="Multi-node runs use an RDMA size with SR-IOV",
    severity="high",
    enforcement="mandatory",
    rationale="Standard_NC24r and other RDMA sizes without SR-IOV expose InfiniBand in a way NCCL and MPI in "
    "the Azure ML images cannot use: traffic falls back to TCP.",
    remediation="Use an SR-IOV InfiniBand size (ND A100 v4, ND H100 v5 and newer).",
    reference="https://learn.microsoft.com/en-us/azure/virtual-machines/extensions/enable-infiniband",
    config_key=("resources", "instance_count"),
)
def run_multi_node_rdma_without_sriov(run: ResolvedRun) -> list[str]:
    if run.instance_count <= 1 or not run.cluster.rdma or run.cluster.sriov:
        return []
    return [f"{run.instance_count} nodes of {run.cluster.size}: RDMA without SR-IOV, unusable by NCCL/MPI"]


@run_rule(
    id="run-launcher-variables-overridden",
    title="Runs do not set variables the launcher owns",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML (and torchrun, mpirun) set MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, "
    "NODE_RANK, OMPI_COMM_WORLD_*, AZ_BATCH_MASTER_NODE and TF_CONFIG per process; a user value makes every "
    "process agree on a wrong rank or address and the run hangs at rendezvous. Kubeflow Trainer rejects the "
    "same names at admission. OMPI_MCA_* settings are the user's and allowed.",
    remediation="Remove the variable from environment_variables and read the launcher's value instead.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("environment_variables",),
)
def run_launcher_variables_overridden(run: ResolvedRun) -> list[str]:
    owned = [
        name for name in sorted(_env(run))
        if name in LAUNCHER_VARIABLES or name.startswith(LAUNCHER_PREFIXES)
    ]
    return [f"sets {name}, which the launcher sets per process" for name in owned]


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


_SIZE = linear.compile(r"([0-9]+)([bkmg])")


def _gib(size: str) -> float | None:
    match = _SIZE.fullmatch(size.strip().lower())
    if not match:
        return None
    return int(match.group(1)) / {"b": 1 << 30, "k": 1 << 20, "m": 1 << 10, "g": 1}[match.group(2)]


@run_rule(
    id="run-shm-size-sufficient",
    title="Runs give /dev/shm enough room for DataLoader workers",
    severity="medium",
    enforcement="advisory",
    hygiene=True,
    rationale="DataLoader workers pass batches through /dev/shm, shared by every process of a node. Azure ML's "
    "2g default (or a small explicit value) runs out with several GPU processes and workers: the run dies with "
    "'bus error' or 'No space left on device' hours in. Hygiene: whether it runs out depends on the DataLoader "
    "workers, which the gate cannot see (the project's default, 4g per GPU, never fires).",
    remediation="Set resources.shm_size to at least min_gib_per_process (pack parameter) times the GPU "
    "processes per node, e.g. 32g on an 8-GPU node; leave it out to get the project's default of 4g per GPU.",
    reference=JOB_YAML,
    config_key=("resources", "shm_size"),
)
def run_shm_size_sufficient(run: ResolvedRun, *, min_gib_per_process: int = 1) -> list[str]:
    size = run.spec.get("resources", {}).get("shm_size")
    # A per-node launcher with no count on its command line (deepspeed, accelerate, Lightning) uses every GPU.
    procs = _gpu_processes_per_node(run) or (run.cluster.gpus if run.launcher in PER_NODE_LAUNCHERS
                                             else run.processes_per_node)
    need = min_gib_per_process * procs
    have = _gib(size) if isinstance(size, str) else 2.0
    if have is None:
        return [f"shm_size {size!r} is not <number><b|k|m|g>"]
    if have >= need:
        return []
    shown = size if isinstance(size, str) else "not set (Azure ML default 2g)"
    return [f"shm_size {shown} for {procs} GPU process(es) per node; give at least {need}g"]


@run_rule(
    id="run-timeout-set",
    title="Runs set a timeout",
    severity="medium",
    enforcement="advisory",
    hygiene=True,
    rationale="A distributed run that hangs (a rank lost at rendezvous, an NCCL deadlock) holds every node of "
    "the cluster until someone notices; limits.timeout bounds the damage.",
    remediation="Set limits.timeout (seconds) to a generous upper bound of the run's duration.",
    reference=JOB_YAML,
    config_key=("limits", "timeout"),
)
def run_timeout_set(run: ResolvedRun) -> list[str]:
    timeout = (run.spec.get("limits") or {}).get("timeout")
    if isinstance(timeout, int) and timeout > 0:
        return []
    return ["no limits.timeout: a hung run holds its nodes until cancelled"]


@run_rule(
    id="run-secrets-in-environment-variables",
    title="Runs do not carry secrets in environment variables",
    severity="critical",
    enforcement="mandatory",
    rationale="environment_variables are stored in the job definition, shown in the studio to everyone with "
    "workspace access, written to the job YAML and the stack's outputs. Judged by value (known token shapes, "
    "high-entropy literals under a credential name), not by name: AZUREML_SSH_KEY: generated-key is a file name.",
    remediation="Keep the secret in the workspace key vault and read it at run time with the job's identity "
    "(azureml secrets / DefaultAzureCredential); never put the value in the stack.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-use-secrets-in-runs",
    config_key=("environment_variables",),
)
def run_secrets_in_environment_variables(run: ResolvedRun) -> list[str]:
    return [f"environment variable {found}" for found in secret_variables(_env(run))]


@run_rule(
    id="run-secrets-in-command",
    title="Runs do not carry secrets in their command, inputs or tags",
    severity="critical",
    enforcement="mandatory",
    rationale="The command line, literal inputs and tags are part of the job definition: written to the job "
    "file, shown on the run's page in the studio and kept with the job. Judged by value (known token shapes, "
    "high-entropy literals after a credential-named flag), not by name: --ssh-key-file generated-key is a file "
    "name.",
    remediation="Read the secret at run time from the workspace key vault with the job's identity; pass its "
    "name, not its value.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-use-secrets-in-runs",
    config_key=("command",),
)
def run_secrets_in_command(run: ResolvedRun) -> list[str]:
    return secrets_in_definition(run.spec)


@run_rule(
    id="run-entry-script-exists",
    title="The script a run's command starts is in its code folder",
    severity="critical",
    enforcement="mandatory",
    rationale="Azure ML uploads the code folder and runs the command in it; a script that is not there (a git "
    "submodule not checked out, a renamed file) fails with 'No such file or directory' after every node has "
    "started and been billed.",
    remediation="Add the script to the code folder (git submodule update --init), or fix the path in command.",
    reference=JOB_YAML,
    config_key=("command",),
)
def run_entry_script_exists(run: ResolvedRun) -> list[str]:
    folder = run.spec.get("code", ".")
    return [f"the command runs {script}, which is not in code folder {folder!r}" for script in run.missing_scripts]


@run_rule(
    id="run-secrets-in-code",
    title="Run code folders hold no private keys or tokens",
    severity="critical",
    enforcement="mandatory",
    rationale="The code folder is uploaded as the run's snapshot, readable by everyone with workspace "
    "access. A public DeepSpeed example ships an SSH private key that way.",
    remediation="Delete the file from the code folder (and rotate the credential); generate SSH keys at run "
    "time if the launcher needs them.",
    reference="https://github.com/Azure/azureml-examples/tree/main/cli/jobs/deepspeed",
    config_key=("code",),
)
def run_secrets_in_code(run: ResolvedRun) -> list[str]:
    return [f"code folder {run.spec.get('code', '.')!r} holds a credential in {path}" for path in run.code_findings]


@stack_rule(
    id="secrets-scan-incomplete",
    title="Code folders and build contexts are scanned for secrets to the end",
    severity="medium",
    enforcement="advisory",
    rationale="Code folders and build contexts are read for credentials up to a byte budget per folder, so a "
    "hostile pull request cannot hold the gate for ever; the files past it were not checked and are uploaded "
    "all the same. What the gate cannot see is unknown, not a finding: advisory.",
    remediation="Keep data and checkpoints out of the folder (a data input or a datastore instead), or leave "
    "them out of the upload with .amlignore.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-save-write-experiment-files",
    config_key=("code",),
)
def secrets_scan_incomplete(stack: Stack) -> list[Violation]:
    out = [Violation(run, _unscanned(f"code folder {run.spec.get('code')!r}", run.code_unscanned))
           for run in stack.runs if run.code_unscanned]
    for environment in stack.of_type(ENVIRONMENT_COMPONENT):
        left = inputs(environment).get("context_unscanned") or []
        if left:
            out.append(Violation(environment, _unscanned(
                f"build context {inputs(environment).get('build_path')!r}", left)))
    return out


def _unscanned(folder: str, paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return (f"{folder}: {len(paths)} file(s) past the {BUDGET_BYTES >> 20} MiB scan budget were not read to the "
            f"end: {shown}")


@run_rule(
    id="run-low-priority-multi-node",
    title="Multi-node runs avoid low-priority clusters",
    severity="medium",
    enforcement="advisory",
    rationale="Azure may preempt any low-priority node at any time; losing one node kills the whole "
    "distributed job, so the chance of finishing drops with every node added.",
    remediation="Use a dedicated cluster for multi-node runs, or checkpoint often and accept restarts.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-manage-optimize-cost",
    config_key=("compute",),
)
def run_low_priority_multi_node(run: ResolvedRun) -> list[str]:
    if run.instance_count <= 1 or run.cluster.tier != "low_priority":
        return []
    return [f"{run.instance_count} nodes on low-priority cluster {run.cluster.name}: one preemption ends the run"]


def _tf(run: ResolvedRun) -> Mapping[str, Any] | None:
    dist = run.distribution
    return dist if dist["type"] == "tensorflow" else None


TF_DISTRIBUTION = "https://learn.microsoft.com/en-us/python/api/azure-ai-ml/azure.ai.ml.tensorflowdistribution"


@run_rule(
    id="run-tensorflow-task-count",
    title="TensorFlow workers fit the run's nodes, one per node",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML runs one TensorFlow worker per node: worker_count defaults to instance_count (azure-ai-ml's "
    "TensorFlowDistribution), SDK v1 set the node count to worker_count, and parameter servers run beside the "
    "workers on the same nodes (azure-ai-ml's own example runs 2 workers and 1 parameter server with "
    "instance_count 2). More workers than nodes puts two workers on a node, and each TensorFlow process maps "
    "nearly all the memory of every GPU it sees (TensorFlow's GPU guide): the second one fails to allocate. "
    "Parameter servers are not counted against the nodes.",
    remediation="Make worker_count at most resources.instance_count (leave it out: it defaults to instance_count).",
    reference=TF_DISTRIBUTION,
    config_key=("distribution", "worker_count"),
)
def run_tensorflow_task_count(run: ResolvedRun) -> list[str]:
    dist = _tf(run)
    if dist is None:
        return []
    workers = dist.get("worker_count") or run.instance_count
    if workers <= run.instance_count:
        return []
    return [f"{workers} worker(s) on {run.instance_count} node(s): Azure ML runs one worker per node"]


@run_rule(
    id="run-tensorflow-parameter-servers",
    title="TensorFlow parameter servers are declared on purpose",
    severity="low",
    enforcement="advisory",
    rationale="Parameter-server training is rarely what GPU runs want (MultiWorkerMirroredStrategy all-reduces "
    "over NCCL); Azure ML also writes an empty 'ps' list into TF_CONFIG that TensorFlow >= 2.13 rejects unless "
    "the script removes it. Waive the rule for a run that uses parameter servers deliberately.",
    remediation="Drop parameter_server_count, or waive this rule for the run with the reason.",
    reference=DISTRIBUTED_GUIDE + "#tensorflow",
    config_key=("distribution", "parameter_server_count"),
)
def run_tensorflow_parameter_servers(run: ResolvedRun) -> list[str]:
    dist = _tf(run)
    servers = (dist.get("parameter_server_count") or 0) if dist else 0
    return [f"uses {servers} parameter server(s)"] if servers else []


_MASTER_TASK = linear.compile(r"(?i)(task[_-]?type|job[_-]?name|[\"']type[\"'])\s*[=: ]\s*[\"']?master\b")


@run_rule(
    id="run-tensorflow-task-names",
    title="TensorFlow tasks are named chief or worker, never master",
    severity="high",
    enforcement="mandatory",
    rationale="TF_CONFIG task types are chief, worker, ps and evaluator; TensorFlow 2 rejects 'master' (a "
    "TensorFlow 1 estimator name) and the run fails at strategy creation.",
    remediation="Use chief (or let Azure ML's worker 0 act as chief).",
    reference="https://www.tensorflow.org/guide/distributed_training#setting_up_the_tf_config_environment_variable",
    config_key=("command",),
)
def run_tensorflow_task_names(run: ResolvedRun) -> list[str]:
    if _tf(run) is None:
        return []
    texts = [str(run.spec.get("command", "")), *(f"{k}={v}" for k, v in sorted(_env(run).items()))]
    if any(_MASTER_TASK.search(text) for text in texts):
        return ["names a TensorFlow task 'master'; TensorFlow 2 accepts chief, worker, ps and evaluator"]
    return []


@stack_rule(
    id="run-cluster-matches-plan",
    title="A run's cluster facts are those of the cluster the stack plans",
    severity="high",
    enforcement="mandatory",
    rationale="Run rules judge a run by its cluster's size, node cap and tier as resolved from the stack "
    "config; if the planned AmlCompute differs (or is missing) the run rules judged the wrong cluster and "
    "the run targets something that will not exist.",
    remediation="Plan runs and infrastructure from the same stack file; make the run's compute a cluster of "
    "this stack.",
    reference=JOB_YAML,
    config_key=("compute",),
)
def run_cluster_matches_plan(stack: Stack) -> list[Violation]:
    computes = {str(get(inputs(c), "computeName", c["name"])).lower(): c for c in stack.of_type(COMPUTE)}
    out = []
    for run in stack.runs:
        compute = computes.get(run.cluster.name.lower())
        if compute is None:
            out.append(Violation(run, f"cluster {run.cluster.name} is not planned in this stack"))
            continue
        aml = get(inputs(compute), "properties.properties", {})
        planned = {
            "size": (get(aml, "vmSize"), run.cluster.size),
            "max nodes": (get(aml, "scaleSettings.maxNodeCount"), run.cluster.max_instances),
            "priority": (get(aml, "vmPriority"), "LowPriority" if run.cluster.tier == "low_priority" else "Dedicated"),
        }
        for what, (actual, resolved) in planned.items():
            if actual is not None and known(actual) and not (actual == resolved or same(actual, resolved)):
                out.append(Violation(run, f"resolved against {what} {resolved} of cluster {run.cluster.name}, "
                                          f"but the stack plans {actual}"))
    return out


@stack_rule(
    id="run-environment-matches-plan",
    title="A run's stack environment is the version the stack registers",
    severity="high",
    enforcement="mandatory",
    rationale="A run naming a stack environment is submitted with azureml:<name>:<version>; if the stack does "
    "not register that version (or registers a different image under it) the submission fails or runs other "
    "libraries than the run rules checked.",
    remediation="Reference environments by their stack name, and bump the environment's version when its "
    "image changes.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/concept-environments",
    config_key=("environment",),
)
def run_environment_matches_plan(stack: Stack) -> list[Violation]:
    versions = stack.of_type(ENVIRONMENT_VERSION)
    out = []
    for run in stack.runs:
        env = run.environment
        if env.name is None or env.source not in ("image", "build"):
            continue
        version = env.id.rsplit(":", 1)[-1]
        match = [v for v in versions
                 if stack.owner(v) == Owner("environment", env.name) and str(get(inputs(v), "version")) == version]
        if not match:
            out.append(Violation(run, f"environment {env.id} is not registered by this stack"))
        elif env.image and get(inputs(match[0]), "properties.image") not in (env.image, None):
            out.append(Violation(run, f"environment {env.id} registers image "
                                      f"{get(inputs(match[0]), 'properties.image')}, not {env.image}"))
    return out
