"""What ``mpirun`` starts for each rank of an emulated ``distribution: mpi`` run.

Usage (built by :func:`jobs.emulate.mpi.mpirun_argv`): ``python -m jobs.emulate.mpi_rank SHELL -c COMMAND``.

Sets the node-local view of Open MPI's variables for the emulated node this rank belongs to (see
:func:`analysis.contract.mpi_rank_env`) and the node's GPUs, puts the stand-in interpreter's folder
first on PATH again (mpirun puts its own prefix there), runs the command, and records the
exit status in ``<status dir>/<rank>.json``. Each line the command prints (stdout and stderr) is
written back whole, marked with the rank (:data:`jobs.emulate.mpi.RANK_MARK`). Signals from mpirun
are passed on to the command, so a rank torn down by mpirun is reported as stopped, not failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from analysis.contract import EMULATOR_PREFIX, mpi_rank_env
from jobs.emulate.launcher import exit_status
from jobs.emulate.mpi import GPUS_VAR, NODES_VAR, PROCS_PER_NODE_VAR, RANK_MARK, STATUS_DIR_VAR


def main(argv: list[str]) -> int:
    nodes = int(os.environ[NODES_VAR])
    per_node = int(os.environ[PROCS_PER_NODE_VAR])
    status_dir = Path(os.environ[STATUS_DIR_VAR])
    gpus = json.loads(os.environ[GPUS_VAR])
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])

    env = {k: v for k, v in os.environ.items() if not k.startswith(EMULATOR_PREFIX)}
    env.update(mpi_rank_env(rank=rank, nodes=nodes, procs_per_node=per_node))
    # mpirun puts its own prefix first on PATH (Open MPI's --prefix, or a build configured with
    # --enable-mpirun-prefix-by-default), so `python` in the command would be that prefix's interpreter,
    # without the packages of the one standing in for the run's environment: put ours first again.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    node_gpus = gpus[rank // per_node]
    if node_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = node_gpus

    # Lead a process group of our own: the supervisor can then kill what this rank started even if
    # mpirun itself was killed before it could.
    os.setpgid(0, 0)
    (status_dir / f"{rank}.pid").write_text(str(os.getpid()), encoding="utf-8")
    started = time.monotonic()
    child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    signalled = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal signalled
        signalled = True
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    assert child.stdout is not None
    mark = f"{RANK_MARK}{rank}{RANK_MARK}".encode()
    for line in child.stdout:
        # One write per whole line, so mpirun never forwards half a line next to another rank's.
        sys.stdout.buffer.write(mark + line if line.endswith(b"\n") else mark + line + b"\n")
        sys.stdout.buffer.flush()
    code = exit_status(child.wait())
    report = {"exit_code": code, "signalled": signalled, "wall_s": time.monotonic() - started, "ended": time.time()}
    partial = status_dir / f".{rank}.json"
    partial.write_text(json.dumps(report), encoding="utf-8")
    partial.replace(status_dir / f"{rank}.json")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
