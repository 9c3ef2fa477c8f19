"""Rules for the workspace's dependencies: storage account, blob containers, key vault, container registry.

Sources: Checkov (CKV_AZURE_3, 34, 35, 42, 44, 109, 137, 139, 189, 190, CKV2_AZURE_40), PSRule for
Azure and the Azure ML network-isolation guide.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.rule import resource_rule
from policies.wire import get, inputs, is_false, is_true, known, same

STORAGE = "azure-native:storage:StorageAccount"
CONTAINER = "azure-native:storage:BlobContainer"
VAULT = "azure-native:keyvault:Vault"
REGISTRY = "azure-native:containerregistry:Registry"


@resource_rule(
    id="storage-no-public-blob-access",
    types=[STORAGE],
    title="Storage accounts forbid anonymous (public) blob access",
    severity="high",
    enforcement="mandatory",
    rationale="With allowBlobPublicAccess any container can be made readable by anyone on the Internet, "
    "datasets and checkpoints included (Checkov CKV_AZURE_190). Older API versions default it to true, so "
    "it must be set explicitly.",
    remediation="Set allowBlobPublicAccess: false on the storage account (the program does).",
    reference="https://learn.microsoft.com/en-us/azure/storage/blobs/anonymous-read-access-prevent",
)
def storage_no_public_blob_access(resource: Mapping[str, Any]) -> list[str]:
    value = get(inputs(resource), "allowBlobPublicAccess")
    if not known(value) or is_false(value):
        return []
    return ["anonymous blob access is " + ("allowed" if is_true(value) else "not explicitly disabled")]


@resource_rule(
    id="storage-https-only",
    types=[STORAGE],
    title="Storage accounts accept HTTPS only",
    severity="high",
    enforcement="mandatory",
    rationale="Plain-HTTP requests carry data and SAS tokens in clear text (Checkov CKV_AZURE_3).",
    remediation="Leave enableHttpsTrafficOnly unset (true) or set it to true.",
    reference="https://learn.microsoft.com/en-us/azure/storage/common/storage-require-secure-transfer",
)
def storage_https_only(resource: Mapping[str, Any]) -> list[str]:
    if is_false(get(inputs(resource), "enableHttpsTrafficOnly")):
        return ["enableHttpsTrafficOnly is false: plain HTTP is accepted"]
    return []


@resource_rule(
    id="storage-minimum-tls-1-2",
    types=[STORAGE],
    title="Storage accounts require TLS 1.2 or newer",
    severity="high",
    enforcement="mandatory",
    rationale="TLS 1.0 and 1.1 have known weaknesses and are retired by Azure Storage (Checkov CKV_AZURE_44).",
    remediation="Set minimumTlsVersion: TLS1_2 (the program does).",
    reference="https://learn.microsoft.com/en-us/azure/storage/common/transport-layer-security-configure-minimum-version",
)
def storage_minimum_tls(resource: Mapping[str, Any]) -> list[str]:
    value = get(inputs(resource), "minimumTlsVersion")
    if not known(value) or value in ("TLS1_2", "TLS1_3"):
        return []
    return [f"minimum TLS version is {value or 'not set'}; require TLS1_2"]


@resource_rule(
    id="storage-shared-key-disabled",
    types=[STORAGE],
    title="Storage accounts disable shared-key (account key) authorization",
    severity="medium",
    enforcement="advisory",
    rationale="Account keys grant full access to all data, never expire and leave no identity in the logs; "
    "with identity-based datastores nothing needs them (Checkov CKV2_AZURE_40).",
    remediation="Set allowSharedKeyAccess: false (the program does, with identity-based datastores).",
    reference="https://learn.microsoft.com/en-us/azure/storage/common/shared-key-authorization-prevent",
)
def storage_shared_key_disabled(resource: Mapping[str, Any]) -> list[str]:
    value = get(inputs(resource), "allowSharedKeyAccess")
    if not known(value) or is_false(value):
        return []
    return ["shared-key (account key) access is " + ("enabled" if is_true(value) else "not explicitly disabled")]


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
    id="storage-container-private",
    types=[CONTAINER],
    title="Blob containers are private",
    severity="high",
    enforcement="mandatory",
    rationale="A container with publicAccess Blob or Container is readable anonymously: environment build "
    "contexts may carry internal code and configuration (Checkov CKV_AZURE_34).",
    remediation="Set publicAccess: None on the container.",
    reference="https://learn.microsoft.com/en-us/azure/storage/blobs/anonymous-read-access-configure",
)
def storage_container_private(resource: Mapping[str, Any]) -> list[str]:
    access = get(inputs(resource), "publicAccess")
    if not known(access) or access is None or same(access, "None"):
        return []
    return [f"container public access is {access}"]


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
    id="key-vault-rbac-authorization",
    types=[VAULT],
    title="Key vaults use Azure RBAC instead of access policies",
    severity="medium",
    enforcement="advisory",
    rationale="RBAC authorization puts vault access in the same reviewed role assignments as everything else; "
    "access policies are a separate, coarser permission model (PSRule Azure.KeyVault.RBAC).",
    remediation="Set properties.enableRbacAuthorization: true (the program does).",
    reference="https://learn.microsoft.com/en-us/azure/key-vault/general/rbac-guide",
)
def key_vault_rbac_authorization(resource: Mapping[str, Any]) -> list[str]:
    value = get(inputs(resource), "properties.enableRbacAuthorization")
    if not known(value) or is_true(value):
        return []
    return ["the vault uses access policies, not Azure RBAC"]


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
    id="registry-admin-user-disabled",
    types=[REGISTRY],
    title="Container registries disable the admin user",
    severity="high",
    enforcement="mandatory",
    rationale="The admin user is a shared username/password with push rights, invisible in audit logs "
    "(Checkov CKV_AZURE_137, Azure Policy 'Container registries should have local admin account disabled').",
    remediation="Set adminUserEnabled: false and grant clusters AcrPull through their identity.",
    reference="https://learn.microsoft.com/en-us/azure/container-registry/container-registry-authentication"
    "#admin-account",
)
def registry_admin_user_disabled(resource: Mapping[str, Any]) -> list[str]:
    if is_true(get(inputs(resource), "adminUserEnabled")):
        return ["the admin user is enabled"]
    return []


@resource_rule(
    id="registry-anonymous-pull-disabled",
    types=[REGISTRY],
    title="Container registries disable anonymous pull",
    severity="medium",
    enforcement="mandatory",
    rationale="Anonymous pull makes every training image, and whatever it bakes in, public.",
    remediation="Set anonymousPullEnabled: false.",
    reference="https://learn.microsoft.com/en-us/azure/container-registry/anonymous-pull-access",
)
def registry_anonymous_pull_disabled(resource: Mapping[str, Any]) -> list[str]:
    if is_true(get(inputs(resource), "anonymousPullEnabled")):
        return ["anonymous pull is enabled"]
    return []


@resource_rule(
    id="registry-public-network-disabled",
    types=[REGISTRY],
    title="Container registries are not reachable from public networks",
    severity="high",
    enforcement="mandatory",
    rationale="Images carry code and sometimes data; the workspace registry should be reachable only through "
    "its private endpoint (Checkov CKV_AZURE_139).",
    remediation="Set publicNetworkAccess: Disabled (Premium SKU).",
    reference="https://learn.microsoft.com/en-us/azure/container-registry/container-registry-private-link",
)
def registry_public_network_disabled(resource: Mapping[str, Any]) -> list[str]:
    value = get(inputs(resource), "publicNetworkAccess")
    if not known(value) or same(value, "Disabled"):
        return []
    return [f"public network access is {value or 'Enabled (not set)'}"]


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
