"""The dependency graph the deploy-order rules check is the one Pulumi's engine schedules (policies/graph.py), and
the precondition rows are data with their sources (policies/rules/deploy_order.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

from planning.engine import ProgramRun
from policies.catalogue import BY_ID
from policies.graph import DependencyGraph
from policies.rules.deploy_order import matches, precondition, preconditions
from tests.conftest import waits

COMPUTE = "azure-native:machinelearningservices:Compute"
ENDPOINT = "azure-native:network:PrivateEndpoint"
ZONE_GROUP = "azure-native:network:PrivateDnsZoneGroup"
WORKSPACE = "azure-native:machinelearningservices:Workspace"
VERSION = "azure-native:machinelearningservices:EnvironmentVersion"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def test_the_plan_records_explicit_implicit_and_component_dependencies(dev_plan: ProgramRun) -> None:
    by_name = {(r.type, r.name): r for r in dev_plan.resources}
    # Implicit: the endpoint's privateLinkServiceId is the workspace's id Output.
    assert (WORKSPACE, "mlw-gpu-dev-workspace") in waits(by_name[(ENDPOINT, "mlw-gpu-dev-workspace-pe")])
    # Explicit depends_on: a cluster without node public IPs after the workspace's endpoint and DNS zone group.
    assert {(ENDPOINT, "mlw-gpu-dev-workspace-pe"), (ZONE_GROUP, "mlw-gpu-dev-workspace-dns")} <= waits(
        by_name[(COMPUTE, "gpu-a100")])
    # A component named in depends_on stands for the resources below it (the image-build cluster and its role).
    assert waits(by_name[("aml-gpu-training:infra:Environment", "horovod")]) == {
        (COMPUTE, "image-builder"), (ASSIGNMENT, "image-builder-access-storage-blob-data-contributor")}


def test_a_resource_waits_for_what_its_component_ancestors_wait_for(dev_plan: ProgramRun) -> None:
    graph = DependencyGraph(r.to_json() for r in dev_plan.resources)
    version = (VERSION, "horovod-1")
    # The version's own inputs do not name the image-build cluster; its component (the environment) waits for it,
    # and the SDK registers a child only once its parent's registration went through.
    assert (COMPUTE, "image-builder") not in graph.direct(version)
    assert (COMPUTE, "image-builder") in graph.before(version)
    # Transitively: the cluster waits for the workspace's endpoint, so the version does too.
    assert (ENDPOINT, "mlw-gpu-dev-workspace-pe") in graph.waits_for(version)
    assert (VERSION, "horovod-1") not in graph.waits_for((COMPUTE, "image-builder"))


def _resource(kind: str, name: str, *, parent: tuple[str, str] | None = None,
              deps: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    return {"type": kind, "name": name, "parent": parent[1] if parent else None,
            **({"parentType": parent[0]} if parent else {}), "inputs": {},
            "options": {"dependsOn": [{"type": t, "name": n} for t, n in deps]}}


def test_a_custom_parent_is_created_before_its_children_and_cycles_do_not_loop() -> None:
    graph = DependencyGraph([
        _resource("azure-native:x:A", "a"),
        _resource("azure-native:x:B", "b", parent=("azure-native:x:A", "a")),
        _resource("azure-native:x:C", "c", deps=(("azure-native:x:D", "d"),)),
        _resource("azure-native:x:D", "d", deps=(("azure-native:x:C", "c"),)),
    ])
    assert graph.before(("azure-native:x:B", "b")) == {("azure-native:x:A", "a")}
    assert graph.waits_for(("azure-native:x:C", "c")) >= {("azure-native:x:D", "d")}


@pytest.mark.parametrize(("inputs", "where", "expected"), [
    ({"properties": {"properties": {"enableNodePublicIp": False}}}, {"properties.properties.enableNodePublicIp": False},
     True),
    ({"properties": {"properties": {"enableNodePublicIp": True}}}, {"properties.properties.enableNodePublicIp": False},
     False),
    ({"privateLinkServiceConnections": [{"groupIds": ["Blob"]}]}, {"privateLinkServiceConnections.groupIds": "blob"},
     True),
    ({"privateLinkServiceConnections": [{"groupIds": ["file"]}]}, {"privateLinkServiceConnections.groupIds": "blob"},
     False),
    ({"roleDefinitionId": "/x/roleDefinitions/BA92F5B4-2d11-453d-a403-e96b0029c9fe"},
     {"roleDefinitionId": {"endswith": "/ba92f5b4-2d11-453d-a403-e96b0029c9fe"}}, True),
    ({"publicNetworkAccess": "[unknown]"}, {"publicNetworkAccess": "Disabled"}, False),
])
def test_where_conditions(inputs: dict[str, Any], where: dict[str, Any], expected: bool) -> None:
    assert matches({"inputs": inputs}, where) is expected


def test_every_row_is_a_mandatory_rule_citing_its_sources() -> None:
    rows = preconditions()
    assert len(rows) >= 3
    for row in rows:
        rule = BY_ID[row.id]
        assert rule.enforcement == "mandatory" and rule.kind == "stack" and rule.family == "deploy_order"
        assert rule.reference == row.sources[0] and all(source in rule.rationale for source in row.sources)
        assert all(source.startswith("https://") for source in row.sources)
        assert any(step.wait for step in row.path) and any(step.required for step in row.path)


def test_a_row_with_a_typo_is_refused() -> None:
    row = {"id": "x", "title": "t", "severity": "high", "subject": {"type": "a"}, "failure": "f", "rationale": "r",
           "remediation": "m", "sources": ["https://example.org"], "path": [{"use": "b", "what": "w"}]}
    with pytest.raises(ValueError, match="exactly one of uses/used_by"):
        precondition(row)
    with pytest.raises(ValueError, match="keys"):
        precondition({**row, "sorces": []})
