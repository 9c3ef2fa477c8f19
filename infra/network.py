"""The Network component: the private network the clusters and private endpoints live in.

Either a new virtual network with one training subnet and its NSG, or an existing subnet
(``network.subnet_id``), in which case nothing is created and the subnet's owner keeps its rules.

A new training subnet is private (``defaultOutboundAccess: false``, Azure Policy 7bca8353 "Subnets should be
private"): nodes without public IPs still need an outbound path to Azure ML's service tags (Microsoft Learn,
"Secure an Azure Machine Learning training environment": "By default, a compute instance/cluster configured for no
public IP doesn't have outbound access to the internet ... we recommend using either a firewall ... or a NAT
gateway"), so the subnet goes out through ``network.nat_gateway_id`` or, by default, a NAT gateway the stack
creates with one static public address. ``network.default_outbound_access: true`` keeps Azure's default outbound
access instead (no NAT gateway; the subnet is not private).

Egress (``network.egress``; on by default for a high-business-impact workspace): the NSG denies outbound Internet
traffic below the service tags Azure ML needs and the team's own allow-list, so a job cannot send data anywhere
through the NAT gateway; ``Storage`` is allowed for the workspace's region only, and a service endpoint policy can
narrow it to the workspace's account and Azure ML's own (docs/operations.md, egress).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.network as network

from azurefacts import regions
from azurefacts.naming import arm_region
from stack.infrastructure import Network as NetworkConfig

TYPE = "aml-gpu-training:infra:Network"

# Outbound service tags a no-public-IP AmlCompute cluster must reach, listed explicitly so that Internet outbound
# can be denied below them (network.egress) without breaking training. "{region}" is the workspace's region as
# service tags spell it. Sources, MicrosoftDocs/azure-ai-docs @ 06fd8bc88853128ac9eab8a33464dae5f9b746d3:
# articles/machine-learning/how-to-secure-training-vnet.md, "Compute instance/cluster or serverless compute with
# no public IP": AzureMachineLearning TCP 443/8787/18881 and UDP 5831; BatchNodeManagement.<region> ANY 443;
# Storage.<region> TCP 443 (the storage account Azure Batch uses; the workspace's own storage is reached through
# its private endpoints, inside the network); how-to-prevent-data-loss-exfiltration.md, "Curated environments":
# MicrosoftContainerRegistry.<region> and AzureFrontDoor.FirstParty TCP 443 for mcr.microsoft.com images. Azure
# Resource Manager, Microsoft Entra ID, Key Vault, Container Registry and Azure Monitor: the firewall guide
# (how-to-access-azureml-behind-firewall.md), service tags without data a job could write elsewhere.
_OUTBOUND = (
    ("AzureMachineLearning", "Tcp", ["443", "8787", "18881"]),
    ("AzureMachineLearning", "Udp", ["5831"]),
    ("BatchNodeManagement.{region}", "*", ["443"]),
    ("AzureResourceManager", "Tcp", ["443"]),
    ("AzureActiveDirectory", "Tcp", ["443"]),
    ("Storage.{region}", "Tcp", ["443"]),
    ("AzureKeyVault", "Tcp", ["443"]),
    ("AzureContainerRegistry", "Tcp", ["443"]),
    ("MicrosoftContainerRegistry.{region}", "Tcp", ["443"]),
    ("AzureFrontDoor.FirstParty", "Tcp", ["443"]),
    ("AzureMonitor", "Tcp", ["443"]),
)
DENY_INTERNET_OUT = 4000
"""The priority of the outbound deny: below every allow (100 to 3990)."""
AML_ALIAS = "/services/Azure/MachineLearning"
"""The service endpoint policy alias holding the Microsoft-managed storage accounts Azure ML compute needs for its
provisioning (Microsoft Learn, "Azure Machine Learning data exfiltration prevention", step 1)."""


def service_tag_region(location: str) -> str:
    """A region as regional service tags spell it: its display name without spaces (``Storage.WestEurope``,
    ``BatchNodeManagement.EastUS2``; Microsoft Learn, "Virtual network service tags")."""
    name = arm_region(location)
    return regions.load().names.get(name, name).replace(" ", "")


def _rule(name: str, priority: int, destinations: list[str], protocol: str, ports: list[str],
          access: str = "Allow") -> network.SecurityRuleArgs:
    one = len(destinations) == 1
    return network.SecurityRuleArgs(
        name=name, priority=priority, direction="Outbound", access=access, protocol=protocol,
        source_address_prefix="VirtualNetwork", source_port_range="*",
        destination_address_prefix=destinations[0] if one else None,
        destination_address_prefixes=None if one else destinations,
        destination_port_range="*" if ports == ["*"] else None,
        destination_port_ranges=None if ports == ["*"] else ports,
    )


def outbound_rules(cfg: NetworkConfig, location: str, restrict: bool) -> list[network.SecurityRuleArgs]:
    """Azure ML's service tags, the team's allow-list, and (``restrict``) the Internet denied below them."""
    region = service_tag_region(location)
    rules = []
    for i, (tag, protocol, ports) in enumerate(_OUTBOUND):
        key = tag.split(".", 1)[0] if "{region}" in tag else tag
        kind = "any" if protocol == "*" else protocol.lower()
        rules.append(_rule(f"allow-{key.lower().replace('.', '-')}-{kind}-out", 100 + 10 * i,
                           [tag.format(region=region)], protocol, ports))
    first = 100 + 10 * len(_OUTBOUND)
    for i, allowed in enumerate(cfg.egress.allow):
        rules.append(_rule(f"allow-team-{allowed.name}-out", first + 10 * i, list(allowed.destinations),
                           allowed.protocol, [str(p) for p in allowed.ports]))
    if restrict:
        # Everything else to the Internet, the NAT gateway's way out, is refused (Learn's secure training guide:
        # outbound to Storage could otherwise carry data to any account).
        rules.append(_rule("deny-internet-out", DENY_INTERNET_OUT, ["Internet"], "*", ["*"], access="Deny"))
    return rules


@dataclass(frozen=True)
class NetworkArgs:
    config: NetworkConfig
    name_prefix: str
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str] | None = None
    restrict_egress: bool = False
    """Deny outbound Internet traffic below the allows (``network.egress.restricted``)."""
    storage_account_id: pulumi.Input[str] | None = None
    """The workspace's storage account: the service endpoint policy's first account."""


class Network(pulumi.ComponentResource):
    subnet_id: pulumi.Output[str]
    virtual_network_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        cfg = args.config
        if cfg.subnet_id is not None:
            self.subnet_id = pulumi.Output.from_input(cfg.subnet_id)
            self.virtual_network_id = pulumi.Output.from_input(cfg.subnet_id.split("/subnets/")[0])
            self.register_outputs({"subnetId": self.subnet_id, "virtualNetworkId": self.virtual_network_id})
            return

        child = pulumi.ResourceOptions(parent=self)
        rules = outbound_rules(cfg, args.location, args.restrict_egress)
        # Nothing from the Internet reaches the nodes: SSH is off and there are no public IPs, and this
        # rule keeps it so even if someone attaches a public IP later.
        rules.append(
            network.SecurityRuleArgs(
                name="deny-internet-in",
                priority=4000,
                direction="Inbound",
                access="Deny",
                protocol="*",
                source_address_prefix="Internet",
                source_port_range="*",
                destination_address_prefix="*",
                destination_port_range="*",
            )
        )
        nsg = network.NetworkSecurityGroup(
            f"{args.name_prefix}-nsg",
            network_security_group_name=f"nsg-{args.name_prefix}-training",
            resource_group_name=args.resource_group_name,
            location=args.location,
            security_rules=rules,
            tags=args.tags,
            opts=child,
        )
        vnet = network.VirtualNetwork(
            f"{args.name_prefix}-vnet",
            virtual_network_name=f"vnet-{args.name_prefix}",
            resource_group_name=args.resource_group_name,
            location=args.location,
            address_space=network.AddressSpaceArgs(address_prefixes=[cfg.address_space]),
            tags=args.tags,
            # Subnets are separate resources; don't let the VNet's own (empty) list fight them.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
        )
        nat_gateway_id: pulumi.Input[str] | None = cfg.nat_gateway_id
        if cfg.creates_nat_gateway:
            address = network.PublicIPAddress(
                f"{args.name_prefix}-nat-ip",
                public_ip_address_name=f"pip-{args.name_prefix}-nat",
                resource_group_name=args.resource_group_name,
                location=args.location,
                sku=network.PublicIPAddressSkuArgs(name="Standard", tier="Regional"),
                public_ip_allocation_method="Static",
                public_ip_address_version="IPv4",
                tags=args.tags,
                opts=child,
            )
            nat_gateway_id = network.NatGateway(
                f"{args.name_prefix}-nat",
                nat_gateway_name=f"nat-{args.name_prefix}",
                resource_group_name=args.resource_group_name,
                location=args.location,
                sku=network.NatGatewaySkuArgs(name="Standard"),
                public_ip_addresses=[network.SubResourceArgs(id=address.id)],
                tags=args.tags,
                opts=child,
            ).id
        endpoint_policy = None
        if cfg.egress.storage_endpoint_policy:
            accounts: list[pulumi.Input[str]] = [a for a in (args.storage_account_id,) if a is not None]
            endpoint_policy = network.ServiceEndpointPolicy(
                f"{args.name_prefix}-storage-policy",
                service_endpoint_policy_name=f"sep-{args.name_prefix}-storage",
                resource_group_name=args.resource_group_name,
                location=args.location,
                service_endpoint_policy_definitions=[
                    network.ServiceEndpointPolicyDefinitionArgs(
                        name="storage-accounts", service="Microsoft.Storage",
                        description="The workspace's storage account and the accounts the stack lists",
                        service_resources=[*accounts, *cfg.egress.storage_accounts],
                    ),
                    network.ServiceEndpointPolicyDefinitionArgs(
                        name="azure-machine-learning", service="Global",
                        description="Microsoft-managed storage Azure ML compute needs to provision",
                        service_resources=[AML_ALIAS],
                    ),
                ],
                tags=args.tags,
                opts=child,
            )
        subnet = network.Subnet(
            f"{args.name_prefix}-training-subnet",
            subnet_name="training",
            resource_group_name=args.resource_group_name,
            virtual_network_name=vnet.name,
            address_prefix=cfg.subnet_prefix,
            network_security_group=network.NetworkSecurityGroupArgs(id=nsg.id),
            private_endpoint_network_policies="Disabled",
            # Private (no default outbound): the NAT gateway carries outbound traffic.
            default_outbound_access=cfg.subnet_default_outbound,
            nat_gateway=network.SubResourceArgs(id=nat_gateway_id) if nat_gateway_id is not None else None,
            service_endpoints=[
                network.ServiceEndpointPropertiesFormatArgs(service="Microsoft.Storage"),
                network.ServiceEndpointPropertiesFormatArgs(service="Microsoft.KeyVault"),
            ],
            service_endpoint_policies=[network.ServiceEndpointPolicyArgs(id=endpoint_policy.id)]
            if endpoint_policy is not None else None,
            # Azure sets defaultOutboundAccess only when it creates the subnet.
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["defaultOutboundAccess"]),
        )
        self.subnet_id = subnet.id
        self.virtual_network_id = vnet.id
        self.register_outputs({"subnetId": subnet.id, "virtualNetworkId": vnet.id, "nsgId": nsg.id})
