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
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.network as network

from stack.infrastructure import Network as NetworkConfig

TYPE = "aml-gpu-training:infra:Network"

# Outbound service tags a no-public-IP AmlCompute cluster must reach (Azure ML "configure inbound and
# outbound network traffic"); listed explicitly so an organisation-wide "deny Internet outbound" rule
# can sit below them without breaking training.
_OUTBOUND = (
    ("AzureMachineLearning", "Tcp", ["443", "8787", "18881"]),
    ("AzureMachineLearning", "Udp", ["5831"]),
    ("BatchNodeManagement", "Tcp", ["443"]),
    ("AzureResourceManager", "Tcp", ["443"]),
    ("AzureActiveDirectory", "Tcp", ["443"]),
    ("Storage", "Tcp", ["443", "445"]),
    ("AzureKeyVault", "Tcp", ["443"]),
    ("AzureContainerRegistry", "Tcp", ["443"]),
    ("MicrosoftContainerRegistry", "Tcp", ["443"]),
    ("AzureFrontDoor.FirstParty", "Tcp", ["443"]),
    ("AzureMonitor", "Tcp", ["443"]),
)


@dataclass(frozen=True)
class NetworkArgs:
    config: NetworkConfig
    name_prefix: str
    resource_group_name: pulumi.Input[str]
    location: str
    tags: dict[str, str] | None = None


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
        rules = [
            network.SecurityRuleArgs(
                name=f"allow-{tag.lower().replace('.', '-')}-{protocol.lower()}-out",
                priority=100 + 10 * i,
                direction="Outbound",
                access="Allow",
                protocol=protocol,
                source_address_prefix="VirtualNetwork",
                source_port_range="*",
                destination_address_prefix=tag,
                destination_port_ranges=ports,
            )
            for i, (tag, protocol, ports) in enumerate(_OUTBOUND)
        ]
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
            # Azure sets defaultOutboundAccess only when it creates the subnet.
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["defaultOutboundAccess"]),
        )
        self.subnet_id = subnet.id
        self.virtual_network_id = vnet.id
        self.register_outputs({"subnetId": subnet.id, "virtualNetworkId": vnet.id, "nsgId": nsg.id})
