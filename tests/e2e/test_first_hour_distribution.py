"""The first hour III, as a new user meets it: a run, a pipeline step or a sweep trial without `distribution`
is told what Azure ML would do without it and what to write, in the words `amlgpu import` uses when it fills one
in (issue 38, point 4)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from stack.runs import MISSING_DISTRIBUTION, WITHOUT_DISTRIBUTION
from tests.conftest import NS, ROOT, copy_project_folders, dev_config

RUN = {"name": "two-nodes", "code": "jobs/workloads", "command": "python train_ddp.py", "environment": "acpt-pytorch",
       "compute": "gpu-a100", "resources": {"instance_count": 2}}


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    copy_project_folders(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _plan(project: Path, jobs: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> str:
    config = dev_config()
    config[f"{NS}:jobs"] = jobs
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    assert main(["plan", "--stack", "dev"]) == 2
    return capsys.readouterr().err


def test_a_run_without_distribution_is_told_why_and_what_to_write(clone: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    err = _plan(clone, [RUN], capsys)
    assert f"aml-gpu-training:jobs[0].distribution  {MISSING_DISTRIBUTION}\n" in err
    assert "required key is missing" not in err
    assert MISSING_DISTRIBUTION.startswith("distribution is required: without it Azure ML runs the command once "
                                           "on each node")
    assert "write distribution: {type: pytorch, process_count_per_instance: 1}" in MISSING_DISTRIBUTION


def test_a_pipeline_step_and_a_sweep_trial_get_the_same_words(clone: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    step = {k: v for k, v in RUN.items() if k != "name"}
    pipeline = {"name": "pipe", "type": "pipeline", "jobs": {"train": step}}
    sweep = {"name": "sw", "type": "sweep", "trial": {k: v for k, v in step.items() if k != "compute"},
             "compute": "gpu-a100", "sampling_algorithm": "random",
             "search_space": {"lr": {"type": "choice", "values": [0.1, 0.01]}},
             "objective": {"goal": "minimize", "primary_metric": "loss"},
             "limits": {"max_total_trials": 2}}
    err = _plan(clone, [pipeline], capsys)
    assert f"aml-gpu-training:jobs[0].jobs.train.distribution  step 'pipe/train': {MISSING_DISTRIBUTION}\n" in err
    err = _plan(clone, [sweep], capsys)
    assert f"aml-gpu-training:jobs[0].trial.distribution  {MISSING_DISTRIBUTION}\n" in err


def test_import_fills_it_in_and_says_so_in_the_same_words(clone: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_config()
    (clone / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    (clone / "job.yml").write_text(yaml.safe_dump({
        "code": "jobs/workloads", "command": "python train_ddp.py", "environment": "azureml:acpt-pytorch:1",
        "compute": "azureml:gpu-a100", "resources": {"instance_count": 2}}))
    assert main(["import", "job.yml", "--stack", "dev"]) == 0
    said = capsys.readouterr()
    assert f"job.yml:1: note: no distribution: {WITHOUT_DISTRIBUTION}; imported as distribution: " in said.err
    (entry,) = yaml.safe_load(said.out)[f"{NS}:jobs"]
    assert entry["distribution"] == {"type": "pytorch", "process_count_per_instance": 1}
