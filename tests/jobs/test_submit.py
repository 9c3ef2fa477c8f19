"""``amlgpu submit``: the checks before sending, the dry run, and the job sent through the real azure-ai-ml.

Azure is a recorded workspace (``tests/aml_workspace.py``): azure-ai-ml's ``MLClient``, its REST clients and
the azure-storage-blob client it opens for the code upload all run for real over azure-core's transport; only
the HTTP answers are recorded, and a request nobody recorded fails the test. The Pulumi CLI, where a test needs
one, is a script on PATH that prints what ``pulumi stack output --json`` prints.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from amlgpu.cli import build_parser, main
from amlgpu.commands import submit as command
from jobs import submit, workspace
from kernel.errors import UserError
from tests import aml_workspace as aml
from tests import cli
from tests.azure_spec import validator
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.policies.test_baseline import sarif_fingerprint
from tests.replay_http import TENANT, Answer, RecordedToken, Replay, bearer_claims, blob_answer, json_body

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

SUBSCRIPTION = aml.SUBSCRIPTION
OFFLINE = workspace.OFFLINE_SUBSCRIPTION
HELLO = {"name": "hello", "command": "echo hello from $HOSTNAME", "environment": "acpt-pytorch", "compute": "gpu-a100",
         "distribution": {"type": "pytorch", "process_count_per_instance": 1}, "resources": {"instance_count": 1},
         "limits": {"timeout": 600}}
"""A run without ``code``: Azure ML starts its command in an empty folder."""


def dev_with_hello() -> dict[str, Any]:
    config = dev_config()
    config[f"{NS}:jobs"].append(dict(HELLO))
    return config


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dev stack plus a run without code, planned once (``amlgpu plan`` in this process: the tests below read
    what it wrote; the console script's own plan is tested with tests/cli.py, in tests/planning/test_stacks.py)."""
    folder = make_project(tmp_path_factory.mktemp("planned") / "project", dev_with_hello(), stack="dev")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        assert main(["plan", "--stack", "dev"]) == 0
    return folder


@pytest.fixture
def project(planned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the planned project, as the working folder; no Pulumi CLI and no subscription unless set."""
    folder = tmp_path / "project"
    shutil.copytree(planned, folder, symlinks=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv(workspace.SUBSCRIPTION_VARIABLE, raising=False)
    return folder


def submit_command(*argv: str, credential: Any = None) -> int:
    """``amlgpu submit ARGV`` as :func:`amlgpu.cli.main` runs it, signed in with ``credential``."""
    args = build_parser().parse_args(["submit", *argv])
    try:
        return command.run(args, credential=credential or RecordedToken("https://management.azure.com/.default"))
    except UserError as err:
        print(err.report(), file=sys.stderr)
        return err.exit_code


def arm_calls(replay: Replay) -> list[tuple[str, str, str]]:
    """(method, path under the workspace, api-version) of each Azure Resource Manager request, in order."""
    found = []
    for call in replay.calls:
        parts = urlsplit(str(call.url))
        if parts.netloc == "management.azure.com":
            path = parts.path.removeprefix(aml.WORKSPACE_ID) or "/"
            found.append((str(call.method), re.sub(r"/codes/[0-9a-f-]{36}", "/codes/<anonymous>", path),
                          replay.query(call)["api-version"][0]))
    return found


JOB_NAME = re.compile(r"ddp-train-\d{8}-\d{6}")


# ------------------------------------------------------------------------------------------ the dry run


def test_dry_run_prints_the_workspace_and_the_planned_job_file(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(workspace.SUBSCRIPTION_VARIABLE, SUBSCRIPTION)
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0
    out = capsys.readouterr().out
    first, second, body = out.split("\n", 2)
    assert first == (f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription "
                     f"{SUBSCRIPTION}) from build/dev/outputs.json and {workspace.SUBSCRIPTION_VARIABLE}")
    assert re.fullmatch(r"# job file build/dev/jobs/ddp-train\.yml \(as planned\), with name: "
                        r"ddp-train-\d{8}-\d{6}", second), second
    assert body == (project / "build" / "dev" / "jobs" / "ddp-train.yml").read_text()  # byte for byte


def test_a_run_without_code_dry_runs_and_names_its_display_name(project: Path, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    assert main(["submit", "hello", "--stack", "dev", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"with name: hello-\d{8}-\d{6}, display_name: hello\n", out)
    assert "code:" not in out


@pytest.mark.slow
def test_dry_run_signs_in_to_nothing(project: Path) -> None:
    script = ("import sys; from amlgpu.cli import main; code = main(['submit', 'allreduce-health', '--stack', "
              "'dev', '--dry-run']); print('azure.identity' in sys.modules, code)")
    env = {**os.environ, workspace.SUBSCRIPTION_VARIABLE: SUBSCRIPTION, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
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
         "ddp-torchrun, ddp-train, fabric-check-gpu-a100, hello, mnist-tf-multiworker\n"),
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
    monkeypatch.setenv(workspace.SUBSCRIPTION_VARIABLE, SUBSCRIPTION)
    config = dev_with_hello()
    config[f"{NS}:jobs"][0]["limits"]["timeout"] = 60
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    assert main(["submit", config[f"{NS}:jobs"][0]["name"], "--stack", "dev", "--dry-run"]) == 2
    assert "changed since build/dev/outputs.json: plan (or `pulumi up`) the stack again" in capsys.readouterr().err


def test_a_planned_job_file_edited_by_hand_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planned = project / "build" / "dev" / "jobs" / "ddp-train.yml"
    planned.write_text(planned.read_text().replace("instance_count: 2", "instance_count: 4"))
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: build/dev/jobs/ddp-train.yml: the planned job file differs from what run 'ddp-train' renders now: "
        "plan the stack again so what is submitted is what was reviewed")


def test_a_code_folder_with_a_private_key_is_never_uploaded(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_with_hello()
    config[f"{NS}:jobs"] = [{**config[f"{NS}:jobs"][0], "code": "src"}]
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    (project / "src" / ".ssh").mkdir(parents=True)
    (project / "src" / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
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
    assert captured.err.startswith("note: pulumi stack output failed: error: PULUMI_ACCESS_TOKEN must be set for "
                                   "login; showing the offline plan's workspace instead\n")
    assert captured.out.startswith(
        f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription {OFFLINE}) from "
        f"build/dev/outputs.json (a placeholder subscription: set {workspace.SUBSCRIPTION_VARIABLE} to submit)\n")


@pytest.mark.parametrize("after_plan", [True, False], ids=["after-a-plan", "before-any-plan"])
def test_a_dry_run_works_offline_without_a_subscription(
    project: Path, capsys: pytest.CaptureFixture[str], after_plan: bool
) -> None:
    if not after_plan:
        shutil.rmtree(project / "build")
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0
    first, second, _ = capsys.readouterr().out.split("\n", 2)
    source = "build/dev/outputs.json" if after_plan else "Pulumi.dev.yaml"
    assert first == (f"# would submit to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription "
                     f"{OFFLINE}) from {source} (a placeholder subscription: set {workspace.SUBSCRIPTION_VARIABLE} "
                     "to submit)")
    assert ("(as planned)" in second) == after_plan


# -------------------------------------------------------------------------------------------- the gate


def _with_idle_gpus(project: Path, *, waived: bool) -> None:
    """ddp-train starting 4 processes on 8-GPU nodes (run-gpus-left-idle, mandatory), planned again."""
    config = dev_with_hello()
    config[f"{NS}:jobs"][0]["distribution"]["process_count_per_instance"] = 4
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    assert main(["plan", "--stack", "dev"]) == 1  # the plan writes its outputs either way
    if waived:  # approved as in review: for the finding the plan showed (its fingerprint)
        expires = (dt.date.today() + dt.timedelta(days=30)).isoformat()
        config[f"{NS}:waivers"] = [{"rule": "run-gpus-left-idle", "resource": "ddp-train", "expires": expires,
                                    "reason": "half the GPUs on purpose: profiling a 4-process layout (ML-77)",
                                    "fingerprint": sarif_fingerprint(project / "build" / "dev", "run-gpus-left-idle")}]
        (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
        assert main(["plan", "--stack", "dev"]) == 0


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "submit"])
def test_a_run_failing_a_mandatory_rule_is_refused_before_anything_is_sent(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    _with_idle_gpus(project, waived=False)
    capsys.readouterr()
    replay = azure({})
    assert submit_command("ddp-train", "--stack", "dev", *(["--dry-run"] if dry_run else [])) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert re.search(r"^Pulumi\.dev\.yaml:\d+  run-gpus-left-idle  \[high\]  run 'ddp-train': ", captured.err, re.M)
    assert captured.err.endswith("submit refused: run 'ddp-train' fails a mandatory policy (exit 1); fix it or "
                                 "waive the rule for the run (docs/policies.md)\n")
    assert replay.calls == []


def test_a_waiver_lets_the_run_through_as_in_review(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _with_idle_gpus(project, waived=True)
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0
    assert "process_count_per_instance: 4" in capsys.readouterr().out


def test_the_gate_reads_the_stacks_pack_config(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pack config the plan reads for the stack (policies/config.dev.json) disables the rule: submit agrees."""
    _with_idle_gpus(project, waived=False)
    (project / "policies").mkdir(exist_ok=True)
    (project / "policies" / "config.dev.json").write_text(json.dumps({"run-gpus-left-idle": "disabled"}))
    assert main(["submit", "ddp-train", "--stack", "dev", "--dry-run"]) == 0


# ------------------------------------------------------------------------ submitting through azure-ai-ml


def submission_routes(statuses: tuple[str, ...] = ("Running", "Running", "Completed"), *, log: str = "",
                      error: str | None = None, code: bool = True) -> dict[str, Any]:
    return {
        **(aml.code_upload_routes() if code else {}),
        f"PUT {aml.ARM}/jobs/*": Answer(201, aml.created),
        **aml.following_routes(statuses, log=log, error=error),
    }


TRAINING_LOG = ("[2026-01-12 10:01:02] rank 0: epoch 1/8 loss 2.3012\n"
                "[2026-01-12 10:04:09] rank 0: epoch 8/8 loss 0.0311\n")


def test_submit_sends_the_planned_job_through_azure_ml_and_follows_it_to_completion(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str]
) -> None:
    replay = azure(submission_routes(log=TRAINING_LOG))
    assert submit_command("ddp-train", "--stack", "dev") == 0

    # What was asked of Azure Resource Manager, in order, with each API version azure-ai-ml 1.35 speaks.
    calls = arm_calls(replay)
    job = next(p for m, p, _ in calls if m == "PUT" and p.startswith("/jobs/")).removeprefix("/jobs/")
    assert JOB_NAME.fullmatch(job)
    assert calls[:4] == [
        ("GET", "/codes/<anonymous>/versions", "2023-04-01"),
        ("POST", "/codes/<anonymous>/versions/1/startPendingUpload", "2023-04-01"),
        ("PUT", "/codes/<anonymous>/versions/1", "2023-04-01"),
        ("PUT", f"/jobs/{job}", "2025-01-01-preview"),
    ]
    assert ("GET", f"/jobs/{job}", "2024-01-01-preview") in calls
    assert ("GET", "/", "2024-10-01-preview") in calls  # the workspace, for its discovery URL
    signed = [c for c in replay.calls if str(c.url).startswith((aml.ARM, f"{aml.API}/history/"))]
    assert {bearer_claims(c)["aud"] for c in signed} == {"https://management.azure.com"}  # ARM and run history
    assert not any("Authorization" in c.headers for c in replay.sent("PUT", f"{aml.UPLOAD}/*"))  # the SAS only
    (listing,) = replay.sent("GET", f"{aml.ARM}/codes/*")
    assert replay.query(listing)["hash"][0]  # the snapshot's content hash: an unchanged folder is not uploaded again

    # The code snapshot: every file of the code folder but what its .amlignore excludes, under the SAS's container.
    uploaded = {urlsplit(str(c.url)).path.removeprefix(urlsplit(aml.UPLOAD).path + "/")
                for c in replay.sent("PUT", f"{aml.UPLOAD}/*") if "comp=metadata" not in str(c.url)}
    workloads = project / "jobs" / "workloads"
    expected = {f"workloads/{p.relative_to(workloads).as_posix()}" for p in workloads.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert uploaded == expected

    # The job sent: valid against the REST API specification's JobBase/CommandJob (2025-12-01), and the file.
    (put,) = replay.sent("PUT", f"{aml.ARM}/jobs/*")
    body = json_body(put)
    errors = [e.message for e in validator(aml.SPEC, "JobBaseResource").iter_errors(body)]
    assert errors == []
    sent = body["properties"]
    planned = yaml.safe_load((project / "build" / "dev" / "jobs" / "ddp-train.yml").read_text())
    assert sent["jobType"] == "Command"
    assert sent["command"] == planned["command"]
    assert sent["displayName"] == planned["display_name"]
    assert sent["experimentName"] == planned["experiment_name"]
    assert sent["computeId"] == f"{aml.WORKSPACE_ID}/computes/gpu-a100"
    assert sent["environmentId"] == f"{aml.WORKSPACE_ID}/environments/acpt-pytorch/versions/1"
    assert sent["codeId"].startswith(f"{aml.WORKSPACE_ID}/codes/") and sent["codeId"].endswith("/versions/1")
    assert sent["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 8}
    assert sent["resources"] == {"instanceCount": 2, "properties": {}, "shmSize": "32g"}
    assert sent["limits"] == {"jobLimitsType": "Command", "timeout": "PT1H"}
    assert sent["inputs"] == {"epochs": {"jobInputType": "literal", "value": "8"},
                              "samples": {"jobInputType": "literal", "value": "262144"}}
    assert sent["outputs"] == {"checkpoints": {"jobOutputType": "uri_folder", "mode": "ReadWriteMount"}}
    assert sent["environmentVariables"] == planned["environment_variables"]

    out = capsys.readouterr().out
    assert ("note: the workspace's storage account takes public traffic only from network.operator_ip_ranges "
            "(203.0.113.0/24): the code upload works from those addresses or from inside the network\n") in out
    assert f"submitted {job} to workspace mlw-gpu-dev (resource group rg-aml-gpu-dev, subscription " in out
    assert f"studio: {aml.studio_url(job)}&tid={TENANT}\n" in out  # azure-ai-ml adds the token's tenant
    assert TRAINING_LOG in out
    assert out.endswith(f"{job}: Completed\n")


def test_a_run_without_code_is_submitted_without_an_upload(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str]
) -> None:
    replay = azure(submission_routes(code=False))
    assert submit_command("hello", "--stack", "dev") == 0
    assert next((m, p.split("/")[1]) for m, p, _ in arm_calls(replay)) == ("PUT", "jobs")
    assert not any("blob.core.windows.net" in str(c.url) and "ExperimentRun" not in str(c.url) for c in replay.calls)
    (put,) = replay.sent("PUT", f"{aml.ARM}/jobs/*")
    body = json_body(put)
    assert [e.message for e in validator(aml.SPEC, "JobBaseResource").iter_errors(body)] == []
    assert "codeId" not in body["properties"]
    assert body["properties"]["displayName"] == "hello"
    out = capsys.readouterr().out
    assert "storage account" not in out  # nothing to upload, nothing to warn about
    assert re.search(r"hello-\d{8}-\d{6}: Completed\n$", out)


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of "
       "31.47 GiB of which 12.73 GiB is free.\n")


@pytest.mark.parametrize(("statuses", "code"), [(("Running", "Failed"), 1), (("Running", "Canceled"), 1),
                                                (("Running", "NotResponding"), 1)])
def test_a_job_that_does_not_complete_exits_1_with_the_cause(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str],
    statuses: tuple[str, ...], code: int,
) -> None:
    azure(submission_routes(statuses, log=TRAINING_LOG + OOM, error="Execution failed. User process exited with 1"))
    assert submit_command("ddp-train", "--stack", "dev") == code
    out = capsys.readouterr().out
    assert re.search(rf"ddp-train-\d{{8}}-\d{{6}}: {statuses[-1]}\n", out)
    assert ("User process exited with 1" in out) == (statuses[-1] == "Failed")
    assert "note: log: a GPU ran out of memory (CUDA out of memory): lower the per-GPU batch size" in out


@pytest.mark.parametrize(("ranges", "notice"), [
    ([], "the workspace's storage account takes no public traffic (network.operator_ip_ranges is empty): the code "
         "upload works only from inside the network"),
    (["203.0.113.0/24", "198.51.100.7"], "the workspace's storage account takes public traffic only from "
     "network.operator_ip_ranges (203.0.113.0/24, 198.51.100.7): the code upload works from those addresses or from "
     "inside the network"),
])
def test_the_upload_notice_says_where_the_code_upload_works_from(ranges: list[str], notice: str) -> None:
    config = SimpleNamespace(network=SimpleNamespace(operator_ip_ranges=ranges))
    assert submit.upload_notice(config) == notice  # type: ignore[arg-type]


def test_storage_refusing_the_upload_is_one_line_naming_the_fix(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str]
) -> None:
    """The workspace's storage refuses traffic from outside the network: Blob Storage answers 403
    AuthorizationFailure (the recorded body), and submit says what to do, without a traceback."""
    routes = submission_routes()
    routes |= aml.code_upload_routes(blob=blob_answer("forbidden_403_authorization_failure"))
    replay = azure(routes)
    assert submit_command("ddp-train", "--stack", "dev") == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("note: the workspace's storage account takes public traffic only from ")
    assert captured.err.splitlines()[-1] == (
        "error: build/dev/outputs.json and AZURE_SUBSCRIPTION_ID: submitting run 'ddp-train': storage account "
        f"{aml.ACCOUNT} refused the request at its firewall: add this machine's public address to "
        "network.operator_ip_ranges (then `pulumi up`) or run `amlgpu submit` from inside the network")
    assert not replay.sent("PUT", f"{aml.ARM}/jobs/*")  # no job without its code


def test_the_notice_names_the_operator_ranges_the_storage_admits(project: Path) -> None:
    from stack.config import from_stackfile
    from stack.stackfile import read

    config = dev_with_hello()
    config[f"{NS}:network"]["operator_ip_ranges"] = ["203.0.113.0/24"]
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    stack = from_stackfile(read(project / "Pulumi.dev.yaml"), project)
    assert submit.upload_notice(stack) == (
        "the workspace's storage account takes public traffic only from network.operator_ip_ranges "
        "(203.0.113.0/24): the code upload works from those addresses or from inside the network")


def test_azure_refusing_the_job_is_one_line(project: Path, azure: Callable[[dict[str, Any]], Replay],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """ARM's error response (common-types ErrorResponse) for a compute the workspace does not have."""
    refusal = {"error": {"code": "UserError", "message": "Compute gpu-a100 not found in workspace mlw-gpu-dev."}}
    azure(submission_routes(code=False) | {f"PUT {aml.ARM}/jobs/*": (400, refusal)})
    assert submit_command("hello", "--stack", "dev") == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: build/dev/outputs.json and AZURE_SUBSCRIPTION_ID: Azure refused submitting run 'hello': "
        "(UserError) Compute gpu-a100 not found in workspace mlw-gpu-dev.")


def test_a_failed_sign_in_is_one_line(project: Path, azure: Callable[[dict[str, Any]], Replay],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from azure.core.exceptions import ClientAuthenticationError

    class NoToken:
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token from the included "
                                            "credentials.")

        get_token_info = get_token

    replay = azure(submission_routes(code=False))
    assert submit_command("hello", "--stack", "dev", credential=NoToken()) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: cannot sign in to Azure (az login, a managed identity, or AZURE_* variables of a service principal): "
        "DefaultAzureCredential failed to retrieve a token from the included credentials.")
    assert replay.calls == []


def test_symbolic_links_leading_out_of_the_code_folder_are_not_uploaded(
    project: Path, azure: Callable[[dict[str, Any]], Replay], tmp_path: Path
) -> None:
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key = not-for-azure\n")
    (project / "jobs" / "workloads" / "creds").symlink_to(secret)
    replay = azure(submission_routes())
    assert submit_command("ddp-train", "--stack", "dev") == 0
    uploaded = [str(c.url) for c in replay.sent("PUT", f"{aml.UPLOAD}/*")]
    assert uploaded and not any("/creds" in url for url in uploaded)
    assert (project / "jobs" / "workloads" / "creds").is_symlink()  # the project itself is left as it was


# --------------------------------------------------------------------------- as a user, with no network


def _console(project: Path, home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The console script, signed in to nothing: DefaultAzureCredential limited to the developer credentials
    (``AZURE_TOKEN_CREDENTIALS=dev``: no managed identity, so no IMDS probe that could wait on a network), none of
    whose tools (az, azd, pwsh) is on PATH and whose caches are in an empty HOME."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home), "AZURE_TOKEN_CREDENTIALS": "dev",
           workspace.SUBSCRIPTION_VARIABLE: SUBSCRIPTION, "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}
    return cli.amlgpu(project, *argv, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["ddp-train", "hello"], ids=["with-code", "without-code"])
def test_with_no_network_submit_reaches_azure_sign_in_and_ends_in_one_line(project: Path, tmp_path: Path,
                                                                           run: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = _console(project, home, "submit", run, "--stack", "dev")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors == done.stderr.splitlines()[-1:]
    assert errors[0].startswith("error: cannot sign in to Azure (az login, a managed identity, or AZURE_* variables "
                                "of a service principal): ")
    # azure-identity's log of every credential it tried (a dozen lines through logging's last resort) is not shown
    other = [line for line in done.stderr.splitlines() if not line.startswith(("Checking run", "note: ", "error: "))]
    assert other == [], done.stderr
