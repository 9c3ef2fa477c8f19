"""Running a launch plan as local processes: labelled output, fail-fast, timeout, Ctrl-C.

Each process starts in a session of its own, so a Ctrl-C in the terminal reaches only this supervisor,
which then stops the run in order: SIGTERM to every process group of the run, SIGKILL to what is left
after the plan's grace period. A second Ctrl-C skips the grace period. Process groups are not enough:
torchrun starts each worker in a session of its own, so the supervisor also follows the process tree
(:class:`_Descendants`) and stops every process it saw the run start, wherever it went.

Output lines are read as they come and written as ``[label] line``; on a terminal a status line
(processes running / exited, elapsed time) is kept at the bottom of stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import IO, Any, TextIO

from jobs.diagnose import Diagnosis
from jobs.emulate.launcher import (
    EXIT_INTERRUPTED,
    EXIT_TIMEOUT,
    LaunchPlan,
    Outcome,
    ProcessResult,
    ProcessSpec,
    RunResult,
    State,
    exit_status,
)

EXIT_TERMINATED = 128 + signal.SIGTERM
STATUS_INTERVAL_S = 0.25
PROC = Path("/proc")


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the whole group is gone already
        os.killpg(group, sig)


Identity = tuple[int, int]
"""A process as (pid, start time in clock ticks since boot): a pid reused by an unrelated process later
has another start time, so it is never signalled by mistake."""


def _process_table(*, zombies: bool = False) -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, process group, start time) of every process (Linux ``/proc``; empty elsewhere);
    zombies (ended, not yet reaped) only when asked for."""
    table: dict[int, tuple[int, int, int]] = {}
    if not PROC.is_dir():
        return table
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # exited meanwhile
        # The command name (field 2) may hold spaces and parentheses: the fields follow the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] in (b"Z", b"X") and not zombies:
            continue  # a zombie runs nothing
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _subreaper(on: bool) -> bool:
    """Make this process the one orphans of its descendants are re-parented to (Linux ``prctl``), or stop
    being it; True when it is one after the call. Elsewhere, or when refused: False, nothing changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return False
        state = ctypes.c_int(0)
        libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(state), 0, 0, 0)
        return bool(state.value)
    except (OSError, AttributeError):
        return False


def _is_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        state = ctypes.c_int(0)
        return libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(state), 0, 0, 0) == 0 and bool(state.value)
    except (OSError, AttributeError):
        return False


class _Descendants:
    """Every process the run's processes started, seen while their parents were alive.

    A process group does not hold them all: torchrun starts each worker in a session of its own
    (``start_new_session=True`` in torch.distributed.elastic), so ``killpg`` on torchrun's group misses
    the workers, and once torchrun is gone they are orphans of PID 1 that nothing links to the run. So
    the supervisor looks at the process tree (every status interval, and again right before it stops
    anything) and remembers who it saw; stopping then reaches every one of them still running, and
    their process groups."""

    def __init__(self) -> None:
        self.seen: dict[int, Identity] = {}
        """pid -> identity of every descendant seen, whatever its group."""
        self.adopted: set[int] = set()
        """Orphans re-parented to the supervisor (a subreaper): its to reap once they end."""
        self._earlier_children = {pid for pid, (parent, _, _) in _process_table().items() if parent == os.getpid()}
        self._was_subreaper = _is_subreaper()
        # Orphans of the run (a worker whose torchrun exited at once) then come to the supervisor, where
        # look() finds them, instead of to PID 1, where nothing links them to the run.
        self.subreaper = self._was_subreaper or _subreaper(True)

    def close(self) -> None:
        """Reap the adopted orphans (SIGKILLed by then) and stop being a subreaper if this made us one."""
        deadline = time.monotonic() + 5
        me = os.getpid()
        # Orphans that ended before anyone saw them are this process's zombies now: reap them too.
        late = {pid for pid, (parent, _, _) in _process_table(zombies=True).items() if parent == me}
        late -= set(_process_table())  # only those that ended: a running child is not ours to wait for
        pending = self.adopted | (late - self._earlier_children if self.subreaper else set())
        while pending and time.monotonic() < deadline:
            for pid in list(pending):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid
                if done:
                    pending.discard(pid)
            if pending:
                time.sleep(0.01)
        if self.subreaper and not self._was_subreaper:
            _subreaper(False)

    def look(self, roots: list[int]) -> None:
        table = _process_table()
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in table.items():
            children.setdefault(parent, []).append(pid)
        if self.subreaper:
            me = os.getpid()
            orphans = {pid for pid, (parent, _, _) in table.items() if parent == me} - self._earlier_children
            orphans -= set(roots)
            self.adopted |= orphans
            roots = [*roots, *orphans]
        pending = [pid for pid in roots if pid in table]
        while pending:
            pid = pending.pop()
            self.seen[pid] = (pid, table[pid][2])
            pending.extend(children.get(pid, ()))

    def alive(self) -> dict[int, int]:
        """The seen processes still running as themselves (not a reused pid): pid -> its process group now."""
        table = _process_table()
        return {pid: table[pid][1] for pid, (_, started) in self.seen.items()
                if pid in table and table[pid][2] == started}

    def signal(self, sig: int) -> None:
        """``sig`` to every process group a seen process still leads or belongs to (so processes started
        since the last look get it too), then to every seen process still running."""
        alive = self.alive()
        for group in sorted(set(alive.values()) - {os.getpgrp()}):  # never the supervisor's own group
            _signal_group(group, sig)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


class _StopRequests:
    """Ctrl-C (SIGINT) and SIGTERM sent to the supervisor, recorded rather than raised, so they are
    handled between two polls and never in the middle of starting a process."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)


@dataclass
class _Live:
    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    started: float
    reader: threading.Thread
    ended: float | None = None
    signalled: int | None = None
    """The last signal the supervisor sent to the process's group."""
    served: bool = False

    @property
    def code(self) -> int:
        assert self.popen.returncode is not None
        return exit_status(self.popen.returncode)

    def signal_group(self, sig: int) -> None:
        _signal_group(self.popen.pid, sig)


@dataclass
class _Console:
    """Serialises output lines from reader threads and keeps the status line out of their way."""

    out: TextIO
    err: TextIO
    status_enabled: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    status: str = ""
    diagnosis: Diagnosis = field(default_factory=Diagnosis)

    def line(self, label: str, text: str) -> None:
        self.diagnosis.see(label, text)
        with self.lock:
            self._clear()
            self.out.write(f"[{label}] {text}\n")
            self.out.flush()
            self._draw()

    def set_status(self, text: str) -> None:
        if not self.status_enabled or text == self.status:
            return
        with self.lock:
            self.status = text
            self._clear()
            self._draw()

    def close(self) -> None:
        with self.lock:
            self._clear()
            self.status = ""

    def _clear(self) -> None:
        if self.status_enabled and self.status:
            self.err.write("\r\x1b[K")
            self.err.flush()

    def _draw(self) -> None:
        if self.status_enabled and self.status:
            self.err.write(self.status)
            self.err.flush()


def _pump(stream: IO[bytes], spec: ProcessSpec, console: _Console) -> None:
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        label, body = spec.fanout.split_line(text) if spec.fanout else (None, text)
        console.line(label or spec.label, body)
    stream.close()


class LocalProcessLauncher:
    """Runs every process of a plan on this machine and supervises them as one run."""

    def __init__(self, *, out: TextIO | None = None, err: TextIO | None = None,
                 status_line: bool | None = None, poll_s: float = 0.05) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.status_line = self.err.isatty() if status_line is None else status_line
        self.poll_s = poll_s

    def launch(self, plan: LaunchPlan) -> RunResult:
        console = _Console(self.out, self.err, self.status_line)
        started = time.monotonic()
        started_wall = time.time()
        live: list[_Live] = []
        tree = _Descendants()
        with _StopRequests() as requests:
            try:
                for spec in plan.processes:
                    live.append(self._start(spec, plan, console))
                outcome, failure, stop_code = self._supervise(
                    plan, live, console, started, started_wall, requests, tree
                )
            finally:
                tree.look([proc.popen.pid for proc in live])
                for proc in live:
                    if proc.popen.poll() is None:
                        proc.signal_group(signal.SIGKILL)
                        proc.popen.wait()
                self._sweep(live, tree)
                tree.close()
                console.close()
        result = self._result(live, outcome, failure, stop_code, started, started_wall)
        # A known signature explains a failure; after a success, a timeout or Ctrl-C it would only mislead.
        return replace(result, notes=console.diagnosis.notes()) if result.outcome == "failed" else result

    @staticmethod
    def _start(spec: ProcessSpec, plan: LaunchPlan, console: _Console) -> _Live:
        popen = subprocess.Popen(
            list(spec.argv), cwd=plan.cwd, env=dict(spec.env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        assert popen.stdout is not None
        reader = threading.Thread(target=_pump, args=(popen.stdout, spec, console), daemon=True)
        reader.start()
        return _Live(spec, popen, time.monotonic(), reader)

    def _supervise(
        self, plan: LaunchPlan, live: list[_Live], console: _Console, started: float, started_wall: float,
        requests: _StopRequests, tree: _Descendants,
    ) -> tuple[Outcome, _Live | None, int | None]:
        """Wait for every process; returns the outcome, the first failure and the exit code a
        stop request (timeout, Ctrl-C, SIGTERM) sets."""
        outcome: Outcome = "ok"
        failure: _Live | None = None
        stop_code: int | None = None
        kill_at: float | None = None
        handled = 0
        next_status = 0.0
        while True:
            now = time.monotonic()
            # Every exit is recorded before anyone is stopped: a process that failed in the same
            # instant as the first one is a failure too, not a process the launcher stopped.
            ended = [proc for proc in live if proc.ended is None and proc.popen.poll() is not None]
            for proc in ended:
                proc.ended = now
            failed = next((p for p in ended if p.code != 0 and p.signalled is None), None)
            if failed is not None and outcome == "ok":
                failure, outcome = failed, "failed"
                kill_at = self._stop(live, plan, tree)
            if len(requests.signals) > handled:
                if outcome != "ok":
                    kill_at = now  # asked while already stopping: no more grace
                else:
                    outcome = "interrupted"
                    stop_code = EXIT_INTERRUPTED if requests.signals[handled] == signal.SIGINT else EXIT_TERMINATED
                    kill_at = self._stop(live, plan, tree)
                handled = len(requests.signals)
            if outcome == "ok" and plan.timeout_s is not None and now - started > plan.timeout_s:
                outcome, stop_code = "timeout", EXIT_TIMEOUT
                kill_at = self._stop(live, plan, tree)
            if outcome == "ok":
                self._stop_services_when_done(live)
            if kill_at is not None and now >= kill_at:
                for proc in live:
                    if proc.ended is None:
                        proc.signalled = signal.SIGKILL
                        proc.signal_group(signal.SIGKILL)
                tree.signal(signal.SIGKILL)
                kill_at = None
            if all(proc.ended is not None for proc in live):
                return outcome, failure, stop_code
            if now >= next_status:
                next_status = now + STATUS_INTERVAL_S
                tree.look([proc.popen.pid for proc in live if proc.ended is None])
                console.set_status(self._status(live, now - started, started_wall, stopping=outcome != "ok"))
            time.sleep(self.poll_s)

    @staticmethod
    def _stop(live: list[_Live], plan: LaunchPlan, tree: _Descendants) -> float:
        """SIGTERM every running process group, and every group their descendants lead (seen now, while
        the tree is whole); returns when to SIGKILL what is left."""
        tree.look([proc.popen.pid for proc in live if proc.ended is None])
        for proc in live:
            if proc.ended is None:
                proc.signalled = signal.SIGTERM
                proc.signal_group(signal.SIGTERM)
        tree.signal(signal.SIGTERM)
        return time.monotonic() + plan.grace_s

    @staticmethod
    def _stop_services_when_done(live: list[_Live]) -> None:
        workers = [p for p in live if not p.spec.service]
        if workers and all(p.ended is not None and p.code == 0 for p in workers):
            for proc in live:
                if proc.spec.service and proc.ended is None and not proc.served:
                    proc.served = True
                    proc.signalled = signal.SIGTERM
                    proc.signal_group(signal.SIGTERM)

    @staticmethod
    def _status(live: list[_Live], elapsed: float, started_wall: float, *, stopping: bool) -> str:
        """``run-local: 3 running, 1 exited (1 failed), 12s``, counting MPI ranks rather than mpirun."""
        running = exited = failed = 0
        for proc in live:
            if proc.spec.fanout is None:
                done = proc.ended is not None
                running, exited = running + (not done), exited + done
                failed += done and proc.code != 0 and proc.signalled is None
                continue
            ranks = proc.spec.fanout.results(started_wall)
            reported = [r for r in ranks if r.exit_code is not None]
            running += 0 if proc.ended is not None else len(ranks) - len(reported)
            exited += len(reported)
            failed += sum(1 for r in reported if r.state == "failed")
        text = f"run-local: {running} running, {exited} exited ({failed} failed), {elapsed:.0f}s"
        return text + (" - stopping" if stopping else "")

    @staticmethod
    def _sweep(live: list[_Live], tree: _Descendants) -> None:
        """Kill whatever a finished process left behind, in its group or anywhere its descendants went,
        then drain the output."""
        tree.signal(signal.SIGKILL)
        for proc in live:
            proc.signal_group(signal.SIGKILL)
            if proc.spec.fanout is not None:
                for group in proc.spec.fanout.leftover_groups():
                    _signal_group(group, signal.SIGKILL)
        for proc in live:
            proc.reader.join(timeout=5)

    @staticmethod
    def _result(live: list[_Live], outcome: Outcome, failure: _Live | None,
                stop_code: int | None, started: float, started_wall: float) -> RunResult:
        results: list[ProcessResult] = []
        first = failure.spec.label if failure else None
        exit_code = stop_code if stop_code is not None else (failure.code if failure else 0)
        for proc in live:
            ended = proc.ended if proc.ended is not None else time.monotonic()
            state: State
            if proc.served:
                state = "served"
            elif proc.code == 0:
                state = "ok"  # possibly exiting on its own just as it was told to stop
            elif proc.signalled == signal.SIGKILL:
                state = "killed"
            elif proc.signalled == signal.SIGTERM:
                state = "stopped"
            else:
                state = "failed"
            own = ProcessResult(proc.spec.label, proc.code, state, ended - proc.started, ended - started)
            if proc.spec.fanout is None:
                results.append(own)
                continue
            ranks = proc.spec.fanout.results(started_wall)
            results.extend(ranks)
            failed_ranks = sorted((r for r in ranks if r.state == "failed"), key=lambda r: r.ended_at)
            if failure is proc and failed_ranks:
                # mpirun only relays a rank's failure: report the rank that failed first.
                first, exit_code = failed_ranks[0].label, failed_ranks[0].exit_code or exit_code
            if own.state == "failed" and not failed_ranks:
                results.append(own)  # mpirun failed on its own (e.g. could not start the ranks)
        return RunResult(outcome, exit_code, tuple(results), time.monotonic() - started, first)
