"""A pipeline's sweep step (CLI v2 ``jobs.<step>`` with ``type: sweep``, azure-ai-ml's node ``SweepSchema``):
declared with a command component as its trial, held as the run Azure ML makes of it (``Sweep._to_job``: each
sampled input's ``${{inputs.<x>}}`` becomes ``${{search_space.<x>}}``), gated as a run named ``<pipeline>/<step>``,
and rendered so azure-ai-ml's ``load_job`` (what ``az ml job create -f`` runs) keeps its trial, search space,
limits and objective. The oracle for the files is azure-ai-ml itself.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.pipeline_render import composite_yaml
from jobs.pipelines import code_folders, resolve_composites
from kernel.errors import ConfigError
from stack.pipelines import PipelineJob, SweepStep
from tests import cli
from tests.conftest import ROOT
from tests.jobs.test_resolve import stack

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

TRAIN = {
    "type": "command", "name": "train", "version": 1, "code": "../jobs/workloads",
    "command": "python train_ddp.py --epochs ${{inputs.epochs}} --lr ${{inputs.lr}} "
               "--batch-size ${{inputs.batch}} --checkpoint-dir ${{outputs.checkpoints}}",
    "environment": "azureml:acpt-pytorch:1",
    "inputs": {"epochs": {"type": "integer", "default": 4}, "lr": {"type": "number"},
               "batch": {"type": "integer", "default": 32}},
    "outputs": {"checkpoints": {"type": "uri_folder"}},
    "resources": {"instance_count": 2},
    "distribution": {"type": "pytorch"},
}
"""A trial component file: three inputs, two of them sampled by the steps below."""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "jobs" / "workloads", tmp_path / "jobs" / "workloads",
                    ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))
    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "train.yml").write_text(yaml.safe_dump(TRAIN))
    return tmp_path


def tune(**changes: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "type": "sweep", "trial": "file:components/train.yml", "inputs": {"epochs": 3},
        "outputs": {"checkpoints": {"type": "uri_folder"}},
        "search_space": {"lr": {"type": "loguniform", "min_value": -9.2, "max_value": -4.6},
                         "batch": {"type": "choice", "values": [32, 64]}},
        "sampling_algorithm": {"type": "random", "seed": 7},
        "objective": {"goal": "minimize", "primary_metric": "loss"},
        "limits": {"max_total_trials": 6, "max_concurrent_trials": 1, "trial_timeout": 3600, "timeout": 7200},
        "early_termination": {"type": "bandit", "slack_factor": 0.1, "evaluation_interval": 1},
    }
    step.update(changes)
    return step


def pipeline(**steps: Any) -> dict[str, Any]:
    """tune (a sweep step) -> evaluate (bound to the best trial's checkpoints), on the dev stack's cluster."""
    jobs = {
        "tune": tune(),
        "evaluate": {
            "code": "jobs/workloads", "environment": "acpt-pytorch",
            "command": "python evaluate.py --checkpoint-dir ${{inputs.checkpoints}}",
            "inputs": {"checkpoints": "${{parent.jobs.tune.outputs.checkpoints}}"},
            "distribution": {"type": "pytorch"}, "limits": {"timeout": 600},
        },
    }
    jobs.update(steps)
    return {"name": "tune-eval", "type": "pipeline", "settings": {"default_compute": "gpu-a100"}, "jobs": jobs}


def _load(path: Path) -> Any:
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_job(path)


def _rendered(root: Path, job: dict[str, Any]) -> tuple[Any, Path]:
    ((resolved, _),) = resolve_composites(stack(root, [job]), root)
    out = root / "build" / "jobs"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tune-eval.yml"
    path.write_text(composite_yaml(resolved.spec, code_relative_to=out, root=root))
    return _load(path), path


# ------------------------------------------------------------------------------------------ declared and resolved


INLINE = {key: value for key, value in TRAIN.items() if key not in ("name", "version")} | {"code": "jobs/workloads"}


@pytest.mark.parametrize("trial", ["file:components/train.yml", "components/train.yml", INLINE],
                         ids=["file", "bare-path", "inline"])
def test_the_trial_is_the_run_azure_ml_makes_of_the_sweep_node(root: Path, trial: Any) -> None:
    (entry,) = stack(root, [pipeline(tune=tune(trial=trial))]).composites
    assert isinstance(entry, PipelineJob) and isinstance(entry.jobs["tune"], SweepStep)
    run = entry.runs["tune"]
    # Sweep._to_job: each sampled input's ${{inputs.<x>}} is ${{search_space.<x>}}; the others keep their values.
    assert run.command == ("python train_ddp.py --epochs ${{inputs.epochs}} --lr ${{search_space.lr}} "
                           "--batch-size ${{search_space.batch}} --checkpoint-dir ${{outputs.checkpoints}}")
    assert run.inputs == {"epochs": 3}
    assert (run.compute, run.resources.instance_count, run.limits.timeout) == ("gpu-a100", 2, 3600)
    assert run.code == "jobs/workloads"
    ((job, runs),) = resolve_composites(stack(root, [pipeline(tune=tune(trial=trial))]), root)
    assert [r.name for r in runs] == ["tune-eval/tune", "tune-eval/evaluate"]
    node = job.spec["jobs"]["tune"]
    assert node["type"] == "sweep" and node["limits"]["max_total_trials"] == 6
    assert node["trial"]["command"] == TRAIN["command"]  # as the component declares it
    assert node["trial"]["distribution"] == {"type": "pytorch", "process_count_per_instance": 8}  # GPU-aware
    assert node["resources"] == {"instance_count": 2, "shm_size": "32g"}


BAD = {
    "sampled-input-the-component-lacks": (
        tune(search_space={"momentum": {"type": "uniform", "min_value": 0.5, "max_value": 0.9}}),
        "aml-gpu-training:jobs[0].jobs.tune.search_space.momentum",
        "the trial component has no input to sample as 'momentum' (its inputs: batch, epochs, lr)"),
    "sampled-and-given": (
        tune(inputs={"epochs": 3, "lr": 0.1}), "aml-gpu-training:jobs[0].jobs.tune",
        "lr: under both search_space and inputs"),
    "required-input-without-value": (
        tune(search_space={"batch": {"type": "choice", "values": [32]}}),
        "aml-gpu-training:jobs[0].jobs.tune.inputs.lr", "component input 'lr' has no value and no default"),
    "grid-over-loguniform": (  # the check a sweep job gets, from the same model
        tune(sampling_algorithm="grid"), "aml-gpu-training:jobs[0].jobs.tune",
        "grid sampling supports choice parameters only (Azure ML): lr (loguniform)"),
    "no-trial": (
        {key: value for key, value in tune().items() if key != "trial"}, "aml-gpu-training:jobs[0].jobs.tune.trial",
        "required key is missing"),
    "missing-trial-file": (
        tune(trial="file:components/nope.yml"), "aml-gpu-training:jobs[0].jobs.tune.trial",
        "component file 'components/nope.yml' not found"),
    "trial-environment-variables": (
        tune(trial=INLINE | {"environment_variables": {"NCCL_DEBUG": "INFO"}}),
        "aml-gpu-training:jobs[0].jobs.tune.trial.environment_variables",
        "a sweep step's trial is a command component, which sets no environment_variables in Azure ML"),
    "trial-without-distribution": (
        tune(trial={key: value for key, value in INLINE.items() if key != "distribution"}),
        "aml-gpu-training:jobs[0].jobs.tune.trial", "distribution"),
    "unknown-trial-cluster": (
        tune(compute="gpu-h100"), "aml-gpu-training:jobs[0].jobs.tune.compute",
        "step 'tune-eval/tune': unknown cluster 'gpu-h100'"),
    "command-key-on-a-sweep-step": (
        tune(command="python x.py"), "aml-gpu-training:jobs[0].jobs.tune.command",
        "a sweep step runs its trial component: write the command under trial"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_sweep_steps_name_the_key(root: Path, case: str) -> None:
    step, key, message = BAD[case]
    with pytest.raises(ConfigError) as raised:
        stack(root, [pipeline(tune=step)])
    problems = [(p.key, p.message) for p in raised.value.problems]
    assert any(k == key and message in m for k, m in problems), problems


# ------------------------------------------------------------------------------------------ rendered


@pytest.mark.parametrize("trial", ["file:components/train.yml", INLINE], ids=["file", "inline"])
def test_load_job_keeps_the_trial_search_space_limits_and_objective(root: Path, trial: Any) -> None:
    loaded, path = _rendered(root, pipeline(tune=tune(trial=trial)))
    assert type(loaded).__name__ == "PipelineJob" and set(loaded.jobs) == {"tune", "evaluate"}
    node = loaded.jobs["tune"]
    assert type(node).__name__ == "Sweep" and node.compute == "gpu-a100"
    assert node.trial.command == TRAIN["command"]
    assert (node.trial.distribution.type, node.trial.distribution.process_count_per_instance) == ("pytorch", 8)
    assert (path.parent / node.trial.code).resolve() == (root / "jobs" / "workloads").resolve()
    assert node.resources.instance_count == 2
    assert set(node.search_space) == {"lr", "batch"}
    assert node._to_dict()["search_space"] == {
        "lr": {"type": "loguniform", "min_value": -9.2, "max_value": -4.6},
        "batch": {"type": "choice", "values": [32, 64]}}
    limits = node.limits
    assert (limits.max_total_trials, limits.max_concurrent_trials, limits.trial_timeout, limits.timeout) == \
        (6, 1, 3600, 7200)
    assert (node.objective.goal, node.objective.primary_metric) == ("minimize", "loss")
    assert type(node.early_termination).__name__ == "BanditPolicy"
    assert node._to_dict()["sampling_algorithm"] == {"type": "random", "seed": 7}
    assert str(node.inputs["epochs"]._data) == "3"
    assert str(loaded.jobs["evaluate"].inputs["checkpoints"]._data) == "${{parent.jobs.tune.outputs.checkpoints}}"
    # What azure-ai-ml submits for the node is the trial the gate judged.
    assert node._to_job().trial.command == stack(root, [pipeline(tune=tune(trial=trial))]).composites[0] \
        .runs["tune"].command


def test_load_job_keeps_the_nodes_own_keys(root: Path) -> None:
    loaded, _ = _rendered(root, pipeline(tune=tune(identity={"type": "managed"}, queue_settings={"job_tier": "spot"},
                                                   display_name="Tune", tags={"team": "nlp"})))
    node = loaded.jobs["tune"]
    assert (node.display_name, node.tags, node.queue_settings.job_tier) == ("Tune", {"team": "nlp"}, "spot")
    assert node.identity == {"type": "managed_identity"}  # as azure-ai-ml keeps a node's identity


def test_a_submission_uploads_the_trials_code_folder(root: Path) -> None:
    ((job, _),) = resolve_composites(stack(root, [pipeline()]), root)
    assert code_folders(job.spec) == ["jobs/workloads"]  # the trial's (and evaluate's), checked before upload
    (root / "trial").mkdir()
    job_ = pipeline(tune=tune(trial=INLINE | {"code": "trial"}))
    (root / "trial" / "train_ddp.py").write_text("print('train')\n")
    ((job, _),) = resolve_composites(stack(root, [job_]), root)
    assert code_folders(job.spec) == ["trial", "jobs/workloads"]


def test_a_registered_trial_not_pulled_is_sent_as_its_reference(root: Path) -> None:
    job = pipeline(tune=tune(trial="azureml:train:3"))
    assert "tune" not in stack(root, [job]).composites[0].runs  # judged only once pulled (a finding says so)
    loaded, path = _rendered(root, job)
    assert "    trial: azureml:train:3\n" in path.read_text()
    node = loaded.jobs["tune"]
    assert type(node).__name__ == "Sweep" and node.trial == "train:3"  # azure-ai-ml's own spelling of it
    assert set(node.search_space) == {"lr", "batch"} and node.limits.max_total_trials == 6


# ------------------------------------------------------------------------------------------ gated, as a user runs it


_IB_OFF = {
    "code": "src", "environment": "acpt-pytorch",
    "command": "NCCL_IB_DISABLE=1 python train.py --lr ${{inputs.lr}}",
    "inputs": {"lr": {"type": "number"}}, "resources": {"instance_count": 2}, "distribution": {"type": "pytorch"},
}


def _project(folder: Path, waivers: list[dict[str, Any]]) -> Path:
    folder.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, folder / name)
    (folder / "src").mkdir()
    (folder / "src" / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    config = {
        "azure-native:location": "westeurope",
        "aml-gpu-training:workspace": {"name": "mlw-sweep"},
        "aml-gpu-training:clusters": [{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 2}],
        "aml-gpu-training:environments": [{"name": "acpt-pytorch", "version": "1", "provides": ["infiniband"],
                                           "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18"}],
        "aml-gpu-training:jobs": [{
            "name": "tune-eval", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
            "jobs": {"tune": {
                "type": "sweep", "trial": _IB_OFF,
                "search_space": {"lr": {"type": "choice", "values": [0.1, 0.01]}}, "sampling_algorithm": "random",
                "objective": {"goal": "minimize", "primary_metric": "loss"},
                "limits": {"max_total_trials": 4, "max_concurrent_trials": 1, "trial_timeout": 3600},
            }},
        }],
        "aml-gpu-training:waivers": waivers,
    }
    (folder / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return folder


@pytest.mark.slow
def test_a_sweep_step_with_infiniband_off_in_its_trial_fails_the_plan_naming_the_step(tmp_path: Path) -> None:
    project = _project(tmp_path / "off", [])
    result = cli.amlgpu(project, "plan", "--stack", "t")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "run-infiniband-disabled  [high]  run 'tune-eval/tune': NCCL_IB_DISABLE='1'" in result.stdout
    build = project / "build" / "t"
    # The sweep's whole bound in cost.json: 4 trials x 2 nodes x 1 h.
    (sweep,) = json.loads((build / "cost.json").read_text())["sweeps"]
    assert (sweep["name"], sweep["trials"], sweep["nodes_per_trial"], sweep["bound_by"]) == \
        ("tune-eval/tune", 4, 2, "trials")
    assert _load(build / "jobs" / "tune-eval.yml").jobs["tune"].trial.command == _IB_OFF["command"]

    # Waived by that name (with the finding's fingerprint, as a mandatory rule's waiver needs), the plan passes.
    row = next(line for line in (build / "policy.md").read_text().splitlines() if "`run-infiniband-disabled`" in line)
    assert "| run 'tune-eval/tune' |" in row
    fingerprint = row.split("fingerprint `", 1)[1].split("`", 1)[0]
    waiver = {"rule": "run-infiniband-disabled", "resource": "tune-eval/tune", "fingerprint": fingerprint,
              "expires": str(dt.date.today() + dt.timedelta(days=30)),
              "reason": "ticket NET-42: the fabric of this cluster is under repair, TCP until it is back"}
    waived = _project(tmp_path / "waived", [waiver])
    result = cli.amlgpu(waived, "plan", "--stack", "t")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 waived" in result.stdout
