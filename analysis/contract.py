"""The launch contract: the variables Azure ML gives each process, per distribution type.

Pure functions, one per distribution, so the contract is unit-tested without starting a process and
the launcher only decides *where* each process runs. The values follow
``shared/reference/azureml-launch-contract.md``:

* ``pytorch``: Azure ML starts ``nodes x procs_per_node`` processes and gives each MASTER_ADDR,
  MASTER_PORT, WORLD_SIZE (all processes), NODE_RANK, RANK and LOCAL_RANK. A per-node launcher
  (torchrun) is the same contract with one process per node; it then starts its own workers.
* ``mpi``: Open MPI's ``OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE,NODE_RANK}`` as a node
  with ``procs_per_node`` slots sets them, plus AZ_BATCH_MASTER_NODE (``addr:port``).
* ``tensorflow``: TF_CONFIG with the cluster's ``worker`` (and ``ps``) addresses and the task.
"""

from __future__ import annotations

import json

AZURE_MASTER_PORT = 6105
"""The MASTER_PORT Azure ML uses; locally a free port stands in so that parallel runs don't collide."""

LAUNCHER_VARIABLES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID",
    "AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE", "TF_CONFIG",
)
"""Variables a launcher owns. Inherited values are removed before the contract is applied, so a
process sees exactly what Azure ML would give it, not what the user's shell happened to export."""

EMULATOR_PREFIX = "AMLGPU_EMULATE_"
"""Settings the emulator passes to its own helpers; never seen by the run's command."""

LAUNCHER_PREFIXES = ("OMPI_COMM_WORLD_", EMULATOR_PREFIX)
"""Prefixes of launcher-owned variables (``OMPI_MCA_*`` settings are the user's and stay)."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def pytorch_env(
    *, nodes: int, procs_per_node: int, node_rank: int, local_rank: int, master_addr: str, master_port: int
) -> dict[str, str]:
    """What one process of a ``distribution: pytorch`` run sees."""
    _check(nodes >= 1 and procs_per_node >= 1, "nodes and procs_per_node must be >= 1")
    _check(0 <= node_rank < nodes, f"node_rank {node_rank} is outside 0..{nodes - 1}")
    _check(0 <= local_rank < procs_per_node, f"local_rank {local_rank} is outside 0..{procs_per_node - 1}")
    return {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(nodes * procs_per_node),
        "NODE_RANK": str(node_rank),
        "RANK": str(node_rank * procs_per_node + local_rank),
        "LOCAL_RANK": str(local_rank),
    }


def mpi_job_env(*, master_addr: str, master_port: int) -> dict[str, str]:
    """What every rank of a ``distribution: mpi`` run sees besides Open MPI's own variables."""
    return {"AZ_BATCH_MASTER_NODE": f"{master_addr}:{master_port}"}


def mpi_rank_env(*, rank: int, nodes: int, procs_per_node: int) -> dict[str, str]:
    """Open MPI's per-rank variables as rank ``rank`` sees them on a node with ``procs_per_node`` slots.

    Ranks fill nodes in order (Azure ML's hostfile gives each node ``procs_per_node`` slots), so the
    node is ``rank // procs_per_node``. Open MPI's NODE_RANK is the rank *within* the node, not the
    node's index: Azure ML scripts that need the node index compute it from RANK and LOCAL_SIZE.
    """
    size = nodes * procs_per_node
    _check(0 <= rank < size, f"rank {rank} is outside 0..{size - 1}")
    local = rank % procs_per_node
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(procs_per_node),
        "OMPI_COMM_WORLD_NODE_RANK": str(local),
    }


def tf_cluster(workers: list[str], parameter_servers: list[str], *, empty_ps: bool) -> dict[str, list[str]]:
    """TF_CONFIG's ``cluster``. Azure ML writes ``"ps": []`` when there are no parameter servers,
    which TensorFlow >= 2.13 rejects; ``empty_ps`` reproduces that so scripts can be tested against it."""
    _check(bool(workers), "a TensorFlow cluster needs at least one worker")
    cluster = {"worker": list(workers)}
    if parameter_servers or empty_ps:
        cluster["ps"] = list(parameter_servers)
    return cluster


def tf_config(cluster: dict[str, list[str]], *, task_type: str, index: int) -> str:
    """The TF_CONFIG value (JSON) for task ``task_type``/``index`` of ``cluster``."""
    _check(task_type in cluster, f"task type {task_type!r} is not in the cluster")
    _check(0 <= index < len(cluster[task_type]), f"{task_type} index {index} is out of range")
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}, sort_keys=True)


def strip_launcher_variables(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` without any variable a launcher owns (see :data:`LAUNCHER_VARIABLES`)."""
    return {
        key: value
        for key, value in environ.items()
        if key not in LAUNCHER_VARIABLES and not key.startswith(LAUNCHER_PREFIXES)
    }
