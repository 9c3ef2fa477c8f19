"""Workspace rules: network exposure, private link, encryption, identity, logs, and what a private
workspace needs to work (an image-build cluster, private endpoints for its dependencies).

Sources: Azure Policy built-ins of category "Machine Learning", Checkov (CKV_AZURE_144,
CKV2_AZURE_49, CKV_AZURE_243, CKV2_AZURE_50) and PSRule for Azure (Azure.ML.*).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from azurefacts.resource_types import (
    APPLICATION_INSIGHTS,
    COMPUTE,
    DIAGNOSTIC_SETTING,
    ENVIRONMENT_VERSION,
    INSIGHTS_DIAGNOSTIC_SETTING,
    LOG_ANALYTICS_WORKSPACE,
    NAT_GATEWAY,
    NETWORK_SECURITY_GROUP,
    PRIVATE_DNS_ZONE,
    PRIVATE_DNS_ZONE_LINK,
    PRIVATE_ENDPOINT,
    PUBLIC_IP_ADDRESS,
    RESOURCE_GROUP,
    VIRTUAL_NETWORK,
    WORKSPACE,
)
from azurefacts.resource_types import CONTAINER_REGISTRY as REGISTRY
from azurefacts.resource_types import KEY_VAULT as VAULT
from azurefacts.resource_types import STORAGE_ACCOUNT as STORAGE
from policies.rule import Message, Violation, resource_rule, stack_rule
from policies.stack import Stack
from policies.wire import get, inputs, is_true, known, same

DIAGNOSTIC_SETTINGS = (DIAGNOSTIC_SETTING, INSIGHTS_DIAGNOSTIC_SETTING)

AML_POLICIES = "https://learn.microsoft.com/en-us/azure/machine-learning/policy-reference"
PSRULE = "https://azure.github.io/PSRule.Rules.Azure/en/rules/"
CHECKOV_AZURE = "https://www.checkov.io/5.Policy%20Index/azure.html"


def _private(workspace: Mapping[str, Any]) -> bool:
    return same(get(inputs(workspace), "publicNetworkAccess"), "Disabled")


def _managed_isolation(workspace: Mapping[str, Any]) -> str | None:
    mode = get(inputs(workspace), "managedNetwork.isolationMode")
    return mode if isinstance(mode, str) and not same(mode, "Disabled") else None


@resource_rule(
    id="workspace-managed-network-private-endpoint-rule",
    types=[WORKSPACE],
    title="A workspace managed network reaches its dependencies through private-endpoint outbound rules",
    severity="medium",
    enforcement="mandatory",
    rationale="With a managed VNet, outbound traffic to storage, key vault and registry should go through "
    "private-endpoint outbound rules, not public service endpoints (Checkov CKV_AZURE_243).",
    remediation="Add an outbound rule of type PrivateEndpoint to managedNetwork.outboundRules, or use the "
    "stack's own VNet with private endpoints (the program's default).",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-managed-network",
)
def workspace_managed_network_private_endpoint_rule(resource: Mapping[str, Any]) -> list[str]:
    mode = _managed_isolation(resource)
    if mode is None:
        return []
    rules = get(inputs(resource), "managedNetwork.outboundRules", {})
    if not known(rules):
        return []
    values = rules.values() if isinstance(rules, Mapping) else rules
    if any(same(get(rule, "type"), "PrivateEndpoint") for rule in values if isinstance(rule, Mapping)):
        return []
    return [f"managed network ({mode}) has no PrivateEndpoint outbound rule"]


@stack_rule(
    id="workspace-private-link",
    title="Private workspaces are reachable through an approved private endpoint",
    severity="high",
    enforcement="mandatory",
    rationale="A workspace without public access and without a private endpoint (or an approved-outbound "
    "managed VNet) cannot be used at all; with one, traffic stays on the Microsoft backbone (Azure Policy "
    "'Azure Machine Learning workspaces should use private link').",
    remediation="Keep the program's private endpoint for the workspace (group id amlworkspace), or set a "
    "managed network with isolationMode AllowOnlyApprovedOutbound.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-configure-private-link",
    config_key=("public_network_access",),
)
def workspace_private_link(stack: Stack) -> list[Violation]:
    out = []
    for workspace in stack.of_type(WORKSPACE):
        if same(_managed_isolation(workspace), "AllowOnlyApprovedOutbound"):
            continue
        if not _endpoints_for(stack, "amlworkspace", "Microsoft.MachineLearningServices/workspaces"):
            out.append(Violation(workspace, "no private endpoint (group id amlworkspace) targets the workspace"))
    return out


def _endpoints_for(stack: Stack, group_id: str, provider_path: str) -> list[Mapping[str, Any]]:
    """Private endpoints for ``group_id`` whose target (when known) is of the ``provider_path`` type."""
    found = []
    for endpoint in stack.of_type(PRIVATE_ENDPOINT):
        connections = [
            *get(inputs(endpoint), "privateLinkServiceConnections", []),
            *get(inputs(endpoint), "manualPrivateLinkServiceConnections", []),
        ]
        for connection in connections:
            target = get(connection, "privateLinkServiceId")
            groups = [g.lower() for g in get(connection, "groupIds", []) if isinstance(g, str)]
            if group_id.lower() in groups and (
                not isinstance(target, str) or not known(target) or f"/{provider_path.lower()}/" in target.lower()
            ):
                found.append(endpoint)
    return found


# Sub-resources a private workspace's dependencies must expose privately, with Azure's group ids.
_DEPENDENCY_ENDPOINTS: tuple[tuple[str, str, str, str], ...] = (
    (STORAGE, "blob", "Microsoft.Storage/storageAccounts", "storage account (blob)"),
    (STORAGE, "file", "Microsoft.Storage/storageAccounts", "storage account (file)"),
    (VAULT, "vault", "Microsoft.KeyVault/vaults", "key vault"),
    (REGISTRY, "registry", "Microsoft.ContainerRegistry/registries", "container registry"),
)


@stack_rule(
    id="workspace-dependencies-private-endpoints",
    title="A private workspace's storage, key vault and registry have private endpoints",
    severity="high",
    enforcement="mandatory",
    rationale="Jobs on clusters without public IPs read the default datastore (blob and file), secrets and "
    "images through the VNet. Without a private endpoint for each, a private workspace fails to start jobs "
    "or build environments.",
    remediation="Keep the program's private endpoints for storage blob and file, key vault and registry.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-secure-workspace-vnet",
)
def workspace_dependencies_private_endpoints(stack: Stack) -> list[Violation]:
    out = []
    for workspace in stack.of_type(WORKSPACE):
        if not _private(workspace):
            continue
        for token, group_id, provider_path, what in _DEPENDENCY_ENDPOINTS:
            if stack.of_type(token) and not _endpoints_for(stack, group_id, provider_path):
                out.append(Violation(workspace, f"the {what} has no private endpoint (group id {group_id})"))
    return out


def _targets(setting: Mapping[str, Any], workspace: Mapping[str, Any], stack: Stack) -> bool:
    uri = get(inputs(setting), "resourceUri")
    name = get(inputs(workspace), "workspaceName") or workspace["name"]
    if isinstance(uri, str) and known(uri):
        return uri.lower().endswith(f"/microsoft.machinelearningservices/workspaces/{str(name).lower()}")
    # Unknown until the workspace exists: the setting belongs to the workspace it was declared with.
    return stack.owner(setting) == stack.owner(workspace)


@stack_rule(
    id="workspace-diagnostic-logs",
    title="Workspace resource logs are sent to a Log Analytics workspace or storage",
    severity="medium",
    enforcement="mandatory",
    rationale="Without diagnostic settings, who ran, read or changed what in the workspace is lost after a few "
    "days (Azure Policy 'Resource logs in Azure Machine Learning Workspaces should be enabled').",
    remediation="Keep the program's diagnostic setting (allLogs to the stack's Log Analytics workspace).",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/monitor-azure-machine-learning",
    config_key=("log_retention_days",),
)
def workspace_diagnostic_logs(stack: Stack) -> list[Violation]:
    out = []
    for workspace in stack.of_type(WORKSPACE):
        settings = [s for s in stack.of_type(*DIAGNOSTIC_SETTINGS) if _targets(s, workspace, stack)]
        good = [
            s for s in settings
            if any(is_true(get(log, "enabled")) for log in get(inputs(s), "logs", []))
            and any(get(inputs(s), key) for key in ("workspaceId", "storageAccountId", "eventHubAuthorizationRuleId"))
        ]
        if not good:
            problem = "sends no enabled log category anywhere" if settings else "has no diagnostic setting"
            out.append(Violation(workspace, f"the workspace {problem}"))
    return out


def _storage_of(workspace: Mapping[str, Any], stack: Stack) -> list[Mapping[str, Any]]:
    account_id = get(inputs(workspace), "storageAccount")
    accounts = stack.of_type(STORAGE)
    if isinstance(account_id, str) and known(account_id):
        named = [a for a in accounts if account_id.lower().endswith(f"/{str(get(inputs(a), 'accountName')).lower()}")]
        if named:
            return named
    return [a for a in accounts if stack.owner(a) == stack.owner(workspace)]


@stack_rule(
    id="workspace-hbi-storage-private",
    title="A high-business-impact workspace's storage account is not publicly accessible",
    severity="high",
    enforcement="mandatory",
    rationale="A workspace flagged high business impact holds sensitive data in its default storage; that "
    "account must not accept traffic from public networks (Checkov CKV2_AZURE_50).",
    remediation="Set publicNetworkAccess: Disabled on the storage account, or deny by default with no IP "
    "rules (remove network.operator_ip_ranges from the stack).",
    reference=CHECKOV_AZURE,
    config_key=("high_business_impact",),
)
def workspace_hbi_storage_private(stack: Stack) -> list[Violation]:
    out = []
    for workspace in stack.of_type(WORKSPACE):
        if not is_true(get(inputs(workspace), "hbiWorkspace")):
            continue
        for account in _storage_of(workspace, stack):
            props = inputs(account)
            if same(get(props, "publicNetworkAccess"), "Disabled"):
                continue
            denies = same(get(props, "networkRuleSet.defaultAction"), "Deny")
            ip_rules = get(props, "networkRuleSet.ipRules", [])
            if denies and not ip_rules:
                continue
            why = f"its firewall admits {len(ip_rules)} public IP range(s)" if denies else "it allows public traffic"
            # The text counts the ranges; a waiver binds to each of them.
            ranges = [str(get(r, "iPAddressOrRange", "")) for r in ip_rules or [] if isinstance(r, Mapping)]
            out.append(Violation(account, Message(f"storage account of a high-business-impact workspace: {why}",
                                                  (why, *ranges))))
    return out


@stack_rule(
    id="workspace-image-build-compute",
    title="A private workspace that builds environments names a cluster to build them on",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML builds Docker-context and conda environments on a shared pool that cannot reach a "
    "private workspace's registry and storage; the build fails unless imageBuildCompute names a cluster in "
    "the VNet.",
    remediation="Keep workspace.image_build_compute (the program creates that cluster for private workspaces).",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-secure-workspace-vnet"
    "#enable-azure-container-registry-acr",
    config_key=("image_build_compute",),
)
def workspace_image_build_compute(stack: Stack) -> list[Violation]:
    builds = [
        e for e in stack.of_type(ENVIRONMENT_VERSION)
        if get(inputs(e), "properties.build") or get(inputs(e), "properties.condaFile")
    ]
    if not builds:
        return []
    computes = {str(get(inputs(c), "computeName", c["name"])).lower() for c in stack.of_type(COMPUTE)}
    out = []
    for workspace in stack.of_type(WORKSPACE):
        if not _private(workspace):
            continue
        builder = get(inputs(workspace), "imageBuildCompute")
        if not builder:
            out.append(Violation(workspace, f"{len(builds)} environment(s) need an image build, but "
                                            "imageBuildCompute is not set"))
        elif known(builder) and str(builder).lower() not in computes:
            out.append(Violation(workspace, f"imageBuildCompute names {builder!r}, which is not a cluster of "
                                            "this stack"))
    return out




TAGGABLE = (
    RESOURCE_GROUP,
    LOG_ANALYTICS_WORKSPACE,
    APPLICATION_INSIGHTS,
    STORAGE,
    VAULT,
    REGISTRY,
    WORKSPACE,
    COMPUTE,
    NETWORK_SECURITY_GROUP,
    VIRTUAL_NETWORK,
    NAT_GATEWAY,
    PUBLIC_IP_ADDRESS,
    PRIVATE_ENDPOINT,
    PRIVATE_DNS_ZONE,
    PRIVATE_DNS_ZONE_LINK,
)
"""Types the stack creates that carry ARM tags (role assignments, subnets, zone groups, diagnostic settings and
blob containers have none)."""


@stack_rule(
    id="required-tags",
    title="Every taggable resource carries the required tags",
    severity="medium",
    enforcement="advisory",
    rationale="Azure Policy 'Require a tag on resources' (871b6d14-10aa-478d-b590-94f262ecfa99, Deny) refuses any "
    "resource without the tag, and cost reports lose what is untagged. The required names are the rule's `tags` "
    "parameter, or by default every tag the workspace carries: the stack's tags must reach clusters, private "
    "endpoints and DNS zones too.",
    remediation="Put the tag in workspace.tags: the program sets the workspace's tags on every taggable resource.",
    reference="https://learn.microsoft.com/en-us/azure/governance/policy/samples/built-in-policies#tags",
)
def required_tags(stack: Stack, *, tags: tuple[str, ...] = ()) -> list[Violation]:
    required = set(tags)
    if not required:
        for workspace in stack.of_type(WORKSPACE):
            carried = get(inputs(workspace), "tags", {})
            required |= set(carried) if isinstance(carried, Mapping) else set()
    out = []
    for resource in stack.of_type(*TAGGABLE):
        carried = get(inputs(resource), "tags", {})
        if not known(carried):
            continue
        missing = sorted(required - set(carried if isinstance(carried, Mapping) else {}))
        if missing:
            out.append(Violation(resource, f"{resource['type'].rsplit(':', 1)[-1]} {resource['name']!r} lacks "
                                           f"tag(s) {', '.join(missing)}"))
    return out
