"""``amlgpu import``: Azure ML jobs as they exist (CLI v2 YAML, SDK v1 and v2 scripts) into stack entries.

The oracle is azure-ai-ml's ``load_job``: an imported entry, resolved and rendered as ``amlgpu plan``
writes it, must load to a job whose distribution, resources, command and inputs equal those of the
original job file (CLI v2) or of the v2 job the SDK v1 configuration documents (Microsoft Learn,
"Distributed GPU training guide (SDK v1)"; azureml-core's ``ScriptRunConfig``). Fixtures and their
sources: tests/fixtures/import/ (README and each file's header).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from importer import Context, ImportInputError, import_files
from importer.base import PLACEHOLDER_MARK, Draft
from importer.emit import append_to_stack, render
from importer.static import PathValue, Unknown, evaluate
from jobs.render import job_yaml
from jobs.resolve import resolve_all
from stack.config import build
from stack.project import load_stack
from tests.conftest import NS, dev_config, make_project

FIXTURES = Path(__file__).parents[1] / "fixtures" / "import"
CORPUS = Path(__file__).parents[1] / "fixtures" / "azureml-examples"
"""Azure/azureml-examples' distributed command jobs, with code folders (its README names the sources)."""
pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

GPU_CLUSTER = {"name": "gpu-cluster", "size": "Standard_ND96asr_v4", "max_instances": 4}
ENTRY_SCRIPTS = ("train.py", "main.py", "pretrain_glue_ORT.py", "setup_nhc.sh")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dev stack plus a ``gpu-cluster`` (the examples' cluster name), the fixtures under ``imports/``
    and each job's code folder (the originals' training code is not copied)."""
    config = dev_config()
    config[f"{NS}:clusters"].append(GPU_CLUSTER)
    root = make_project(tmp_path_factory.mktemp("import") / "project", config)
    shutil.copytree(FIXTURES, root / "imports")
    shutil.copytree(CORPUS, root / "imports" / "corpus")
    (root / "imports" / "src").mkdir()
    for folder in [p.parent for p in (root / "imports").rglob("*") if p.suffix in (".py", ".yml", ".yaml")
                   and "corpus" not in p.parts]:
        (folder / "src").mkdir(exist_ok=True)
        for script in ENTRY_SCRIPTS:
            (folder / "src" / script).write_text("print('fixture')\n")
            (folder / script).write_text("print('fixture')\n")
    return root


def _import(project: Path, path: str, **options: Any) -> list[Draft]:
    ctx = Context(root=project, stack=load_stack("test", project), **options)
    return import_files([project / "imports" / path], ctx)


def _rendered(project: Path, drafts: list[Draft]) -> dict[str, dict[str, Any]]:
    """Each draft as ``amlgpu plan`` renders it, read back by azure-ai-ml's ``load_job``."""
    stack = load_stack("test", project)
    values = {k.removeprefix(f"{NS}:"): v for k, v in stack.file.config.items() if k.startswith(f"{NS}:")}
    values["environments"] = [*values.get("environments", []), *(e for d in drafts for e in d.environments)]
    values["jobs"] = [*values.get("jobs", []), *(d.run for d in drafts)]
    config = build(values, location="westeurope", file="Pulumi.test.yaml", root=project)
    names = {d.run["name"] for d in drafts}
    out = project / "build" / "import" / "jobs"
    out.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for run in resolve_all(config, project):
        if run.name in names:
            path = out / f"{run.name}.yml"
            path.write_text(job_yaml(run.spec, code_relative_to=out, root=project))
            jobs[run.name] = _load(path)
    return jobs


def _facets(job: dict[str, Any]) -> dict[str, Any]:
    """What decides what runs: distribution, node count (and shm/docker args when set), command, inputs."""
    resources = job.get("resources") or {}
    return {
        "distribution": job.get("distribution"),
        "instance_count": resources.get("instance_count", 1),
        "command": " ".join(job["command"].split()),
        "inputs": job.get("inputs") or {},
        "environment_variables": job.get("environment_variables") or {},
    }


def _load(path: Path) -> dict[str, Any]:
    """The job azure-ai-ml reads from a file (a ``Command`` node for some files: its job then)."""
    from azure.ai.ml import load_job

    job = load_job(path)
    return (job._to_job() if hasattr(job, "_to_job") else job)._to_dict()


# ------------------------------------------------------------------------------------------ CLI v2

_NONE = {"distribution": {"type": "pytorch", "process_count_per_instance": 1}}
"""What a job without ``distribution`` becomes: the same processes (one per node)."""
_GPU = {"compute": "gpu-cluster"}
CLI_V2 = {
    # job file under imports/ (corpus/: tests/fixtures/azureml-examples) -> (options, what changes on purpose)
    "corpus/cli/jobs/single-step/pytorch/cifar-distributed/job.yml": ({}, {}),
    "corpus/cli/jobs/single-step/tensorflow/mnist-distributed/job.yml": ({}, {}),
    "corpus/cli/jobs/single-step/gpu_perf/gpu_perf_job.yml": (_GPU, {}),
    "corpus/cli/jobs/deepspeed/deepspeed-training/job.yml": (_GPU, {}),
    "cliv2/nebulaml/PyTorch_CNN_MNIST/job.yml": (_GPU, _NONE),
    "corpus/best-practices/largescale-deep-learning/Training/Bert-Pretrain/AML-DeepSpeed-submit.yml": (_GPU, {}),
    "corpus/best-practices/largescale-deep-learning/Training/Bert-Pretrain/AML-submit.yml": (_GPU, {}),
    "corpus/best-practices/largescale-deep-learning/Training/Bloom-Pretrain/src/deepspeed-BLOOM-AML-SDKv2.yaml": (
        _GPU, {}),
    "corpus/best-practices/largescale-deep-learning/Debugging/Compute/health_job.yaml": (_GPU, {}),
}


@pytest.mark.parametrize("fixture", sorted(CLI_V2))
def test_cli_v2_examples_render_to_the_job_azure_ml_would_run(project: Path, fixture: str) -> None:
    options, changed = CLI_V2[fixture]
    drafts = _import(project, fixture, **options)
    assert len(drafts) == 1 and not drafts[0].placeholders
    rendered = _rendered(project, drafts)[drafts[0].run["name"]]
    original = _load(project / "imports" / fixture)
    assert _facets(rendered) == {**_facets(original), **changed}
    for key in ("shm_size", "docker_args"):
        if key in (original.get("resources") or {}):
            assert rendered["resources"][key] == original["resources"][key]
    for key in ("display_name", "experiment_name", "description", "services", "limits", "outputs"):
        assert rendered.get(key) == original.get(key), key
    # The code folder is the original's, now named relative to the project root.
    source = project / "imports" / fixture
    code = yaml.safe_load(source.read_text()).get("code")
    if code is None:
        assert "code" not in drafts[0].run
    else:
        assert (project / drafts[0].run["code"]).resolve() == (source.parent / code).resolve()


def test_an_azureml_reference_to_a_stack_environment_maps_to_its_name(project: Path, tmp_path: Path) -> None:
    job = project / "imports" / "env-ref.yml"
    job.write_text("command: python train.py\ncode: src\nenvironment: azureml:acpt-pytorch:1\n"
                   "compute: azureml:gpu-a100\ndistribution: {type: pytorch, process_count_per_instance: 8}\n"
                   "resources: {instance_count: 2}\n")
    (draft,) = import_files([job], Context(root=project, stack=load_stack("test", project)))
    assert draft.run["environment"] == "acpt-pytorch" and draft.run["compute"] == "gpu-a100"
    assert draft.run["name"] == "env-ref"


def test_inline_and_build_environments_become_stack_environments(project: Path) -> None:
    (health,) = _import(project, "corpus/best-practices/largescale-deep-learning/Debugging/Compute/health_job.yaml",
                        compute="gpu-cluster")
    assert health.environments == [
        {"name": "health_job-env", "version": "1", "image": "mcr.microsoft.com/aznhc/aznhc-nv"}]
    assert health.run["environment"] == "health_job-env"
    (deepspeed,) = _import(project, "corpus/cli/jobs/deepspeed/deepspeed-training/job.yml", compute="gpu-cluster")
    assert deepspeed.environments == [{"name": "deepspeed-training-env", "version": "1",
                                       "build": {"path": "imports/corpus/cli/jobs/deepspeed/deepspeed-training/"
                                                          "docker-context"}}]


def test_template_values_are_left_as_placeholders(project: Path) -> None:
    (draft,) = _import(project, "corpus/cli/jobs/nebulaml/cifar10_deepspeed/job.yml")
    assert sorted((p.key, p.line) for p in draft.placeholders) == [("compute", 18), ("environment", 8)]
    assert "< your environment name >" in draft.placeholders[0].why + draft.placeholders[1].why


def test_local_data_is_left_as_a_placeholder(project: Path) -> None:
    (draft,) = _import(project, "cliv2/single-step/pytorch/word-language-model/job.yml")
    (placeholder,) = draft.placeholders
    assert (placeholder.key, placeholder.line) == ("inputs.corpus.path", 16)
    assert draft.run["inputs"]["corpus"]["path"].startswith(PLACEHOLDER_MARK)
    assert "az ml data create" in placeholder.fix


# ------------------------------------------------------------------------------------------ SDK v1

_GUIDE_ENV = "azureml:AzureML-PyTorch-1.6-GPU@latest"
_TF_ENV = "azureml:AzureML-TensorFlow-2.3-GPU@latest"
V1 = {
    # fixture -> (options, the v2 job the guide's v1 configuration runs)
    "mpi_per_process.py": ({}, {
        "command": "python train.py", "environment": _GUIDE_ENV,
        "distribution": {"type": "mpi", "process_count_per_instance": 4}, "resources": {"instance_count": 2}}),
    "mpi_per_node.py": ({}, {
        "command": "python train.py --node-rank $OMPI_COMM_WORLD_RANK --gpus-per-node 4",
        "environment": "azureml:AzureML-PyTorch-1.6-GPU:3",
        "distribution": {"type": "mpi", "process_count_per_instance": 1}, "resources": {"instance_count": 2}}),
    "pytorch_per_process.py": ({}, {  # process_count=8 is the total over node_count=2
        "command": "python train.py --epochs 50", "environment": _GUIDE_ENV,
        "distribution": {"type": "pytorch", "process_count_per_instance": 4}, "resources": {"instance_count": 2}}),
    "pytorch_launch_per_node.py": ({}, {
        "command": "python -m torch.distributed.launch --nproc_per_node 4 --nnodes 2 --node_rank $NODE_RANK "
                   "--master_addr $MASTER_ADDR --master_port $MASTER_PORT --use_env train.py --epochs 50",
        "environment": _GUIDE_ENV,
        "distribution": {"type": "pytorch", "process_count_per_instance": 1}, "resources": {"instance_count": 2}}),
    "lightning_mpi.py": ({}, {
        "command": "python train.py --max_epochs 50 --gpus_per_node 4 --accelerator ddp --num_nodes 2",
        "environment": _GUIDE_ENV,
        "distribution": {"type": "mpi", "process_count_per_instance": 4}, "resources": {"instance_count": 2}}),
    "huggingface_launch.py": ({}, {
        "command": "python -m torch.distributed.launch --nproc_per_node 8 text-classification/run_glue.py "
                   "--model_name_or_path bert-large-uncased-whole-word-masking --task_name mnli --do_train --do_eval "
                   "--max_seq_length 128 --per_device_train_batch_size 8 --learning_rate 2e-5 --num_train_epochs 3.0 "
                   "--output_dir /tmp/mnli_output",
        "environment": _GUIDE_ENV,
        "distribution": {"type": "pytorch", "process_count_per_instance": 1}, "resources": {"instance_count": 1}}),
    "tensorflow_multiworker.py": ({}, {
        "command": "python train.py", "environment": _TF_ENV,
        "distribution": {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 0},
        "resources": {"instance_count": 2}}),
    "tensorflow_parameter_server.py": ({}, {
        "command": "python train.py", "environment": _TF_ENV,
        "distribution": {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1},
        "resources": {"instance_count": 2}}),
    "horovod/job.py": ({"compute": "gpu-cluster"}, {
        "command": "python train.py --epochs 30", "environment": "azureml:tf-gpu-horovod-example:1",
        "distribution": {"type": "mpi", "process_count_per_instance": 2}, "resources": {"instance_count": 2}}),
    "deepspeed/cifar/job.py": ({"compute": "gpu-cluster"}, {
        "command": "python train.py --deepspeed --deepspeed_config ds_config.json --deepspeed_mpi --global_rank "
                   "$AZ_BATCHAI_TASK_INDEX --with_aml_log True",
        "environment": "azureml:deepspeed-transformers:1",
        "distribution": {"type": "mpi", "process_count_per_instance": 2}, "resources": {"instance_count": 2}}),
}


@pytest.mark.parametrize("fixture", sorted(V1))
def test_sdk_v1_guide_examples_render_to_the_v2_job_of_the_same_configuration(
        project: Path, fixture: str, tmp_path: Path) -> None:
    options, expected = V1[fixture]
    drafts = _import(project, f"v1/{fixture}", **options)
    assert len(drafts) == 1 and not drafts[0].placeholders, drafts[0].placeholders
    rendered = _rendered(project, drafts)[drafts[0].run["name"]]
    # The oracle: azure-ai-ml reading the v2 job file that runs what the v1 configuration ran.
    code = (project / "imports" / "v1" / fixture).parent / "src"
    expected_file = tmp_path / "expected.yml"
    expected_file.write_text(yaml.safe_dump({"type": "command", "code": str(code), "compute": "azureml:gpu-cluster",
                                             **expected}))
    assert _facets(rendered) == _facets(_load(expected_file))
    assert rendered["environment"] == expected["environment"]
    assert (project / drafts[0].run["code"]).resolve() == code.resolve()


def test_the_v1_examples_datasets_and_environments_follow_their_calls(project: Path) -> None:
    (horovod,) = _import(project, "v1/horovod/job.py", compute="gpu-cluster")
    assert horovod.environments == [{
        "name": "tf-gpu-horovod-example", "version": "1",
        "image": "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.1-cudnn8-ubuntu20.04",
        "conda_file": "imports/v1/horovod/environment.yml"}]
    assert horovod.run["experiment_name"] == "tf-mnist-distributed-horovod-example"
    (deepspeed,) = _import(project, "v1/deepspeed/cifar/job.py", compute="gpu-cluster")
    assert deepspeed.environments[0]["build"] == {"path": "imports/v1/deepspeed", "dockerfile_path": "dockerfile"}
    assert any("AZ_BATCHAI" in note for note in deepspeed.notes)


def test_a_dataset_uploaded_at_run_time_is_a_placeholder_input(project: Path) -> None:
    (draft,) = _import(project, "v1/cifar_distributed_job.py", compute="gpu-cluster")
    (placeholder,) = draft.placeholders
    assert (placeholder.key, placeholder.line) == ("inputs.data_dir.path", 62)
    assert "Dataset.File.upload_directory" in placeholder.why
    assert draft.run["command"] == "python train.py --data-dir ${{inputs.data_dir}} --epochs 25"
    assert draft.run["inputs"]["data_dir"]["mode"] == "download"
    assert draft.run["distribution"] == {"type": "pytorch", "process_count_per_instance": 2}


def test_a_registered_dataset_becomes_a_data_asset_input(project: Path) -> None:
    script = project / "imports" / "dataset.py"
    script.write_text(textwrap.dedent("""\
        from azureml.core import Dataset, ScriptRunConfig, Environment
        ds = Dataset.get_by_name(ws, name="cifar", version=3)
        src = ScriptRunConfig(source_directory="src", script="train.py",
                              arguments=["--data", ds.as_named_input("cifar10").as_mount(), "--flag"],
                              compute_target="gpu-a100", environment=Environment.get(ws, "acpt-pytorch", version="1"),
                              max_run_duration_seconds=3600)
        """))
    (draft,) = import_files([script], Context(root=project, stack=load_stack("test", project)))
    assert draft.run["inputs"] == {"cifar10": {"type": "uri_folder", "path": "azureml:cifar:3", "mode": "ro_mount"}}
    assert draft.run["command"] == "python train.py --data ${{inputs.cifar10}} --flag"
    assert draft.run["environment"] == "acpt-pytorch"  # the stack's environment of that name and version
    assert draft.run["limits"] == {"timeout": 3600}
    assert any("once, on one node" in note for note in draft.notes)


# ------------------------------------------------------------------------------------------ SDK v2


def test_sdk_v2_command_renders_to_the_job_azure_ai_ml_builds(project: Path) -> None:
    from azure.ai.ml import TensorFlowDistribution, command

    (draft,) = _import(project, "v2/tensorflow_mnist_distributed.py", compute="gpu-cluster")
    assert not draft.placeholders
    rendered = _rendered(project, [draft])[draft.run["name"]]
    # The same keyword arguments, given to azure-ai-ml itself.
    job = command(code=str(project / "imports" / "v2" / "src"),
                  command="python main.py --epochs ${{inputs.epochs}} --model-dir ${{inputs.model_dir}}",
                  inputs={"epochs": 1, "model_dir": "outputs/keras-model"},
                  environment="AzureML-tensorflow-2.16-cuda12@latest", compute="gpu-cluster", instance_count=2,
                  display_name="tensorflow-mnist-distributed-example")
    job.distribution = TensorFlowDistribution(worker_count=2)
    expected = job._to_job()._to_dict()
    assert _facets(rendered) == {**_facets(expected), "distribution": {
        **expected["distribution"], "parameter_server_count": 0}}  # azure-ai-ml's default, written out
    assert rendered["environment"] == "azureml:AzureML-tensorflow-2.16-cuda12@latest"


def test_sdk_v2_values_known_only_at_run_time_are_placeholders(project: Path) -> None:
    (draft,) = _import(project, "v2/pytorch_cifar_distributed.py")
    assert sorted((p.key, p.line) for p in draft.placeholders) == [("compute", 26), ("inputs.cifar.path", 13)]
    # `job.resources = ResourceConfiguration(instance_type=..., instance_count=2)`: the node count is kept, the
    # serverless VM size is the cluster's to decide, and the entry says so.
    assert draft.run["resources"] == {"instance_count": 2}
    assert any("instance_type 'STANDARD_NC4AS_T4_V3' dropped" in note for note in draft.notes)
    assert draft.run["distribution"] == {"type": "pytorch", "process_count_per_instance": 1}


# ------------------------------------------------------------------------------------------ bad input

BAD_SCRIPTS = {
    "process-count-not-divisible": (
        "from azureml.core.runconfig import PyTorchConfiguration\nfrom azureml.core import ScriptRunConfig\n"
        "d = PyTorchConfiguration(process_count=6, node_count=4)\n"
        "ScriptRunConfig(source_directory='src', script='train.py', compute_target='gpu-a100',"
        " distributed_job_config=d)\n", 3, "6 does not divide into 4 nodes"),
    "no-run-config": ("import os\nprint(os.getcwd())\n", None, "no ScriptRunConfig"),
    "spread-arguments": ("from azureml.core import ScriptRunConfig\noptions = {}\nScriptRunConfig(**options)\n", 3,
                         "write them out as keyword arguments"),
    "in-a-function": ("from azureml.core import ScriptRunConfig\n\ndef build(ws):\n"
                      "    return ScriptRunConfig(source_directory='src', script='train.py')\n", 4,
                      "move the call to the module level"),
    "estimator": ("from azureml.train.dnn import PyTorch\nest = PyTorch(source_directory='.')\n", None,
                  "rewrite the estimator as a ScriptRunConfig"),
    "not-python": ("ScriptRunConfig(\n", 1, "not Python"),
    "script-and-command": (
        "from azureml.core import ScriptRunConfig\nScriptRunConfig(source_directory='src', script='a.py', "
        "command=['ls'])\n", 2, "both script and command"),
    "code-outside-the-project": (
        "from azureml.core import ScriptRunConfig\nScriptRunConfig(source_directory='/etc', script='a.py', "
        "compute_target='gpu-a100')\n", 2, "outside the project"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCRIPTS))
def test_bad_scripts_exit_2_with_file_and_line(project: Path, case: str, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    text, line, message = BAD_SCRIPTS[case]
    script = project / "imports" / f"{case}.py"
    script.write_text(text)
    monkeypatch.chdir(project)
    assert main(["import", str(script.relative_to(project)), "--stack", "test"]) == 2
    err = capsys.readouterr().err
    assert f"imports/{case}.py" in err and message in err and "Traceback" not in err
    if line:
        assert f"line {line}" in err


BAD_JOBS = {
    "empty-pipeline": ("type: pipeline\njobs: {}\n", "a pipeline job without steps"),
    "parallel": ("type: parallel\ncompute: gpu-a100\n", "a parallel job: amlgpu imports command, pipeline and sweep"),
    "component": ("$schema: https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json\n"
                  "type: command\ncommand: echo\n", "a component"),
    "no-command": ("code: src\nenvironment: azureml:x:1\n", "no 'command' key"),
    "not-a-mapping": ("- a\n- b\n", "not a job file"),
    "broken-yaml": ("command: [unclosed\n", "invalid YAML"),
    "name-collision": ("name: ddp-train\ncommand: python train.py\ncode: src\nenvironment: azureml:acpt-pytorch:1\n"
                       "compute: gpu-a100\n", "'ddp-train' is already declared in Pulumi.test.yaml"),
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_bad_job_files_exit_2_naming_the_file(project: Path, case: str, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    text, message = BAD_JOBS[case]
    (project / "imports" / f"{case}.yml").write_text(text)
    monkeypatch.chdir(project)
    assert main(["import", f"imports/{case}.yml", "--stack", "test"]) == 2
    err = capsys.readouterr().err
    assert f"imports/{case}.yml" in err and message in err and "Traceback" not in err


def test_two_imported_runs_of_one_name_are_a_collision(project: Path) -> None:
    job = "corpus/cli/jobs/single-step/pytorch/cifar-distributed/job.yml"
    ctx = Context(root=project, stack=load_stack("test", project))
    with pytest.raises(ImportInputError, match="also imported from"):
        import_files([project / "imports" / job, project / "imports" / job], ctx)


def test_flags_that_name_nothing_in_the_stack_are_bad_input(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    job = "imports/corpus/cli/jobs/single-step/pytorch/cifar-distributed/job.yml"
    assert main(["import", job, "--stack", "test", "--compute", "nope"]) == 2
    assert "--compute 'nope' is not a cluster of stack 'test'" in capsys.readouterr().err
    assert main(["import", job, "--write"]) == 2
    assert "--write appends to a stack file" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ output


def test_stdout_is_stack_yaml_with_origin_comments_and_exit_1_for_placeholders(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    code = main(["import", "imports/v1/pytorch_per_process.py", "imports/v1/cifar_distributed_job.py",
                 "--stack", "test"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "# imported from imports/v1/pytorch_per_process.py:14 (SDK v1 ScriptRunConfig)" in out
    assert "imports/v1/cifar_distributed_job.py:62: left for you: inputs.data_dir.path" in err
    document = yaml.safe_load(out)
    assert [r["name"] for r in document[f"{NS}:jobs"]] == ["pytorch_per_process", "cifar_distributed_job"]


def test_write_appends_keeping_the_stack_file_and_plans(tmp_path: Path, project: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p", dev_config())
    shutil.copy(Path(__file__).parents[2] / "Pulumi.dev.yaml", root / "Pulumi.test.yaml")  # with its comments
    shutil.copytree(project / "imports" / "v1" / "horovod", root / "horovod")
    before = (root / "Pulumi.test.yaml").read_text()
    monkeypatch.chdir(root)
    code = main(["import", "horovod/job.py", "--stack", "test", "--compute", "gpu-a100", "--write"])
    out, err = capsys.readouterr()
    after = (root / "Pulumi.test.yaml").read_text()
    # Every original line is still there, in order, unchanged; the new lines are the imported entries.
    import difflib

    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    assert not [line for line in diff if line.startswith("- ")]
    added = [line[2:] for line in diff if line.startswith("+ ")]
    assert "    # imported from horovod/job.py:59 (SDK v1 ScriptRunConfig)" in added
    assert "    - name: tf-gpu-horovod-example" in added
    # The comment introducing the jobs stays right above the jobs key.
    lines = after.splitlines()
    jobs_at = lines.index(f"  {NS}:jobs:")
    assert lines[jobs_at - 2].lstrip().startswith("# Declared runs (CLI v2 commandJob keys)")
    # ... and the plan ran on the stack with the new run.
    assert code in (0, 1) and "Appended 1 run(s) to Pulumi.test.yaml: horovod" in err
    assert (root / "build" / "test" / "jobs" / "horovod.yml").is_file()
    assert "horovod" in out


def test_write_refuses_placeholders_and_leaves_the_stack_file(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    before = (project / "Pulumi.test.yaml").read_bytes()
    assert main(["import", "imports/v1/cifar_distributed_job.py", "--stack", "test", "--compute", "gpu-cluster",
                 "--write"]) == 1
    assert "nothing written" in capsys.readouterr().err
    assert (project / "Pulumi.test.yaml").read_bytes() == before


def test_appending_to_a_stack_without_jobs_creates_the_key(project: Path, tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("# my stack\nconfig:\n  azure-native:location: westeurope  # region\n")
    (draft,) = _import(project, "v1/mpi_per_process.py")
    text = append_to_stack(stack, [draft])
    assert text.startswith("# my stack\nconfig:\n  azure-native:location: westeurope  # region\n")
    assert yaml.safe_load(text)["config"][f"{NS}:jobs"][0]["name"] == "mpi_per_process"
    assert yaml.safe_load(render([draft]))[f"{NS}:jobs"] == [draft.run]


# ------------------------------------------------------------------------------------------ reading scripts

STATIC = {
    "literal": ("x = 2\n", "x", 2),
    "followed": ("n = 2\ng = 4\nx = ['--n', n, '--g', g * n]\n", "x", ["--n", 2, "--g", 8]),
    "split": ("x = 'a b  c'.split()\n", "x", ["a", "b", "c"]),
    "fstring": ("n = 3\nx = f'--nodes {n}'\n", "x", "--nodes 3"),
    "path": ("from pathlib import Path\nx = str(Path(__file__).parent.joinpath('src'))\n", "x", "/p/src"),
    "os-path-join": ("import os\nx = os.path.join('./outputs', 'model')\n", "x", "./outputs/model"),
    "augmented": ("x = ['a']\nx += ['b']\nx.append('c')\n", "x", ["a", "b", "c"]),
    "branch": ("import sys\nif sys.argv:\n    x = 1\n", "x", Unknown),
    "runtime": ("import os\nx = os.environ['N']\n", "x", Unknown),
    "main-guard": ("if __name__ == '__main__':\n    x = 5\n", "x", 5),
}


@pytest.mark.parametrize("case", sorted(STATIC))
def test_module_values_are_followed_statically(case: str) -> None:
    text, name, expected = STATIC[case]
    value = evaluate(text, "/p/job.py").names.get(name)
    if expected is Unknown:
        assert isinstance(value, Unknown) and value.line >= 1
    else:
        assert (value.path if isinstance(value, PathValue) else value) == expected


def test_scripts_are_never_executed(project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = project / "imports" / "side-effect.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('x')\nfrom azureml.core import ScriptRunConfig\n"
                      "ScriptRunConfig(source_directory='src', script='train.py', compute_target='gpu-a100')\n")
    import_files([script], Context(root=project))
    assert not marker.exists()


def test_what_the_stack_model_refuses_is_bad_input_at_its_line(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (project / "imports" / "refused.yml").write_text(
        "command: python train.py\ncode: src\nenvironment: azureml:acpt-pytorch:1\ncompute: gpu-a100\n"
        "resources:\n  instance_count: 0\n")
    monkeypatch.chdir(project)
    assert main(["import", "imports/refused.yml", "--stack", "test"]) == 2
    err = capsys.readouterr().err
    assert "imports/refused.yml: line 5:" in err and "instance_count" in err and "Traceback" not in err


def test_every_example_imports_and_plans_in_one_stack(project: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "copy"
    shutil.copytree(project, root, symlinks=True)
    sources = [f"imports/v1/{f}" for f in V1] + [f"imports/{f}" for f in CLI_V2] + [
        "imports/v2/tensorflow_mnist_distributed.py"]
    monkeypatch.chdir(root)
    code = main(["import", *sources, "--stack", "test", "--compute", "gpu-cluster", "--write"])
    err = capsys.readouterr().err
    assert code in (0, 1), err  # the plan's verdict: the examples keep their settings (e.g. 1 process per 8 GPUs)
    written = {p.stem for p in (root / "build" / "test" / "jobs").glob("*.yml")}
    imported = {str(r["name"]) for r in yaml.safe_load((root / "Pulumi.test.yaml").read_text())["config"][
        f"{NS}:jobs"]}
    assert len(imported) == len(dev_config()[f"{NS}:jobs"]) + len(sources)
    assert imported <= written
