"""The local process launcher on small real processes (plain Python, no torch): labelled output,
fail-fast, SIGKILL after the grace period, timeout, parameter servers, nothing left behind."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from amlgpu.terminal import CleanStream
from jobs.emulate.launcher import LaunchPlan, ProcessSpec, RunResult
from jobs.emulate.local import LocalProcessLauncher

pytestmark = pytest.mark.slow


def py(label: str, code: str, *, service: bool = False) -> ProcessSpec:
    return ProcessSpec(label, (sys.executable, "-c", code), dict(os.environ), service=service)


def launch(tmp_path: Path, *specs: ProcessSpec, timeout_s: float | None = None,
           grace_s: float = 3.0) -> tuple[RunResult, str]:
    out = io.StringIO()
    plan = LaunchPlan("t", specs, cwd=tmp_path, timeout_s=timeout_s, grace_s=grace_s)
    result = LocalProcessLauncher(out=out, err=io.StringIO(), status_line=False).launch(plan)
    return result, out.getvalue()


def states(result: RunResult) -> dict[str, tuple[int | None, str]]:
    return {p.label: (p.exit_code, p.state) for p in result.processes}


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie waiting for a PID 1 that may never reap it."""
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


SLEEPER = "import time; time.sleep(60)"


def test_every_line_is_prefixed_with_its_process(tmp_path: Path) -> None:
    result, out = launch(
        tmp_path,
        py("rank 0", "print('a'); print('b', flush=True)"),
        py("rank 1", "import sys; sys.stdout.write('no newline at the end')"),
    )
    assert (result.outcome, result.exit_code) == ("ok", 0)
    assert sorted(out.splitlines()) == ["[rank 0] a", "[rank 0] b", "[rank 1] no newline at the end"]
    assert states(result) == {"rank 0": (0, "ok"), "rank 1": (0, "ok")}


def test_a_failing_process_stops_the_others_fast_with_its_exit_code(tmp_path: Path) -> None:
    started = time.monotonic()
    result, _ = launch(
        tmp_path,
        py("rank 0", SLEEPER),
        py("rank 1", "import time, sys; time.sleep(0.3); sys.exit(7)"),
        py("rank 2", SLEEPER),
    )
    assert time.monotonic() - started < 5
    assert (result.outcome, result.exit_code, result.first_failure) == ("failed", 7, "rank 1")
    assert states(result) == {"rank 0": (143, "stopped"), "rank 1": (7, "failed"), "rank 2": (143, "stopped")}
    assert "rank 1 exited 7 first (exit 7)" in result.summary()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
               "time.sleep(60)"
    started = time.monotonic()
    result, _ = launch(tmp_path, py("rank 0", stubborn),
                       py("rank 1", "import time, sys; time.sleep(1); sys.exit(3)"), grace_s=0.5)
    assert time.monotonic() - started < 5
    assert states(result) == {"rank 0": (137, "killed"), "rank 1": (3, "failed")}
    assert result.exit_code == 3


def test_a_process_killed_by_a_signal_fails_the_run_with_128_plus_the_signal(tmp_path: Path) -> None:
    result, _ = launch(tmp_path, py("rank 0", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert (result.outcome, result.exit_code) == ("failed", 128 + signal.SIGSEGV)


def test_timeout_stops_everything_with_124(tmp_path: Path) -> None:
    started = time.monotonic()
    result, _ = launch(tmp_path, py("rank 0", SLEEPER), py("rank 1", SLEEPER), timeout_s=0.5)
    assert time.monotonic() - started < 4
    assert (result.outcome, result.exit_code) == ("timeout", 124)
    assert states(result) == {"rank 0": (143, "stopped"), "rank 1": (143, "stopped")}


def test_parameter_servers_are_stopped_once_every_worker_succeeded(tmp_path: Path) -> None:
    result, _ = launch(tmp_path, py("worker 0", "print('done')"), py("ps 0", SLEEPER, service=True))
    assert (result.outcome, result.exit_code) == ("ok", 0)
    assert states(result) == {"worker 0": (0, "ok"), "ps 0": (143, "served")}


def test_what_a_process_started_in_the_background_does_not_outlive_the_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "orphan.pid"
    code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))")
    result, _ = launch(tmp_path, py("rank 0", code))
    assert result.exit_code == 0
    orphan = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while not gone(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(orphan)


def test_the_status_line_is_drawn_on_a_terminal_only(tmp_path: Path) -> None:
    specs = (py("rank 0", "import time; time.sleep(0.6)"), py("rank 1", "import time; time.sleep(0.6)"))
    plan = LaunchPlan("t", specs, cwd=tmp_path)
    terminal = io.StringIO()
    LocalProcessLauncher(out=io.StringIO(), err=terminal, status_line=True).launch(plan)
    assert "\r\x1b[Krun-local: 2 running, 0 exited (0 failed), 0s" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r\x1b[K")  # cleared before the summary is printed
    piped = io.StringIO()  # not a TTY: no status line, so logs stay clean
    LocalProcessLauncher(out=io.StringIO(), err=piped).launch(plan)
    assert piped.getvalue() == ""


def test_the_status_line_is_drawn_past_the_sanitiser_every_command_prints_through(tmp_path: Path) -> None:
    """Every command prints through amlgpu.terminal.CleanStream, which drops control characters from what it
    is given: the status line's own erase sequence goes past it, the status text through it."""
    specs = (py("rank 0", "import time; time.sleep(0.6)"),)
    terminal = io.StringIO()
    err = CleanStream(terminal)
    LocalProcessLauncher(out=io.StringIO(), err=err, status_line=True).launch(LaunchPlan("t", specs, cwd=tmp_path))
    err.finish()
    assert "\r\x1b[Krun-local: 1 running, 0 exited (0 failed), 0s" in terminal.getvalue()
    assert "[K" not in terminal.getvalue().replace("\x1b[K", "")  # no half-stripped escape left behind


# A worker the way torchrun starts one: in a session of its own (torch.distributed.elastic's
# start_new_session=True), outside its launcher's process group, and deaf to SIGTERM.
DETACHED_WORKER = """
import os, signal, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"],
    start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(str(worker.pid))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
{then}
"""

AWAIT_FILE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n{then}"


def _detached(tmp_path: Path, then: str) -> tuple[ProcessSpec, Path]:
    pid_file = tmp_path / "worker.pid"
    spec = ProcessSpec("launcher", (sys.executable, "-c", DETACHED_WORKER.format(then=then), str(pid_file)),
                       dict(os.environ))
    return spec, pid_file


def _waiter(pid_file: Path, then: str) -> ProcessSpec:
    return ProcessSpec("rank 1", (sys.executable, "-c", AWAIT_FILE.format(then=then), str(pid_file)),
                       dict(os.environ))


LEFTOVER_CASES = [
    # (case, what the launcher does after starting its worker, what the other process does, outcome)
    ("another rank fails", "time.sleep(120)", "sys.exit(3)", {}, "failed"),
    ("the run times out", "time.sleep(120)", "time.sleep(120)", {"timeout_s": 2.0}, "timeout"),
    ("the launcher exits at once, leaving its worker", "sys.exit(0)", "sys.exit(0)", {}, "ok"),
    ("the launcher ignores SIGTERM too", "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)",
     "sys.exit(3)", {}, "failed"),
]


@pytest.mark.parametrize(("case", "launcher_then", "other_then", "plan", "outcome"), LEFTOVER_CASES,
                         ids=[c[0] for c in LEFTOVER_CASES])
def test_no_process_of_the_run_survives_it_even_in_a_session_of_its_own(
    tmp_path: Path, case: str, launcher_then: str, other_then: str, plan: dict[str, float], outcome: str
) -> None:
    """Before: the worker survived every case (killpg on the launcher's group never reached it)."""
    spec, pid_file = _detached(tmp_path, launcher_then)
    result, _ = launch(tmp_path, spec, _waiter(pid_file, other_then), grace_s=1.0, **plan)
    worker = int(pid_file.read_text())
    try:
        assert result.outcome == outcome
        assert gone(worker), f"worker {worker} outlived the run"
    finally:
        if not gone(worker):
            os.kill(worker, signal.SIGKILL)


# What libstdc++ prints when std::terminate runs with no exception (a joinable std::thread destroyed),
# then SIGABRT: a torch.distributed backend torn down during interpreter exit does this.
ABORT_AT_EXIT = ("import os, sys; print('[rank1] done', flush=True); "
                 "sys.stderr.write('terminate called without an active exception\\n'); sys.stderr.flush(); os.abort()")


def test_an_abort_at_exit_is_explained_under_the_table(tmp_path: Path) -> None:
    result, out = launch(tmp_path, py("rank 0", "import time; time.sleep(0.5)"), py("rank 1", ABORT_AT_EXIT))
    assert (result.outcome, result.exit_code, result.first_failure) == ("failed", 134, "rank 1")
    assert "[rank 1] terminate called without an active exception" in out
    assert result.notes == (
        "rank 1: aborted at exit (SIGABRT): the torch.distributed process group was torn down while the interpreter "
        "exited, with the backend's threads still running (pytorch/pytorch#190489). Call "
        "torch.distributed.destroy_process_group() once the script's last collective is done, in every process "
        "(PyTorch docs, torch.distributed 'Shutdown'); on Azure ML the same abort fails the job after training "
        "has finished",
    )
    assert result.summary().splitlines()[-1] == f"note: {result.notes[0]}"


@pytest.mark.parametrize(("case", "code", "timeout_s"), [
    ("the run succeeded", "print('terminate called without an active exception')", None),
    ("the run timed out", "print('terminate called without an active exception', flush=True); "
                          "import time; time.sleep(60)", 1.0),
    ("another failure", "import sys; sys.exit(3)", None),
])
def test_no_note_where_the_signature_explains_nothing(tmp_path: Path, case: str, code: str,
                                                      timeout_s: float | None) -> None:
    result, _ = launch(tmp_path, py("rank 0", code), timeout_s=timeout_s)
    assert result.notes == ()
    assert "note:" not in result.summary()
