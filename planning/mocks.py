"""Pulumi mocks that answer as Azure would: resource ids in ARM's format and the computed outputs the
program reads (principal ids, names, endpoints), all derived deterministically from the inputs.

They stand in for Azure only. The program, its components and the Pulumi SDK run for real.
"""

from __future__ import annotations

import uuid
from typing import Any

import pulumi

from azurefacts import resource_types
from azurefacts.ids import UNKNOWN_SUBSCRIPTION

SUBSCRIPTION_ID = UNKNOWN_SUBSCRIPTION
TENANT_ID = "11111111-1111-1111-1111-111111111111"
BUILD_CONTEXT_UPLOAD = "pulumi-python:dynamic/amlgpu:BuildContextUpload"
ROLES_EFFECTIVE = "pulumi-python:dynamic/amlgpu:RolesEffective"
_IDS = uuid.UUID("0b7a64c4-3c0e-4a5f-8f8e-0e6f3c5a9d21")

# type token -> (ARM provider/type path, the input holding the resource's own name)
_ARM: dict[str, tuple[str, str]] = {
    resource_types.RESOURCE_GROUP: ("", "resourceGroupName"),
    resource_types.LOG_ANALYTICS_WORKSPACE: ("Microsoft.OperationalInsights/workspaces", "workspaceName"),
    resource_types.APPLICATION_INSIGHTS: ("Microsoft.Insights/components", "resourceName"),
    resource_types.STORAGE_ACCOUNT: ("Microsoft.Storage/storageAccounts", "accountName"),
    resource_types.BLOB_CONTAINER: (
        "Microsoft.Storage/storageAccounts/{accountName}/blobServices/default/containers",
        "containerName",
    ),
    resource_types.KEY_VAULT: ("Microsoft.KeyVault/vaults", "vaultName"),
    resource_types.CONTAINER_REGISTRY: ("Microsoft.ContainerRegistry/registries", "registryName"),
    resource_types.WORKSPACE: (
        "Microsoft.MachineLearningServices/workspaces",
        "workspaceName",
    ),
    resource_types.COMPUTE: (
        "Microsoft.MachineLearningServices/workspaces/{workspaceName}/computes",
        "computeName",
    ),
    resource_types.ENVIRONMENT_CONTAINER: (
        "Microsoft.MachineLearningServices/workspaces/{workspaceName}/environments",
        "name",
    ),
    resource_types.ENVIRONMENT_VERSION: (
        "Microsoft.MachineLearningServices/workspaces/{workspaceName}/environments/{name}/versions",
        "version",
    ),
    resource_types.VIRTUAL_NETWORK: ("Microsoft.Network/virtualNetworks", "virtualNetworkName"),
    resource_types.SUBNET: ("Microsoft.Network/virtualNetworks/{virtualNetworkName}/subnets", "subnetName"),
    resource_types.NETWORK_SECURITY_GROUP: (
        "Microsoft.Network/networkSecurityGroups",
        "networkSecurityGroupName",
    ),
    resource_types.PRIVATE_ENDPOINT: ("Microsoft.Network/privateEndpoints", "privateEndpointName"),
    resource_types.NAT_GATEWAY: ("Microsoft.Network/natGateways", "natGatewayName"),
    resource_types.PUBLIC_IP_ADDRESS: ("Microsoft.Network/publicIPAddresses", "publicIpAddressName"),
    resource_types.SERVICE_ENDPOINT_POLICY: (
        "Microsoft.Network/serviceEndpointPolicies",
        "serviceEndpointPolicyName",
    ),
    resource_types.PRIVATE_DNS_ZONE_GROUP: (
        "Microsoft.Network/privateEndpoints/{privateEndpointName}/privateDnsZoneGroups",
        "privateDnsZoneGroupName",
    ),
    resource_types.PRIVATE_DNS_ZONE: ("Microsoft.Network/privateDnsZones", "privateZoneName"),
    resource_types.PRIVATE_DNS_ZONE_LINK: (
        "Microsoft.Network/privateDnsZones/{privateZoneName}/virtualNetworkLinks",
        "virtualNetworkLinkName",
    ),
}


def subscription_id() -> str:
    """The provider's subscription: ``azure-native:subscriptionId`` when the stack sets it."""
    return pulumi.Config("azure-native").get("subscriptionId") or SUBSCRIPTION_ID


def _guid(*parts: str) -> str:
    return str(uuid.uuid5(_IDS, "/".join(parts)))


DEPLOYER_OBJECT_ID = _guid("operator")
"""The object id ``getClientConfig`` answers for the principal running the plan."""


def user_assigned_principal(identity_id: str) -> str:
    """The principal (object) id Azure answers for the user-assigned identity ``identity_id``."""
    return _guid(identity_id, "principal")


def arm_id(token: str, name: str, inputs: dict[str, Any]) -> str:
    """The ARM id Azure would give the resource (scoped resources hang off their ``scope``/``resourceUri``)."""
    if token == resource_types.ROLE_ASSIGNMENT:
        return f"{inputs['scope']}/providers/Microsoft.Authorization/roleAssignments/{inputs['roleAssignmentName']}"
    if token == BUILD_CONTEXT_UPLOAD:
        # The dynamic provider's id: the context's URI.
        return f"https://{inputs['accountName']}.blob.core.windows.net/{inputs['containerName']}/{inputs['prefix']}"
    if token == resource_types.MANAGEMENT_LOCK:
        return f"{inputs['scope']}/providers/Microsoft.Authorization/locks/{inputs['lockName']}"
    if token == ROLES_EFFECTIVE:
        # The dynamic provider's id (infra.role_wait): no Azure resource.
        return f"roles-effective-{len(inputs.get('assignmentIds') or [])}"
    if token == resource_types.DIAGNOSTIC_SETTING:
        return f"{inputs['resourceUri']}/providers/Microsoft.Insights/diagnosticSettings/{inputs.get('name', name)}"
    path, name_key = _ARM.get(token, ("", ""))
    group = f"/subscriptions/{subscription_id()}/resourceGroups/{inputs.get('resourceGroupName', name)}"
    if not path:
        return group
    own = inputs.get(name_key) or name
    return f"{group}/providers/{path.format_map(_Missing(inputs))}/{own}"


class _Missing(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> str:
        return key


def computed_outputs(token: str, name: str, inputs: dict[str, Any], resource_id: str) -> dict[str, Any]:
    """Outputs Azure computes that the program or a submitter reads."""
    state: dict[str, Any] = {}
    _, name_key = _ARM.get(token, ("", "name"))
    state["name"] = inputs.get(name_key) or inputs.get("name") or name
    identity = inputs.get("identity")
    if isinstance(identity, dict):
        # Inputs list user-assigned identity ids; Azure answers with a map id -> {principalId, clientId}.
        state["identity"] = {
            **identity,
            "userAssignedIdentities": {
                uai: {"principalId": user_assigned_principal(uai), "clientId": _guid(uai, "client")}
                for uai in identity.get("userAssignedIdentities") or []
            },
        }
        if "SystemAssigned" in str(identity.get("type", "")):
            state["identity"].update(principalId=_guid(resource_id, "principal"), tenantId=TENANT_ID)
    if token == resource_types.STORAGE_ACCOUNT:
        account = state["name"]
        state["primaryEndpoints"] = {
            "blob": f"https://{account}.blob.core.windows.net/",
            "file": f"https://{account}.file.core.windows.net/",
        }
    elif token == resource_types.CONTAINER_REGISTRY:
        state["loginServer"] = f"{state['name']}.azurecr.io"
    elif token == resource_types.KEY_VAULT:
        state["properties"] = {**inputs.get("properties", {}), "vaultUri": f"https://{state['name']}.vault.azure.net/"}
    elif token == resource_types.WORKSPACE:
        state["workspaceId"] = _guid(resource_id, "workspace")
        state["discoveryUrl"] = f"https://{inputs.get('location', 'westeurope')}.api.azureml.ms/discovery"
    return state


class AzureMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if not args.custom:
            return None, {}
        resource_id = arm_id(args.typ, args.name, args.inputs)
        return resource_id, {**args.inputs, **computed_outputs(args.typ, args.name, args.inputs, resource_id)}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == resource_types.GET_CLIENT_CONFIG:
            return {
                "subscriptionId": subscription_id(),
                "tenantId": TENANT_ID,
                "clientId": _guid("client"),
                "objectId": DEPLOYER_OBJECT_ID,
            }, []
        if args.token == resource_types.GET_USER_ASSIGNED_IDENTITY:
            # Answers as Azure would for the identity named: its id, and the principal id the workspace's
            # identity output reports for it (computed_outputs).
            identity = (f"/subscriptions/{subscription_id()}/resourceGroups/{args.args['resourceGroupName']}"
                        f"/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{args.args['resourceName']}")
            return {"id": identity, "name": args.args["resourceName"], "principalId": user_assigned_principal(identity),
                    "clientId": _guid(identity, "client"), "tenantId": TENANT_ID}, []
        raise NotImplementedError(f"the offline plan has no answer for the invoke {args.token}")
