"""``amlgpu plan --base`` end to end: a plan folder, a git ref (planned in a temporary worktree with its own
code), and bad bases (exit 2, nothing written)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from amlgpu.cli import main
from tests.conftest import NS, ROOT, dev_config, make_project


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
    """The worktrees of the repository under this session's temporary folder, where a base is planned (the
    repository's other worktrees, and other test sessions', come and go on their own)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    mine = str(Path(tempfile.gettempdir()).resolve())
    return [line for line in listed if line.startswith("worktree ") and line.removeprefix("worktree ").startswith(mine)]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.slow
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


def test_the_sample_comment_in_the_gitops_guide_is_what_the_plan_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/gitops.md's sample: the prod stack after a change that raises ``h100`` to 12 nodes and moves
    ``h200`` to H100 nodes. Every line it shows is a line of the real ``policy.md``, in order (rows it
    shortens to ``| ... |`` aside, and the base label, which is a commit there)."""
    project = make_project(tmp_path / "project", {}, stack="prod")
    shipped = (ROOT / "Pulumi.prod.yaml").read_text()
    (project / "Pulumi.prod.yaml").write_text(shipped)
    (project / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "config.prod.json", project / "policies")  # prod's own pack config
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "prod", "--out", str(tmp_path / "base")]) == 0
    changed = shipped.replace("size: Standard_ND96isr_H200_v5", "size: Standard_ND96isr_H100_v5", 1)
    changed = changed.replace("    - name: h100\n      size: Standard_ND96isr_H100_v5\n      min_instances: 0\n"
                              "      max_instances: 8\n", "    - name: h100\n      size: Standard_ND96isr_H100_v5\n"
                              "      min_instances: 0\n      max_instances: 12\n", 1)
    assert changed.count("max_instances: 12") == 1 and changed.count("Standard_ND96isr_H200_v5") == 0
    (project / "Pulumi.prod.yaml").write_text(changed)
    assert main(["plan", "--stack", "prod", "--out", str(tmp_path / "head"), "--base", str(tmp_path / "base")]) == 0
    written = (tmp_path / "head" / "policy.md").read_text().replace(str(tmp_path / "base"), "main (<commit>)")
    guide = (ROOT / "docs" / "gitops.md").read_text()
    sample = guide.split("### Sample comment", 1)[1].split("````markdown\n", 1)[1].split("````", 1)[0]
    lines = iter(written.splitlines())
    for line in sample.splitlines():
        if line.startswith("| ... |"):
            continue
        assert any(line == got for got in lines), f"not in the plan's policy.md (or out of order): {line}"


def test_the_plan_says_when_a_clusters_size_is_not_sold_in_its_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """H200 nodes in eastus: Microsoft lists the ND H200 v5 series in eastus2, not eastus."""
    config = dev_config()
    config["azure-native:location"] = "eastus"
    config[f"{NS}:clusters"][0]["size"] = "Standard_ND96isr_H200_v5"
    monkeypatch.chdir(make_project(tmp_path / "project", config, stack="h200"))
    assert main(["plan", "--stack", "h200"]) in (0, 1)
    out = capsys.readouterr().out
    assert ("Not listed as sold in its region (Microsoft's products-by-region table): gpu-a100 "
            "(Standard_ND96isr_H200_v5 in eastus)") in out
    cost = json.loads((tmp_path / "project" / "build" / "h200" / "cost.json").read_text())
    assert [c["availability"] for c in cost["clusters"]] == ["not listed", "unknown"]  # the image builder: a CPU size
