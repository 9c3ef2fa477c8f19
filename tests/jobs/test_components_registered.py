"""Registered components under the gate (issue 40.1): ``amlgpu components pull`` over the recorded wire, plan
judging each step against its pulled spec (or refusing what it cannot see, naming the pull command), and
``amlgpu submit`` refusing a pipeline whose registered components no longer match the lock.

Azure is the recorded workspace (``tests/aml_workspace.py``) plus a registry: azure-ai-ml's real ``MLClient``
reads ``components/{name}/versions/{v}`` answers in the REST specification's shape (``ComponentVersion/get.json``
examples, ``tests/fixtures/aml-jobs-rest/README.md``), the component's spec under ``properties.componentSpec``.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import build_parser, main
from amlgpu.commands import components as command
from amlgpu.commands import submit as submit_command
from jobs import components
from kernel.errors import UserError
from stack import registered
from tests import aml_workspace as aml
from tests.conftest import NS, dev_config, make_project
from tests.policies.test_baseline import sarif_fingerprint
from tests.replay_http import RecordedToken, Replay

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]

REGISTRY = "shared-ml"
REGISTRY_ID = (f"/subscriptions/{aml.SUBSCRIPTION}/resourceGroups/rg-shared-ml/providers/"
               f"Microsoft.MachineLearningServices/registries/{REGISTRY}")
REGISTRY_API = "https://westeurope.api.azureml.ms/"
DISCOVERY = f"https://eastus.api.azureml.ms/registrymanagement/v1.0/registries/{REGISTRY}/discovery"
TRAIN = "azureml:train_ddp:3"
EVALUATE = f"azureml://registries/{REGISTRY}/components/evaluate/versions/1"

TRAIN_SPEC: dict[str, Any] = {
    "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
    "name": "train_ddp", "version": "3", "type": "command", "display_name": "Train with DDP",
    "command": "python train_ddp.py --epochs ${{inputs.epochs}} --checkpoint-dir ${{outputs.checkpoints}}",
    "environment": "azureml:acpt-pytorch:1",
    "code": f"azureml:{aml.WORKSPACE_ID}/codes/6f1e1c37-5d4e-4b1a-9c55-0d2e4f7a8b90/versions/1",
    "inputs": {"epochs": {"type": "integer", "default": 4}},
    "outputs": {"checkpoints": {"type": "uri_folder"}},
    "resources": {"instance_count": 2},
    "distribution": {"type": "pytorch", "process_count_per_instance": 8},
}
EVALUATE_SPEC: dict[str, Any] = {
    "name": "evaluate", "version": "1", "type": "command",
    "command": "python evaluate.py --checkpoint-dir ${{inputs.checkpoints}}",
    "environment": "azureml:acpt-pytorch:1",
    "code": f"azureml://registries/{REGISTRY}/codes/0c2d/versions/1",
    "inputs": {"checkpoints": {"type": "uri_folder"}},
    "distribution": {"type": "pytorch", "process_count_per_instance": 8},
}
PIPELINE = {
    "name": "reg-train", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
    "jobs": {
        "train": {"component": TRAIN, "inputs": {"epochs": 6}},
        "evaluate": {"component": EVALUATE, "inputs": {"checkpoints": "${{parent.jobs.train.outputs.checkpoints}}"}},
    },
}


def version_body(example: str, asset: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``GET .../components/{name}/versions/{v}`` as the specification's example answers it, for ``spec``."""
    body = aml.example(example)
    body |= {"id": asset, "name": spec["version"], "type": "Microsoft.MachineLearningServices/workspaces/components/"
             "versions"}
    body["properties"] |= {"description": None, "tags": {}, "properties": {}, "componentSpec": copy.deepcopy(spec)}
    return body


def routes(train: dict[str, Any] = TRAIN_SPEC, evaluate: dict[str, Any] = EVALUATE_SPEC) -> dict[str, Any]:
    discovery = {"registryName": REGISTRY, "tenantId": "72f988bf-0000-4000-8000-00000000a11c",
                 "primaryRegion": "westeurope", "regions": ["westeurope"], "subscriptionId": aml.SUBSCRIPTION,
                 "resourceGroup": "rg-shared-ml", "primaryRegionResourceProviderUri": REGISTRY_API}
    return {
        f"GET {aml.ARM}/components/train_ddp/versions/3": (200, version_body(
            "Workspace/ComponentVersion/get.json", f"{aml.WORKSPACE_ID}/components/train_ddp/versions/3", train)),
        f"GET {DISCOVERY}": (200, discovery),
        f"GET {REGISTRY_API}mferp/managementfrontend{REGISTRY_ID}/components/evaluate/versions/1": (200, version_body(
            "Registry/ComponentVersion/get.json", f"{REGISTRY_ID}/components/evaluate/versions/1", evaluate)),
    }


def config(pipeline: dict[str, Any] = PIPELINE) -> dict[str, Any]:
    values = dev_config()
    values[f"{NS}:jobs"] = [*values[f"{NS}:jobs"], copy.deepcopy(pipeline)]
    return values


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = make_project(tmp_path / "project", config(), stack="dev")
    monkeypatch.chdir(root)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Pulumi CLI: the workspace comes from the plan's outputs.json
    return root


def pull() -> int:
    args = build_parser().parse_args(["components", "pull", "--stack", "dev"])
    try:
        return command.run(args, credential=RecordedToken("https://management.azure.com/.default"))
    except UserError as err:
        print(err.report(), file=sys.stderr)
        return err.exit_code


def test_a_registered_component_not_pulled_is_a_mandatory_finding_naming_the_pull_command(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 1  # not bad input (exit 2): the gate cannot see it
    out, _ = capsys.readouterr()
    for step, reference in (("train", TRAIN), ("evaluate", EVALUATE)):
        assert (f"pipeline-component-not-pulled  [critical]  pipeline 'reg-train': step {step!r} runs registered "
                f"component {reference}, whose spec is not in the project: run `amlgpu components pull --stack dev`"
                in out), out


def test_pull_writes_reviewable_specs_and_a_lock_over_the_recorded_wire(
        project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "--stack", "dev"])  # the workspace's coordinates (outputs.json)
    replay = azure(routes())
    assert pull() == 0, capsys.readouterr().err
    # One GET per component, with the API versions azure-ai-ml 1.35 speaks; the registry found by its discovery.
    asked = [(c.method, str(c.url).split("?")[0], replay.query(c).get("api-version", [""])[0]) for c in replay.calls]
    assert asked == [
        ("GET", f"{aml.ARM}/components/train_ddp/versions/3", "2024-01-01-preview"),
        ("GET", DISCOVERY, "v1.0"),
        ("GET", f"{REGISTRY_API}mferp/managementfrontend{REGISTRY_ID}/components/evaluate/versions/1",
         "2021-10-01-dataplanepreview"),
    ]
    train = project / "components/registered/workspace/train_ddp/3.yml"
    evaluate = project / f"components/registered/registries/{REGISTRY}/evaluate/1.yml"
    text = train.read_text()
    assert text.startswith(f"# Pulled by `amlgpu components pull` from the workspace: {TRAIN}\n")
    assert f"# code: azureml:{aml.WORKSPACE_ID}/codes/" in text
    spec = yaml.safe_load(text)
    assert "code" not in spec and "id" not in spec and "creation_context" not in spec
    assert spec["command"] == TRAIN_SPEC["command"] and spec["distribution"] == TRAIN_SPEC["distribution"]
    assert yaml.safe_load(evaluate.read_text())["command"] == EVALUATE_SPEC["command"]
    lock = json.loads((project / registered.LOCK).read_text())["components"]  # sorted by reference
    assert [(e["reference"], e["source"], e["version"], e["file"]) for e in lock] == [
        (EVALUATE, f"registry {REGISTRY}", "1", f"components/registered/registries/{REGISTRY}/evaluate/1.yml"),
        (TRAIN, "workspace", "3", "components/registered/workspace/train_ddp/3.yml"),
    ]
    assert lock[1]["asset_id"] == f"azureml:{aml.WORKSPACE_ID}/components/train_ddp/versions/3"
    assert lock[1]["file_sha256"] == registered.file_hash(train.read_bytes())
    assert lock[1]["spec_sha256"].startswith("sha256:") and lock[0]["spec_sha256"] != lock[1]["spec_sha256"]

    # Planned now: each step judged as the run its pulled spec makes, rendered as the reference azure-ai-ml loads.
    assert main(["plan", "--stack", "dev"]) == 0, capsys.readouterr().out
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = load_job(project / "build" / "dev" / "jobs" / "reg-train.yml")
    written = yaml.safe_load((project / "build" / "dev" / "jobs" / "reg-train.yml").read_text())["jobs"]
    assert (written["train"]["component"], written["evaluate"]["component"]) == (TRAIN, EVALUATE)
    assert "command" not in written["train"] and "environment" not in written["train"]  # the component's
    # azure-ai-ml keeps the references (a workspace one without its azureml: prefix), resolved at submission.
    assert (job.jobs["train"].component, job.jobs["evaluate"].component) == ("train_ddp:3", EVALUATE)
    assert job.jobs["train"].inputs["epochs"]._data == 6
    assert job.jobs["train"].distribution.process_count_per_instance == 8
    assert job.jobs["train"].resources.instance_count == 2


def test_a_pulled_spec_gets_the_findings_it_deserves_and_waivers_name_the_step(
        project: Path, azure: Callable[[dict[str, Any]], Replay], capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "--stack", "dev"])
    azure(routes(train={**TRAIN_SPEC, "distribution": {"type": "pytorch", "process_count_per_instance": 4}}))
    assert pull() == 0
    assert main(["plan", "--stack", "dev"]) == 1
    out, _ = capsys.readouterr()
    assert ("run-gpus-left-idle  [high]  run 'reg-train/train': 4 GPU process(es) per node on Standard_ND96asr_v4: "
            "4 of 8 GPUs stay idle") in out
    values = config()
    values[f"{NS}:waivers"] = [{
        "rule": "run-gpus-left-idle", "resource": "reg-train/train",
        "expires": (dt.date.today() + dt.timedelta(days=30)).isoformat(),
        "reason": "the registered trainer drives two GPUs per process (tensor parallel, ML-90)",
        "fingerprint": sarif_fingerprint(project / "build" / "dev", "run-gpus-left-idle")}]
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": values}, sort_keys=False))
    assert main(["plan", "--stack", "dev"]) == 0


def submit(*argv: str) -> int:
    args = build_parser().parse_args(["submit", *argv])
    try:
        return submit_command.run(args, credential=RecordedToken("https://management.azure.com/.default"))
    except UserError as err:
        print(err.report(), file=sys.stderr)
        return err.exit_code


def test_submit_refuses_a_pipeline_whose_registered_component_changed_since_the_pull(
        project: Path, azure: Callable[[dict[str, Any]], Replay], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "--stack", "dev"])
    azure(routes())
    assert pull() == 0
    assert main(["plan", "--stack", "dev"]) == 0
    capsys.readouterr()
    # Someone registers version 1 of evaluate again, with another command: what Azure ML would run is not what
    # the plan judged.
    changed = azure(routes(evaluate={**EVALUATE_SPEC, "command": "python evaluate.py --fast"}))
    assert submit("reg-train", "--stack", "dev") == 2
    err = capsys.readouterr().err
    assert (f"error: step 'reg-train/evaluate': {EVALUATE} registered in the registry {REGISTRY} is not what was "
            "pulled") in err
    assert "run `amlgpu components pull --stack dev`, review the change and plan again" in err
    assert not [c for c in changed.calls if c.method == "PUT"]  # nothing was sent


def test_verify_passes_what_matches_and_names_an_edited_file(
        project: Path, azure: Callable[[dict[str, Any]], Replay]) -> None:
    from jobs.remote import ml_client
    from jobs.workspace import WorkspaceRef
    from stack.project import load_stack

    main(["plan", "--stack", "dev"])
    azure(routes())
    assert pull() == 0
    stack = load_stack("dev", project)
    client = ml_client(WorkspaceRef(aml.SUBSCRIPTION, aml.GROUP, aml.WORKSPACE, "test"),
                       credential=RecordedToken("https://management.azure.com/.default"))
    clients = components.client_factory(client)
    assert components.verify(stack.config, project, "reg-train", clients, stack="dev") == []
    edited = project / "components/registered/workspace/train_ddp/3.yml"
    edited.write_text(edited.read_text().replace("process_count_per_instance: 8", "process_count_per_instance: 4"))
    (problem,) = components.verify(stack.config, project, "reg-train", clients, stack="dev")
    assert problem.startswith(f"step 'reg-train/train': {TRAIN}: components/registered/workspace/train_ddp/3.yml "
                              "is not the file pulled")


@pytest.mark.parametrize("reference", ["azureml:train_ddp@latest", "azureml:train_ddp",
                                       "azureml://registries/r/components/x", "azureml:../x:1"])
def test_an_unpinned_or_malformed_reference_is_bad_input(reference: str) -> None:
    with pytest.raises(ValueError, match="name a registered component with its version"):
        registered.parse(reference)
