"""``distribution: mpi`` on one machine: a real Open MPI ``mpirun``, as Azure ML runs it.

Azure ML builds the ``mpirun`` line itself, one slot per process on each node. Here the emulated
nodes share one host, so every rank starts through :mod:`jobs.emulate.mpi_rank`, which sets the
per-node view Open MPI would give on a real node (LOCAL_RANK, LOCAL_SIZE, NODE_RANK for
``procs_per_node`` slots) and the node's GPUs, marks each output line with the rank, and records the
rank's exit status for the summary.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from analysis.contract import EMULATOR_PREFIX
from jobs.emulate.launcher import GRACE_S, ProcessResult, RankFanout, State

INSTALL_HINT = (
    "install Open MPI (Debian/Ubuntu: apt-get install openmpi-bin; macOS: brew install open-mpi; "
    "conda: conda install -c conda-forge openmpi)"
)

RANK_MARK = "\x1f"
"""Frames the rank number at the start of each line of a rank's output (``\\x1f3\\x1f text``).
:mod:`jobs.emulate.mpi_rank` writes whole marked lines; mpirun's ``--tag-output`` is not used
because it tags each chunk it reads, and a line written in two pieces comes out with a tag inside."""


class MpiUnavailable(Exception):
    """No usable Open MPI ``mpirun`` on PATH."""


def find_mpirun(environ: Mapping[str, str]) -> str:
    """The path of Open MPI's ``mpirun``; raises :class:`MpiUnavailable` saying how to get one."""
    path = shutil.which("mpirun", path=environ.get("PATH"))
    if path is None:
        raise MpiUnavailable(f"distribution 'mpi' runs under mpirun, which is not on PATH: {INSTALL_HINT}")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise MpiUnavailable(f"{path} --version failed ({err}): {INSTALL_HINT}") from None
    if "Open MPI" not in version.stdout + version.stderr:
        first = (version.stdout or version.stderr).strip().splitlines()[:1]
        found = first[0] if first else "unknown"
        raise MpiUnavailable(f"{path} is not Open MPI's ({found}); Azure ML images use Open MPI: {INSTALL_HINT}")
    return path


def mpirun_argv(
    mpirun: str, *, ranks: int, command: str, shell: str, forwarded: tuple[str, ...], as_root: bool
) -> tuple[str, ...]:
    """The ``mpirun`` line: ``ranks`` slots on this host, each rank running ``command`` in ``shell``.

    ``--oversubscribe`` and ``--bind-to none`` because the emulated nodes share fewer cores than
    they have ranks.
    """
    argv = [mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]
    if as_root:
        argv.append("--allow-run-as-root")  # Open MPI refuses root without it (containers run as root)
    for name in forwarded:
        argv += ["-x", name]
    return (*argv, sys.executable, "-m", "jobs.emulate.mpi_rank", shell, "-c", command)


NODES_VAR = f"{EMULATOR_PREFIX}NODES"
PROCS_PER_NODE_VAR = f"{EMULATOR_PREFIX}PROCS_PER_NODE"
STATUS_DIR_VAR = f"{EMULATOR_PREFIX}STATUS_DIR"
GPUS_VAR = f"{EMULATOR_PREFIX}GPUS"
"""JSON list: each emulated node's CUDA_VISIBLE_DEVICES, or null to leave it as it is."""

OPEN_MPI_DEFAULTS = {
    # Containers often forbid the cross-memory attach Open MPI's shared-memory transport tries first.
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    # When a rank fails, mpirun tears the others down: SIGTERM, then SIGKILL after this many seconds
    # (Open MPI's default is 1). The ranks get the grace every other process of a stopped run gets.
    "OMPI_MCA_odls_base_sigkill_timeout": str(math.ceil(GRACE_S)),
}
"""Open MPI settings for running in a container, unless the user's environment sets them."""


def rank_settings(*, nodes: int, procs_per_node: int, status_dir: Path, gpus: tuple[str | None, ...]) -> dict[str, str]:
    """The variables :mod:`jobs.emulate.mpi_rank` reads (and removes before the rank's command runs)."""
    return {
        NODES_VAR: str(nodes),
        PROCS_PER_NODE_VAR: str(procs_per_node),
        STATUS_DIR_VAR: str(status_dir),
        GPUS_VAR: json.dumps(list(gpus)),
    }


def split_marked_line(line: str) -> tuple[str | None, str]:
    """A rank's marked line -> (``rank 3``, its text); mpirun's own lines -> (None, line)."""
    rank, mark, text = line[len(RANK_MARK):].partition(RANK_MARK) if line.startswith(RANK_MARK) else ("", "", "")
    if not mark or not rank.isdecimal():
        return None, line
    return f"rank {rank}", text


def read_rank_results(status_dir: Path, ranks: int, started_wall: float) -> list[ProcessResult]:
    """Each rank's result from the files its :mod:`jobs.emulate.mpi_rank` wrote."""
    results = []
    for rank in range(ranks):
        path = status_dir / f"{rank}.json"
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            results.append(ProcessResult(f"rank {rank}", None, "killed", 0.0, float("inf")))
            continue
        code = int(report["exit_code"])
        state: State = "stopped" if report.get("signalled") else ("ok" if code == 0 else "failed")
        ended = float(report["ended"]) - started_wall
        results.append(ProcessResult(f"rank {rank}", code, state, float(report["wall_s"]), ended))
    return results


def rank_groups(status_dir: Path) -> list[int]:
    """Process groups the ranks started (their ``mpi_rank`` process leads one each)."""
    groups = []
    for path in status_dir.glob("*.pid"):
        try:
            groups.append(int(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return sorted(groups)


def fanout(status_dir: Path, ranks: int) -> RankFanout:
    return RankFanout(
        split_line=split_marked_line,
        results=lambda started_wall: read_rank_results(status_dir, ranks, started_wall),
        leftover_groups=lambda: rank_groups(status_dir),
    )


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
