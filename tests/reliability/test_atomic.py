"""All-or-nothing outputs: a plan that fails, crashes mid-write or is interrupted (Ctrl-C, SIGTERM) leaves the
previous ``build/<stack>`` byte-identical and no staging folder behind; a plan never replaces a folder that
holds anything but an earlier plan's output.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import EXIT_INTERNAL
from planning import artifacts
from tests.cli import AMLGPU
from tests.conftest import make_project
from tests.reliability.test_corpus import (
    STACK,
    good_config,
    good_plan_output,
    leftovers,
    plan_in_process,
    snapshot,
)


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A good plan's output folder, as bytes."""
    return good_plan_output(tmp_path_factory)


@pytest.fixture
def project(tmp_path: Path, earlier: dict[str, bytes]) -> Path:
    """A project whose build/<stack> holds an earlier good plan's output; its stack plans cleanly."""
    folder = make_project(tmp_path / "project", good_config(), stack=STACK)
    for relative, data in earlier.items():
        path = folder / "build" / STACK / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def _failing_on_call(number: int, error: BaseException) -> Callable[[Path, str], None]:
    calls = []

    def write_text(path: Path, text: str) -> None:
        calls.append(path)
        if len(calls) == number:
            raise error
        artifacts.write_text(path, text)

    return write_text


def _output_unchanged(project: Path, earlier: dict[str, bytes]) -> None:
    assert snapshot(project / "build" / STACK) == earlier
    assert leftovers(project / "build") == []


# ------------------------------------------------------------------------------------------------ in-process


def test_a_crash_mid_write_leaves_the_earlier_output(
    project: Path, earlier: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug in a writer is an internal error (exit 3, named, no traceback), and the earlier output stays whole."""
    monkeypatch.setattr("planning.service.write_text", _failing_on_call(3, RuntimeError("bug in a writer")))
    outcome = plan_in_process(project, capsys)
    assert outcome.code == EXIT_INTERNAL
    assert "internal error (RuntimeError: bug in a writer)" in outcome.error_line
    assert "Traceback" not in outcome.err
    _output_unchanged(project, earlier)


def test_a_full_disk_mid_write_is_a_clean_error_and_keeps_the_earlier_output(
    project: Path, earlier: dict[str, bytes], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "policy.sarif")
    monkeypatch.setattr("planning.service.write_text", _failing_on_call(3, full))
    outcome = plan_in_process(project, capsys)
    assert outcome.code == 2
    assert "Traceback" not in outcome.err
    assert outcome.error_line.startswith("error: --out: cannot write the plan to ")
    assert "No space left on device" in outcome.error_line
    _output_unchanged(project, earlier)


def test_a_new_plan_replaces_the_folder_whole_with_ordinary_permissions(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No stale job file survives (a renamed run's old file would still be submittable), and the folder is
    not left private the way a temporary folder is made."""
    config = good_config()
    config["aml-gpu-training:jobs"][0]["name"] = "ddp-renamed"
    make_project(project, config, stack=STACK)
    umask = os.umask(0o022)
    try:
        outcome = plan_in_process(project, capsys, "--format", "json")
    finally:
        os.umask(umask)
    assert outcome.code == 0, outcome.err
    assert sorted(p.name for p in (project / "build" / STACK / "jobs").iterdir()) == [
        "ddp-renamed.yml", "fabric-check-gpu-a100.yml"
    ]
    assert (project / "build" / STACK).stat().st_mode & 0o777 == 0o755
    assert leftovers(project / "build") == []


def test_sigterm_while_writing_cleans_the_staging_folder(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "resources.json").write_text("earlier\n")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), artifacts.atomic_directory(target) as staging:
        (staging / "resources.json").write_text("half\n")
        os.kill(os.getpid(), signal.SIGTERM)
    assert (target / "resources.json").read_text() == "earlier\n"
    assert leftovers(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) == before


# ------------------------------------------------------------------------------------------------ --out guard


GUARDED: list[tuple[str, Callable[[Path], str], str]] = [
    ("the project root", lambda p: ".", "is or holds"),
    ("a parent of the project", lambda p: "..", "is or holds"),
    ("a folder of sources", lambda p: "src", "holds train.py"),
    ("a folder of job sources", lambda p: "build/case-jobs", "holds jobs/train.py"),
    ("a file", lambda p: "src/train.py", "is a file, not a folder"),
]


@pytest.mark.parametrize(("case", "out", "says"), GUARDED, ids=[g[0] for g in GUARDED])
def test_plan_refuses_an_out_folder_it_would_destroy(
    project: Path, capsys: pytest.CaptureFixture[str], case: str, out: Callable[[Path], str], says: str
) -> None:
    (project / "src").mkdir()
    (project / "src" / "train.py").write_text("print('precious')\n")
    (project / "build" / "case-jobs" / "jobs").mkdir(parents=True)
    (project / "build" / "case-jobs" / "jobs" / "train.py").write_text("print('precious')\n")
    before = snapshot(project)

    outcome = plan_in_process(project, capsys, "--out", out(project))

    assert outcome.code == 2, outcome.err
    assert outcome.error_line.startswith("error: --out: ")
    assert says in outcome.error_line
    assert snapshot(project) == before
    assert leftovers(project) == [] and leftovers(project.parent) == []


def test_plan_writes_into_an_empty_out_folder(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "empty").mkdir()
    assert plan_in_process(project, capsys, "--out", "empty", "--format", "json").code == 0
    assert (project / "empty" / "resources.json").is_file()


# ------------------------------------------------------------------------------------------------ real signals


# The child takes over SIGINT as the console script does (``interrupts.install``), rather than relying on
# Python's default handler: a parent may hand SIGINT down ignored (bash does for a command started with
# ``&`` in a script), and Python keeps an inherited SIG_IGN, so the signal would never arrive.
SLOW_WRITER = """
import sys, time
from kernel import interrupts
interrupts.install()
import planning.service as plan
from planning import artifacts

def write_text(path, text):
    artifacts.write_text(path, text)
    time.sleep(0.4)  # widen the write phase so the signal lands inside it

plan.write_text = write_text
from amlgpu.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _as_a_background_job() -> None:
    """Start the child with SIGINT ignored, as bash starts ``cmd &`` in a script: the harshest parent, and
    the same for every run of the suite whatever started it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(project: Path, command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_a_background_job)


def _wait_for(condition: Callable[[], Any], process: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def _staging_with_files(project: Path) -> bool:
    build = project / "build"
    return any(p.suffix == ".tmp" and any(p.iterdir()) for p in build.glob(f".{STACK}.*"))


@pytest.mark.slow  # a real plan in a fresh interpreter, signalled mid-write: about 7 CPU s each
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_writing_leaves_the_earlier_output(
    project: Path, earlier: dict[str, bytes], sig: signal.Signals
) -> None:
    process = _start(project, [sys.executable, "-c", SLOW_WRITER, "plan", "--stack", STACK])
    _wait_for(lambda: _staging_with_files(project), process)
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)

    assert process.returncode == 130, err
    assert err.rstrip().endswith("interrupted")
    assert "Traceback" not in out + err
    _output_unchanged(project, earlier)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_console_script_interrupted_while_planning_leaves_the_earlier_output(
    project: Path, earlier: dict[str, bytes], sig: signal.Signals
) -> None:
    process = _start(project, [str(AMLGPU), "plan", "--stack", STACK])
    assert process.stderr is not None
    assert process.stderr.readline().startswith("Planning stack")
    time.sleep(0.5)
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)

    # Ctrl-C is caught (exit 130, one line); SIGTERM outside the write phase ends the process at once.
    assert process.returncode in (130, -sig), err
    assert "Traceback" not in out + err
    _output_unchanged(project, earlier)

