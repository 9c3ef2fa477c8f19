"""Pulumi azure-native type tokens of the resources the stack creates or the rules read: each written once.

A token is ``azure-native:<module>:<Resource>``, as the provider's schema names it (pulumi/pulumi-azure-native;
each resource's Pulumi Registry page, e.g. https://www.pulumi.com/registry/packages/azure-native/api-docs/
machinelearningservices/compute/). :data:`CREATED` are the types the program creates:
tests/azurefacts/test_resource_types.py ties them to the types of a planned stack's ``resources.json``.
"""

from __future__ import annotations

RESOURCE_GROUP = "azure-native:resources:ResourceGroup"
LOG_ANALYTICS_WORKSPACE = "azure-native:operationalinsights:Workspace"
APPLICATION_INSIGHTS = "azure-native:applicationinsights:Component"
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"
KEY_VAULT = "azure-native:keyvault:Vault"
CONTAINER_REGISTRY = "azure-native:containerregistry:Registry"
WORKSPACE = "azure-native:machinelearningservices:Workspace"
COMPUTE = "azure-native:machinelearningservices:Compute"
ENVIRONMENT_CONTAINER = "azure-native:machinelearningservices:EnvironmentContainer"
ENVIRONMENT_VERSION = "azure-native:machinelearningservices:EnvironmentVersion"
VIRTUAL_NETWORK = "azure-native:network:VirtualNetwork"
SUBNET = "azure-native:network:Subnet"
NETWORK_SECURITY_GROUP = "azure-native:network:NetworkSecurityGroup"
NAT_GATEWAY = "azure-native:network:NatGateway"
PUBLIC_IP_ADDRESS = "azure-native:network:PublicIPAddress"
PRIVATE_ENDPOINT = "azure-native:network:PrivateEndpoint"
PRIVATE_DNS_ZONE_GROUP = "azure-native:network:PrivateDnsZoneGroup"
PRIVATE_DNS_ZONE = "azure-native:privatedns:PrivateZone"
PRIVATE_DNS_ZONE_LINK = "azure-native:privatedns:VirtualNetworkLink"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
DIAGNOSTIC_SETTING = "azure-native:monitor:DiagnosticSetting"

CREATED = frozenset({
    RESOURCE_GROUP, LOG_ANALYTICS_WORKSPACE, APPLICATION_INSIGHTS, STORAGE_ACCOUNT, BLOB_CONTAINER, KEY_VAULT,
    CONTAINER_REGISTRY, WORKSPACE, COMPUTE, ENVIRONMENT_CONTAINER, ENVIRONMENT_VERSION, VIRTUAL_NETWORK, SUBNET,
    NETWORK_SECURITY_GROUP, NAT_GATEWAY, PUBLIC_IP_ADDRESS, PRIVATE_ENDPOINT, PRIVATE_DNS_ZONE_GROUP, PRIVATE_DNS_ZONE,
    PRIVATE_DNS_ZONE_LINK, ROLE_ASSIGNMENT, DIAGNOSTIC_SETTING,
})
"""Every azure-native type the program creates (the dev stack creates each of them)."""

MANAGEMENT_LOCK = "azure-native:authorization:ManagementLockByScope"
SERVICE_ENDPOINT_POLICY = "azure-native:network:ServiceEndpointPolicy"
CREATED_WHEN_ASKED = frozenset({MANAGEMENT_LOCK, SERVICE_ENDPOINT_POLICY})
"""Types the program creates only when a stack asks (``workspace.lock``, ``network.egress.storage_endpoint_policy``)."""

# Types the rules also read, which the program does not create.
SECURITY_RULE = "azure-native:network:SecurityRule"
"""A network security group's rule declared as its own resource (the program declares them inline)."""
INSIGHTS_DIAGNOSTIC_SETTING = "azure-native:insights:DiagnosticSetting"
"""The diagnostic setting under its azure-native v2 module (``azure-native.insights``; ``monitor`` since v3)."""
USER_ASSIGNED_IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"
"""A user-assigned identity created in the stack (the program looks existing ones up)."""

# Functions (invokes) the offline plan answers.
GET_CLIENT_CONFIG = "azure-native:authorization:getClientConfig"
GET_USER_ASSIGNED_IDENTITY = "azure-native:managedidentity:getUserAssignedIdentity"
