"""GPU slices per emulated node, and the pure parts of the mpirun launch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jobs.emulate import devices, mpi
from jobs.emulate.launcher import GRACE_S


@pytest.mark.parametrize(
    ("gpus", "nodes", "per_node", "slices", "cpu_note"),
    [
        ([], 2, 2, (None, None), False),  # no GPU: nothing to hide, gloo
        (["0", "1", "2", "3"], 2, 2, ("0,1", "2,3"), False),
        (["0", "1", "2", "3", "4", "5", "6", "7"], 2, 1, ("0", "1"), False),
        (["4", "6"], 1, 2, ("4,6",), False),  # a CUDA_VISIBLE_DEVICES subset keeps its ids
        (["0", "1"], 2, 2, ("", ""), True),  # too few: hide them all rather than share one (NCCL refuses)
    ],
)
def test_each_node_gets_gpus_of_its_own_or_none(gpus: list[str], nodes: int, per_node: int,
                                                slices: tuple[str | None, ...], cpu_note: bool) -> None:
    assignment = devices.assign_gpus(gpus, nodes=nodes, gpus_per_node=per_node)
    assert assignment.per_node == slices
    assert (assignment.note is not None) is cpu_note


def test_visible_gpus_honours_cuda_visible_devices() -> None:
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


@pytest.mark.parametrize(
    ("line", "label", "text"),
    [
        ("\x1f3\x1fhello [1,2] world", "rank 3", "hello [1,2] world"),
        ("\x1f0\x1f", "rank 0", ""),
        ("mpirun detected that one or more processes exited", None,
         "mpirun detected that one or more processes exited"),
    ],
)
def test_rank_lines_are_told_from_mpiruns_own(line: str, label: str | None, text: str) -> None:
    assert mpi.split_marked_line(line) == (label, text)


def test_mpirun_line_starts_every_rank_through_the_rank_helper() -> None:
    argv = mpi.mpirun_argv("/usr/bin/mpirun", ranks=4, command="python t.py", shell="/bin/bash",
                           forwarded=("AZ_BATCH_MASTER_NODE",), as_root=True)
    assert argv[:3] == ("/usr/bin/mpirun", "-np", "4")
    assert "--allow-run-as-root" in argv and "--oversubscribe" in argv
    assert argv[argv.index("-x") + 1] == "AZ_BATCH_MASTER_NODE"
    assert argv[-6:] == (sys.executable, "-m", "jobs.emulate.mpi_rank", "/bin/bash", "-c", "python t.py")
    as_user = mpi.mpirun_argv("mpirun", ranks=1, command="x", shell="sh", forwarded=(), as_root=False)
    assert "--allow-run-as-root" not in as_user


def test_mpirun_gives_torn_down_ranks_the_launchers_grace_period() -> None:
    assert mpi.OPEN_MPI_DEFAULTS["OMPI_MCA_odls_base_sigkill_timeout"] == "3" == f"{GRACE_S:g}"


def test_rank_results_come_from_the_files_ranks_leave(tmp_path: Path) -> None:
    (tmp_path / "0.json").write_text(json.dumps({"exit_code": 0, "signalled": False, "wall_s": 1.0, "ended": 101}))
    (tmp_path / "1.json").write_text(json.dumps({"exit_code": 7, "signalled": False, "wall_s": 0.5, "ended": 100.5}))
    (tmp_path / "2.json").write_text(json.dumps({"exit_code": 143, "signalled": True, "wall_s": 1.2, "ended": 101}))
    results = mpi.read_rank_results(tmp_path, 4, started_wall=100.0)
    assert [(r.label, r.exit_code, r.state) for r in results] == [
        ("rank 0", 0, "ok"), ("rank 1", 7, "failed"), ("rank 2", 143, "stopped"), ("rank 3", None, "killed")]
    assert results[1].ended_at == pytest.approx(0.5)
