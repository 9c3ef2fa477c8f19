"""The rank shim mpirun starts (``jobs.emulate.mpi_rank``), run as mpirun would run it, without mpirun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobs.emulate.mpi import GPUS_VAR, NODES_VAR, PROCS_PER_NODE_VAR, RANK_MARK, STATUS_DIR_VAR
from tests.conftest import ROOT


def test_python_in_a_rank_is_the_stand_in_even_when_mpirun_put_its_prefix_first(tmp_path: Path) -> None:
    """Seen on a GPU machine: mpirun's prefix held another `python`, without torch; the rank died with
    ModuleNotFoundError. The shim puts the stand-in interpreter's folder first again."""
    prefix = tmp_path / "openmpi" / "bin"
    prefix.mkdir(parents=True)
    impostor = prefix / "python"
    impostor.write_text("#!/bin/sh\necho 'the prefix python'\nexit 9\n")
    impostor.chmod(0o755)
    status = tmp_path / "status"
    status.mkdir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(prefix), os.environ.get("PATH", os.defpath)]),
        "PYTHONPATH": str(ROOT),
        NODES_VAR: "1", PROCS_PER_NODE_VAR: "1", STATUS_DIR_VAR: str(status), GPUS_VAR: json.dumps([None]),
        "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "jobs.emulate.mpi_rank", "/bin/sh", "-c",
         "python -c 'import sys; print(sys.executable)'"],
        env=env, cwd=tmp_path, capture_output=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{RANK_MARK}0{RANK_MARK}"), lines
    assert Path(lines[0].split(RANK_MARK)[-1]).parent == Path(sys.executable).parent
    assert json.loads((status / "0.json").read_text())["exit_code"] == 0
