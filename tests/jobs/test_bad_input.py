"""Bad run declarations: each one is an error naming the file and the exact key, exit 2, no traceback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from kernel.errors import ConfigError
from stack.config import build
from tests.conftest import NS, ROOT, dev_config, make_project

RUN = {"name": "r", "code": "jobs/workloads", "command": "python train_ddp.py", "environment": "acpt-pytorch",
       "compute": "gpu-a100", "distribution": {"type": "pytorch"}}


def run(**changes: Any) -> dict[str, Any]:
    declared = copy.deepcopy(RUN)
    declared.update(changes)
    return {k: v for k, v in declared.items() if v is not None}


CASES: list[tuple[str, list[dict[str, Any]], str, str]] = [
    ("unknown cluster", [run(compute="gpu-a10")], "jobs[0].compute",
     "unknown cluster 'gpu-a10'; did you mean 'gpu-a100'"),
    ("unknown environment", [run(environment="acpt")], "jobs[0].environment", "unknown environment 'acpt'"),
    ("undeclared placeholder", [run(command="python t.py ${{inputs.data}} --out ${{outputs.model}}")],
     "jobs[0].command", "${{inputs.data}}, ${{outputs.model}} has no declared input/output"),
    ("count as a string", [run(resources={"instance_count": "2"})], "jobs[0].resources.instance_count",
     "expected a whole number"),
    ("fractional count", [run(distribution={"type": "pytorch", "process_count_per_instance": 1.5})],
     "jobs[0].distribution.process_count_per_instance", "expected a whole number"),
    ("boolean count", [run(resources={"instance_count": True})], "jobs[0].resources.instance_count",
     "expected a whole number"),
    ("negative nodes", [run(resources={"instance_count": -1})], "jobs[0].resources.instance_count",
     "must be at least 1"),
    ("zero processes", [run(distribution={"type": "mpi", "process_count_per_instance": 0})],
     "jobs[0].distribution.process_count_per_instance", "must be at least 1"),
    ("no workers", [run(distribution={"type": "tensorflow", "worker_count": 0})],
     "jobs[0].distribution.worker_count", "must be at least 1"),
    ("negative parameter servers", [run(distribution={"type": "tensorflow", "parameter_server_count": -1})],
     "jobs[0].distribution.parameter_server_count", "must be at least 0"),
    ("missing command", [run(command=None)], "jobs[0].command", "required key is missing"),
    ("blank command", [run(command="   ")], "jobs[0].command", "command is empty"),
    ("missing code folder", [run(code="jobs/missing")], "jobs[0].code", "does not exist under the project root"),
    ("code outside the project", [run(code="../elsewhere")], "jobs[0].code", "inside the project"),
    ("absolute code folder", [run(code="/etc")], "jobs[0].code", "inside the project"),
    ("unknown distribution type", [run(distribution={"type": "ray"})], "jobs[0].distribution",
     "type must be one of 'pytorch', 'mpi', 'tensorflow' (got \"ray\")"),
    ("no distribution", [run(distribution=None)], "jobs[0].distribution",
     "distribution is required: without it Azure ML runs the command once on each node"),
    ("duplicate names", [run(), run(name="R")], "jobs[1].name", "duplicate name 'R'"),
    ("missing environment file", [run(environment="file:envs/missing.yml")], "jobs[0].environment",
     "environment file 'envs/missing.yml' not found"),
    ("environment file outside the project", [run(environment="file:../env.yml")], "jobs[0].environment",
     "must be inside the project"),
    ("inline environment without a source", [run(environment={"conda_file": "c.yml"})], "jobs[0].environment",
     "exactly one of image or build"),
    ("inline build without a Dockerfile", [run(environment={"build": {"path": "nowhere"}})], "jobs[0].environment",
     "no Dockerfile in build folder 'nowhere'"),
    ("bad azureml reference", [run(environment="azureml:a:b:c")], "jobs[0].environment", "is not a reference"),
    ("local data path", [run(inputs={"data": {"path": "./data"}})], "jobs[0].inputs.data.path",
     "register local data as a data asset"),
    ("input description", [run(inputs={"data": {"path": "azureml:cifar:1", "description": "d"}})],
     "jobs[0].inputs.data.description", "unknown key 'description'"),
    ("identity ids for a user identity", [run(identity={"type": "user_identity", "client_id": "x"})],
     "jobs[0].identity", "select a managed identity"),
    ("service key of another type", [run(services={"x": {"type": "vs_code", "log_dir": "logs"}})],
     "jobs[0].services.x", "log_dir is for type 'tensor_board'"),
    ("misspelt key", [run(comand="python x.py")], "jobs[0].comand", "did you mean 'command'"),
    ("bad shm_size", [run(resources={"shm_size": "16GB"})], "jobs[0].resources.shm_size", "<number><b|k|m|g>"),
    ("zero timeout", [run(limits={"timeout": 0})], "jobs[0].limits.timeout", "must be at least 1"),
    ("bad run name", [run(name="1st-run")], "jobs[0].name", "run name '1st-run' is invalid"),
]


@pytest.mark.parametrize(("jobs", "key", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_run_names_its_key(jobs: list[dict[str, Any]], key: str, message: str) -> None:
    config = {k.removeprefix(f"{NS}:"): v for k, v in dev_config().items() if k.startswith(f"{NS}:")}
    with pytest.raises(ConfigError) as caught:
        build({**config, "jobs": jobs}, location="westeurope", file="Pulumi.dev.yaml", root=ROOT)
    assert caught.value.file == "Pulumi.dev.yaml"
    assert caught.value.key == f"{NS}:{key}"
    assert message in caught.value.message
    assert caught.value.exit_code == 2


def test_the_cli_reports_a_bad_run_with_its_position_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_config()
    config[f"{NS}:jobs"] = [run(compute="gpu-h100")]
    project = make_project(tmp_path / "project", config)
    monkeypatch.chdir(project)
    assert main(["submit", "r", "--stack", "test", "--dry-run"]) == 2
    err = capsys.readouterr().err
    lines = (project / "Pulumi.test.yaml").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.strip() == "compute: gpu-h100")
    column = lines[line - 1].index("compute") + 1
    assert err == (f"Pulumi.test.yaml:{line}:{column}  aml-gpu-training:jobs[0].compute  run 'r': unknown cluster "
                   "'gpu-h100'; did you mean 'gpu-a100'?\nerror: 1 problem in Pulumi.test.yaml\n")
