"""The fabric health check: an all-reduce bandwidth run declared for every InfiniBand cluster.

Right after ``pulumi up`` a team submits ``fabric-check-<cluster>`` and learns whether NCCL runs over
InfiniBand between nodes (bus bandwidth near the fabric's figure) or silently fell back to TCP (a few
GB/s). The run is generated, not written in the stack file; declaring a run with the same name
replaces it.
"""

from __future__ import annotations

from pathlib import Path

from stack.infrastructure import Cluster, Environment
from stack.runs import Run

CODE = "jobs/workloads"
SCRIPT = "allreduce_perf.py"
BUSBW_FLOOR = 0.4
"""Fail below this fraction of the VM's InfiniBand bandwidth: far above any TCP fallback, well below
what a healthy fabric gives across two nodes (nccl-tests reach about 0.9)."""


def run_name(cluster: Cluster) -> str:
    return f"fabric-check-{cluster.name}"


def _environment_for(cluster: Cluster, environments: list[Environment], root: Path) -> Environment | None:
    """The first environment known (declared, or read from its image or build context) to have PyTorch and the
    cluster's collective library."""
    library = cluster.sku.collective_library
    return next((e for e in environments if {"pytorch", library} <= e.capabilities | e.evidence(root).present), None)


def fabric_check_runs(
    clusters: list[Cluster], environments: list[Environment], declared: set[str], root: Path
) -> list[Run]:
    """One check per InfiniBand cluster that has a PyTorch environment for its collective library."""
    if not (root / CODE / SCRIPT).is_file():
        return []  # a project that doesn't ship the workload has nothing to run
    runs = []
    for cluster in clusters:
        env = _environment_for(cluster, environments, root)
        if not cluster.sku.infiniband or env is None or run_name(cluster) in declared:
            continue
        nodes = min(2, cluster.max_instances)
        command = f"python {SCRIPT} -b 8M -e 1G -f 2 -w 5 -n 20"
        if nodes > 1 and cluster.sku.ib_gbps_per_vm:
            # Gb/s per VM -> GB/s, the unit the script reports bus bandwidth in.
            command += f" --min-busbw {round(cluster.sku.ib_gbps_per_vm / 8 * BUSBW_FLOOR)}"
        runs.append(
            Run.model_validate(dict(
                name=run_name(cluster),
                display_name=f"Fabric check: all-reduce bandwidth on {cluster.name}",
                experiment_name="fabric-checks",
                description=f"nccl-tests style all-reduce sweep across {nodes} node(s) of {cluster.size}.",
                code=CODE,
                command=command,
                environment=env.name,
                compute=cluster.name,
                resources={"instance_count": nodes},
                distribution={"type": "pytorch"},
                limits={"timeout": 1800},
                tags={"generated-by": "aml-gpu-training", "purpose": "fabric-check"},
            ))
        )
    return runs
