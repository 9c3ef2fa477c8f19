"""A hostile stack file gets its answer: 8 MiB (the most a stack file may hold) of the characters that cost
each pattern the project applies to user input the most, all in one file.

Only the outcome is asserted (an exit code the CLI promises, no traceback). How long it takes is measured by
``bench/hostile_bench.py``, one case per pattern, with the results in docs/performance.md: every pattern
runs on RE2, whose time is linear in its input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stack.stackfile import MAX_BYTES
from tests import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import hostile_bench  # bench/ is a folder of scripts, not a package


@pytest.mark.slow
def test_an_8_mib_hostile_stack_file_gets_its_answer(tmp_path: Path) -> None:
    project = hostile_bench.write_project(tmp_path / "project", "mixed")
    stack = project / f"Pulumi.{hostile_bench.STACK}.yaml"
    assert MAX_BYTES - (1 << 20) < stack.stat().st_size <= MAX_BYTES

    done = cli.amlgpu(project, "plan", "--stack", hostile_bench.STACK, timeout=1200)

    assert done.returncode in (1, 2), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    if done.returncode == 1:  # planned: the gate found the payload's credential shapes, and masked them
        assert "run-secrets-in" in done.stdout
        outputs = (project / "build" / hostile_bench.STACK / "outputs.json").read_text()
        assert "AccountKey=AccountKey=" not in outputs
