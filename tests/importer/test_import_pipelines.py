"""``amlgpu import`` of pipeline and sweep jobs: Microsoft's CLI v2 files and an SDK v2 ``@pipeline`` notebook
(tests/fixtures/import/pipelines/, README there), and the whole path a user takes: import with ``--write``,
plan, and the job files azure-ai-ml loads.

The oracle is azure-ai-ml's ``load_job``: what the stack renders for an imported job must load to the same
steps (command, distribution, node count, bindings) as the original file.
"""

from __future__ import annotations

import shutil
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from importer import Context, import_files
from importer.base import Draft
from jobs.pipeline_render import composite_yaml
from jobs.pipelines import resolve_composites
from stack.config import build
from stack.project import load_stack
from tests.conftest import NS, dev_config, make_project

FIXTURES = Path(__file__).parents[1] / "fixtures" / "import" / "pipelines"
pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

CODE = {
    "cli/jobs/pipelines/cifar-10/src/train-model": "main.py",
    "cli/jobs/pipelines/cifar-10/src/eval-model": "main.py",
    "cli/jobs/pipelines/tensorflow-image-segmentation/src": "run.py",
    "cli/jobs/single-step/lightgbm/iris/src": "main.py",
    "cli/jobs/pipelines-with-components/pipeline_with_hyperparameter_sweep/train-src": "train.py",
    "cli/jobs/pipelines-with-components/pipeline_with_hyperparameter_sweep/predict-src": "predict.py",
    "sdk/python/jobs/pipelines/2b_train_cifar_10_with_pytorch/train-model": "main.py",
    "sdk/python/jobs/pipelines/2b_train_cifar_10_with_pytorch/eval-model": "main.py",
}
"""The code folders the fixtures name, each with a stand-in for its entry script (the training code is not kept)."""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_project(tmp_path_factory.mktemp("import-pipelines") / "project", dev_config())
    shutil.copytree(FIXTURES, root / "imports")
    for folder, script in CODE.items():
        (root / "imports" / folder).mkdir(parents=True, exist_ok=True)
        (root / "imports" / folder / script).write_text("print('fixture')\n")
    return root


def _import(project: Path, path: str, **options: Any) -> list[Draft]:
    return import_files([project / "imports" / path], Context(root=project, stack=load_stack("test", project),
                                                              **options))


def _load(path: Path) -> Any:
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_job(path)


def _rendered(project: Path, drafts: list[Draft]) -> dict[str, Any]:
    """Each imported job as ``amlgpu plan`` renders it, read back by ``load_job``."""
    stack = load_stack("test", project)
    values = {k.removeprefix(f"{NS}:"): v for k, v in stack.file.config.items() if k.startswith(f"{NS}:")}
    values["environments"] = [*values.get("environments", []), *(e for d in drafts for e in d.environments)]
    values["jobs"] = [*values.get("jobs", []), *(d.run for d in drafts)]
    config = build(values, location="westeurope", file="Pulumi.test.yaml", root=project)
    out = project / "build" / "import-pipelines"
    out.mkdir(parents=True, exist_ok=True)
    loaded = {}
    for job, _ in resolve_composites(config, project):
        path = out / f"{job.name}.yml"
        path.write_text(composite_yaml(job.spec, code_relative_to=out, root=project))
        loaded[job.name] = _load(path)
    return loaded


def _step(node: Any) -> dict[str, Any]:
    """What defines a loaded step: its command, distribution, node count and input bindings."""
    dist = node.distribution
    return {
        "command": node.component.command,
        "distribution": (dist.type, getattr(dist, "process_count_per_instance", None) or getattr(
            dist, "worker_count", None)) if dist else None,
        "instance_count": node.resources.instance_count if node.resources else 1,
        "bindings": {k: str(v._data) for k, v in node.inputs.items() if str(v._data).startswith("${{parent")},
    }


@pytest.mark.parametrize(("fixture", "name"), [
    ("cli/jobs/pipelines/cifar-10/pipeline.yml", "cifar-10"),
    ("cli/jobs/pipelines-with-components/basics/6b_pytorch_hello_world/pipeline.yml", "run-6b_pytorch_hello_world"),
    ("cli/jobs/pipelines-with-components/basics/6a_tf_hello_world/pipeline.yml", "run-6a_tf_hello_world"),
    ("cli/jobs/pipelines/tensorflow-image-segmentation/pipeline.yml", "tensorflow-image-segmentation"),
])
def test_cli_v2_pipelines_render_to_the_steps_azure_ml_would_run(project: Path, fixture: str, name: str) -> None:
    drafts = _import(project, fixture, compute="gpu-a100")
    assert [d.run["name"] for d in drafts] == [name] and not drafts[0].placeholders
    original = _load(project / "imports" / fixture)
    ours = _rendered(project, drafts)[name]
    assert set(ours.jobs) == set(original.jobs)
    for step, node in original.jobs.items():
        expected = _step(node)
        if expected["distribution"] is None:  # imported as Azure ML runs it: once per node
            expected["distribution"] = ("pytorch", 1)
        assert _step(ours.jobs[step]) == expected, step


def test_the_sdk_v2_pipeline_function_renders_to_the_pipeline_it_builds(project: Path) -> None:
    fixture = "sdk/python/jobs/pipelines/2b_train_cifar_10_with_pytorch/train_cifar_10_with_pytorch.py"
    (draft,) = _import(project, fixture, compute="gpu-a100")
    assert draft.kind == "SDK v2 @pipeline" and draft.run["name"] == "train-cifar-10-with-pytorch"
    steps = draft.run["jobs"]
    assert steps["train_model"]["inputs"] == {"epochs": 1, "cifar": "${{parent.jobs.get_data.outputs.cifar}}"}
    assert steps["train_model"]["outputs"] == {"model_dir": {"mode": "upload"}}  # train_model.outputs.model_dir.mode
    assert steps["eval_model"]["inputs"]["model_dir"] == "${{parent.jobs.train_model.outputs.model_dir}}"
    assert draft.run["settings"] == {"default_compute": "gpu-a100"}  # pipeline_job.settings.default_compute, mapped
    loaded = _rendered(project, [draft])["train-cifar-10-with-pytorch"]
    train = loaded.jobs["train_model"]
    # What the component file declares (train-model.yml: pytorch, 1 process per node, 2 nodes) survives.
    assert (train.distribution.type, train.distribution.process_count_per_instance) == ("pytorch", 1)
    assert train.resources.instance_count == 2
    assert str(train.inputs["cifar"]._data) == "${{parent.jobs.get_data.outputs.cifar}}"
    assert loaded.jobs["get_data"].inputs["cifar_zip"].path.startswith("wasbs://datasets@azuremlexamples")


def test_sweeps_render_to_the_sweep_azure_ml_would_run(project: Path) -> None:
    fixture = "cli/jobs/single-step/lightgbm/iris/job-sweep.yml"
    (draft,) = _import(project, fixture, compute="gpu-a100", environment="acpt-pytorch")
    assert draft.run["type"] == "sweep" and draft.run["name"] == "iris"
    assert any(n.startswith("trial: no distribution") for n in draft.notes)
    original, ours = _load(project / "imports" / fixture), _rendered(project, [draft])["iris"]
    assert ours.trial.command == original.trial.command
    for key in ("search_space", "objective", "limits"):
        assert ours._to_dict()[key] == original._to_dict()[key], key
    assert ours.sampling_algorithm == original.sampling_algorithm == "random"
    assert ours.inputs["iris_csv"].path == original.inputs["iris_csv"].path.removeprefix("azureml:")


@pytest.mark.parametrize(("fixture", "placeholders"), [
    ("cli/jobs/pipelines/nyc-taxi/pipeline.yml", {"jobs.prep_job.inputs.raw_data.path"}),
    ("cli/jobs/pipelines-with-components/basics/1b_e2e_registered_components/pipeline.yml",
     {"jobs.train_job.component", "jobs.score_job.component", "jobs.evaluate_job.component",
      "jobs.train_job.inputs.training_data.path", "jobs.score_job.inputs.test_data.path"}),
])
def test_what_cannot_be_read_is_left_as_placeholders_naming_the_step(project: Path, fixture: str,
                                                                     placeholders: set[str]) -> None:
    (draft,) = _import(project, fixture, compute="gpu-a100", environment="acpt-pytorch")
    assert {p.key for p in draft.placeholders} == placeholders


def test_a_sweep_step_inside_a_pipeline_renders_to_the_sweep_node_azure_ml_would_run(project: Path) -> None:
    fixture = "cli/jobs/pipelines-with-components/pipeline_with_hyperparameter_sweep/pipeline.yml"
    (draft,) = _import(project, fixture, compute="gpu-a100")
    step = draft.run["jobs"]["sweep_step"]
    assert step["type"] == "sweep" and not draft.placeholders
    # train.yml declares no distribution and a sweep step has none of its own: the component is written inline.
    assert step["trial"]["code"] == f"imports/{Path(fixture).parent}/train-src"
    assert step["trial"]["distribution"] == {"type": "pytorch", "process_count_per_instance": 1}
    assert any(n.startswith("step 'sweep_step': trial ") and "declares no distribution: written inline" in n
               for n in draft.notes)
    original = _load(project / "imports" / fixture).jobs["sweep_step"]
    ours = _rendered(project, [draft])["pipeline_with_hyperparameter_sweep"].jobs["sweep_step"]
    assert type(ours).__name__ == type(original).__name__ == "Sweep"
    assert ours.trial.command == original.trial.command
    for key in ("search_space", "objective", "limits", "sampling_algorithm"):
        assert ours._to_dict()[key] == original._to_dict()[key], key
    # Literal inputs as written; a boolean as Azure ML sends it (false as 0: stack.runs.Literal_).
    assert {k: str(v._data) for k, v in ours.inputs.items() if k != "data"} == \
        {k: str(int(v._data) if isinstance(v._data, bool) else v._data) for k, v in original.inputs.items()
         if k != "data"}
    assert ours.inputs["data"].path == original.inputs["data"].path
    # What azure-ai-ml submits for the node (Sweep._to_job): each sampled input is ${{search_space.<name>}}.
    assert ours._to_job().trial.command == original._to_job().trial.command
    assert "--C ${{search_space.c_value}} --kernel ${{search_space.kernel}}" in ours._to_job().trial.command


def test_compute_and_environment_flags_apply_to_every_step(project: Path) -> None:
    (draft,) = _import(project, "cli/jobs/pipelines/cifar-10/pipeline.yml", compute="gpu-a100",
                       environment="acpt-pytorch")
    steps = draft.run["jobs"]
    assert {s["compute"] for s in steps.values()} == {"gpu-a100"}
    assert {s["environment"] for s in steps.values()} == {"acpt-pytorch"}
    (draft,) = _import(project, "cli/jobs/pipelines-with-components/basics/6b_pytorch_hello_world/pipeline.yml",
                       compute="gpu-a100", environment="acpt-pytorch")
    assert draft.run["jobs"]["pytorch_job"]["environment"] == "acpt-pytorch"  # replaces the component's


# ------------------------------------------------------------------------------------------ as a user would


PIPELINE = textwrap.dedent("""\
    $schema: https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json
    type: pipeline
    name: {name}
    display_name: Train on 2 x 8 A100, then evaluate
    settings:
      default_compute: azureml:gpu-cluster
    inputs:
      epochs: 4
    jobs:
      train:
        type: command
        code: ../jobs/workloads
        command: >-
          python train_ddp.py --epochs ${{{{inputs.epochs}}}} --checkpoint-dir ${{{{outputs.checkpoints}}}}
        environment: azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest
        inputs:
          epochs: ${{{{parent.inputs.epochs}}}}
        outputs:
          checkpoints:
            type: uri_folder
            mode: rw_mount
        environment_variables:{variables}
        resources:
          instance_count: 2
        distribution:
          type: pytorch
          process_count_per_instance: 8
        limits:
          timeout: 7200
      evaluate:
        type: command
        code: ../jobs/workloads
        command: >-
          python evaluate.py --checkpoint-dir ${{{{inputs.checkpoints}}}} --report-dir ${{{{outputs.report}}}}
        environment: azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest
        inputs:
          checkpoints: ${{{{parent.jobs.train.outputs.checkpoints}}}}
        outputs:
          report:
            type: uri_folder
        distribution:
          type: pytorch
          process_count_per_instance: 8
        limits:
          timeout: 1800
    """)
SWEEP = textwrap.dedent("""\
    $schema: https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json
    type: sweep
    name: {name}
    compute: azureml:gpu-cluster
    trial:
      code: ../jobs/workloads
      command: python train_ddp.py --epochs 4 --lr ${{{{search_space.lr}}}}
      environment: azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest
      resources:
        instance_count: 2
      distribution:
        type: pytorch
        process_count_per_instance: 8
    search_space:
      lr:
        type: loguniform
        min_value: -9.2
        max_value: -4.6
    sampling_algorithm: random
    objective:
      goal: minimize
      primary_metric: loss
    limits:
      max_total_trials: 8
      max_concurrent_trials: {concurrent}
      trial_timeout: 7200
    """)


def test_import_write_plan_and_load_a_distributed_pipeline_and_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "project", dev_config())
    (root / "azure").mkdir()
    (root / "azure" / "pipeline.yml").write_text(PIPELINE.format(name="train-eval", variables=" {}"))
    (root / "azure" / "sweep.yml").write_text(SWEEP.format(name="lr-sweep", concurrent=1))
    monkeypatch.chdir(root)
    flags = ["--stack", "test", "--compute", "gpu-a100", "--environment", "acpt-pytorch", "--write"]
    # Imported, appended and planned: no mandatory finding.
    assert main(["import", "azure/pipeline.yml", "azure/sweep.yml", *flags]) == 0
    out, err = capsys.readouterr()
    assert "Appended 2 run(s) to Pulumi.test.yaml: train-eval, lr-sweep" in err
    assert "train-eval/train" in out and "lr-sweep/trial" in out
    pipeline = _load(root / "build" / "test" / "jobs" / "train-eval.yml")
    train = pipeline.jobs["train"]
    assert (train.distribution.type, train.distribution.process_count_per_instance) == ("pytorch", 8)
    assert train.resources.instance_count == 2
    sweep = _load(root / "build" / "test" / "jobs" / "lr-sweep.yml")
    assert (sweep.trial.distribution.process_count_per_instance, sweep.trial.resources.instance_count) == (8, 2)
    assert yaml.safe_load((root / "Pulumi.test.yaml").read_text())["config"][f"{NS}:jobs"][-1]["type"] == "sweep"

    # The same pipeline with InfiniBand switched off in its training step fails the plan, naming the step; four
    # concurrent 2-node trials on the 2-node cluster are reported (advisory).
    (root / "azure" / "pipeline.yml").write_text(PIPELINE.format(
        name="train-eval-ib-off", variables="\n      NCCL_IB_DISABLE: '1'"))
    (root / "azure" / "sweep.yml").write_text(SWEEP.format(name="lr-sweep-wide", concurrent=4))
    assert main(["import", "azure/pipeline.yml", "azure/sweep.yml", *flags]) == 1
    out, _ = capsys.readouterr()
    assert "run-infiniband-disabled  [high]  run 'train-eval-ib-off/train': NCCL_IB_DISABLE='1'" in out
    report = (root / "build" / "test" / "policy.md").read_text()
    rows = [line for line in report.splitlines() if "`sweep-concurrent-trials-exceed-cluster`" in line]
    assert len(rows) == 1  # the first sweep (one trial at a time) fits
    assert ("| sweep 'lr-sweep-wide' | 4 concurrent trial(s) of 2 node(s) need 8 nodes; cluster gpu-a100 scales to "
            "2: 1 trial(s) run at once, the other 3 wait in the queue<br>fingerprint `") in rows[0]
