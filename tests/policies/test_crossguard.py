"""The CrossGuard adapter: each rule as a Pulumi policy, called the way the engine calls it.

Arguments are built as ``pulumi_policy``'s analyzer builds them: inputs go through a protobuf
Struct (integers become floats), are deserialized and wrapped in the unknown-checking proxy, and
unknown values arrive as Pulumi's sentinel strings. For every rule case the CrossGuard policy must
report exactly what the offline gate reports. One test starts the real pack (``policies/__main__.py``)
and talks to it over the analyzer gRPC protocol, as ``pulumi preview --policy-pack`` does.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from policies.catalogue import BY_ID, RULES
from policies.crossguard import policies, stack_settings
from tests.conftest import ROOT
from tests.policies.test_baseline import STACK_NAME, Baseline, baseline
from tests.policies.test_rules import CASES, Case, both

STACK = STACK_NAME


def _wire_to_engine(inputs: Mapping[str, Any]) -> Any:
    """Inputs as the analyzer hands them to a policy: via a protobuf Struct, unknowns as sentinels."""
    struct = struct_pb2.Struct()
    struct.update(_sentinels(dict(inputs)))
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))


def _sentinels(value: Any) -> Any:
    if value == "[unknown]":
        return UNKNOWN_STRING_VALUE
    if isinstance(value, dict):
        return {k: _sentinels(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sentinels(v) for v in value]
    return value


def _urns(resources: list[dict[str, Any]]) -> dict[int, str]:
    components = {r["name"]: r for r in resources if r["type"].startswith("aml-gpu-training:")}

    def chain(resource: dict[str, Any]) -> list[str]:
        parent = components.get(resource["parent"]) if resource["parent"] else None
        return [*chain(parent), resource["type"]] if parent is not None else [resource["type"]]

    return {
        id(r): f"urn:pulumi:{STACK}::aml-gpu-training::{'$'.join(chain(r))}::{r['name']}" for r in resources
    }


def _opts(resource: dict[str, Any], parent_urn: str | None) -> PolicyResourceOptions:
    options = resource.get("options") or {}
    return PolicyResourceOptions(bool(options.get("protect")), [], options.get("deleteBeforeReplace"), [],
                                 PolicyCustomTimeouts(0, 0, 0), [], parent_urn)


def resource_args(b: Baseline, config: Mapping[str, Any] | None = None) -> list[ResourceValidationArgs]:
    urns = _urns(b.resources)
    by_name = {r["name"]: r for r in b.resources if r["type"].startswith("aml-gpu-training:")}
    out = []
    for r in b.resources:
        parent = urns[id(by_name[r["parent"]])] if r["parent"] else None
        out.append(ResourceValidationArgs(r["type"], _wire_to_engine(r["inputs"]), urns[id(r)], r["name"],
                                          _opts(r, parent), None, dict(config or {})))
    return out


def stack_args(b: Baseline, config: Mapping[str, Any] | None = None) -> StackValidationArgs:
    urns = _urns(b.resources)
    policy_resources = {
        id(r): PolicyResource(r["type"], _wire_to_engine(r["inputs"]), urns[id(r)], r["name"], _opts(r, None), None,
                              None, [], {})
        for r in b.resources
    }
    by_name = {r["name"]: r for r in b.resources if r["type"].startswith("aml-gpu-training:")}
    by_key = {(r["type"], r["name"]): policy_resources[id(r)] for r in b.resources}
    for r in b.resources:
        if r["parent"]:
            policy_resources[id(r)].parent = policy_resources[id(by_name[r["parent"]])]
        policy_resources[id(r)].dependencies = [by_key[(d["type"], d["name"])]
                                                for d in (r.get("options") or {}).get("dependsOn", [])
                                                if (d["type"], d["name"]) in by_key]
    return StackValidationArgs(list(policy_resources.values()), dict(config or {}))


def reported(policy: Any, b: Baseline) -> list[tuple[str, str | None]]:
    """(message, urn) of every violation ``policy`` reports on ``b``."""
    out: list[tuple[str, str | None]] = []

    def report(message: str, urn: str | None = None) -> None:
        out.append((message, urn))

    if isinstance(policy, StackValidationPolicy):
        policy.validate(stack_args(b), report)
    else:
        for args in resource_args(b):
            policy.validate(args, report)
    return out


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The pack's policies, reading stack files (waivers) from an empty project folder."""
    return {p.name: p for p in policies(tmp_path_factory.mktemp("project"))}


def test_every_rule_is_a_policy_of_the_right_kind(pack: dict[str, Any]) -> None:
    assert set(pack) == set(BY_ID) | {"policy-waivers", "policy-waived-findings"}
    for rule in RULES:
        policy = pack[rule.id]
        expected = StackValidationPolicy if rule.kind == "stack" else ResourceValidationPolicy
        assert isinstance(policy, expected), rule.id
        assert policy.enforcement_level.value == rule.enforcement and policy.severity.value == rule.severity
        assert policy.url == rule.reference and policy.remediation_steps == rule.remediation
        if rule.parameters:
            assert set(policy.config_schema.properties) == set(rule.parameters)


def pulumi_config(b: Baseline) -> str:
    """``PULUMI_CONFIG`` as Pulumi hands it to a policy pack: every key, values as strings (JSON for others)."""
    return json.dumps({k: v if isinstance(v, str) else json.dumps(v) for k, v in b.config.items()})


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.rule)
def test_crossguard_reports_what_the_offline_gate_reports(
    case: Case, pack: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for mutation in (case.comply, both(case.comply, case.violate)):
        b = baseline()
        mutation(b)
        monkeypatch.setenv("PULUMI_CONFIG", pulumi_config(b))
        offline = sorted(f.text for f in b.evaluate(today=dt.date.today()).findings if f.rule.id == case.rule)
        crossguard = reported(pack[case.rule], b)
        assert sorted(message for message, _ in crossguard) == offline
        if BY_ID[case.rule].kind == "stack":  # stack findings are attached to the resource at fault
            assert all(urn and urn.startswith(f"urn:pulumi:{STACK}::") for _, urn in crossguard)


def test_run_rules_read_the_run_component_props(pack: dict[str, Any]) -> None:
    b = baseline()
    b.run("ddp-per-process")["spec"]["distribution"]["process_count_per_instance"] = 4
    (args,) = [a for a in resource_args(b) if a.name == "ddp-per-process"]
    assert isinstance(args.props["spec"]["resources"]["instance_count"], float)  # as the engine sends numbers
    messages: list[str] = []
    pack["run-gpus-left-idle"].validate(args, lambda m, urn=None: messages.append(m))
    assert messages == [
        "run 'ddp-per-process': 4 GPU process(es) per node on Standard_ND96asr_v4: 4 of 8 GPUs stay idle"]


def test_unknown_values_during_preview_do_not_raise_or_report(pack: dict[str, Any]) -> None:
    b = baseline()
    b.inputs("azure-native:machinelearningservices:Compute", "gpu-a100")["properties"]["properties"]["subnet"][
        "id"] = "[unknown]"
    b.inputs("azure-native:machinelearningservices:Workspace")["publicNetworkAccess"] = "[unknown]"
    for name in ("compute-in-virtual-network", "workspace-public-network-disabled"):
        assert reported(pack[name], b) == []


def test_pack_config_parameters_reach_the_rule(pack: dict[str, Any]) -> None:
    b = baseline()
    messages: list[str] = []
    for args in resource_args(b, {"max_nodes_per_cluster": 1.0}):
        pack["compute-max-nodes"].validate(args, lambda m, urn=None: messages.append(m))
    assert messages == ["cluster 'gpu-a100': can scale to 2 nodes, above the cap of 1"]


SOON = (dt.date.today() + dt.timedelta(days=30)).isoformat()
"""An expiry CrossGuard (which judges waivers by today's date) always takes: within 90 days."""


def _project_with_waivers(tmp_path: Path, *waivers: dict[str, Any]) -> dict[str, Any]:
    config = {"aml-gpu-training:waivers": [{"expires": SOON, **w} for w in waivers]}
    (tmp_path / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": config}))
    return {p.name: p for p in policies(tmp_path)}


def _idle_gpus() -> tuple[Baseline, str]:
    """The baseline with run ddp-per-process leaving 4 GPUs idle, and that finding's fingerprint."""
    b = baseline()
    b.run("ddp-per-process")["spec"]["distribution"]["process_count_per_instance"] = 4
    (finding,) = [f for f in b.evaluate(today=dt.date.today()).findings if f.rule.id == "run-gpus-left-idle"]
    return b, finding.fingerprint


def test_waivers_from_the_stack_file_are_honoured_and_reported(tmp_path: Path) -> None:
    b, fingerprint = _idle_gpus()
    pack = _project_with_waivers(tmp_path, {"rule": "run-gpus-left-idle", "resource": "ddp-per-process",
                                            "reason": "pipeline parallel, two GPUs per process",
                                            "fingerprint": fingerprint})
    assert reported(pack["run-gpus-left-idle"], b) == []
    waived = reported(pack["policy-waived-findings"], b)
    assert [m for m, _ in waived] == [
        f"[run-gpus-left-idle] waived in the stack file (pipeline parallel, two GPUs per process, until {SOON}): "
        "run 'ddp-per-process': "
        "4 GPU process(es) per node on Standard_ND96asr_v4: 4 of 8 GPUs stay idle"]
    run_urn = f"urn:pulumi:{STACK}::aml-gpu-training::aml-gpu-training:jobs:DistributedRun::ddp-per-process"
    assert waived[0][1] == run_urn
    assert reported(pack["policy-waivers"], b) == []


def test_a_waiver_for_an_unknown_resource_fails_the_waiver_policy(tmp_path: Path) -> None:
    pack = _project_with_waivers(tmp_path, {"rule": "run-gpus-left-idle", "resource": "no-such-run",
                                            "reason": "typo in the run name here"})
    (message,) = [m for m, _ in reported(pack["policy-waivers"], baseline())]
    assert message.startswith(f"Pulumi.{STACK}.yaml  aml-gpu-training:waivers[0].resource  no resource or run")


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", "[" * 100_000 + "]" * 100_000],
                         ids=["not JSON", "not an object", "nested too deeply"])
def test_a_pulumi_config_that_is_no_json_object_reads_as_no_settings(
    raw: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": {"azure-native:location": "x"}}))
    monkeypatch.setenv("PULUMI_CONFIG", raw)
    assert stack_settings(tmp_path, STACK) is None  # PULUMI_CONFIG wins over the stack file, even when unreadable


def test_the_real_pack_answers_the_analyzer_protocol() -> None:
    process = subprocess.Popen([sys.executable, "__main__.py"], cwd=ROOT / "policies", stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())  # type: ignore[union-attr]
        stub = analyzer_pb2_grpc.AnalyzerStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
        assert info.name == "aml-gpu-training"
        assert {p.name for p in info.policies} == set(BY_ID) | {"policy-waivers", "policy-waived-findings"}
        props = struct_pb2.Struct()
        props.update({"computeName": "gpu", "identity": {"type": "SystemAssigned"}, "properties": {
            "computeType": "AmlCompute", "disableLocalAuth": True, "properties": {
                "vmSize": "Standard_ND96asr_v4", "enableNodePublicIp": True, "remoteLoginPortPublicAccess": "Disabled",
                "subnet": {"id": "/subscriptions/s/subnets/training"},
                "scaleSettings": {"minNodeCount": 0, "maxNodeCount": 4}}}})
        cluster = "urn:pulumi:ci::aml-gpu-training::aml-gpu-training:infra:GpuCluster"
        response = stub.Analyze(analyzer_pb2.AnalyzeRequest(
            type="azure-native:machinelearningservices:Compute", properties=props, name="gpu",
            urn=f"{cluster}$azure-native:machinelearningservices:Compute::gpu",
            options=analyzer_pb2.AnalyzerResourceOptions(parent=f"{cluster}::gpu")), timeout=30)
        assert [(d.policyName, d.message.splitlines()[-1]) for d in response.diagnostics] == [
            ("compute-no-node-public-ip", "cluster 'gpu': node public IPs are enabled")]
    finally:
        process.terminate()
        process.wait(timeout=10)
