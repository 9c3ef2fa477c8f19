"""A run without ``code`` (Azure ML starts its command in an empty folder: ``nvidia-smi``, an image's own
entrypoint, ``echo``), through every command that reads runs.

Each raised ``KeyError: 'code'`` before: ``plan`` (exit 1, read as a policy failure), ``submit --dry-run``,
``run-local``, and ``import --write`` (which plans the stack it appended to). ``run-local`` runs as a user runs
it, the console script starting real processes; the others through the CLI's entry point in this process (an
exception there fails the test as it would end the command; the console script's exit codes and one-line errors
are tested in tests/cli.py's users). ``submit`` itself, through azure-ai-ml, is in ``tests/jobs/test_submit.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from tests import cli
from tests.conftest import NS, ROOT, dev_config, make_project

SUBSCRIPTION = "5e1f0c9a-1111-4222-8333-944455556666"

HELLO = {"name": "hello", "command": "echo hello from node $NODE_RANK", "environment": "acpt-pytorch",
         "compute": "gpu-a100", "distribution": {"type": "pytorch", "process_count_per_instance": 1},
         "resources": {"instance_count": 1}, "limits": {"timeout": 120}}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = dev_config()
    config[f"{NS}:jobs"].append(dict(HELLO))
    folder = make_project(tmp_path / "project", config, stack="dev")
    monkeypatch.chdir(folder)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    return folder


def amlgpu(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return cli.amlgpu(project, *argv, env=env, timeout=600)


def test_plan_writes_the_job_file_without_code(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 0, capsys.readouterr().err[-3000:]
    job = yaml.safe_load((project / "build" / "dev" / "jobs" / "hello.yml").read_text())
    assert "code" not in job and job["command"] == HELLO["command"]


def test_submit_dry_run_shows_the_job_without_code(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["submit", "hello", "--stack", "dev", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert "display_name: hello" in out and "\ncode:" not in out


@pytest.mark.slow
def test_run_local_runs_the_command_in_an_empty_folder(project: Path) -> None:
    done = amlgpu(project, "run-local", "hello", "--stack", "dev")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "snapshot" in done.stdout + done.stderr and "empty: the run has no code" in done.stdout + done.stderr
    assert "hello from node 0" in done.stdout


def test_import_write_of_a_job_without_code_appends_and_plans(project: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "smoke.yml"
    job.write_text("$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
                   "command: nvidia-smi\nenvironment: azureml:acpt-pytorch:1\ncompute: azureml:gpu-a100\n"
                   "resources:\n  instance_count: 1\n")
    code = main(["import", str(job), "--stack", "dev", "--write"])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert "Appended 1 run(s) to Pulumi.dev.yaml: smoke" in err
    assert (project / "build" / "dev" / "jobs" / "smoke.yml").is_file()
