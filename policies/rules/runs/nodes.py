"""Run rules on nodes: no more than the cluster scales to, InfiniBand with SR-IOV for multi-node runs, no
low-priority multi-node runs, enough shared memory per process, a timeout."""

from __future__ import annotations

from jobs.launchers import (
    PER_NODE_LAUNCHERS,
)
from kernel import regex as linear
from policies.rule import run_rule
from policies.rules.runs import DISTRIBUTED_GUIDE, JOB_YAML, gpu_processes_per_node
from stack.resolved import ResolvedRun


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
    procs = gpu_processes_per_node(run) or (run.cluster.gpus if run.launcher in PER_NODE_LAUNCHERS
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
