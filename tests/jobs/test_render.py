"""Job files: built by azure-ai-ml, reloaded by ``load_job`` to the same job, equal to the exported spec."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.launchers import LAUNCHERS
from jobs.render import SCHEMA_COMMENT, build_job, job_yaml
from jobs.resolve import resolve_all
from stack import stackfile
from stack.config import build, from_stackfile
from stack.resolved import ResolvedRun
from tests.conftest import NS, ROOT, dev_config

FIXTURES = Path(__file__).parents[1] / "fixtures"
# azure-ai-ml's schemas use marshmallow APIs that warn on import and on every load.
pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        plain = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in plain.items() if v != {}}
    return value


def reloads_to_the_same_job(path: Path, spec: dict[str, Any], root: Path) -> None:
    """``load_job`` gives the job azure-ai-ml builds from the spec: same serialisation, same code folder."""
    from azure.ai.ml import load_job

    original = build_job(spec, root=root)
    node = load_job(path)
    reloaded = node._to_job()
    # `code` is serialised relative to the working directory; compare the folders it names instead.
    assert (Path(node.base_path) / node.code).resolve() == Path(original.code).resolve()
    mine, theirs = _plain(original._to_dict()), _plain(reloaded._to_dict())
    mine.pop("code")
    theirs.pop("code")
    # The file has no name (Azure ML names each submission); everything else is the same job.
    mine.pop("name")
    theirs.pop("name", None)
    assert theirs == mine


def shipped_runs(stack: str) -> list[ResolvedRun]:
    config = from_stackfile(stackfile.read(ROOT / f"Pulumi.{stack}.yaml"), ROOT)
    return resolve_all(config, ROOT)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[ResolvedRun, Path]]:
    """Every run of the shipped stacks, written as `amlgpu plan` writes them: <out>/jobs/<name>.yml."""
    files = {}
    for stack in ("dev", "prod"):
        jobs = tmp_path_factory.mktemp(stack) / "jobs"
        jobs.mkdir()
        for run in shipped_runs(stack):
            path = jobs / f"{run.name}.yml"
            path.write_text(job_yaml(run.spec, code_relative_to=jobs, root=ROOT))
            files[f"{stack}/{run.name}"] = (run, path)
    return files


def test_the_shipped_stacks_show_every_launch_style(written: dict[str, tuple[ResolvedRun, Path]]) -> None:
    assert {k.split("/")[0] for k in written} == {"dev", "prod"}
    shown = {run.launcher for run, _ in written.values()}
    # Not shipped: torch.distributed.launch is deprecated in favour of torchrun, and parameter-server
    # training is what the policy pack advises against on GPUs (docs/jobs.md).
    assert shown == set(LAUNCHERS) - {"torch.distributed.launch", "tf-parameter-server"}


def test_every_shipped_run_reloads_to_an_equal_job(written: dict[str, tuple[ResolvedRun, Path]]) -> None:
    for run, path in written.values():
        reloads_to_the_same_job(path, run.spec, ROOT)


def test_every_job_file_is_the_spec_with_code_relative_to_the_file(
    written: dict[str, tuple[ResolvedRun, Path]],
) -> None:
    for run, path in written.values():
        text = path.read_text()
        assert text.startswith(SCHEMA_COMMENT)
        document = yaml.safe_load(text)
        assert "name" not in document
        assert {**document, "code": run.spec["code"], "name": run.spec["name"]} == run.spec
        assert (path.parent / document["code"]).resolve() == (ROOT / run.spec["code"]).resolve()
        assert not Path(document["code"]).is_absolute()


def test_rendering_is_byte_identical_and_independent_of_the_checkout(tmp_path: Path) -> None:
    run = shipped_runs("prod")[0]
    copies = []
    for name in ("a", "b"):
        root = tmp_path / name / "checkout"
        shutil.copytree(ROOT / "jobs" / "workloads", root / "jobs" / "workloads")
        copies.append(job_yaml(run.spec, code_relative_to=root / "build" / "prod" / "jobs", root=root))
    assert copies[0] == copies[1]
    again = job_yaml(run.spec, code_relative_to=tmp_path / "a" / "checkout" / "build" / "prod" / "jobs",
                     root=tmp_path / "a" / "checkout")
    assert again.encode() == copies[0].encode()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('train')\n")
    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    return tmp_path


def _stack_runs(project: Path, jobs: list[dict[str, Any]], clusters: list[dict[str, Any]] | None = None) -> list[Any]:
    config = {k.removeprefix(f"{NS}:"): v for k, v in dev_config().items() if k.startswith(f"{NS}:")}
    config["jobs"] = jobs
    if clusters:
        config["clusters"] = clusters
    return resolve_all(build(config, location="westeurope", file="Pulumi.test.yaml", root=project), project)


def _render_and_reload(project: Path, run: ResolvedRun) -> dict[str, Any]:
    out = project / "build" / "test" / "jobs"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{run.name}.yml"
    path.write_text(job_yaml(run.spec, code_relative_to=out, root=project))
    reloads_to_the_same_job(path, run.spec, project)
    document = yaml.safe_load(path.read_text())
    assert "name" not in document  # a job name is usable once per workspace: files leave it to Azure ML
    assert {**document, "code": run.spec["code"], "name": run.spec["name"]} == run.spec
    return document


EXAMPLES = yaml.safe_load((FIXTURES / "azure_example_runs.yaml").read_text())


def _leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    return [(path, value)]


def _at(document: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


@pytest.mark.parametrize("declared", EXAMPLES["jobs"], ids=[j["name"] for j in EXAMPLES["jobs"]])
def test_azure_public_examples_render_with_every_declared_setting(project: Path, declared: dict[str, Any]) -> None:
    (run,) = _stack_runs(project, [declared], EXAMPLES["clusters"])
    document = _render_and_reload(project, run)
    for path, value in _leaves(declared):
        if path == ("code",):
            assert (project / "build" / "test" / "jobs" / document["code"]).resolve() == (project / value).resolve()
        elif path == ("name",):
            assert "name" not in document  # Azure ML names each submission of the file
        else:
            assert _at(document, path) == value, path


LONG = "python train.py \\\n  --epochs 3\nrm -rf /tmp/cache && echo 'done: ${{outputs.model}}'"


@pytest.mark.parametrize(
    "fields",
    [
        {"inputs": {"data": {"type": "uri_folder", "path": "wasbs://data@acct.blob.core.windows.net/cifar/"},
                    "table": {"type": "mltable", "path": "azureml:cifar-table:2", "mode": "eval_mount"},
                    "file": {"type": "uri_file", "path": "abfss://fs@acct.dfs.core.windows.net/a.csv",
                             "mode": "download"},
                    "store": {"path": "azureml://datastores/workspaceblobstore/paths/cifar/", "mode": "ro_mount"},
                    "lr": 0.001, "steps": 10, "name": "run-1"},
         "command": "python train.py ${{inputs.data}} ${{inputs.table}} ${{inputs.file}} ${{inputs.store}}"},
        {"outputs": {"model": {"type": "mlflow_model", "mode": "upload"},
                     "logs": {"path": "azureml://datastores/workspaceblobstore/paths/logs/", "mode": "rw_mount"}},
         "command": LONG},
        {"identity": {"type": "user_identity"}},
        {"identity": {"type": "aml_token"}},
        {"identity": {"type": "managed", "object_id": "00000000-0000-0000-0000-0000000000bb"}},
        {"services": {"jl": {"type": "jupyter_lab", "port": 8888, "properties": {"a": "b"}},
                      "ssh": {"type": "ssh", "ssh_public_keys": "ssh-rsa AAAA x"}}},
        {"queue_settings": {"job_tier": "spot", "priority": "low"}, "limits": {"timeout": 60}},
        {"distribution": {"type": "tensorflow", "worker_count": 1, "parameter_server_count": 1},
         "resources": {"instance_count": 2, "docker_args": "--ipc=host --ulimit memlock=-1"}},
        {"distribution": {"type": "mpi"}, "environment": "azureml://registries/azureml/environments/x/versions/3"},
        {"code": ".", "tags": {"k": "v", "empty": ""}, "environment_variables": {"A": "", "B": "x y"}},
    ],
    ids=["data-inputs", "outputs-multiline", "user-identity", "aml-token", "managed-object-id", "services",
         "queue-limits", "tensorflow-ps", "mpi-registry-env", "root-code-empty-strings"],
)
def test_every_kind_of_setting_round_trips(project: Path, fields: dict[str, Any]) -> None:
    declared = {"name": "r", "code": "src", "command": "python train.py", "environment": "acpt-pytorch",
                "compute": "gpu-a100", "distribution": {"type": "pytorch"}, **fields}
    (run,) = _stack_runs(project, [declared])
    _render_and_reload(project, run)


def test_urls_are_written_as_declared_not_as_asset_names(project: Path) -> None:
    url = "https://azuremlexamples.blob.core.windows.net/datasets/cifar-10-python.tar.gz"
    (run,) = _stack_runs(project, [{
        "name": "r", "code": "src", "command": "python train.py ${{inputs.cifar}}", "environment": "acpt-pytorch",
        "compute": "gpu-a100", "distribution": {"type": "pytorch"},
        "inputs": {"cifar": {"type": "uri_file", "path": url}}}])
    text = job_yaml(run.spec, code_relative_to=project, root=project)
    assert f"path: {url}\n" in text
    assert "azureml:https" not in text


def test_multi_line_commands_are_literal_blocks(project: Path) -> None:
    (run,) = _stack_runs(project, [{
        "name": "r", "code": "src", "command": "nvidia-smi\npython train.py", "environment": "acpt-pytorch",
        "compute": "gpu-a100", "distribution": {"type": "pytorch"}}])
    text = job_yaml(run.spec, code_relative_to=project, root=project)
    assert "command: |-\n  nvidia-smi\n  python train.py\n" in text


def test_a_spec_key_without_a_place_in_the_job_is_refused(project: Path) -> None:
    with pytest.raises(ValueError, match="have no place"):
        build_job({"type": "command", "name": "r", "code": "src", "command": "x", "environment": "azureml:e:1",
                   "compute": "azureml:c", "resources": {"instance_count": 1}, "distribution": {"type": "mpi"},
                   "retries": 3}, root=project)


def test_a_file_environment_keeps_its_tags(project: Path) -> None:
    (project / "envs").mkdir()
    (project / "envs" / "train.yml").write_text(
        "$schema: https://azuremlschemas.azureedge.net/latest/environment.schema.json\n"
        "name: train-env\nimage: mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:20\n"
        "tags:\n  team: vision\n  os: ubuntu22.04\n")
    (run,) = _stack_runs(project, [{
        "name": "r", "code": "src", "command": "python train.py", "environment": "file:envs/train.yml",
        "compute": "gpu-a100", "distribution": {"type": "pytorch"}}])
    assert run.spec["environment"]["tags"] == {"team": "vision", "os": "ubuntu22.04"}
    path = project / "r.yml"
    path.write_text(job_yaml(run.spec, code_relative_to=project, root=project))
    reloads_to_the_same_job(path, run.spec, project)  # load_job keeps them: the job Azure ML gets has them
    assert yaml.safe_load(path.read_text())["environment"]["tags"] == {"team": "vision", "os": "ubuntu22.04"}
