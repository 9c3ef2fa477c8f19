"""Joining the torch process group from whatever started this process.

Shared by the workloads in this folder; self-contained (stdlib and torch only) because this folder
is the ``code`` snapshot Azure ML uploads. Works the same under:

* Azure ML ``distribution: pytorch`` (or ``amlgpu run-local``): MASTER_ADDR, MASTER_PORT,
  WORLD_SIZE, RANK, LOCAL_RANK are set per process;
* torchrun / ``python -m torch.distributed.launch``: the same variables, set by the launcher;
* Azure ML ``distribution: mpi``: only Open MPI's OMPI_COMM_WORLD_* and AZ_BATCH_MASTER_NODE
  (``addr:port``) are set, and :func:`torch_env` maps them to the variables above;
* plain ``python script.py``: a world of one on this machine.

NCCL when a GPU is visible, gloo otherwise.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

AZURE_MASTER_PORT = "6105"


def torch_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables torch's ``env://`` rendezvous needs that ``environ`` lacks."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return {}
    if "OMPI_COMM_WORLD_RANK" in environ:
        # Older Azure ML images named it AZ_BATCHAI_MPI_MASTER_NODE.
        master = environ.get("AZ_BATCH_MASTER_NODE") or environ.get("AZ_BATCHAI_MPI_MASTER_NODE")
        if not master:
            raise RuntimeError("started by mpirun without AZ_BATCH_MASTER_NODE: cannot find the master node")
        addr, _, port = master.rpartition(":") if ":" in master else (master, "", AZURE_MASTER_PORT)
        rank = int(environ["OMPI_COMM_WORLD_RANK"])
        local_size = int(environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
        return {
            "MASTER_ADDR": addr,
            "MASTER_PORT": port,
            "RANK": str(rank),
            "WORLD_SIZE": environ["OMPI_COMM_WORLD_SIZE"],
            "LOCAL_RANK": environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            "LOCAL_WORLD_SIZE": str(local_size),
            # OMPI_COMM_WORLD_NODE_RANK is the rank within the node, not the node's index.
            "NODE_RANK": str(rank // local_size),
        }
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}


@dataclass(frozen=True)
class Dist:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init(timeout_s: float = 1800.0) -> Dist:
    """Join the process group (``init_method="env://"``) and pick this process's device."""
    import torch
    import torch.distributed as dist

    os.environ.update(torch_env(os.environ))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        backend, device = "nccl", torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, backend, device)


def finish(code: int) -> None:
    """Leave the process group and exit with ``code``.

    ``os._exit`` rather than ``sys.exit``: gloo can abort the interpreter at exit, turning a clean
    run into a crash report.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
