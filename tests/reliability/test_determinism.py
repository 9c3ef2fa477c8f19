"""Byte-identical outputs: the same stack plans to the same bytes twice in a row, and on another machine
(another absolute path, hash seed, time zone and locale). Nothing carries a timestamp or a local path.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, make_project
from tests.reliability.test_corpus import STACK, amlgpu, good_config, plan_in_process, snapshot

TIMESTAMP = re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d[T ][0-2]\d:[0-5]\d")


def _standalone_project(folder: Path) -> Path:
    """A project with its own copy of the code folders (no links back to this checkout), as a clone has."""
    folder.mkdir(parents=True)
    for name in ("jobs", "environments"):
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    return make_project(folder, good_config(), stack=STACK)


def test_planning_twice_gives_the_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    first = plan_in_process(project, capsys, "--out", "build/first")
    second = plan_in_process(project, capsys, "--out", "build/second")
    assert first.code == second.code == 0, first.err + second.err
    files = snapshot(project / "build" / "first")
    assert files == snapshot(project / "build" / "second")
    assert {"resources.json", "outputs.json", "policy.sarif", "policy.md", "jobs/ddp.yml"} <= set(files)
    assert first.out.replace("build/first", "build/second") == second.out


@pytest.mark.slow
def test_another_machine_gives_the_same_bytes(tmp_path: Path) -> None:
    here = _standalone_project(tmp_path / "a")
    there = _standalone_project(tmp_path / "somewhere" / "else" / "with a space" / "checkout")
    local = amlgpu(here, "plan", "--stack", STACK, env={
        "PYTHONHASHSEED": "0", "TZ": "UTC", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
    }, fresh=True)
    remote = amlgpu(there, "plan", "--stack", STACK, env={
        "PYTHONHASHSEED": "4242", "TZ": "Asia/Kathmandu", "LANG": "tr_TR.UTF-8", "LC_ALL": "tr_TR.UTF-8",
    }, fresh=True)
    assert local.code == remote.code == 0, local.err + remote.err
    files = snapshot(here / "build" / STACK)
    assert files == snapshot(there / "build" / STACK)
    assert local.out == remote.out
    for name, data in files.items():
        text = data.decode("utf-8")
        assert str(here) not in text and str(tmp_path) not in text, f"{name} holds a local path"
        assert not TIMESTAMP.search(text), f"{name} holds a timestamp: {TIMESTAMP.search(text)}"
