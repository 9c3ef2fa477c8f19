"""Everything CLI v2 accepts for a distributed command job can be declared, and renders to what azure-ai-ml
itself makes of the same YAML: inline / ``file:`` / curated / registry environments, boolean inputs,
``$[[...]]`` optional segments, runs without ``code``, environments without ``version``."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.render import job_yaml
from jobs.resolve import resolve_run
from kernel.errors import ConfigError
from tests.conftest import ROOT
from tests.jobs.test_resolve import declared, stack

IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20250701.v1"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('training')\n")
    (tmp_path / "envs" / "ds").mkdir(parents=True)
    (tmp_path / "envs" / "ds" / "Dockerfile").write_text(f"FROM {IMAGE}\nRUN pip install deepspeed==0.12.6 mpi4py\n")
    (tmp_path / "envs" / "ds" / "env.yml").write_text("name: ds\nversion: openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04\n"
                                                      "build:\n  path: .\n")
    shutil.copytree(ROOT / "environments", tmp_path / "environments")  # the stack's build contexts
    (tmp_path / "envs" / "conda.yml").write_text("name: t\ndependencies:\n  - python=3.10\n  - pip:\n    - horovod\n")
    return tmp_path


def _load(path: Path) -> dict[str, Any]:
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_job(path)._to_dict()


def _render_and_reload(root: Path, **fields: Any) -> tuple[Any, dict[str, Any]]:
    config = stack(root, [declared(**fields)])
    run = resolve_run(config.jobs[0], config, root)
    out = root / "out"
    out.mkdir(exist_ok=True)
    (out / "job.yml").write_text(job_yaml(run.spec, code_relative_to=out, root=root))
    return run, _load(out / "job.yml")


@pytest.mark.parametrize(
    ("environment", "expected_env", "capabilities"),
    [
        ({"image": IMAGE}, {"image": IMAGE}, {"mpi": "present", "deepspeed": "absent"}),
        ({"image": IMAGE, "conda_file": "envs/conda.yml"}, {"image": IMAGE, "conda_file": {
            "name": "t", "dependencies": ["python=3.10", {"pip": ["horovod"]}]}}, {"horovod": "present"}),
        ({"build": {"path": "envs/ds"}}, {"build": {"path": "envs/ds"}},
         {"deepspeed": "present", "mpi4py": "present", "pytorch": "absent"}),
        ("file:envs/ds/env.yml", {"build": {"path": "envs/ds"}}, {"deepspeed": "present"}),
        ({"image": "example.com/own:1", "provides": ["mpi"]}, {"image": "example.com/own:1"},
         {"mpi": "present", "deepspeed": "unknown"}),
    ],
)
def test_inline_and_file_environments_render_as_azure_ml_reads_them(
    root: Path, environment: Any, expected_env: dict[str, Any], capabilities: dict[str, str]
) -> None:
    run, job = _render_and_reload(root, environment=environment)
    env = job["environment"]
    assert env["name"] == "CliV2AnonymousEnvironment"  # Azure ML registers it anonymously, as for the CLI
    for key, value in expected_env.items():
        if key == "build":
            assert Path(env["build"]["path"]).resolve() == (root / value["path"]).resolve()
        else:
            assert env[key] == value
    for capability, state in capabilities.items():
        assert run.environment.state(capability) == state, capability


@pytest.mark.parametrize(
    "reference",
    ["azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest", "azureml:AzureML-acpt-pytorch-2.8-cuda12.6:15",
     "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/labels/latest"],
)
def test_curated_and_registry_references_pass_through(root: Path, reference: str) -> None:
    run, job = _render_and_reload(root, environment=reference)
    assert job["environment"] == reference
    assert run.environment.state("deepspeed") == "present"
    assert run.environment.state("infiniband") == "unknown"  # not public for ACPT: unknown, not missing


def test_a_curated_reference_declared_in_the_stack_carries_provides(root: Path) -> None:
    environments = [{"name": "acpt", "reference": "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest",
                     "provides": ["infiniband"]}]
    config = stack(root, [declared(environment="acpt")], environments=environments)
    run = resolve_run(config.jobs[0], config, root)
    assert run.spec["environment"] == "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"
    assert {"infiniband", "deepspeed", "mpi"} <= set(run.environment.capabilities)  # provides adds, never hides
    assert not run.environment.pinned


def test_boolean_inputs_are_accepted_and_the_plan_says_how_azure_ml_sends_them(root: Path) -> None:
    run, job = _render_and_reload(root, command="python train.py --flag ${{inputs.flag}}", inputs={"flag": True})
    assert job["inputs"]["flag"] == 1
    assert "inputs.flag: true is sent as 1 (Azure ML's encoding of booleans)" in run.defaults


def test_optional_segments_may_name_undeclared_inputs(root: Path) -> None:
    command = "python train.py $[[--resume ${{inputs.checkpoint}}]]"
    _, job = _render_and_reload(root, command=command)
    assert job["component"]["command"] == command
    with pytest.raises(ConfigError, match=r"inputs\.checkpoint\}\} has no declared input"):
        stack(root, [declared(command="python train.py --resume ${{inputs.checkpoint}}")])


def test_a_run_without_code(root: Path) -> None:
    fields = declared(command="nvidia-smi")
    del fields["code"]
    config = stack(root, [fields])
    run = resolve_run(config.jobs[0], config, root)
    assert "code" not in run.spec and run.code_findings == () and run.missing_scripts == ()
    out = root / "out"
    out.mkdir()
    (out / "job.yml").write_text(job_yaml(run.spec, code_relative_to=out, root=root))
    assert "code" not in yaml.safe_load((out / "job.yml").read_text())
    assert _load(out / "job.yml")["component"].get("code") is None


def test_default_environment_version_is_derived_from_content_and_stable(root: Path, tmp_path_factory: Any) -> None:
    environments = [{"name": "ds", "build": {"path": "envs/ds"}}]
    first = stack(root, [], environments=environments).environments[0].version
    assert first is not None and len(first) == 64
    # Another checkout of the same files (another machine): the same version.
    other = tmp_path_factory.mktemp("other")
    (other / "envs" / "ds").mkdir(parents=True)
    shutil.copytree(ROOT / "environments", other / "environments")
    for name in ("Dockerfile", "env.yml"):
        (other / "envs" / "ds" / name).write_bytes((root / "envs" / "ds" / name).read_bytes())
    assert stack(other, [], environments=environments).environments[0].version == first
    # Different content: a different version.
    (other / "envs" / "ds" / "Dockerfile").write_text(f"FROM {IMAGE}\n")
    assert stack(other, [], environments=environments).environments[0].version != first


def test_environment_versions_up_to_azures_limit(root: Path) -> None:
    version = "openmpi4.1.0-cuda11.1-cudnn8-ubuntu18.04"  # azureml-examples' own gpu_perf environment version
    env = [{"name": "nccl", "image": IMAGE, "version": version}]
    assert stack(root, [], environments=env).environments[0].version == version
    with pytest.raises(ConfigError, match="1-255 characters"):
        stack(root, [], environments=[{"name": "nccl", "image": IMAGE, "version": "v" * 256}])


def test_plan_notes_the_defaults_the_project_added(root: Path) -> None:
    run, _ = _render_and_reload(root)
    assert any(d.startswith("resources.shm_size: 32g") for d in run.defaults)
    assert any(d.startswith("distribution.process_count_per_instance: 8") for d in run.defaults)
    run, _ = _render_and_reload(root, resources={"shm_size": "64g"}, distribution={
        "type": "pytorch", "process_count_per_instance": 8})
    assert run.defaults == ()


def test_plan_output_lists_the_added_defaults_per_run(root: Path) -> None:
    from types import SimpleNamespace

    from planning.render import plan_tree

    config = stack(root, [declared()])
    run = resolve_run(config.jobs[0], config, root)
    report = SimpleNamespace(mandatory_failures=0, advisory_failures=0, waived=0, findings=(), waivers=(),
                             stale_waivers=(), expired_waivers=())
    stack_file = SimpleNamespace(display="Pulumi.test.yaml", line_of=lambda *_: None)
    result = SimpleNamespace(resources=[], engine=SimpleNamespace(resources=[]), stack=SimpleNamespace(
        name="test", config=config, file=stack_file), runs=[run], report=report, job_files={}, diff=None, base=None)
    text = plan_tree(result, "build/test")
    assert "    added by the project: resources.shm_size: 32g (Azure ML's own default is 2g)" in text
