"""A run without ``code`` (Azure ML starts its command in an empty folder: ``nvidia-smi``, an image's own
entrypoint, ``echo``), through every command that reads runs, as a user runs them: the console script.

Each raised ``KeyError: 'code'`` before: ``plan`` (exit 1, read as a policy failure), ``submit --dry-run``,
``run-local``, and ``import --write`` (which plans the stack it appended to). ``submit`` itself, through
azure-ai-ml, is in ``tests/jobs/test_submit.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import cli
from tests.conftest import NS, ROOT, dev_config, make_project

pytestmark = pytest.mark.slow

HELLO = {"name": "hello", "command": "echo hello from node $NODE_RANK", "environment": "acpt-pytorch",
         "compute": "gpu-a100", "distribution": {"type": "pytorch", "process_count_per_instance": 1},
         "resources": {"instance_count": 1}, "limits": {"timeout": 120}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    config = dev_config()
    config[f"{NS}:jobs"].append(dict(HELLO))
    return make_project(tmp_path / "project", config, stack="dev")


def amlgpu(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AZURE_SUBSCRIPTION_ID": "5e1f0c9a-1111-4222-8333-944455556666"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return cli.amlgpu(project, *argv, env=env, timeout=600)


def test_plan_writes_the_job_file_without_code(project: Path) -> None:
    done = amlgpu(project, "plan", "--stack", "dev")
    assert done.returncode == 0, done.stderr[-3000:]
    job = yaml.safe_load((project / "build" / "dev" / "jobs" / "hello.yml").read_text())
    assert "code" not in job and job["command"] == HELLO["command"]


def test_submit_dry_run_shows_the_job_without_code(project: Path) -> None:
    done = amlgpu(project, "submit", "hello", "--stack", "dev", "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "display_name: hello" in done.stdout and "\ncode:" not in done.stdout


def test_run_local_runs_the_command_in_an_empty_folder(project: Path) -> None:
    done = amlgpu(project, "run-local", "hello", "--stack", "dev")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "snapshot" in done.stdout + done.stderr and "empty: the run has no code" in done.stdout + done.stderr
    assert "hello from node 0" in done.stdout


def test_import_write_of_a_job_without_code_appends_and_plans(project: Path, tmp_path: Path) -> None:
    job = tmp_path / "smoke.yml"
    job.write_text("$schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json\n"
                   "command: nvidia-smi\nenvironment: azureml:acpt-pytorch:1\ncompute: azureml:gpu-a100\n"
                   "resources:\n  instance_count: 1\n")
    done = amlgpu(project, "import", str(job), "--stack", "dev", "--write")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Appended 1 run(s) to Pulumi.dev.yaml: smoke" in done.stderr
    assert (project / "build" / "dev" / "jobs" / "smoke.yml").is_file()
