"""Runs as ``DistributedRun`` components: what the engine (and CrossGuard) sees, and what the stack exports."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import mocks, settings

from amlgpu.cli import main
from jobs.resolve import resolve_all
from planning.engine import ProgramRun, RecordingMonitor
from planning.mocks import AzureMocks
from stack import stackfile
from stack.config import from_stackfile
from stack.resolved import RUN_TYPE, ClusterFacts, EnvironmentFacts, ResolvedRun
from tests.conftest import ROOT

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]


def run_under_mocks(program: Callable[[], None]) -> ProgramRun:
    """Run ``program`` as a Pulumi program on the mock engine; only Azure is mocked."""
    monitor = RecordingMonitor(AzureMocks())
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        settings.ROOT.set(None)
        mocks.set_mocks(AzureMocks(), project="aml-gpu-training", stack="test", preview=True, monitor=monitor)
        settings.ROOT.set(None)
        loop.run_until_complete(pulumi.runtime.stack.run_in_stack(program))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return monitor.plan


def test_dev_plan_carries_each_resolved_run_as_component_props(dev_plan: ProgramRun) -> None:
    config = from_stackfile(stackfile.read(ROOT / "Pulumi.dev.yaml"), ROOT)
    expected = {run.name: run for run in resolve_all(config, ROOT)}
    components = dev_plan.by_type(RUN_TYPE)
    assert sorted(c.name for c in components) == sorted(expected)
    for component in components:
        assert ResolvedRun.from_props(component.inputs) == expected[component.name]
        assert component.parent is None


def test_dev_plan_exports_every_spec_under_jobs(dev_plan: ProgramRun) -> None:
    config = from_stackfile(stackfile.read(ROOT / "Pulumi.dev.yaml"), ROOT)
    assert dev_plan.outputs["jobs"] == {run.name: run.spec for run in resolve_all(config, ROOT)}


def _run(environment: EnvironmentFacts, **spec: Any) -> ResolvedRun:
    return ResolvedRun(
        name="x",
        spec={"type": "command", "resources": {"instance_count": 2, "shm_size": "32g"},
              "distribution": {"type": "pytorch", "process_count_per_instance": 8}, **spec},
        launcher="per-process", launcher_nproc_per_node=None,
        cluster=ClusterFacts("gpu-a100", "Standard_ND96asr_v4", 8, "nvidia", True, True, True, 0, 2, "dedicated"),
        environment=environment, code_findings=("keys/id_rsa",),
    )


def test_props_round_trip_through_the_engine_with_optional_facts_left_out() -> None:
    # The engine drops None-valued props and turns ints into floats: from_props must undo both.
    external = EnvironmentFacts(id="azureml:team-env:3", name=None, source="external", capabilities=(), pinned=True)
    run = _run(external, inputs={"lr": 0.5, "epochs": 3, "tag": ""})

    def program() -> None:
        from jobs.component import DistributedRun

        component = DistributedRun("x", run)
        pulumi.export("spec", component.spec)

    plan = run_under_mocks(program)
    (component,) = plan.by_type(RUN_TYPE)
    assert ResolvedRun.from_props(component.inputs) == run
    assert plan.outputs["spec"] == run.spec


def test_secret_inputs_are_recorded_as_the_marker_and_plain_ones_as_they_are() -> None:
    # The recording monitor reads a registration's wire form back as plain data only when the secret signature is
    # in it (planning.engine._keep_secret_markers): a secret nested anywhere must still be recorded as the marker.
    def program() -> None:
        secret = pulumi.Output.secret("hunter22-Tr0ub4dor")
        pulumi.ComponentResource("test:index:Plain", "plain", {"a": "x", "n": [1, {"b": "y"}]})
        pulumi.ComponentResource("test:index:Top", "top", {"a": "x", "token": secret})
        pulumi.ComponentResource("test:index:Nested", "nested", {"a": "x", "n": [1, {"b": secret}]})

    recorded = {r.name: r.inputs for r in run_under_mocks(program).resources}
    assert recorded["plain"] == {"a": "x", "n": [1, {"b": "y"}]}
    assert recorded["top"] == {"a": "x", "token": "[secret]"}
    assert recorded["nested"] == {"a": "x", "n": [1, {"b": "[secret]"}]}  # the marker where the secret is


def test_declare_runs_parents_every_run_and_keys_them_by_name(tmp_path: Path) -> None:
    config = from_stackfile(stackfile.read(ROOT / "Pulumi.prod.yaml"), ROOT)
    names: list[str] = []

    def program() -> None:
        from jobs.component import declare_runs

        parent = pulumi.ComponentResource("test:index:Parent", "runs")
        runs = declare_runs(config, ROOT, parent=parent)
        names.extend(runs)
        parent.register_outputs({})

    plan = run_under_mocks(program)
    assert names == sorted(r.name for r in config.jobs)
    assert {(c.name, c.parent) for c in plan.by_type(RUN_TYPE)} == {(n, "runs") for n in names}


@pytest.fixture(scope="module")
def prod_plan_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``amlgpu plan --stack prod``, as a user runs it (exit 0: the catalogue passes the policy pack)."""
    out = tmp_path_factory.mktemp("plan") / "prod"
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)
        assert main(["plan", "--stack", "prod", "--out", str(out)]) == 0
    finally:
        os.chdir(cwd)
    return out


def test_plan_writes_a_job_file_per_exported_run_equal_to_its_spec(prod_plan_dir: Path) -> None:
    from azure.ai.ml import load_job

    outputs = json.loads((prod_plan_dir / "outputs.json").read_text())
    files = sorted(p.stem for p in (prod_plan_dir / "jobs").glob("*.yml"))
    # 11 declared runs and a fabric check for each of the 3 InfiniBand clusters.
    assert files == sorted(outputs["jobs"]) and len(files) == 14
    for name, spec in outputs["jobs"].items():
        path = prod_plan_dir / "jobs" / f"{name}.yml"
        document = yaml.safe_load(path.read_text())
        # Job files leave the name to Azure ML (job names are unique in a workspace): the spec keeps it.
        assert "name" not in document
        assert {**document, "code": spec["code"], "name": spec["name"]} == spec
        assert (path.parent / document["code"]).resolve() == (ROOT / spec["code"]).resolve()
        node = load_job(path)
        assert node.name is None and node.distribution is not None  # Azure ML names each submission


def test_plan_exports_the_workspace_coordinates_a_submitter_needs(prod_plan_dir: Path) -> None:
    workspace = json.loads((prod_plan_dir / "outputs.json").read_text())["workspace"]
    assert {k: workspace[k] for k in ("resource_group", "name")} == {"resource_group": "rg-aml-gpu-prod",
                                                                     "name": "mlw-gpu-prod"}
    assert isinstance(workspace["subscription_id"], str)
