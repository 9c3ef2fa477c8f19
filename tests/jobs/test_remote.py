"""``amlgpu job show|stream|cancel``: a submitted job through the real azure-ai-ml, over a recorded workspace.

The answers are the REST API specification's examples (``tests/aml_workspace.py``); the requests are asserted:
method, URL and api-version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import build_parser
from amlgpu.commands import job as command
from kernel.errors import UserError
from planning.engine import ProgramRun
from tests import aml_workspace as aml
from tests.conftest import dev_config, make_project
from tests.replay_http import TENANT, Answer, RecordedToken, Replay

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

JOB = "ddp-train-20260112-100102"
CANCEL_LOCATION = json.loads((aml.EXAMPLES / "Job" / "cancel.json").read_text())["responses"]["202"]["headers"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dev_plan: ProgramRun) -> Path:
    """The dev stack planned (its outputs.json), as the working folder."""
    folder = make_project(tmp_path / "project", dev_config(), stack="dev")
    (folder / "build" / "dev").mkdir(parents=True)
    (folder / "build" / "dev" / "outputs.json").write_text(json.dumps(dev_plan.outputs))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Pulumi CLI: the plan's outputs name the workspace
    return folder


def job_command(*argv: str) -> int:
    args = build_parser().parse_args(["job", *argv])
    try:
        return command.run(args, credential=RecordedToken("https://management.azure.com/.default"))
    except UserError as err:
        print(err.report())
        return err.exit_code


def arm(replay: Replay) -> list[tuple[str, str, str]]:
    return [(str(c.method), str(c.url).split("?")[0].removeprefix(aml.ARM), replay.query(c)["api-version"][0])
            for c in replay.calls if str(c.url).startswith(aml.ARM)]


def test_show_prints_the_status_and_the_studio_link(project: Path, azure: Callable[[dict[str, Any]], Replay],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    replay = azure({f"GET {aml.ARM}/jobs/{JOB}": (200, aml.job_resource(JOB, "Running"))})
    assert job_command("show", JOB, "--stack", "dev") == 0
    assert arm(replay) == [("GET", f"/jobs/{JOB}", "2024-01-01-preview")]
    assert capsys.readouterr().out == (
        f"name:         {JOB}\n"
        "status:       Running\n"
        f"display name: {JOB}\n"
        "experiment:   ddp\n"
        "compute:      gpu-a100\n"
        "created:      2020-01-01T12:34:56.999000+00:00\n"
        f"studio:       {aml.studio_url(JOB)}&tid={TENANT}\n")


@pytest.mark.parametrize(("final", "code"), [("Completed", 0), ("Failed", 1), ("Canceled", 1)])
@pytest.mark.parametrize("action", ["stream", "logs"])
def test_stream_follows_the_job_to_its_end_and_exits_with_its_outcome(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str],
    action: str, final: str, code: int,
) -> None:
    log = "epoch 1/8 loss 2.3012\nepoch 8/8 loss 0.0311\n"
    replay = azure(aml.following_routes(("Running", "Running", final), log=log, error="User process exited with 1"))
    assert job_command(action, JOB, "--stack", "dev") == code
    history = [str(c.url).split("?")[0] for c in replay.calls if "/history/" in str(c.url)]
    assert history == [f"{aml.API}/history/v1.0{aml.WORKSPACE_ID}/runs/{JOB}/details"] * 3
    assert ("GET", f"/jobs/{JOB}", "2024-01-01-preview") in arm(replay)
    out = capsys.readouterr().out
    assert "Streaming user_logs/std_log.txt\n" in out and log in out
    assert out.endswith(f"{JOB}: {final}\n")


def test_stream_says_when_nccl_left_the_infiniband_fabric(project: Path, azure: Callable[[dict[str, Any]], Replay],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The dev stack's gpu-a100 (ND96asr_v4) has InfiniBand: NCCL on sockets there is worth a note even when the
    job completes (it ran, slowly). The log lines are NVIDIA/nccl#676's (tests/fixtures/job-logs)."""
    log = (aml.FIXTURES.parent / "job-logs" / "nccl-socket.txt").read_text()
    azure(aml.following_routes(("Running", "Completed"), log=log))
    assert job_command("stream", JOB, "--stack", "dev") == 0
    out = capsys.readouterr().out
    assert out.endswith(f"{JOB}: Completed\nnote: log: NCCL sends over TCP sockets although the cluster has "
                        "InfiniBand ('Using network Socket', not 'IB'): use an image with the InfiniBand user "
                        "libraries (an Azure ML ACPT or NVIDIA NGC image), leave NCCL_IB_DISABLE and NCCL_NET unset, "
                        "and run the fabric check (amlgpu submit fabric-check-<cluster>)\n")


def test_cancel_posts_the_long_running_cancel_and_reports_the_status(
    project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str]
) -> None:
    """Jobs_Cancel is a POST answered 202 with a Location to poll (example Job/cancel.json); the command asks,
    then reads the job's status, without waiting for Canceled."""
    replay = azure({
        f"POST {aml.ARM}/jobs/{JOB}/cancel": Answer(202, None, {"Location": f"{aml.ARM}/jobs/{JOB}"}),
        f"GET {aml.ARM}/jobs/{JOB}": (200, aml.job_resource(JOB, "CancelRequested")),
    })
    assert "location" in CANCEL_LOCATION
    assert job_command("cancel", JOB, "--stack", "dev") == 0
    assert arm(replay) == [("POST", f"/jobs/{JOB}/cancel", "2023-04-01-preview"),
                           ("GET", f"/jobs/{JOB}", "2024-01-01-preview")]
    assert capsys.readouterr().out == f"cancel requested for {JOB}: CancelRequested\n"


def test_an_unknown_job_is_one_line(project: Path, azure: Callable[[dict[str, Any]], Replay],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """ARM's ErrorResponse (common-types) for a job name the workspace never had."""
    missing = {"error": {"code": "UserError", "message": f"The specified resource name '{JOB}' was not found."}}
    azure({f"GET {aml.ARM}/jobs/{JOB}": (404, missing)})
    assert job_command("show", JOB, "--stack", "dev") == 2
    assert capsys.readouterr().out == (
        f"error: build/dev/outputs.json and AZURE_SUBSCRIPTION_ID: Azure refused showing job {JOB}: (UserError) The "
        f"specified resource name '{JOB}' was not found.\n")


def test_without_a_subscription_the_job_commands_say_which(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    assert job_command("show", JOB, "--stack", "dev") == 2
    assert "set AZURE_SUBSCRIPTION_ID" in capsys.readouterr().out
