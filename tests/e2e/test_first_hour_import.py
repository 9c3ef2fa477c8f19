"""The first hour III, importing as a new user would (issue 38, points 12 and 13): a folder in one call with
distinct names; a sweep's top-level resources; an SDK v1 Pipeline named as dropped; the preview type sweep_job."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from tests.conftest import NS, ROOT, copy_project_folders, dev_config

COMMAND_JOB = {"$schema": "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json",
               "code": "src", "command": "python main.py --lr 0.1", "environment": "azureml:acpt-pytorch:1",
               "compute": "azureml:gpu-a100", "resources": {"instance_count": 1},
               "distribution": {"type": "pytorch", "process_count_per_instance": 8}}
SWEEP_JOB = {"$schema": "https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json", "type": "sweep",
             "trial": {"code": "src", "command": "python main.py --lr ${{search_space.lr}}",
                       "environment": "azureml:acpt-pytorch:1",
                       "distribution": {"type": "pytorch", "process_count_per_instance": 8}},
             "compute": "azureml:gpu-a100", "sampling_algorithm": "random",
             "search_space": {"lr": {"type": "choice", "values": [0.1, 0.01]}},
             "objective": {"goal": "minimize", "primary_metric": "loss"}, "limits": {"max_total_trials": 2}}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    copy_project_folders(tmp_path)
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": dev_config()}, sort_keys=False))
    folder = tmp_path / "iris"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('train')\n")
    monkeypatch.chdir(tmp_path)
    return folder


def _import(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> tuple[list[dict[str, object]], str]:
    assert main(["import", *argv, "--stack", "dev"]) == code
    said = capsys.readouterr()
    return yaml.safe_load(said.out)[f"{NS}:jobs"], said.err


def test_a_folder_imports_in_one_call_with_distinct_names(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "job.yml").write_text(yaml.safe_dump(COMMAND_JOB))
    (project / "sweep.yml").write_text(yaml.safe_dump(SWEEP_JOB))
    (project / "conda.yml").write_text("name: iris\ndependencies: [python=3.10]\n")
    (project / "helpers.py").write_text("def helper():\n    return 1\n")
    runs, err = _import(["iris"], capsys)
    assert [(r["name"], r.get("type", "command")) for r in runs] == [("iris", "command"), ("iris-sweep", "sweep")]
    assert "note: skipped iris/conda.yml: not a job (no command, jobs or trial)" in err
    assert "note: skipped iris/helpers.py: no ScriptRunConfig(...)" in err
    assert ("iris/sweep.yml:1: note: named 'iris-sweep': 'iris' is the name of the run imported from "
            "iris/job.yml:1") in err
    # several files in one call: the same names
    again, _ = _import(["iris/job.yml", "iris/sweep.yml"], capsys)
    assert [r["name"] for r in again] == ["iris", "iris-sweep"]


def test_a_sweeps_top_level_resources_go_to_its_trial(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "sweep.yml").write_text(yaml.safe_dump({**SWEEP_JOB, "resources": {"instance_count": 2,
                                                                                  "shm_size": "16g"}}))
    (run,), err = _import(["iris/sweep.yml"], capsys)
    assert "resources" not in run
    assert run["trial"]["resources"] == {"instance_count": 2, "shm_size": "16g"}  # type: ignore[index]
    assert "note: resources at the top of the sweep" in err


def test_the_preview_type_sweep_job_is_imported_as_sweep(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "sweep.yml").write_text(yaml.safe_dump({**SWEEP_JOB, "type": "sweep_job"}))
    (run,), err = _import(["iris/sweep.yml"], capsys)
    assert run["type"] == "sweep"
    assert "type: sweep_job (the preview CLI's spelling, which azure-ai-ml refuses today) is now written type: sweep" \
        in err


def test_an_sdk_v1_pipeline_is_an_explicit_todo(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "submit.py").write_text(
        "from azureml.core import Experiment, ScriptRunConfig, Workspace\n"
        "from azureml.pipeline.core import Pipeline\n"
        "from azureml.pipeline.steps import CommandStep\n"
        "ws = Workspace.from_config()\n"
        "src = ScriptRunConfig(source_directory='src', script='main.py', compute_target='gpu-a100',\n"
        "                      environment=ws.environments['acpt-pytorch'])\n"
        "step = CommandStep(name='train', runconfig=src)\n"
        "pipeline = Pipeline(workspace=ws, steps=[step])\n"
        "Experiment(ws, 'iris').submit(pipeline)\n")
    assert main(["import", "iris/submit.py", "--stack", "dev", "--environment", "acpt-pytorch"]) == 1
    said = capsys.readouterr()
    assert ("TODO(amlgpu import): SDK v1 Pipeline(...) of 1 step(s) (CommandStep) at line 8 was dropped: only the "
            "ScriptRunConfig is imported, as one run") in said.out
    assert "declare a pipeline job (type: pipeline" in said.out


def test_write_keeps_the_users_comment_where_it_was(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = project.parent / "Pulumi.dev.yaml"
    text = (ROOT / "Pulumi.dev.yaml").read_text().rstrip("\n") + (
        "\n    # A pipeline: train then evaluate.\n"
        "    - name: train-eval\n      type: pipeline\n      settings:\n        default_compute: gpu-a100\n"
        "      jobs:\n        train:\n          code: jobs/workloads\n          command: python train_ddp.py\n"
        "          environment: acpt-pytorch\n          resources:\n            instance_count: 2\n"
        "          distribution:\n            type: pytorch\n            process_count_per_instance: 8\n"
        "  # Waivers, reviewed monthly by the platform team.\n  aml-gpu-training:waivers: []\n")
    stack.write_text(text)
    (project / "job.yml").write_text(yaml.safe_dump(COMMAND_JOB))
    assert main(["import", "iris/job.yml", "--stack", "dev", "--write"]) == 0
    capsys.readouterr()
    written = stack.read_text()
    assert written.startswith(text.split("  # Waivers", 1)[0])  # everything before the new entry as it was
    head, entry = written.split("    # imported from iris/job.yml:1 (CLI v2 job)\n    - name: iris\n", 1)
    assert head.endswith("            process_count_per_instance: 8\n")  # right after the pipeline, no comment
    assert entry.endswith("  # Waivers, reviewed monthly by the platform team.\n  aml-gpu-training:waivers: []\n")
    assert written.count("# Waivers, reviewed monthly") == 1
