"""Distributed-run rules: runs that would fail, hang or waste an InfiniBand cluster, judged before submission.

One family (``runs``), one module per subject: :mod:`.gpus` (processes per GPU, launcher-owned variables),
:mod:`.nodes` (node count, InfiniBand, tier, shared memory, timeout), :mod:`.capabilities` (what the
environment must provide), :mod:`.secrets`, :mod:`.tensorflow`, :mod:`.consistency` (the run agrees with the
planned stack and its code folder). They follow Azure ML's launch contract and judge each run with the facts
of its cluster and environment (:class:`~stack.resolved.ResolvedRun`). Shared here: references and helpers.
"""

from __future__ import annotations

from collections.abc import Mapping

from jobs.launchers import PER_NODE_LAUNCHERS, TORCH_DISTRIBUTED_LAUNCH, TORCHRUN
from stack.resolved import ResolvedRun

DISTRIBUTED_GUIDE = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-train-distributed-gpu"
JOB_YAML = "https://learn.microsoft.com/en-us/azure/machine-learning/reference-yaml-job-command"

_DEFAULT_NPROC = {TORCHRUN: 1, TORCH_DISTRIBUTED_LAUNCH: 1}
"""Processes per node a per-node launcher starts when its command gives no count (torchrun's default).
The others (deepspeed, accelerate, Lightning) default to every visible GPU or to their own config."""


def environment_variables(run: ResolvedRun) -> Mapping[str, str]:
    return run.spec.get("environment_variables") or {}


def gpu_processes_per_node(run: ResolvedRun) -> int | None:
    """GPU processes each node runs: Azure ML's per-process count, or what a per-node launcher starts
    (None for TensorFlow, where one process drives all GPUs, and when only known at run time)."""
    if run.distribution["type"] == "tensorflow":
        return None
    if run.launcher in PER_NODE_LAUNCHERS:
        return run.launcher_nproc_per_node or _DEFAULT_NPROC.get(run.launcher)
    return run.processes_per_node
