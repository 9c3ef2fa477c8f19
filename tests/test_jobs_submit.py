"""``amlgpu submit``: workspace coordinates, the checks before sending, the dry run, and following the job.

Everything short of Azure: the client is a fake object handed to :func:`jobs.submit.submit`, and the
Pulumi CLI a script on PATH that prints what ``pulumi stack output --json`` prints.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from amlgpu.plan import Plan
from jobs import submit
from jobs.render import build_job
from model import stackfile
from model.config import from_stackfile
from tests.conftest import NS, ROOT, dev_config, make_project

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

SUBSCRIPTION = "5e1f0c9a-1111-4222-8333-944455556666"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dev_plan: Plan) -> Path:
    """The dev stack in a project of its own, planned (outputs.json as `amlgpu plan` writes it), as cwd."""
    folder = make_project(tmp_path / "project", dev_config(), stack="dev")
    (folder / "build" / "dev").mkdir(parents=True)
    (folder / "build" / "dev" / "outputs.json").write_text(json.dumps(dev_plan.outputs))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Pulumi CLI unless a test puts one there
    monkeypatch.delenv(submit.SUBSCRIPTION_VARIABLE, raising=False)
    return folder


def test_dry_run_prints_the_workspace_and_the_job_file(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(submit.SUBSCRIPTION_VARIABLE, SUBSCRIPTION)
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0
    out = capsys.readouterr().out
    first, body = out.split("\n", 1)
    assert first == (f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription "
                     f"{SUBSCRIPTION}) from build/dev/outputs.json and {submit.SUBSCRIPTION_VARIABLE}")
    document = yaml.safe_load(body)
    exported = json.loads((project / "build" / "dev" / "outputs.json").read_text())["jobs"]["ddp-train"]
    assert re.fullmatch(r"ddp-train-\d{8}-\d{6}", document["name"])
    assert {**document, "name": "ddp-train", "code": exported["code"]} == exported
    assert (Path.cwd() / document["code"]).resolve() == (project / "jobs" / "workloads").resolve()

    from azure.ai.ml import load_job

    (project / "job.yml").write_text(body)  # what `az ml job create -f job.yml` would be given
    assert load_job(project / "job.yml").distribution.process_count_per_instance == 8


def test_dry_run_signs_in_to_nothing(project: Path) -> None:
    script = ("import sys; from amlgpu.cli import main; code = main(['submit', 'allreduce-health', '--stack', "
              "'dev', '--dry-run']); print('azure.identity' in sys.modules, code)")
    env = {**os.environ, submit.SUBSCRIPTION_VARIABLE: SUBSCRIPTION, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "False 0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["submit", "ddp-train", "--stack", "dev"],
         "error: build/dev/outputs.json: workspace.subscription_id: an offline plan does not know the subscription; "
         "set AZURE_SUBSCRIPTION_ID (or use the Pulumi CLI's outputs of the deployed stack)\n"),
        (["submit", "ddp", "--stack", "dev", "--dry-run"],
         "error: Pulumi.dev.yaml: aml-gpu-training:jobs: no run named 'ddp'; declared runs: allreduce-health, "
         "ddp-torchrun, ddp-train, fabric-check-gpu-a100, mnist-tf-multiworker\n"),
        (["submit", "ddp-train", "--stack", "dev", "--plan-dir", "elsewhere"],
         "error: elsewhere/outputs.json: no outputs.json in elsewhere: run `amlgpu plan --stack dev --out "
         "elsewhere`\n"),
    ],
    ids=["offline-subscription", "unknown-run", "missing-plan-dir"],
)
def test_what_cannot_be_submitted_is_exit_2(project: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                            message: str) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == message


def test_a_run_changed_since_the_plan_is_refused(project: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(submit.SUBSCRIPTION_VARIABLE, SUBSCRIPTION)
    config = dev_config()
    config[f"{NS}:jobs"][0]["limits"]["timeout"] = 60
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    assert main(["submit", config[f"{NS}:jobs"][0]["name"], "--stack", "dev", "--dry-run"]) == 2
    assert "changed since build/dev/outputs.json: plan (or `pulumi up`) the stack again" in capsys.readouterr().err


def test_a_code_folder_with_a_private_key_is_never_uploaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str], dev_plan: Plan) -> None:
    config = dev_config()
    config[f"{NS}:jobs"] = [{**config[f"{NS}:jobs"][0], "code": "src"}]
    folder = make_project(tmp_path / "project", config, stack="dev")
    (folder / "build" / "dev").mkdir(parents=True)
    (folder / "build" / "dev" / "outputs.json").write_text(json.dumps(dev_plan.outputs))
    (folder / "src" / ".ssh").mkdir(parents=True)
    (folder / "src" / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    monkeypatch.chdir(folder)
    assert main(["submit", config[f"{NS}:jobs"][0]["name"], "--stack", "dev", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "jobs[0].code: run 'ddp-train': the code folder 'src' holds private keys or tokens (.ssh/id_rsa)" in err
    assert "BEGIN" not in err


def test_without_a_plan_or_the_pulumi_cli_the_user_is_told_how_to_get_one(
    project: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    (project / "build" / "dev" / "outputs.json").unlink()
    assert main(["submit", "ddp-train", "--stack", "dev"]) == 2
    assert "run `amlgpu plan --stack dev` (writes build/dev/outputs.json) or install the Pulumi CLI" in (
        capsys.readouterr().err
    )


def fake_pulumi(folder: Path, *, stdout: str, stderr: str = "", code: int = 0) -> None:
    folder.mkdir(exist_ok=True)
    script = folder / "pulumi"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {folder}/args\ncat <<'EOF'\n{stdout}\nEOF\n"
                      f"cat >&2 <<'EOF'\n{stderr}\nEOF\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_the_deployed_stacks_outputs_come_from_the_pulumi_cli(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    outputs = json.loads((project / "build" / "dev" / "outputs.json").read_text())
    outputs["workspace"]["subscription_id"] = SUBSCRIPTION
    bin_dir = project / "bin"
    fake_pulumi(bin_dir, stdout=json.dumps(outputs))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert main(["submit", "ddp-torchrun", "--stack", "dev", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(
        f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription {SUBSCRIPTION}) "
        "from pulumi stack output --stack dev\n")
    assert (bin_dir / "args").read_text().split() == ["stack", "output", "--json", "--stack", "dev"]


def test_a_failing_pulumi_cli_is_reported_with_its_reason(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir = project / "bin"
    fake_pulumi(bin_dir, stdout="", stderr="error: no stack named 'dev' found", code=255)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert main(["submit", "ddp-train", "--stack", "dev"]) == 2
    assert capsys.readouterr().err == ("error: Pulumi.dev.yaml: pulumi stack output failed: "
                                       "error: no stack named 'dev' found\n")


def test_a_dry_run_with_a_failing_pulumi_cli_shows_the_plans_workspace(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir = project / "bin"
    fake_pulumi(bin_dir, stdout="", stderr="error: PULUMI_ACCESS_TOKEN must be set for login", code=255)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ("note: pulumi stack output failed: error: PULUMI_ACCESS_TOKEN must be set for login; "
                            "showing the offline plan's workspace instead\n")
    assert captured.out.startswith(
        f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription {OFFLINE}) from "
        f"build/dev/outputs.json (a placeholder subscription: set {submit.SUBSCRIPTION_VARIABLE} to submit)\n")


@pytest.mark.parametrize("planned", [True, False], ids=["after-a-plan", "before-any-plan"])
def test_a_dry_run_works_offline_without_a_subscription(
    project: Path, capsys: pytest.CaptureFixture[str], planned: bool
) -> None:
    if not planned:
        (project / "build" / "dev" / "outputs.json").unlink()
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0
    first, body = capsys.readouterr().out.split("\n", 1)
    source = "build/dev/outputs.json" if planned else "Pulumi.dev.yaml"
    assert first == (f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription "
                     f"{OFFLINE}) from {source} (a placeholder subscription: set {submit.SUBSCRIPTION_VARIABLE} "
                     "to submit)")
    assert re.fullmatch(r"ddp-train-\d{8}-\d{6}", yaml.safe_load(body)["name"])


OFFLINE = submit.OFFLINE_SUBSCRIPTION


class FakeJobs:
    """Azure ML's job operations as a real service answers them, for one job."""

    def __init__(self, final_status: str, *, fail_stream: bool = False, refuse: Exception | None = None) -> None:
        self.final_status = final_status
        self.fail_stream = fail_stream
        self.refuse = refuse
        self.sent: list[Any] = []
        self.streamed: list[str] = []

    def create_or_update(self, job: Any) -> Any:
        if self.refuse is not None:
            raise self.refuse
        self.sent.append(job)
        return type("Created", (), {"name": job.name, "studio_url": f"https://ml.azure.com/runs/{job.name}"})()

    def stream(self, name: str) -> None:
        self.streamed.append(name)
        if self.fail_stream:
            from azure.ai.ml.exceptions import ErrorTarget, JobException

            raise JobException(message="Exception : rank 3 exited with code 1", target=ErrorTarget.JOB,
                               no_personal_data_message="failed")

    def get(self, name: str) -> Any:
        return type("Job", (), {"name": name, "status": self.final_status})()


class FakeClient:
    def __init__(self, jobs: FakeJobs) -> None:
        self.jobs = jobs


def prepared(project: Path, name: str) -> submit.Submission:
    config = from_stackfile(stackfile.read(project / "Pulumi.dev.yaml"), project)
    outputs = submit.stack_outputs("dev", project, None)
    return submit.prepare(name, config=config, stack_file="Pulumi.dev.yaml", outputs=outputs, root=project,
                          environ={submit.SUBSCRIPTION_VARIABLE: SUBSCRIPTION},
                          now=datetime(2025, 6, 1, 12, 30, 5, tzinfo=UTC))


def test_submit_sends_the_job_and_follows_it_to_completion(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    submission = prepared(project, "ddp-train")
    jobs = FakeJobs("Completed")
    assert submit.submit(submission, root=project, client=FakeClient(jobs)) == 0
    (sent,) = jobs.sent
    assert sent.name == "ddp-train-20250601-123005"
    assert sent._to_dict() == build_job(submission.spec, root=project)._to_dict()
    assert Path(sent.code) == project / "jobs" / "workloads"
    assert jobs.streamed == ["ddp-train-20250601-123005"]
    assert capsys.readouterr().out.splitlines() == [
        f"submitted ddp-train-20250601-123005 to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, "
        f"subscription {SUBSCRIPTION}) from build/dev/outputs.json and {submit.SUBSCRIPTION_VARIABLE}",
        "studio: https://ml.azure.com/runs/ddp-train-20250601-123005",
        "ddp-train-20250601-123005: Completed",
    ]


@pytest.mark.parametrize(("status", "fail_stream"), [("Failed", True), ("Canceled", False), ("NotResponding", False)])
def test_a_job_that_does_not_complete_exits_1(project: Path, capsys: pytest.CaptureFixture[str], status: str,
                                              fail_stream: bool) -> None:
    jobs = FakeJobs(status, fail_stream=fail_stream)
    assert submit.submit(prepared(project, "allreduce-health"), root=project, client=FakeClient(jobs)) == 1
    out = capsys.readouterr().out
    assert out.endswith(f"allreduce-health-20250601-123005: {status}\n")
    assert ("rank 3 exited with code 1" in out) == fail_stream


def test_azure_refusing_the_job_is_a_user_error(project: Path) -> None:
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

    for refusal, message in [
        (ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token"), "cannot sign in to Azure"),
        (HttpResponseError("(ResourceNotFound) Workspace mlw-gpu-dev not found"), "Azure refused the job"),
    ]:
        client = FakeClient(FakeJobs("x", refuse=refusal))
        with pytest.raises(submit.UserError, match=message):
            submit.submit(prepared(project, "ddp-train"), root=project, client=client)


def test_the_real_client_targets_the_stacks_workspace() -> None:
    workspace = submit.WorkspaceRef(SUBSCRIPTION, "rg-aml-gpu-dev", "mlw-gpu-dev", "test")
    client = submit.ml_client(workspace)
    assert (client.subscription_id, client.resource_group_name, client.workspace_name) == (
        SUBSCRIPTION, "rg-aml-gpu-dev", "mlw-gpu-dev")
