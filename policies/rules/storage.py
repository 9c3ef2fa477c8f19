"""Rules for the workspace's dependencies: storage account, blob containers, key vault, container registry.

Sources: Checkov (CKV_AZURE_3, 34, 35, 42, 44, 109, 137, 139, 189, 190, CKV2_AZURE_40), PSRule for
Azure and the Azure ML network-isolation guide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from azurefacts.resource_types import CONTAINER_REGISTRY as REGISTRY
from azurefacts.resource_types import KEY_VAULT as VAULT
from azurefacts.resource_types import STORAGE_ACCOUNT as STORAGE
from policies.rule import resource_rule
from policies.wire import get, inputs, is_false, is_true, known, same


@resource_rule(
    id="storage-network-default-deny",
    types=[STORAGE],
    title="Storage accounts deny public network traffic by default",
    severity="high",
    enforcement="mandatory",
    rationale="A storage firewall that allows by default exposes the workspace's datastores to every network "
    "(Checkov CKV_AZURE_35); private endpoints and listed operator ranges are the only ways in that are needed.",
    remediation="Set networkRuleSet.defaultAction: Deny (the program does) or publicNetworkAccess: Disabled.",
    reference="https://learn.microsoft.com/en-us/azure/storage/common/storage-network-security",
)
def storage_network_default_deny(resource: Mapping[str, Any]) -> list[str]:
    props = inputs(resource)
    if same(get(props, "publicNetworkAccess"), "Disabled"):
        return []
    action = get(props, "networkRuleSet.defaultAction")
    if not known(action) or same(action, "Deny"):
        return []
    return [f"the storage firewall's default action is {action or 'Allow (not set)'}"]


@resource_rule(
    id="key-vault-purge-protection",
    types=[VAULT],
    title="Key vaults have soft delete and purge protection",
    severity="high",
    enforcement="mandatory",
    rationale="Without soft delete and purge protection a deleted or purged vault takes the workspace's "
    "secrets (and a customer-managed key) with it for good (Checkov CKV_AZURE_42; required for CMK workspaces).",
    remediation="Set properties.enableSoftDelete: true and properties.enablePurgeProtection: true.",
    reference="https://learn.microsoft.com/en-us/azure/key-vault/general/soft-delete-overview",
)
def key_vault_purge_protection(resource: Mapping[str, Any]) -> list[str]:
    props = get(inputs(resource), "properties", {})
    out = []
    if is_false(get(props, "enableSoftDelete")):
        out.append("soft delete is disabled")
    purge = get(props, "enablePurgeProtection")
    if known(purge) and not is_true(purge):
        out.append("purge protection is not enabled")
    return out


@resource_rule(
    id="key-vault-public-network-disabled",
    types=[VAULT],
    title="Key vaults are not reachable from public networks",
    severity="high",
    enforcement="mandatory",
    rationale="The workspace key vault holds connection secrets; it should only be reachable through its "
    "private endpoint (Checkov CKV_AZURE_189 / CKV_AZURE_109).",
    remediation="Set properties.publicNetworkAccess: Disabled, or networkAcls.defaultAction: Deny.",
    reference="https://learn.microsoft.com/en-us/azure/key-vault/general/network-security",
)
def key_vault_public_network_disabled(resource: Mapping[str, Any]) -> list[str]:
    props = get(inputs(resource), "properties", {})
    access = get(props, "publicNetworkAccess")
    action = get(props, "networkAcls.defaultAction")
    if same(access, "Disabled") or same(action, "Deny") or not known(access) or not known(action):
        return []
    return [f"public network access is {access or 'Enabled (not set)'} and the firewall allows by default"]


@resource_rule(
    id="registry-sku-supports-private-link",
    types=[REGISTRY],
    title="Registries without public access are Premium",
    severity="high",
    enforcement="mandatory",
    rationale="Only the Premium tier supports private endpoints and disabling public access; on Basic or "
    "Standard the deployment fails or the registry stays public.",
    remediation="Set sku.name: Premium.",
    reference="https://learn.microsoft.com/en-us/azure/container-registry/container-registry-skus",
)
def registry_sku_supports_private_link(resource: Mapping[str, Any]) -> list[str]:
    props = inputs(resource)
    sku = get(props, "sku.name")
    if not same(get(props, "publicNetworkAccess"), "Disabled") or not known(sku) or same(sku, "Premium"):
        return []
    return [f"public access is disabled but the SKU is {sku or 'not set'}, which has no private link"]
