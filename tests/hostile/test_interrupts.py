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

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planning.service import OUTPUT_LAYOUT
from tests.cli import AMLGPU
from tests.conftest import make_project
from tests.reliability.test_corpus import STACK, STACK_FILE, good_config, leftovers, snapshot

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


@pytest.mark.slow
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
from kernel import interrupts
interrupts.install()  # what the console script does: `python -c` is not it
import planning.service as plan
from planning import artifacts

def write_text(path, text):
    artifacts.write_text(path, text)
    time.sleep(0.3)

plan.write_text = write_text
from amlgpu.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a real plan in a fresh interpreter, interrupted mid-write: about 6 CPU s
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


# ------------------------------------------------------------------------------------------ nothing left behind
# Ctrl-C during `plan --base <ref>` left git worktrees behind in 5 of 10 tries, and during `import --write`
# once left the temporary copy of the stack file in the project root. Each case below stops the command at a
# known point with a real signal: the code under test blocks there (a base commit whose amlgpu waits, a check
# that waits) and says so in a marker file, so the signal always lands where it must, without a timed race.

WAIT_FOREVER = """\
import os, pathlib, sys, time
pathlib.Path(os.environ["AMLGPU_TEST_READY"]).write_text(str(os.getpid()))
while True:
    time.sleep(60)
"""


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "PATH": os.environ["PATH"], "HOME": str(repo)}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env).stdout


def _repository_with_a_waiting_base(tmp_path: Path) -> Path:
    """A project whose commit ``base`` holds an amlgpu that waits forever once started (the base plan runs the
    base commit's own code), and whose working tree is the real project."""
    project = make_project(tmp_path / "repo", good_config(), stack=STACK)
    _git(project, "init", "-q", "-b", "main")
    fake = project / "amlgpu"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(WAIT_FOREVER)
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "base")
    _git(project, "tag", "base")
    shutil.rmtree(fake)
    return project


def _wait_for(marker: Path, process: subprocess.Popen[str]) -> int:
    """The pid the marker holds, once the process under test reached the point it marks."""
    deadline = time.monotonic() + 120
    while not marker.is_file() or not marker.read_text():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the command never reached the marked point"
        time.sleep(0.02)
    return int(marker.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("target", ["process group (Ctrl-C in a terminal)", "amlgpu alone", "SIGTERM to amlgpu"])
def test_ctrl_c_while_the_base_is_planned_removes_its_worktree(tmp_path: Path, target: str) -> None:
    project = _repository_with_a_waiting_base(tmp_path)
    marker = tmp_path / "ready"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "AMLGPU_TEST_READY": str(marker), "TMPDIR": str(scratch)}
    process = subprocess.Popen([str(AMLGPU), "plan", "--stack", STACK, "--base", "base"], cwd=project, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    child = _wait_for(marker, process)  # the base plan is running, in its worktree
    try:
        assert [p.name for p in scratch.iterdir() if p.name.startswith("amlgpu-base-")]
        if target.startswith("process group"):
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM if target.startswith("SIGTERM") else signal.SIGINT)
        out, err = process.communicate(timeout=120)
        orphaned = _alive(child)
    finally:
        if _alive(child):  # never leave it running, whatever the outcome
            os.kill(child, signal.SIGKILL)

    assert process.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in out + err
    assert list(scratch.iterdir()) == []  # no amlgpu-base-* folder
    worktrees = [line for line in _git(project, "worktree", "list", "--porcelain").splitlines()
                 if line.startswith("worktree ")]
    assert worktrees == [f"worktree {project}"]
    assert not (project / ".git" / "worktrees").exists() or not list((project / ".git" / "worktrees").iterdir())
    assert not orphaned  # the base plan was stopped, not left running


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_worktree_cut_short_while_being_added_is_removed_too(tmp_path: Path) -> None:
    """`git worktree add` killed half-way leaves its worktree locked ("initializing"): prune alone keeps it."""
    from planning.base import _remove_worktree

    project = _repository_with_a_waiting_base(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _git(project, "worktree", "add", "--detach", "--quiet", str(scratch / "tree"), "base")
    _git(project, "worktree", "lock", "--reason", "initializing", str(scratch / "tree"))
    _remove_worktree(project, scratch)
    assert not scratch.exists()
    assert [line for line in _git(project, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")] == [f"worktree {project}"]


SHIELDED = """
import os, signal, sys
from kernel import interrupts
interrupts.install()
steps = []
try:
    with interrupts.cleanup_on_interrupt():
        try:
            steps.append("work")
        finally:
            with interrupts.shielded():
                os.kill(os.getpid(), signal.SIGINT)  # lands inside the cleanup
                steps.append("cleanup finished")
except KeyboardInterrupt:
    steps.append("interrupted after the cleanup")
print(steps)
"""


def test_a_ctrl_c_inside_a_shielded_cleanup_waits_for_its_end() -> None:
    done = subprocess.run([sys.executable, "-c", SHIELDED], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "['work', 'cleanup finished', 'interrupted after the cleanup']", done.stderr


SLOW_CHECK = """
import os, pathlib, sys, time
from kernel import interrupts
interrupts.install()  # what the console script does: `python -c` is not it
from stack import stackfile

read = stackfile.read

def waiting_read(path):
    if path.name.startswith(".Pulumi."):  # the temporary copy import --write checks before swapping it in
        pathlib.Path(os.environ["AMLGPU_TEST_READY"]).write_text(str(os.getpid()))
        while True:
            time.sleep(60)
    return read(path)

stackfile.read = waiting_read
from amlgpu.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_during_import_write_leaves_no_temporary_copy(tmp_path: Path, sig: signal.Signals) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    (project / "job.yml").write_text("name: imported\ncommand: python train.py\ncompute: gpu-a100\n"
                                     "environment: azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest\n")
    before = snapshot(project)
    marker = tmp_path / "ready"
    process = subprocess.Popen([sys.executable, "-c", SLOW_CHECK, "import", "job.yml", "--stack", STACK, "--write"],
                               cwd=project, env={**os.environ, "AMLGPU_TEST_READY": str(marker)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(marker, process)
    assert [p.name for p in project.glob(f".{STACK_FILE}.*")]  # the temporary copy is there now
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)

    assert process.returncode == 130, err
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in out + err
    assert [p.name for p in project.glob(f".{STACK_FILE}.*")] == []
    assert snapshot(project) == before  # the stack file as it was, nothing added
