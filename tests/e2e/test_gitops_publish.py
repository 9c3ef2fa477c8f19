"""pr-publish.yml's shell steps, run as the runner runs them, against a recording stand-in for ``gh``.

The stand-in answers ``gh api`` from canned responses (in the GitHub REST API's shapes: issue comments
carry ``user.login`` and ``user.type``, pulls carry ``head.sha``), applies ``--jq`` with the real jq as gh
does, and records every call, so the tests see exactly which comment would be edited or created and
which artifacts are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash, jq")

SHA = "3d3c42e5aac5ba805825da76410c181273ba90b1"
REPO = "example-org/aml-gpu-training"
MARKER = "<!-- amlgpu-plan -->"

FAKE_GH = r'''
import json, os, subprocess, sys
args = sys.argv[1:]
assert args[0] == "api", args
log = open(os.environ["GH_LOG"], "a")
method, path, jq, fields, body = "GET", None, None, {}, None
i = 1
while i < len(args):
    a = args[i]
    if a in ("--method", "-X"):
        method = args[i + 1]; i += 2; continue
    if a == "--jq":
        jq = args[i + 1]; i += 2; continue
    if a == "-f":
        k, v = args[i + 1].split("=", 1); fields[k] = v; i += 2; continue
    if a == "--input":
        body = json.loads(sys.stdin.read()); i += 2; continue
    if a == "--paginate":
        i += 1; continue
    path = a; i += 1
log.write(json.dumps({"method": method, "path": path, "fields": fields, "body": body}) + "\n")
responses = json.load(open(os.environ["GH_RESPONSES"]))
answer = responses.get(f"{method} {path}", {})
text = json.dumps(answer)
if jq:
    text = subprocess.run(["jq", "-r", jq], input=text, capture_output=True, text=True, check=True).stdout
sys.stdout.write(text)
'''


def _steps(job: str = "publish") -> dict[str, Any]:
    document = yaml.safe_load((ROOT / ".github" / "workflows" / "pr-publish.yml").read_text(encoding="utf-8"))
    return {step.get("name", ""): step for step in document["jobs"][job]["steps"]}


class Runner:
    """One job's workspace: RUNNER_TEMP with the downloaded artifact, a stand-in gh, the step outputs."""

    def __init__(self, tmp: Path, responses: dict[str, Any]) -> None:
        self.tmp = tmp
        self.temp = tmp / "runner-temp"
        (self.temp / "artifact" / "plan" / "dev").mkdir(parents=True)
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        gh = bin_dir / "gh"
        gh.write_text(f"#!{sys.executable}\n{FAKE_GH}", encoding="utf-8")
        gh.chmod(0o755)
        (tmp / "responses.json").write_text(json.dumps(responses), encoding="utf-8")
        self.env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "RUNNER_TEMP": str(self.temp),
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_OUTPUT": str(tmp / "output"),
            "GH_LOG": str(tmp / "gh.log"),
            "GH_RESPONSES": str(tmp / "responses.json"),
            "GH_TOKEN": "not-a-token",
            "HEAD_SHA": SHA,
            "HEAD_OWNER": "a-fork-owner",
            "HEAD_BRANCH": "feature; rm -rf /",
        }

    def artifact(self, *, meta: dict[str, Any] | None = None, verdict: str = "## ✅ passed\n") -> Path:
        folder = self.temp / "artifact"
        (folder / "meta.json").write_text(json.dumps(meta or {"head_sha": SHA, "exit_code": 0, "stacks": ["dev"]}))
        (folder / "comment.md").write_text(verdict, encoding="utf-8")
        (folder / "plan" / "dev" / "policy.sarif").write_text("{}", encoding="utf-8")
        return folder

    def run(self, step: str, job: str = "publish", **env: str) -> subprocess.CompletedProcess[str]:
        script = _steps(job)[step]["run"]
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                              env={**self.env, **env}, capture_output=True, text=True, timeout=60, check=False,
                              cwd=self.tmp)

    @property
    def calls(self) -> list[dict[str, Any]]:
        log = self.tmp / "gh.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    @property
    def outputs(self) -> str:
        out = self.tmp / "output"
        return out.read_text() if out.exists() else ""


def _comment(id_: int, login: str, kind: str, body: str) -> dict[str, Any]:
    return {"id": id_, "user": {"login": login, "type": kind}, "body": body}


COMMENTS = f"GET repos/{REPO}/issues/7/comments"


def test_the_sticky_comment_is_the_bots_never_a_users_with_the_same_marker(tmp_path: Path) -> None:
    runner = Runner(tmp_path, {COMMENTS: [
        _comment(11, "mallory", "User", f"{MARKER}\nI put the marker here"),
        _comment(12, "github-actions[bot]", "Bot", f"{MARKER}\nold verdict"),
    ]})
    runner.artifact(verdict="## ❌ failed\n| a | b |\n")
    result = runner.run("Policy verdict as a sticky PR comment", PR="7")
    assert result.returncode == 0, result.stderr
    writes = [c for c in runner.calls if c["method"] != "GET"]
    assert writes == [{"method": "PATCH", "path": f"repos/{REPO}/issues/comments/12", "fields": {},
                       "body": {"body": f"{MARKER}\n## ❌ failed\n| a | b |\n"}}]


def test_a_users_marker_comment_alone_gets_a_new_bot_comment(tmp_path: Path) -> None:
    runner = Runner(tmp_path, {COMMENTS: [
        _comment(11, "mallory", "User", f"{MARKER}\nI put the marker here"),
        _comment(13, "github-actions[bot]", "Bot", "<!-- amlgpu-policy:prod -->\nan earlier version's comment"),
    ]})
    runner.artifact()
    assert runner.run("Policy verdict as a sticky PR comment", PR="7").returncode == 0
    writes = [c for c in runner.calls if c["method"] != "GET"]
    assert [(w["method"], w["path"]) for w in writes] == [("POST", f"repos/{REPO}/issues/7/comments")]


def test_an_oversized_verdict_is_cut_and_says_so(tmp_path: Path) -> None:
    runner = Runner(tmp_path, {COMMENTS: []})
    runner.artifact(verdict="x" * 70_000)
    assert runner.run("Policy verdict as a sticky PR comment", PR="7").returncode == 0
    body = runner.calls[-1]["body"]["body"]
    assert body.startswith(MARKER + "\n" + "x" * 60_000 + "\n\n(cut:")
    assert len(body) < 65_536


def _pulls(sha: str) -> dict[str, Any]:
    return {f"GET repos/{REPO}/pulls": [{"number": 7, "head": {"sha": sha}}]}


def test_the_pull_request_comes_from_the_event_and_must_be_at_the_planned_commit(tmp_path: Path) -> None:
    runner = Runner(tmp_path, _pulls(SHA))
    runner.artifact()
    result = runner.run("Check the artifact")
    assert result.returncode == 0, result.stderr
    assert runner.outputs == "pr=7\nstacks=[\"dev\"]\n"
    lookup = runner.calls[0]
    # The fork's branch name (attacker-chosen text) is passed as one query value, never run.
    assert lookup["fields"] == {"state": "open", "head": "a-fork-owner:feature; rm -rf /"}


def test_a_pull_request_moved_on_since_the_plan_gets_nothing(tmp_path: Path) -> None:
    runner = Runner(tmp_path, _pulls("0" * 40))
    runner.artifact()
    assert runner.run("Check the artifact").returncode == 0
    assert runner.outputs.startswith("pr=\n")


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        ({"head_sha": "0" * 40, "exit_code": 0, "stacks": ["dev"]}, "another commit's plan"),
        ({"head_sha": SHA, "exit_code": 0, "stacks": ["dev"], "pad": "x" * 40_000}, "an oversized meta.json"),
    ],
)
def test_a_forged_artifact_is_refused(tmp_path: Path, meta: dict[str, Any], why: str) -> None:
    runner = Runner(tmp_path, _pulls(SHA))
    runner.artifact(meta=meta)
    result = runner.run("Check the artifact")
    assert result.returncode == 1, why
    assert "pr=" not in runner.outputs


def test_only_names_spelled_as_stack_names_reach_the_code_scanning_matrix(tmp_path: Path) -> None:
    runner = Runner(tmp_path, _pulls(SHA))
    names = ["prod", "dev", "../../etc", "a\nb", "::set-output name=x::y", "-rf", 7, None, "dev", "x" * 101]
    runner.artifact(meta={"head_sha": SHA, "exit_code": 1, "stacks": [*names, *(f"s{i:03d}" for i in range(120))]})
    result = runner.run("Check the artifact")
    assert result.returncode == 0, result.stderr
    stacks = json.loads(runner.outputs.split("stacks=", 1)[1])
    assert stacks[:3] == ["dev", "prod", "s000"] and len(stacks) == 100


def test_a_symlinked_verdict_is_refused(tmp_path: Path) -> None:
    runner = Runner(tmp_path, _pulls(SHA))
    folder = runner.artifact()
    (folder / "comment.md").unlink()
    (folder / "comment.md").symlink_to("/etc/passwd")
    result = runner.run("Check the artifact")
    assert result.returncode == 1
    assert "lacks comment.md" in result.stdout


@pytest.mark.parametrize("how", ["in place", "missing", "linked file", "linked folder"])
def test_each_stacks_sarif_is_checked_before_its_upload(tmp_path: Path, how: str) -> None:
    runner = Runner(tmp_path, {})
    folder = runner.artifact() / "plan"
    if how == "missing":
        (folder / "dev" / "policy.sarif").unlink()
    elif how == "linked file":
        (folder / "dev" / "policy.sarif").unlink()
        (folder / "dev" / "policy.sarif").symlink_to("/etc/passwd")
    elif how == "linked folder":
        shutil.move(folder / "dev", tmp_path / "elsewhere")
        (folder / "dev").symlink_to(tmp_path / "elsewhere")
    result = runner.run("Check the stack's SARIF", job="sarif", STACK="dev")
    assert result.returncode == (0 if how == "in place" else 1), result.stdout
