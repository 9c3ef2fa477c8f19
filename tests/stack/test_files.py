"""The suite's stacks are the ones the project ships, not whatever stack files lie in the folder: a reader who
follows docs/quickstart.md has a ``Pulumi.mine.yaml`` of their own, and ``make test`` must still pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stack.config import from_stackfile
from stack.stackfile import read
from tests.conftest import ROOT, SHIPPED_STACK_FILES, shipped_stacks
from tests.e2e.test_docs_commands import SHELLS, blocks
from tests.forkserver import amlgpu_on_path


def _git_tracked_stack_files() -> list[str] | None:
    git = shutil.which("git")
    if git is None:
        return None
    listed = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z", "--", "Pulumi.*.yaml", "*/Pulumi.*.yaml"],
                            capture_output=True, text=True, timeout=60, check=False)
    if listed.returncode != 0:
        return None  # not a git checkout (an unpacked archive): the list below is all there is
    return sorted(name for name in listed.stdout.split("\0") if name)


def test_the_shipped_list_is_every_git_tracked_stack_file() -> None:
    tracked = _git_tracked_stack_files()
    if tracked is None:
        pytest.skip("not a git checkout")
    assert sorted(SHIPPED_STACK_FILES) == tracked


@pytest.mark.slow
def test_following_the_quickstart_leaves_the_suites_stacks_as_shipped(tmp_path: Path) -> None:
    """The quick start's own commands, in a copy of the project: the stack file they write is the reader's,
    and the suite's enumeration is unchanged (a folder listing would have taken it for a shipped stack)."""
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", *SHIPPED_STACK_FILES):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    for folder in ("environments", "jobs", "schema", "policies"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    first = next(b for b in blocks("docs/quickstart.md") if b.language in SHELLS and not b.tags)
    assert "amlgpu init --stack mine" in first.body, first.body
    shim = amlgpu_on_path(tmp_path / "bin").parent  # amlgpu as a shell starts it, without its imports each time
    env = {**os.environ, "PATH": os.pathsep.join([str(shim), str(Path(sys.executable).parent), os.environ["PATH"]])}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", first.body], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (copy / "Pulumi.mine.yaml").is_file()
    assert copy / "Pulumi.mine.yaml" in set(copy.glob("Pulumi.*.yaml"))  # a folder listing takes it in
    enumerated = [copy / p.relative_to(ROOT) for p in [*shipped_stacks(), *shipped_stacks("examples/multi-team")]]
    assert sorted(p.relative_to(copy).as_posix() for p in enumerated) == sorted(SHIPPED_STACK_FILES)
    for path in enumerated:  # and each is still the shipped stack, valid as the suite expects
        from_stackfile(read(path), copy)
