"""What `pulumi up` would send Azure for the shipped dev stack: every secure default, on the wire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from planning.engine import ProgramRun
from tests.conftest import NS, only

UPLOAD = "pulumi-python:dynamic/amlgpu:BuildContextUpload"

WS = "azure-native:machinelearningservices:Workspace"
COMPUTE = "azure-native:machinelearningservices:Compute"
STORAGE = "azure-native:storage:StorageAccount"
VAULT = "azure-native:keyvault:Vault"
REGISTRY = "azure-native:containerregistry:Registry"


def _at(value: dict, path: str):
    for key in path.split("."):
        value = value[key]
    return value


@pytest.mark.parametrize(
    ("token", "path", "expected"),
    [
        (WS, "publicNetworkAccess", "Disabled"),
        (WS, "allowPublicAccessWhenBehindVnet", False),
        (WS, "systemDatastoresAuthMode", "identity"),
        (WS, "identity.type", "SystemAssigned"),
        (WS, "imageBuildCompute", "image-builder"),
        (STORAGE, "allowBlobPublicAccess", False),
        (STORAGE, "minimumTlsVersion", "TLS1_2"),
        (STORAGE, "enableHttpsTrafficOnly", True),
        (STORAGE, "allowSharedKeyAccess", False),
        (STORAGE, "networkRuleSet.defaultAction", "Deny"),
        (VAULT, "properties.enableRbacAuthorization", True),
        (VAULT, "properties.enableSoftDelete", True),
        (VAULT, "properties.enablePurgeProtection", True),
        (VAULT, "properties.publicNetworkAccess", "Disabled"),
        (REGISTRY, "adminUserEnabled", False),
        (REGISTRY, "publicNetworkAccess", "Disabled"),
    ],
)
def test_workspace_dependencies_are_locked_down(dev_plan: ProgramRun, token: str, path: str, expected: object) -> None:
    assert _at(only(dev_plan, token)["inputs"], path) == expected


def test_every_cluster_is_private_keyless_and_scales_to_zero(dev_plan: ProgramRun) -> None:
    subnet = only(dev_plan, "azure-native:network:Subnet")
    computes = [r.to_json() for r in dev_plan.by_type(COMPUTE)]
    assert {c["inputs"]["computeName"] for c in computes} == {"gpu-a100", "image-builder"}
    for compute in computes:
        props = compute["inputs"]["properties"]
        assert props["computeType"] == "AmlCompute"
        assert props["disableLocalAuth"] is True
        inner = props["properties"]
        assert inner["enableNodePublicIp"] is False
        assert inner["remoteLoginPortPublicAccess"] == "Disabled"
        assert inner["scaleSettings"]["minNodeCount"] == 0
        assert inner["scaleSettings"]["nodeIdleTimeBeforeScaleDown"].startswith("PT")
        assert inner["subnet"]["id"].endswith("/virtualNetworks/vnet-mlw-gpu-dev/subnets/training")
        assert subnet["inputs"]["subnetName"] == "training"


def test_dev_cluster_is_the_declared_infiniband_size(dev_plan: ProgramRun) -> None:
    inner = only(dev_plan, COMPUTE, "gpu-a100")["inputs"]["properties"]["properties"]
    assert inner["vmSize"] == "Standard_ND96asr_v4"
    assert inner["vmPriority"] == "Dedicated"
    assert inner["scaleSettings"]["maxNodeCount"] == 2


def test_private_endpoints_cover_every_workspace_dependency(dev_plan: ProgramRun) -> None:
    groups = sorted(
        r.inputs["privateLinkServiceConnections"][0]["groupIds"][0]
        for r in dev_plan.by_type("azure-native:network:PrivateEndpoint")
    )
    assert groups == ["amlworkspace", "blob", "file", "registry", "vault"]
    zones = sorted(r.inputs["privateZoneName"] for r in dev_plan.by_type("azure-native:privatedns:PrivateZone"))
    assert "privatelink.api.azureml.ms" in zones and "privatelink.azurecr.io" in zones
    links = dev_plan.by_type("azure-native:privatedns:VirtualNetworkLink")
    assert len(links) == len(zones) and all(not link.inputs["registrationEnabled"] for link in links)


def test_nsg_denies_inbound_internet(dev_plan: ProgramRun) -> None:
    rules = only(dev_plan, "azure-native:network:NetworkSecurityGroup")["inputs"]["securityRules"]
    deny = [r for r in rules if r["direction"] == "Inbound" and r["access"] == "Deny"]
    assert deny and deny[0]["sourceAddressPrefix"] == "Internet"


@pytest.mark.parametrize(
    ("name", "resource"),
    [("mlw-gpu-dev-diagnostics", "/workspaces/mlw-gpu-dev"), ("mlw-gpu-dev-kv-diagnostics", "/vaults/kv-mlw-gpu-dev-"),
     ("mlw-gpu-dev-blob-diagnostics", "/blobServices/default")],
)
def test_workspace_vault_and_blob_logs_go_to_log_analytics(dev_plan: ProgramRun, name: str, resource: str) -> None:
    setting = only(dev_plan, "azure-native:monitor:DiagnosticSetting", name)["inputs"]
    assert resource in setting["resourceUri"]
    assert "/Microsoft.OperationalInsights/workspaces/" in setting["workspaceId"]
    assert setting["logs"][0]["categoryGroup"] == "allLogs"


def test_cluster_identities_get_exactly_the_storage_data_role(dev_plan: ProgramRun) -> None:
    assignments = [
        r for r in dev_plan.by_type("azure-native:authorization:RoleAssignment") if r.parent == "gpu-a100-access"
    ]
    # AcrPull on the workspace registry is granted by Azure ML itself (infra/access.py).
    roles = [a.inputs["roleDefinitionId"].rsplit("/", 1)[-1] for a in assignments]
    assert roles == ["ba92f5b4-2d11-453d-a403-e96b0029c9fe"]
    assert all(a.inputs["principalType"] == "ServicePrincipal" for a in assignments)
    # Role assignment names are GUIDs derived from the names, so re-running never duplicates them.
    assert len({a.inputs["roleAssignmentName"] for a in assignments}) == 1


def test_build_context_is_uploaded_to_workspace_storage(dev_plan: ProgramRun) -> None:
    uploads = {u.inputs["source"]: u.inputs for u in dev_plan.by_type(UPLOAD)}
    assert sorted(uploads) == ["environments/horovod", "environments/pytorch", "environments/tensorflow"]
    upload = uploads["environments/tensorflow"]
    assert upload["containerName"] == "environment-builds"
    assert upload["prefix"].startswith("tf-gpu/1/") and list(upload["files"]) == ["Dockerfile"]
    version = only(dev_plan, "azure-native:machinelearningservices:EnvironmentVersion", "tf-gpu-1")["inputs"]
    build = version["properties"]["build"]
    assert build["contextUri"].endswith(f".blob.core.windows.net/environment-builds/{upload['prefix']}")
    assert build["dockerfilePath"] == "Dockerfile"


def test_environment_versions_are_pinned_and_carry_their_conda_file(plan_variant: Any, tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "conda.yaml").write_text("name: extra\ndependencies:\n  - pip:\n      - mpi4py==4.1.1\n")
    plan = plan_variant(lambda c: c[f"{NS}:environments"][0].update(conda_file="conda.yaml"))
    version = only(plan, "azure-native:machinelearningservices:EnvironmentVersion", "acpt-pytorch-1")["inputs"]
    assert version["version"] == "1"
    assert "mpi4py==4.1.1" in version["properties"]["condaFile"]
    version = only(plan, "azure-native:machinelearningservices:EnvironmentVersion", "horovod-1")["inputs"]
    provides = version["properties"]["tags"]["provides"].split(",")
    assert provides == sorted(provides)
