"""``amlgpu run-local`` of a pipeline and a sweep, as a user runs it: real processes, one run after another.

The pipeline trains with ``train_ddp.py`` (2 nodes x 2 processes) and evaluates the checkpoint with
``evaluate.py`` in the step bound to the training step's output, in the order the binding gives (the
evaluation is declared first). The sweep runs two trials with parameters drawn from its search space; so
does a pipeline's sweep step, before the step that binds its output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from jobs.emulate.composite import sample, shown
from tests import cli
from tests.conftest import emulation_project

pytestmark = pytest.mark.slow


PIPELINE = {
    "name": "train-eval", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
    "inputs": {"epochs": 3},
    "jobs": {
        "evaluate": {  # declared first: it runs second, after the step whose output it binds
            "code": "src", "environment": "azureml:acpt:1",
            "command": "python evaluate.py --samples 512 --checkpoint-dir ${{inputs.checkpoints}} "
                       "--report-dir ${{outputs.report}} --max-loss ${{inputs.max_loss}}",
            "inputs": {"checkpoints": "${{parent.jobs.train.outputs.checkpoints}}", "max_loss": 10.0},
            "outputs": {"report": {"type": "uri_folder"}},
            "distribution": {"type": "pytorch", "process_count_per_instance": 2},
        },
        "train": {
            "code": "src", "environment": "azureml:acpt:1",
            "command": "python train_ddp.py --samples 512 --epochs ${{inputs.epochs}} "
                       "--checkpoint-dir ${{outputs.checkpoints}}",
            "inputs": {"epochs": "${{parent.inputs.epochs}}"},
            "outputs": {"checkpoints": {"type": "uri_folder"}},
            "resources": {"instance_count": 2},
            "distribution": {"type": "pytorch", "process_count_per_instance": 2},
        },
    },
}
SWEEP = {
    "name": "lr-sweep", "type": "sweep", "compute": "gpu-a100",
    "trial": {"code": "src", "environment": "azureml:acpt:1",
              "command": "python train_ddp.py --samples 256 --epochs 1 --lr ${{search_space.lr}} "
                         "--batch-size ${{search_space.batch}} --checkpoint-dir ${{outputs.checkpoints}}",
              "distribution": {"type": "pytorch", "process_count_per_instance": 1}},
    "outputs": {"checkpoints": {"type": "uri_folder"}},
    "search_space": {"lr": {"type": "loguniform", "min_value": -6.9, "max_value": -2.3},
                     "batch": {"type": "choice", "values": [16, 32]}},
    "sampling_algorithm": {"type": "random", "seed": 3},
    "objective": {"goal": "minimize", "primary_metric": "loss"},
    "limits": {"max_total_trials": 4, "max_concurrent_trials": 1},
}


TUNE = {
    "type": "sweep",
    "trial": {"code": "src", "environment": "azureml:acpt:1",
              "command": "python train_ddp.py --samples 256 --epochs 1 --lr ${{inputs.lr}} "
                         "--checkpoint-dir ${{outputs.checkpoints}}",
              "inputs": {"lr": {"type": "number"}}, "outputs": {"checkpoints": {"type": "uri_folder"}},
              "distribution": {"type": "pytorch", "process_count_per_instance": 1}},
    "search_space": {"lr": {"type": "loguniform", "min_value": -6.9, "max_value": -2.3}},
    "sampling_algorithm": {"type": "random", "seed": 5},
    "objective": {"goal": "minimize", "primary_metric": "loss"},
    "limits": {"max_total_trials": 4, "max_concurrent_trials": 1},
}
PIPELINE_SWEEP = {
    "name": "tune-eval", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
    "jobs": {
        "tune": TUNE,
        "evaluate": {
            "code": "src", "environment": "azureml:acpt:1",
            "command": "python evaluate.py --samples 256 --checkpoint-dir ${{inputs.checkpoints}} "
                       "--report-dir ${{outputs.report}} --max-loss 10.0",
            "inputs": {"checkpoints": "${{parent.jobs.tune.outputs.checkpoints}}"},
            "outputs": {"report": {"type": "uri_folder"}},
            "distribution": {"type": "pytorch", "process_count_per_instance": 1},
        },
    },
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return emulation_project(tmp_path_factory.mktemp("project"), [PIPELINE, SWEEP, PIPELINE_SWEEP])


def run_local(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(project / "work")}
    return cli.amlgpu(project, "run-local", *args, "--stack", "test", env=env, timeout=240)


def _workdir(result: subprocess.CompletedProcess[str]) -> Path:
    match = re.search(r"^work folder \(snapshot and outputs, kept: --keep\): (.+)$", result.stderr, re.M)
    assert match, result.stderr
    return Path(match.group(1))


def test_a_pipeline_runs_its_steps_in_binding_order_on_local_folders(project: Path) -> None:
    result = run_local(project, "train-eval", "--keep")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "pipeline 'train-eval' of stack 'test', 2 step(s): train, evaluate, one after another" in result.stderr
    work = _workdir(result)
    checkpoints = work / "train" / "outputs" / "checkpoints"
    assert (checkpoints / "checkpoint.pt").is_file()
    # The evaluation read the training step's output folder, as its binding says.
    assert f"--checkpoint-dir {checkpoints} " in result.stderr
    report = json.loads((work / "evaluate" / "outputs" / "report" / "evaluation.json").read_text())
    assert report["epoch"] == 2 and report["world_size"] == 2 and report["samples"] == 512
    assert "2 node(s) x 2 process(es) = 4 processes" in result.stderr  # train: as declared


def test_a_failing_step_stops_the_pipeline(project: Path) -> None:
    # One process per step is enough to fail one (the test above runs the steps at their declared scale).
    result = run_local(project, "train-eval", "--input", "epochs=0", "--nodes", "1", "--procs-per-node", "1")
    # No epoch trained, no checkpoint: the evaluation fails, and says so.
    assert result.returncode != 0
    assert "no checkpoint.pt in" in result.stdout + result.stderr
    assert "run-local: evaluate ended with exit" in result.stderr


def test_a_sweep_runs_trials_with_sampled_parameters(project: Path) -> None:
    result = run_local(project, "lr-sweep", "--trials", "2", "--keep")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trials = re.findall(r"^trial-(\d): batch=(\d+), lr=([0-9.e-]+)$", result.stderr, re.M)
    assert [t[0] for t in trials] == ["1", "2"] and trials[0][1:] != trials[1][1:]
    for _, batch, lr in trials:
        assert 0.001 <= float(lr) <= 0.1 and batch in ("16", "32")
        assert f"--lr {lr} --batch-size {batch}" in result.stderr
    work = _workdir(result)
    assert all((work / f"trial-{n}" / "outputs" / "checkpoints" / "checkpoint.pt").is_file() for n in (1, 2))


def test_trials_is_for_sweeps(project: Path) -> None:
    result = run_local(project, "train-eval", "--trials", "2")
    assert result.returncode == 2
    assert ("--trials is for sweeps and pipelines with a sweep step; 'train-eval' is a pipeline of command steps"
            in result.stderr)


def test_a_pipelines_sweep_step_runs_sampled_trials_and_the_next_step_reads_the_first(project: Path) -> None:
    result = run_local(project, "tune-eval", "--trials", "2", "--keep")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("pipeline 'tune-eval' of stack 'test', 3 step(s): tune/trial-1, tune/trial-2, evaluate, one after "
            "another") in result.stderr
    trials = re.findall(r"^tune/trial-(\d): lr=([0-9.e-]+)$", result.stderr, re.M)
    # The same draws as a sweep job with this search space and seed (one sampler for both).
    expected = [shown(p["lr"]) for p in sample(TUNE, 2)]
    assert [lr for _, lr in trials] == expected
    for lr in expected:  # the sampled input reached the command where the component wrote ${{inputs.lr}}
        assert f"--lr {lr} " in result.stderr
    work = _workdir(result)
    checkpoints = work / "tune" / "trial-1" / "outputs" / "checkpoints"
    assert (checkpoints / "checkpoint.pt").is_file()
    assert (work / "tune" / "trial-2" / "outputs" / "checkpoints" / "checkpoint.pt").is_file()
    assert f"--checkpoint-dir {checkpoints} " in result.stderr  # evaluate reads trial 1's output
