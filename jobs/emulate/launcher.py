"""The backend interface of local emulation: a :class:`Launcher` turns a :class:`LaunchPlan` into a
:class:`RunResult`.

Kubeflow Trainer's SDK separates *what* to run (one spec per process, with its environment) from
*where* it runs (a backend); this package does the same. :mod:`jobs.emulate.prepare` builds the plan
from a declared run, :class:`jobs.emulate.local.LocalProcessLauncher` runs it as local processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

State = Literal["ok", "failed", "stopped", "killed", "served"]
"""ok: exited 0; failed: exited non-zero on its own; stopped: ended after SIGTERM from the launcher;
killed: needed SIGKILL, or never reported (an MPI rank mpirun tore down); served: a parameter server
stopped once every worker had succeeded."""

Outcome = Literal["ok", "failed", "timeout", "interrupted"]

EXIT_TIMEOUT = 124
GRACE_S = 3.0
"""Seconds a stopped process has between SIGTERM and SIGKILL (mpirun's ranks too: see jobs.emulate.mpi)."""
EXIT_INTERRUPTED = 130


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class ProcessResult:
    label: str
    exit_code: int | None
    """The exit status, 128+N for signal N; None when the process never reported one."""
    state: State
    wall_s: float
    ended_at: float = field(default=0.0, compare=False)
    """Seconds after the run started (orders failures: the first one sets the run's exit code)."""


@dataclass(frozen=True)
class RankFanout:
    """One supervised process that stands for several ranks (``mpirun``): how to label its output
    lines and how to read each rank's result once it is done."""

    split_line: Callable[[str], tuple[str | None, str]]
    """A line of the process's output -> (the rank's label or None for the process's own, text)."""
    results: Callable[[float], list[ProcessResult]]
    """Per-rank results, given the run's start time (``time.time()``)."""
    leftover_groups: Callable[[], list[int]]
    """Process groups of ranks that may have outlived the process (to kill at the end)."""


@dataclass(frozen=True)
class ProcessSpec:
    label: str
    """How its output lines are prefixed: ``rank 3``, ``node 1``, ``worker 0``, ``ps 0``, ``mpirun``."""
    argv: tuple[str, ...]
    env: Mapping[str, str]
    """The complete environment of the process."""
    service: bool = False
    """Serves the others (a TensorFlow parameter server): stopped, as a success, once all the
    non-service processes have exited 0."""
    fanout: RankFanout | None = None


@dataclass(frozen=True)
class LaunchPlan:
    run_name: str
    processes: tuple[ProcessSpec, ...]
    cwd: Path
    timeout_s: float | None = None
    grace_s: float = GRACE_S
    """Between SIGTERM and SIGKILL when the run is stopped."""


@dataclass(frozen=True)
class RunResult:
    outcome: Outcome
    exit_code: int
    processes: tuple[ProcessResult, ...]
    wall_s: float
    first_failure: str | None = None
    """The label of the process whose failure stopped the run."""
    notes: tuple[str, ...] = ()
    """What known signatures in the output say of a failed run (:mod:`jobs.diagnose`)."""

    def summary(self) -> str:
        """The closing table: one row per process (per rank under MPI), then the verdict."""
        width = max([len("process"), *(len(p.label) for p in self.processes)])
        rows = [f"  {'process':<{width}}  {'exit':>4}  {'state':<7}  {'wall':>7}"]
        for p in self.processes:
            code = "-" if p.exit_code is None else str(p.exit_code)
            rows.append(f"  {p.label:<{width}}  {code:>4}  {p.state:<7}  {p.wall_s:>6.1f}s")
        verdict = {
            "ok": "succeeded",
            "failed": f"failed: {self.first_failure} exited {self.exit_code} first",
            "timeout": "timed out",
            "interrupted": "interrupted",
        }[self.outcome]
        rows.append(f"run {verdict} (exit {self.exit_code}) in {self.wall_s:.1f}s")
        rows.extend(f"note: {note}" for note in self.notes)
        return "\n".join(rows)


class Launcher(Protocol):
    """A backend that runs every process of a plan and reports how each ended."""

    def launch(self, plan: LaunchPlan) -> RunResult: ...
