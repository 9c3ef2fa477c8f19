"""A step that opens no GPU is not judged against idle GPUs (issue 40.5).

Microsoft's pipelines start with a data preparation step (``python prep.py``, pandas and mlflow, no deep learning
framework) on the same cluster as training. Imported with ``amlgpu import --write`` (which writes "no
distribution" as pytorch with one process per node) such a pipeline plans clean: ``run-gpus-left-idle`` judges
only processes known to open a GPU; the prep step gets the advisory ``run-gpu-nodes-unused`` instead.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from amlgpu.cli import main
from analysis import pyscan
from tests.conftest import dev_config, make_project

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

PIPELINE = textwrap.dedent("""\
    $schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
    type: pipeline
    name: prep-train
    display_name: Prepare the data, then train on 2 x 8 A100
    settings:
      default_compute: azureml:gpu-cluster
    inputs:
      raw:
        type: uri_folder
        path: azureml://datastores/workspaceblobstore/paths/raw/
    jobs:
      prep:
        type: command
        code: ../src/prep
        command: python prep.py --raw ${{inputs.raw}} --out ${{outputs.prepped}}
        environment: azureml:AzureML-sklearn-1.5@latest
        inputs:
          raw: ${{parent.inputs.raw}}
        outputs:
          prepped:
            type: uri_folder
      train:
        type: command
        code: ../jobs/workloads
        command: >-
          python train_ddp.py --epochs 4 --checkpoint-dir ${{outputs.checkpoints}}
        environment: azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest
        inputs:
          data: ${{parent.jobs.prep.outputs.prepped}}
        outputs:
          checkpoints:
            type: uri_folder
        resources:
          instance_count: 2
        distribution:
          type: pytorch
          process_count_per_instance: 8
        limits:
          timeout: 7200
    """)
PREP = textwrap.dedent("""\
    import argparse
    import os
    from pathlib import Path

    import mlflow
    import pandas as pd

    parser = argparse.ArgumentParser()
    parser.add_argument("--raw")
    parser.add_argument("--out")
    args = parser.parse_args()
    frame = pd.concat(pd.read_csv(p) for p in Path(args.raw).glob("*.csv"))
    mlflow.log_metric("rows", len(frame))
    frame.dropna().to_parquet(os.path.join(args.out, "data.parquet"))
    """)


def _project(tmp_path: Path, prep: str) -> Path:
    root = make_project(tmp_path / "project", dev_config())
    (root / "azure").mkdir()
    (root / "azure" / "pipeline.yml").write_text(PIPELINE)
    (root / "src" / "prep").mkdir(parents=True)
    (root / "src" / "prep" / "prep.py").write_text(prep)
    return root


def _findings(root: Path, rule: str) -> list[dict[str, object]]:
    sarif = json.loads((root / "build" / "test" / "policy.sarif").read_text())
    return [r for run in sarif["runs"] for r in run["results"] if r["ruleId"] == rule]


def test_a_prep_step_that_opens_no_gpu_plans_clean_with_an_advisory_cost_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = _project(tmp_path, PREP)
    monkeypatch.chdir(root)
    flags = ["--stack", "test", "--compute", "gpu-a100", "--environment", "acpt-pytorch", "--write"]
    assert main(["import", "azure/pipeline.yml", *flags]) == 0, capsys.readouterr()
    out, _ = capsys.readouterr()
    assert "run-gpus-left-idle" not in out
    (unused,) = _findings(root, "run-gpu-nodes-unused")
    assert unused["level"] == "warning"
    assert "prep.py import(s) nothing that opens a GPU, yet the run holds 1 Standard_ND96asr_v4 node(s) of 8 GPU(s)" \
        in unused["message"]["text"]
    assert "prep-train/prep" in unused["message"]["text"]
    assert not _findings(root, "run-gpus-left-idle")


def test_the_same_step_importing_torch_is_judged_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = _project(tmp_path, "import torch\n" + PREP)
    monkeypatch.chdir(root)
    flags = ["--stack", "test", "--compute", "gpu-a100", "--environment", "acpt-pytorch", "--write"]
    assert main(["import", "azure/pipeline.yml", *flags]) == 1
    out, _ = capsys.readouterr()
    assert "run-gpus-left-idle  [high]  run 'prep-train/prep': 1 GPU process(es) per node on Standard_ND96asr_v4: " \
           "7 of 8 GPUs stay idle" in out
    assert not _findings(root, "run-gpu-nodes-unused")


@pytest.mark.parametrize(("source", "opens"), [
    ("import pandas\nimport mlflow\nprint(1)\n", False),
    ("import torch\n", True),
    ("from numba import cuda\n", True),
    ("import numba\nprint(numba)\n", False),
    ("from tensorflow import keras\n", True),
    ("import helpers\n", True),  # helpers.py imports jax
    ("import importlib\nimportlib.import_module('torch')\n", True),  # unreadable: the cautious answer
])
def test_gpu_opening_imports_are_followed_through_the_code_folder(tmp_path: Path, source: str, opens: bool) -> None:
    (tmp_path / "helpers.py").write_text("import jax\n")
    (tmp_path / "main.py").write_text(source)
    assert pyscan.process_group_use(tmp_path, "main.py").opens_gpu is opens
