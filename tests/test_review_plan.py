"""``amlgpu plan --base`` end to end: a plan folder, a git ref (planned in a temporary worktree with its own
code), and bad bases (exit 2, nothing written)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from amlgpu.cli import main
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def dev_plan_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base") / "dev"
    assert main(["plan", "--stack", "dev", "--out", str(out)]) == 0
    return out


def test_a_plan_against_its_previous_plan_reports_no_change(dev_plan_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "head"
    assert main(["plan", "--stack", "dev", "--out", str(out), "--base", str(dev_plan_folder)]) == 0
    result = json.loads((out / "diff.json").read_text())
    assert result["resources"] == [] and result["runs"] == [] and result["verdict"].startswith("No change")
    policy = (out / "policy.md").read_text()
    assert policy.startswith(f"## Changes against `{dev_plan_folder}`\n\n**Verdict:** No change")
    assert "### Cost at list price (USD)" in policy
    assert json.loads((out / "cost.json").read_text()) == json.loads((dev_plan_folder / "cost.json").read_text())
    # Without --base there is no diff: the earlier output's diff.json must not linger either.
    assert not (dev_plan_folder / "diff.json").exists()


def _worktrees() -> list[str]:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True,
                          text=True, check=True).stdout.splitlines()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_a_git_ref_is_planned_with_its_own_code_in_a_temporary_worktree(tmp_path: Path) -> None:
    before = _worktrees()
    out = tmp_path / "head"
    assert main(["plan", "--stack", "dev", "--out", str(out), "--base", "HEAD"]) in (0, 1)
    result = json.loads((out / "diff.json").read_text())
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert result["base"] == f"HEAD ({commit[:12]})"
    assert result["verdict"]
    assert _worktrees() == before  # the temporary worktree is gone


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ("no-such-ref-anywhere", "is neither a plan folder nor a git ref"),
        ("--upload-pack=touch /tmp/x", "is neither a plan folder nor a git ref"),
        ("HEAD..main", "is neither a plan folder nor a git ref"),
        ("EMPTY_FOLDER", "holds no plan (no resources.json)"),
    ],
)
def test_a_bad_base_exits_2_and_writes_nothing(
    base: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if base == "EMPTY_FOLDER":
        base = str(tmp_path / "empty")
        Path(base).mkdir()
    out = tmp_path / "head"
    assert main(["plan", "--stack", "dev", "--out", str(out), f"--base={base}"]) == 2
    err = capsys.readouterr().err
    assert "--base" in err and message in err and "Traceback" not in err
    assert not out.exists()
