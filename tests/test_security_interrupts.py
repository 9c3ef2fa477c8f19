"""Ctrl-C at any moment (docs/security.md): the console script exits 130 with one line, no traceback, and the
earlier output intact, wherever the signal lands: interpreter start, imports (pulumi_azure_native's lazy
modules, where an interrupt used to leave a half-initialised module and a traceback with exit 1), the
program under the mock engine, the write.

Each case sends one SIGINT at its own delay, measured from the start of the process or from the plan's
"Planning stack" line. The child starts with SIGINT blocked, as a parent may leave it: a signal sent before
amlgpu's first line runs is then held, and delivered the moment amlgpu takes over Ctrl-C, so even a delay
of 0 tests amlgpu and not the interpreter's own start (which no program can guard).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amlgpu.commands.plan import OUTPUT_LAYOUT
from tests.conftest import make_project
from tests.test_reliability_corpus import AMLGPU, STACK, good_config, leftovers, snapshot

EARLIER = {name: f"earlier {name}\n".encode() for name in OUTPUT_LAYOUT if OUTPUT_LAYOUT[name] is None}

DELAYS = [
    # (phase the delay aims at, measured from, seconds)
    ("interpreter start", "spawn", 0.0),
    ("interpreter start", "spawn", 0.03),
    ("amlgpu's imports", "spawn", 0.15),
    ("the command's imports, reading the stack", "spawn", 0.4),
    ("pulumi imports", "planning", 0.0),
    ("pulumi_azure_native's lazy modules", "planning", 0.2),
    ("the program under the mock engine", "planning", 0.5),
    ("the program under the mock engine", "planning", 0.9),
    ("the program, the policy pack", "planning", 1.4),
]


def _block_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = make_project(tmp_path_factory.mktemp("interrupts"), good_config(), stack=STACK)
    return folder


def _with_earlier_output(project: Path) -> Path:
    build = project / "build" / STACK
    if build.exists():
        for path in build.iterdir():
            path.unlink()
    build.mkdir(parents=True, exist_ok=True)
    for name, data in EARLIER.items():
        (build / name).write_bytes(data)
    return build


def _interrupt(command: list[str], project: Path, origin: str, delay: float) -> tuple[int, str, str]:
    process = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_block_sigint)
    assert process.stderr is not None
    seen = ""
    if origin == "planning":
        seen = process.stderr.readline()
        assert seen.startswith("Planning stack"), seen
    time.sleep(delay)
    assert process.poll() is None, "the plan ended before the signal: shorten the delay"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, seen + err


@pytest.mark.parametrize(("phase", "origin", "delay"), DELAYS, ids=[f"{o}+{d}s ({p})" for p, o, d in DELAYS])
def test_ctrl_c_at_any_moment_exits_130_with_one_line(project: Path, phase: str, origin: str, delay: float) -> None:
    build = _with_earlier_output(project)
    code, out, err = _interrupt([str(AMLGPU), "plan", "--stack", STACK], project, origin, delay)

    assert code == 130, err
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert lines[-1] == "interrupted", err
    assert lines[:-1] in ([], ["Planning stack 'case' offline (Pulumi mock engine; no Azure calls)..."]), err
    assert out == ""
    assert snapshot(build) == EARLIER
    assert leftovers(build.parent) == []


SLOW_WRITE = """
import sys, time
from amlgpu import interrupts
interrupts.install()  # what the console script does: `python -c` is not it
import amlgpu.commands.plan as plan
from amlgpu import artifacts

def write_text(path, text):
    artifacts.write_text(path, text)
    time.sleep(0.3)

plan.write_text = write_text
from amlgpu.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_while_writing_removes_the_staging_folder_and_keeps_the_earlier_output(project: Path) -> None:
    build = _with_earlier_output(project)
    process = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, "plan", "--stack", STACK], cwd=project,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(p.suffix == ".tmp" and any(p.iterdir()) for p in build.parent.glob(f".{STACK}.*")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)  # a second Ctrl-C does not cut the cleanup short
    out, err = process.communicate(timeout=60)

    assert process.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted"
    assert "Traceback" not in out + err
    assert snapshot(build) == EARLIER
    assert leftovers(build.parent) == []
