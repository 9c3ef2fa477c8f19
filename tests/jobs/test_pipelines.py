"""Pipeline and sweep jobs: declared in the stack's ``jobs``, each step and trial resolved as a run, rendered to
files azure-ai-ml's ``load_job`` reads back with the step's distribution and node count intact.

The oracle for the files is azure-ai-ml itself (``load_job``, what ``az ml job create -f`` runs): the values
the stack resolved must be what the loaded ``PipelineJob``'s nodes and ``SweepJob``'s trial hold.
"""

from __future__ import annotations

import math
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.emulate.composite import sample, step_order
from jobs.emulate.errors import EmulationError
from jobs.pipeline_render import composite_yaml
from jobs.pipelines import resolve_composites
from kernel.errors import ConfigError
from stack.config import StackConfig
from stack.pipelines import PipelineJob
from stack.sweeps import SweepJob
from tests.conftest import ROOT
from tests.jobs.test_resolve import stack

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "jobs" / "workloads", tmp_path / "jobs" / "workloads",
                    ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))
    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "train.yml").write_text(yaml.safe_dump({
        "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
        "type": "command", "name": "train", "version": 1,
        "code": "../jobs/workloads",
        "command": "python train_ddp.py --epochs ${{inputs.epochs}} --checkpoint-dir ${{outputs.checkpoints}}",
        "environment": "azureml:acpt-pytorch:1",
        "inputs": {"epochs": {"type": "integer", "default": 4}},
        "outputs": {"checkpoints": {"type": "uri_folder"}},
        "resources": {"instance_count": 2},
        "distribution": {"type": "pytorch", "process_count_per_instance": 8},
    }))
    return tmp_path


def pipeline(**changes: Any) -> dict[str, Any]:
    """prepare -> train (2 x 8, distributed) -> evaluate, on the dev stack's cluster."""
    job: dict[str, Any] = {
        "name": "train-eval", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
        "inputs": {"epochs": 3},
        "outputs": {"report": {"type": "uri_folder"}},
        "jobs": {
            "train": {
                "code": "jobs/workloads",
                "command": "python train_ddp.py --epochs ${{inputs.epochs}} --checkpoint-dir ${{outputs.checkpoints}}",
                "environment": "acpt-pytorch", "inputs": {"epochs": "${{parent.inputs.epochs}}"},
                "outputs": {"checkpoints": {"type": "uri_folder", "mode": "rw_mount"}},
                "resources": {"instance_count": 2}, "distribution": {"type": "pytorch"},
                "limits": {"timeout": 3600},
            },
            "evaluate": {
                "code": "jobs/workloads",
                "command": "python evaluate.py --checkpoint-dir ${{inputs.checkpoints}} "
                           "--report-dir ${{outputs.report}}",
                "environment": "acpt-pytorch", "compute": "gpu-a100",
                "inputs": {"checkpoints": "${{parent.jobs.train.outputs.checkpoints}}"},
                "outputs": {"report": "${{parent.outputs.report}}"},
                "distribution": {"type": "pytorch"}, "limits": {"timeout": 600},
            },
        },
    }
    job.update(changes)
    return job


def sweep(**changes: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": "lr-sweep", "type": "sweep", "compute": "gpu-a100",
        "trial": {
            "code": "jobs/workloads",
            "command": "python train_ddp.py --lr ${{search_space.lr}} --batch-size ${{search_space.batch}}",
            "environment": "acpt-pytorch", "resources": {"instance_count": 2},
            "distribution": {"type": "pytorch"},
        },
        "search_space": {"lr": {"type": "loguniform", "min_value": -9.2, "max_value": -4.6},
                         "batch": {"type": "choice", "values": [32, 64]}},
        "sampling_algorithm": "random",
        "objective": {"goal": "minimize", "primary_metric": "loss"},
        "limits": {"max_total_trials": 8, "max_concurrent_trials": 1, "trial_timeout": 3600},
        "early_termination": {"type": "bandit", "slack_factor": 0.1, "evaluation_interval": 1},
    }
    job.update(changes)
    return job


def _load(path: Path) -> Any:
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_job(path)


def _rendered(root: Path, config: StackConfig) -> dict[str, tuple[Any, Path]]:
    out = root / "build" / "jobs"
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for job, _ in resolve_composites(config, root):
        path = out / f"{job.name}.yml"
        path.write_text(composite_yaml(job.spec, code_relative_to=out, root=root))
        files[job.name] = (job, path)
    return files


# ------------------------------------------------------------------------------------------ declared and resolved


def test_each_step_is_a_run_with_the_pipelines_defaults(root: Path) -> None:
    config = stack(root, [pipeline()])
    (entry,) = config.composites
    assert isinstance(entry, PipelineJob) and config.runs[-1].name.startswith("fabric-check")
    train, evaluate = entry.runs["train"], entry.runs["evaluate"]
    assert (train.compute, evaluate.compute) == ("gpu-a100", "gpu-a100")  # settings.default_compute, and its own
    assert train.inputs == {"epochs": "${{parent.inputs.epochs}}"}
    ((job, runs),) = resolve_composites(config, root)
    assert [r.name for r in runs] == ["train-eval/train", "train-eval/evaluate"]
    assert {r.part_of for r in runs} == {"train-eval"}
    step = job.spec["jobs"]["train"]
    assert step["distribution"] == {"type": "pytorch", "process_count_per_instance": 8}  # the GPU-aware default
    assert step["resources"] == {"instance_count": 2, "shm_size": "32g"}
    assert step["compute"] == "azureml:gpu-a100" and "name" not in step
    assert job.spec["jobs"]["evaluate"]["outputs"] == {"report": "${{parent.outputs.report}}"}
    assert job.spec["settings"] == {"default_compute": "azureml:gpu-a100"}


def test_a_component_file_is_merged_into_its_step(root: Path) -> None:
    job = pipeline(jobs={"train": {"component": "file:components/train.yml", "inputs": {"epochs": 9},
                                   "resources": {"instance_count": 1}, "environment": "acpt-pytorch"}})
    (entry,) = stack(root, [job]).composites
    run = entry.runs["train"]
    assert run.code == "jobs/workloads"  # relative to the component file, as Azure ML reads it
    assert run.command.startswith("python train_ddp.py") and run.inputs == {"epochs": 9}
    assert run.resources.instance_count == 1  # the step's resources replace the component's
    assert run.distribution.process_count_per_instance == 8  # the component's
    assert run.environment == "acpt-pytorch"  # the step's environment replaces the component's
    # A component input the step leaves out takes the component's default.
    default = pipeline(jobs={"train": {"component": "components/train.yml"}})
    assert stack(root, [default]).composites[0].runs["train"].inputs == {"epochs": 4}


def test_a_sweep_holds_its_trial_as_a_run_on_its_compute(root: Path) -> None:
    (entry,) = stack(root, [sweep()]).composites
    assert isinstance(entry, SweepJob) and entry.algorithm == "random"
    trial = entry.runs["trial"]
    assert (trial.compute, trial.resources.instance_count, trial.limits.timeout) == ("gpu-a100", 2, 3600)
    ((job, (run,)),) = resolve_composites(stack(root, [sweep()]), root)
    assert run.name == "lr-sweep/trial" and run.spec["limits"] == {"timeout": 3600}
    assert job.spec["trial"]["distribution"] == {"type": "pytorch", "process_count_per_instance": 8}
    assert job.spec["search_space"]["lr"] == {"type": "loguniform", "min_value": -9.2, "max_value": -4.6}
    assert set(job.spec) == {"type", "name", "compute", "trial", "search_space", "sampling_algorithm", "objective",
                             "limits", "early_termination"}


BAD = {
    "unknown-step-cluster": (
        pipeline(jobs={"train": {**pipeline()["jobs"]["train"], "compute": "gpu-h100"}}),
        "aml-gpu-training:jobs[0].jobs.train.compute", "step 'train-eval/train': unknown cluster 'gpu-h100'"),
    "no-compute-anywhere": (
        pipeline(settings={}, jobs={"train": pipeline()["jobs"]["train"]}),
        "aml-gpu-training:jobs[0].jobs.train.compute",
        "names no compute and the pipeline has no settings.default_compute"),
    "unknown-default-cluster": (
        pipeline(settings={"default_compute": "gpu-h100"}),
        "aml-gpu-training:jobs[0].settings.default_compute", "unknown cluster 'gpu-h100'"),
    "undeclared-placeholder": (
        pipeline(jobs={"train": {**pipeline()["jobs"]["train"], "inputs": {}}}),
        "aml-gpu-training:jobs[0].jobs.train.command", "${{inputs.epochs}} has no declared input"),
    "parallel-step": (
        pipeline(jobs={"split": {"type": "parallel"}}), "aml-gpu-training:jobs[0].jobs.split.type",
        "step type 'parallel': a pipeline here runs command and sweep steps"),
    "registered-component-without-version": (  # issue 40: a pinned one is judged against its pulled spec
        pipeline(jobs={"train": {"component": "azureml:my_train@latest"}}),
        "aml-gpu-training:jobs[0].jobs.train.component", "name a registered component with its version"),
    "missing-component-file": (
        pipeline(jobs={"train": {"component": "file:components/nope.yml"}}),
        "aml-gpu-training:jobs[0].jobs.train.component", "component file 'components/nope.yml' not found"),
    "component-input-without-value": (
        pipeline(jobs={"train": {"component": "file:components/train.yml", "inputs": {"batch": 3}}}),
        "aml-gpu-training:jobs[0].jobs.train.inputs.batch", "the component declares no input 'batch'"),
    "step-name": (pipeline(jobs={"Train": pipeline()["jobs"]["train"]}), "aml-gpu-training:jobs[0].jobs",
                  "step name 'Train' is invalid"),
    "partial-binding": (
        pipeline(jobs={"train": {**pipeline()["jobs"]["train"], "inputs": {"epochs": "x${{parent.inputs.epochs}}"}}}),
        "aml-gpu-training:jobs[0].jobs.train.inputs", "is not a binding this stack reads"),
    "unknown-type": ({"name": "x", "type": "parallel"}, "aml-gpu-training:jobs[0]",
                     "type must be pipeline or sweep (a run, Azure ML's command job, has no type) "
                     "(got type \"parallel\")"),
    "no-default-environment": (pipeline(settings={"default_compute": "gpu-a100", "default_environment": "x"}),
                               "aml-gpu-training:jobs[0].settings.default_environment",
                               "Azure ML pipelines have no default environment"),
    "grid-over-uniform": (sweep(sampling_algorithm="grid"), "aml-gpu-training:jobs[0]",
                          "grid sampling supports choice parameters only (Azure ML): lr (loguniform)"),
    "bayesian-with-early-termination": (
        sweep(sampling_algorithm="bayesian", search_space={"lr": {"type": "uniform", "min_value": 0.1,
                                                                  "max_value": 0.2}, "batch": {"type": "choice",
                                                                                               "values": [1]}}),
        "aml-gpu-training:jobs[0]", "bayesian sampling takes no early_termination"),
    "undeclared-search-parameter": (sweep(search_space={"lr": {"type": "uniform", "min_value": 0, "max_value": 1}}),
                                    "aml-gpu-training:jobs[0]", "${{search_space.batch}}, which search_space does not"),
    "parameter-keys": (sweep(search_space={"lr": {"type": "normal", "mu": 0},
                                           "batch": {"type": "choice", "values": [1]}}),
                       "aml-gpu-training:jobs[0].search_space.lr", "a normal parameter needs sigma"),
    "bandit-slack": (sweep(early_termination={"type": "bandit"}), "aml-gpu-training:jobs[0].early_termination",
                     "a bandit policy takes exactly one of slack_factor and slack_amount"),
    "trial-limits": (sweep(trial={**sweep()["trial"], "limits": {"timeout": 5}}),
                     "aml-gpu-training:jobs[0].trial.limits", "a trial's timeout is the sweep's limits.trial_timeout"),
    "trial-cluster": (sweep(compute="gpu-h100"), "aml-gpu-training:jobs[0].compute",
                      "trial 'lr-sweep/trial': unknown cluster 'gpu-h100'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_pipelines_and_sweeps_name_the_key(root: Path, case: str) -> None:
    job, key, message = BAD[case]
    with pytest.raises(ConfigError) as raised:
        stack(root, [job])
    problems = [(p.key, p.message) for p in raised.value.problems]
    assert any(k == key and message in m for k, m in problems), problems


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_component_file_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from amlgpu.cli import main
    from tests.conftest import NS, dev_config, make_project

    config = dev_config()
    config[f"{NS}:jobs"] = [pipeline(jobs={"train": {"component": "file:components/train.yml"}})]
    project = make_project(tmp_path / "project", config)
    component = project / "components" / "train.yml"
    component.parent.mkdir()
    component.write_text("type: command\n")
    component.chmod(0)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Pulumi CLI: the workspace comes from the stack file
    try:
        assert main(["plan", "--stack", "test"]) == 2
    finally:
        component.chmod(0o644)
    err = capsys.readouterr().err
    assert "jobs[0].jobs.train.component" in err and "component file 'components/train.yml' cannot be read: " \
        "Permission denied" in err, err
    assert "Traceback" not in err and not (project / "build").exists()


def test_names_are_unique_across_runs_pipelines_and_sweeps(root: Path) -> None:
    with pytest.raises(ConfigError, match="duplicate name 'train-eval'"):
        stack(root, [pipeline(), sweep(name="train-eval")])


# ------------------------------------------------------------------------------------------ job files


def test_the_pipeline_file_loads_with_the_steps_distribution_and_node_count(root: Path) -> None:
    config = stack(root, [pipeline()])
    (_, path), = _rendered(root, config).values()
    loaded = _load(path)
    assert type(loaded).__name__ == "PipelineJob" and set(loaded.jobs) == {"train", "evaluate"}
    train = loaded.jobs["train"]
    assert (train.distribution.type, train.distribution.process_count_per_instance) == ("pytorch", 8)
    assert train.resources.instance_count == 2 and train.resources.shm_size == "32g"
    assert train.compute == "gpu-a100" and train.limits.timeout == 3600
    assert (path.parent / train.component.code).resolve() == (root / "jobs" / "workloads").resolve()
    evaluate = loaded.jobs["evaluate"]
    assert str(evaluate.inputs["checkpoints"]._data) == "${{parent.jobs.train.outputs.checkpoints}}"
    assert evaluate.resources.instance_count == 1
    assert loaded.settings.default_compute == "gpu-a100"
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=https://azuremlschemas.azureedge.net/latest/pipelineJob")
    assert "name:" not in [line.split(" ")[0] for line in text.splitlines()]  # no job name: submit it again and again
    assert "code: ../../jobs/workloads\n" in text  # relative to the file's folder


def test_the_sweep_file_loads_with_the_trials_distribution_and_node_count(root: Path) -> None:
    config = stack(root, [sweep()])
    (_, path), = _rendered(root, config).values()
    loaded = _load(path)
    assert type(loaded).__name__ == "SweepJob"
    trial = loaded.trial
    assert (trial.distribution.type, trial.distribution.process_count_per_instance) == ("pytorch", 8)
    assert trial.resources.instance_count == 2
    assert (loaded.limits.max_total_trials, loaded.limits.max_concurrent_trials, loaded.limits.trial_timeout) == \
        (8, 1, 3600)
    assert type(loaded.early_termination).__name__ == "BanditPolicy" and loaded.early_termination.slack_factor == 0.1
    assert loaded.objective.primary_metric == "loss" and loaded.sampling_algorithm == "random"
    assert set(loaded.search_space) == {"lr", "batch"} and loaded.compute == "gpu-a100"


def test_job_files_are_byte_identical_wherever_they_are_rendered(root: Path, tmp_path_factory: Any) -> None:
    config = stack(root, [pipeline(), sweep()])
    first = {name: path.read_text() for name, (_, path) in _rendered(root, config).items()}
    other = tmp_path_factory.mktemp("other")
    shutil.copytree(root, other, dirs_exist_ok=True, ignore=shutil.ignore_patterns("build"))
    rendered = _rendered(other, stack(other, [pipeline(), sweep()]))
    again = {name: path.read_text() for name, (_, path) in rendered.items()}
    assert first == again


def _submitted(root: Path, job: dict[str, Any]) -> tuple[Any, Any, Path]:
    """What ``amlgpu submit`` sends for ``job`` (azure-ai-ml's ``load_job`` of the file the plan writes), its
    submission, and the folder that file is in."""
    from jobs import submit

    submission = submit.prepare(job["name"], config=stack(root, [job]), stack_file="Pulumi.test.yaml", outputs=None,
                                root=root, environ={}, dry_run=True)
    file = submit.job_file(submission, root=root, plan_dir=root / "build" / "test")
    return submit.load(submission, file), submission, file.path.parent


def test_what_a_submission_sends_is_load_job_of_the_file(root: Path) -> None:
    loaded, submission, folder = _submitted(root, pipeline())
    # The file names no job: the only name is the submission's own.
    assert loaded.name == submission.name and loaded.jobs["train"].resources.instance_count == 2
    # The code folder, relative to the file's folder, is where the project has it.
    assert (folder / loaded.jobs["train"].component.code).resolve() == (root / "jobs" / "workloads").resolve()
    loaded, _, folder = _submitted(root, sweep())
    assert (folder / loaded.trial.code).resolve() == (root / "jobs" / "workloads").resolve()


# ------------------------------------------------------------------------------------------ run-local


def test_steps_run_after_the_steps_whose_outputs_they_bind() -> None:
    spec = {"jobs": {"evaluate": {"inputs": {"m": "${{parent.jobs.train.outputs.model}}"}},
                     "train": {"inputs": {"d": "${{parent.jobs.prep.outputs.data}}"}, "outputs": {"model": {}}},
                     "prep": {"outputs": {"data": {}}}}}
    assert step_order(spec) == ["prep", "train", "evaluate"]
    spec["jobs"]["prep"]["inputs"] = {"x": "${{parent.jobs.evaluate.outputs.report}}"}
    spec["jobs"]["evaluate"]["outputs"] = {"report": {}}
    with pytest.raises(EmulationError, match="wait on each other's outputs"):
        step_order(spec)
    spec["jobs"]["prep"]["inputs"] = {"x": "${{parent.jobs.nope.outputs.report}}"}
    with pytest.raises(EmulationError, match="which no step produces"):
        step_order(spec)



@pytest.mark.parametrize("kind", ["pipeline", "sweep"])
def test_a_step_or_trial_error_is_keyed_under_it_and_a_flags_is_not(root: Path, tmp_path: Path, kind: str) -> None:
    from jobs.emulate.composite import prepare_pipeline, prepare_sweep
    from jobs.emulate.prepare import Request
    from jobs.pipelines import resolve_composite

    mpi = {"type": "mpi", "process_count_per_instance": 8}
    if kind == "pipeline":
        declared = pipeline()
        declared["jobs"]["train"]["distribution"] = mpi
    else:
        declared = sweep()
        declared["trial"]["distribution"] = mpi
    config = stack(root, [declared])
    job, runs = resolve_composite(config.composites[0], config, root)

    def prepared(request: Request) -> Any:
        environ = {"PATH": str(tmp_path / "no-mpirun")}  # mpi needs an mpirun: a key of the step's own fails
        if kind == "pipeline":
            return prepare_pipeline(job, {r.name: r for r in runs}, request, root=root, workdir=tmp_path / "w",
                                    environ=environ)
        return prepare_sweep(job, runs[0], request, trials=1, root=root, workdir=tmp_path / "w", environ=environ)

    with pytest.raises(EmulationError, match="mpirun") as raised:
        prepared(Request())
    assert raised.value.key == ("jobs.train" if kind == "pipeline" else "trial") + ".distribution.type"
    with pytest.raises(EmulationError, match="has no input 'nope'") as raised:
        prepared(Request(inputs={"train.nope" if kind == "pipeline" else "nope": "1"}))
    assert raised.value.key == "--input"

def test_sampling_follows_azure_mls_distributions() -> None:
    space = {"lr": {"type": "loguniform", "min_value": -9.2, "max_value": -4.6},
             "q": {"type": "quniform", "min_value": 0, "max_value": 100, "q": 10},
             "k": {"type": "randint", "upper": 3}, "b": {"type": "choice", "values": [16, 32]}}
    drawn = sample({"search_space": space, "sampling_algorithm": "random"}, 50)
    assert drawn == sample({"search_space": space, "sampling_algorithm": "random"}, 50)  # the same every time
    assert all(math.exp(-9.2) <= d["lr"] <= math.exp(-4.6) for d in drawn)
    assert all(d["q"] % 10 == 0 and isinstance(d["q"], int) for d in drawn)
    assert {d["k"] for d in drawn} == {0, 1, 2} and {d["b"] for d in drawn} == {16, 32}
    seeded = sample({"search_space": space, "sampling_algorithm": {"type": "random", "seed": 7}}, 3)
    assert seeded != drawn[:3]
    grid = {"a": {"type": "choice", "values": [1, 2]}, "b": {"type": "choice", "values": ["x", "y"]}}
    assert sample({"search_space": grid, "sampling_algorithm": "grid"}, 9) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


# ------------------------------------------------------------------------------------------ submission


@pytest.mark.parametrize("job", [pipeline(), sweep()], ids=["pipeline", "sweep"])
def test_a_dry_run_prints_the_file_a_submission_sends(job: dict[str, Any], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from amlgpu.cli import main
    from tests.conftest import NS, dev_config, make_project

    config = dev_config()
    config[f"{NS}:jobs"] = [job]
    project = make_project(tmp_path / "project", config)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Pulumi CLI: the workspace comes from the stack file
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    assert main(["submit", job["name"], "--stack", "test", "--dry-run"]) == 0
    first, second, body = capsys.readouterr().out.split("\n", 2)
    assert first.startswith("# would submit to workspace mlw-gpu-dev")
    assert second.startswith(f"# job file build/test/jobs/{job['name']}.yml (") and f"name: {job['name']}-" in second
    document = yaml.safe_load(body)
    assert "name" not in document and document["type"] == job["type"]  # the submission adds its own name
    # What `az ml job create -f` reads at the path the plan writes (paths in it are relative to that folder).
    planned = project / "build" / "test" / "jobs" / f"{job['name']}.yml"
    planned.parent.mkdir(parents=True)
    planned.write_text(body)
    loaded = _load(planned)
    trial = loaded.trial if job["type"] == "sweep" else loaded.jobs["train"]
    assert (trial.distribution.process_count_per_instance, trial.resources.instance_count) == (8, 2)


def test_a_pipeline_step_holding_a_private_key_is_never_submitted(root: Path, tmp_path: Path) -> None:
    from jobs import submit
    from kernel.errors import UserError

    (root / "jobs" / "workloads" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n")
    config = stack(root, [pipeline()])
    with pytest.raises(UserError, match="run 'train-eval/train': the code folder 'jobs/workloads' holds private") \
            as raised:
        submit.prepare("train-eval", config=config, stack_file="Pulumi.test.yaml", outputs=None, root=root,
                       environ={}, dry_run=True)
    assert raised.value.key == "aml-gpu-training:jobs[0].jobs.train.code"
