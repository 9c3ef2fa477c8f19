"""Running a launch plan as local processes: labelled output, fail-fast, timeout, Ctrl-C.

Each process starts in a session of its own, so stopping it reaches everything it started (DataLoader
workers, torchrun's workers) by signalling its process group, and a Ctrl-C in the terminal reaches
only this supervisor, which then stops the run in order: SIGTERM to every group, SIGKILL to what is
left after the plan's grace period. A second Ctrl-C skips the grace period.

Output lines are read as they come and written as ``[label] line``; on a terminal a status line
(processes running / exited, elapsed time) is kept at the bottom of stderr.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any, TextIO

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


def _signal_group(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the whole group is gone already
        os.killpg(group, sig)


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

    def line(self, label: str, text: str) -> None:
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
        with _StopRequests() as requests:
            try:
                for spec in plan.processes:
                    live.append(self._start(spec, plan, console))
                outcome, failure, stop_code = self._supervise(plan, live, console, started, started_wall, requests)
            finally:
                for proc in live:
                    if proc.popen.poll() is None:
                        proc.signal_group(signal.SIGKILL)
                        proc.popen.wait()
                self._sweep(live)
                console.close()
        return self._result(live, outcome, failure, stop_code, started, started_wall)

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
        requests: _StopRequests,
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
                kill_at = self._stop(live, plan)
            if len(requests.signals) > handled:
                if outcome != "ok":
                    kill_at = now  # asked while already stopping: no more grace
                else:
                    outcome = "interrupted"
                    stop_code = EXIT_INTERRUPTED if requests.signals[handled] == signal.SIGINT else EXIT_TERMINATED
                    kill_at = self._stop(live, plan)
                handled = len(requests.signals)
            if outcome == "ok" and plan.timeout_s is not None and now - started > plan.timeout_s:
                outcome, stop_code = "timeout", EXIT_TIMEOUT
                kill_at = self._stop(live, plan)
            if outcome == "ok":
                self._stop_services_when_done(live)
            if kill_at is not None and now >= kill_at:
                for proc in live:
                    if proc.ended is None:
                        proc.signalled = signal.SIGKILL
                        proc.signal_group(signal.SIGKILL)
                kill_at = None
            if all(proc.ended is not None for proc in live):
                return outcome, failure, stop_code
            if console.status_enabled and now >= next_status:
                next_status = now + STATUS_INTERVAL_S
                console.set_status(self._status(live, now - started, started_wall, stopping=outcome != "ok"))
            time.sleep(self.poll_s)

    @staticmethod
    def _stop(live: list[_Live], plan: LaunchPlan) -> float:
        """SIGTERM every running process group; returns when to SIGKILL what is left."""
        for proc in live:
            if proc.ended is None:
                proc.signalled = signal.SIGTERM
                proc.signal_group(signal.SIGTERM)
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
    def _sweep(live: list[_Live]) -> None:
        """Kill whatever a finished process left behind in its group, then drain the output."""
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
