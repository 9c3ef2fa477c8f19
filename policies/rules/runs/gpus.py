"""Run rules on processes and GPUs: counts valid, one GPU process per GPU, launchers started once per node,
and the variables the launcher sets per process left to it."""

from __future__ import annotations

from analysis.contract import LAUNCHER_PREFIXES, LAUNCHER_VARIABLES
from jobs.launchers import (
    PER_GPU_LAUNCHERS,
    PER_NODE_LAUNCHERS,
    command_scripts,
)
from policies.rule import run_rule
from policies.rules.pipelines import opens_no_gpu
from policies.rules.runs import DISTRIBUTED_GUIDE, JOB_YAML, environment_variables, gpu_processes_per_node
from stack.resolved import ResolvedRun


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
    procs = gpu_processes_per_node(run)
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
    procs = gpu_processes_per_node(run)
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
        name for name in sorted(environment_variables(run))
        if name in LAUNCHER_VARIABLES or name.startswith(LAUNCHER_PREFIXES)
    ]
    return [f"sets {name}, which the launcher sets per process" for name in owned]
