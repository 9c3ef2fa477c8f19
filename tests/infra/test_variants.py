"""Stack settings that change what is created: protection, replacement, identities, networks, keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from planning.engine import ProgramRun
from tests.conftest import NS, only

COMPUTE = "azure-native:machinelearningservices:Compute"
PROTECTED = (
    ("azure-native:resources:ResourceGroup", "mlw-gpu-dev-rg"),
    ("azure-native:machinelearningservices:Workspace", "mlw-gpu-dev-workspace"),
    ("azure-native:storage:StorageAccount", "mlw-gpu-dev-storage"),
    ("azure-native:keyvault:Vault", "mlw-gpu-dev-kv"),
)

Variant = Callable[[Callable[[dict[str, Any]], None]], ProgramRun]


@pytest.mark.parametrize(("token", "name"), PROTECTED)
def test_data_holding_resources_are_protected_by_default(dev_plan: ProgramRun, token: str, name: str) -> None:
    assert only(dev_plan, token, name)["options"]["protect"] is True


def test_protection_can_be_turned_off_explicitly(plan_variant: Variant) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:workspace"].update(protect=False))
    for token, name in PROTECTED:
        assert "protect" not in only(plan, token, name).get("options", {})


def test_immutable_cluster_properties_replace_the_cluster_delete_first(dev_plan: ProgramRun) -> None:
    options = only(dev_plan, COMPUTE, "gpu-a100")["options"]
    assert options["replaceOnChanges"] == [
        "properties.properties.enableNodePublicIp",
        "properties.properties.subnet",
        "properties.properties.vmPriority",
        "properties.properties.vmSize",
    ]
    assert options["deleteBeforeReplace"] is True


def test_environment_versions_outlive_the_stack(dev_plan: ProgramRun) -> None:
    for version in dev_plan.by_type("azure-native:machinelearningservices:EnvironmentVersion"):
        assert version.options["retainOnDelete"] is True


def test_existing_subnet_creates_no_network(plan_variant: Variant) -> None:
    subnet_id = (
        "/subscriptions/1/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/hub/subnets/training"
    )
    plan = plan_variant(lambda c: c.__setitem__(f"{NS}:network", {"subnet_id": subnet_id}))
    assert not plan.by_type("azure-native:network:VirtualNetwork")
    assert not plan.by_type("azure-native:network:Subnet")
    inner = only(plan, COMPUTE, "gpu-a100")["inputs"]["properties"]["properties"]
    assert inner["subnet"]["id"] == subnet_id
    link = plan.by_type("azure-native:privatedns:VirtualNetworkLink")[0]
    assert link.inputs["virtualNetwork"]["id"].endswith("/virtualNetworks/hub")


def test_low_priority_tier_maps_to_azure_priority(plan_variant: Variant) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:clusters"][0].update(tier="low_priority"))
    assert only(plan, COMPUTE, "gpu-a100")["inputs"]["properties"]["properties"]["vmPriority"] == "LowPriority"


def test_public_workspace_needs_no_image_builder(plan_variant: Variant) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:workspace"].update(public_network_access="Enabled"))
    workspace = only(plan, "azure-native:machinelearningservices:Workspace")["inputs"]
    assert workspace["publicNetworkAccess"] == "Enabled"
    assert "imageBuildCompute" not in workspace
    assert [c.inputs["computeName"] for c in plan.by_type(COMPUTE)] == ["gpu-a100"]


def test_customer_managed_key_encrypts_the_workspace(plan_variant: Variant) -> None:
    key = {
        "key_vault": "/subscriptions/1/resourceGroups/rg-keys/providers/Microsoft.KeyVault/vaults/kv-keys",
        "key_uri": "https://kv-keys.vault.azure.net/keys/aml/0123456789abcdef",
    }
    plan = plan_variant(lambda c: c[f"{NS}:workspace"].update(customer_managed_key=key))
    encryption = only(plan, "azure-native:machinelearningservices:Workspace")["inputs"]["encryption"]
    assert encryption["status"] == "Enabled"
    assert encryption["keyVaultProperties"] == {"keyIdentifier": key["key_uri"], "keyVaultArmId": key["key_vault"]}


def test_user_assigned_identity_becomes_primary(plan_variant: Variant) -> None:
    uai = "/subscriptions/1/resourceGroups/rg-id/providers/Microsoft.ManagedIdentity/userAssignedIdentities/aml"
    identity = {"type": "user_assigned", "user_assigned_identities": [{"resource_id": uai}]}
    plan = plan_variant(lambda c: c[f"{NS}:workspace"].update(identity=identity))
    workspace = only(plan, "azure-native:machinelearningservices:Workspace")["inputs"]
    assert workspace["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [uai]}
    assert workspace["primaryUserAssignedIdentity"] == uai


def test_cluster_with_user_assigned_identity_gets_no_role_assignments_from_the_stack(plan_variant: Variant) -> None:
    uai = "/subscriptions/1/resourceGroups/rg-id/providers/Microsoft.ManagedIdentity/userAssignedIdentities/gpu"
    identity = {"type": "user_assigned", "user_assigned_identities": [{"resource_id": uai}]}
    plan = plan_variant(lambda c: c[f"{NS}:clusters"][0].update(identity=identity))
    assert only(plan, COMPUTE, "gpu-a100")["inputs"]["identity"]["type"] == "UserAssigned"
    assert not [r for r in plan.by_type("azure-native:authorization:RoleAssignment") if r.parent == "gpu-a100-access"]


def test_operator_ranges_open_the_storage_firewall_only_to_them(plan_variant: Variant) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:network"].update(operator_ip_ranges=["203.0.113.0/24"]))
    rules = only(plan, "azure-native:storage:StorageAccount")["inputs"]["networkRuleSet"]
    assert rules["defaultAction"] == "Deny"
    assert rules["ipRules"] == [{"action": "Allow", "iPAddressOrRange": "203.0.113.0/24"}]
