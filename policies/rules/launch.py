"""Launch-topology rules: what a run's command starts on each node, against what Azure ML gives the run.

Azure ML starts the command ``instance_count x process_count_per_instance`` times (once per node under a
per-node launcher) and gives each copy the variables of its distribution (see docs/jobs.md). A launcher
inside the command (torchrun, ``torch.distributed.launch``, accelerate, the deepspeed CLI, Lightning,
``mpirun``) then decides how many nodes it waits for and where its processes meet. The command is read by
:mod:`jobs.topology` into :class:`~jobs.topology.Launch` facts, which these rules judge against the run.
What cannot be read (a variable whose value is only known at run time, a wrapper script) is reported by the
advisory ``run-launch-topology-unknown``, never taken as right or wrong.
"""

from __future__ import annotations

from jobs.launchers import PER_NODE_LAUNCHERS, TORCH_DISTRIBUTED_LAUNCH, TORCHRUN
from jobs.resolved import ResolvedRun
from policies.rule import run_rule

DISTRIBUTED_GUIDE = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-train-distributed-gpu"


def _copies(run: ResolvedRun) -> int:
    """How many times the command's scripts run: Azure ML's processes, times the workers a per-node launcher
    starts in each (its count, else one per GPU); TensorFlow: one per worker and parameter server."""
    dist = run.distribution
    if dist["type"] == "tensorflow":
        return int(dist.get("worker_count") or run.instance_count) + int(dist.get("parameter_server_count") or 0)
    per_process = 1
    if run.launcher in PER_NODE_LAUNCHERS:
        # torchrun and torch.distributed.launch start 1 worker without --nproc_per_node; the others every GPU.
        default = 1 if run.launcher in (TORCHRUN, TORCH_DISTRIBUTED_LAUNCH) else run.cluster.gpus
        per_process = run.launcher_nproc_per_node or default
    return run.instance_count * run.processes_per_node * per_process


@run_rule(
    id="run-copies-without-process-group",
    title="A script started more than once joins a process group",
    severity="medium",
    enforcement="advisory",
    rationale="A script that never joins a process group (no torch.distributed or DistributedDataParallel, "
    "DeepSpeed, Horovod, Lightning, accelerate, Hugging Face Trainer, tf.distribute, mpi4py or Ray in it or in "
    "the code-folder modules it imports, read with Python's ast) does the same work in every copy Azure ML "
    "starts: a preprocessing script on 2 nodes x 8 GPUs runs 16 times, each copy writing the same files, 15 of "
    "them paid for nothing. Advisory: a script may pick its shard from RANK on purpose, and packages outside "
    "the code folder are judged by name only.",
    remediation="Run the script once (a single-node, single-process run, or a pipeline step before the "
    "distributed one), or make it distributed.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("command",),
)
def run_copies_without_process_group(run: ResolvedRun) -> list[str]:
    copies = _copies(run)
    if copies <= 1 or not run.scripts_without_process_group:
        return []
    return [f"{script} joins no process group and is started {copies} times: {copies - 1} duplicate "
            "copies doing the same work" for script in run.scripts_without_process_group]
