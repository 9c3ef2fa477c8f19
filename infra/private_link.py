"""The PrivateLinks component: private endpoints that make a private workspace reachable from its VNet.

One endpoint per (target, sub-resource) with its private DNS zone, so names such as
``<ws>.api.azureml.ms`` or ``<account>.blob.core.windows.net`` resolve to private addresses inside
the network. With public network access disabled, these endpoints are the only way in.

Each DNS zone group is created after the network links of the zones it writes to: once the group exists, the
target's name resolves to its private address inside the network, which is what the resources that wait for it
(clusters without public IPs, build-context uploads) need.

Hub and spoke: a zone listed in ``network.private_dns_zone_ids`` already exists (usually in the hub,
linked to the hub network by its owner) and is only referenced by the endpoints' DNS zone groups; the
stack neither creates nor links it. Azure refuses a second zone of the same name linked to one network,
so a stack deploying into a hub network with central zones must list them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.network as network
import pulumi_azure_native.privatedns as privatedns

from azurefacts.ids import PRIVATE_DNS_ZONES

TYPE = "aml-gpu-training:infra:PrivateLinks"



@dataclass(frozen=True)
class PrivateTarget:
    key: str
    """Short logical name, e.g. ``workspace`` or ``storage-blob``."""
    resource_id: pulumi.Input[str]
    group_id: str


@dataclass(frozen=True)
class PrivateLinksArgs:
    name_prefix: str
    resource_group_name: pulumi.Input[str]
    location: str
    subnet_id: pulumi.Input[str]
    virtual_network_id: pulumi.Input[str]
    targets: tuple[PrivateTarget, ...]
    tags: dict[str, str] | None = None
    existing_zone_ids: Mapping[str, str] = field(default_factory=dict)
    """Zone name -> resource id of an existing zone to use instead of creating (and linking) one."""


class PrivateLinks(pulumi.ComponentResource):
    endpoints: dict[str, network.PrivateEndpoint]
    """Each target's private endpoint, by target key."""
    dns_groups: dict[str, network.PrivateDnsZoneGroup]
    """Each target's DNS zone group, by target key (created after its zones' network links)."""

    def __init__(self, name: str, args: PrivateLinksArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        zone_ids: dict[str, pulumi.Input[str]] = dict(args.existing_zone_ids)
        links: dict[str, privatedns.VirtualNetworkLink] = {}
        wanted = {z for t in args.targets for z in PRIVATE_DNS_ZONES[t.group_id]}
        for zone_name in sorted(wanted - set(args.existing_zone_ids)):
            zone = privatedns.PrivateZone(
                f"{args.name_prefix}-{zone_name}",
                private_zone_name=zone_name,
                resource_group_name=args.resource_group_name,
                location="global",
                tags=args.tags,
                opts=child,
            )
            links[zone_name] = privatedns.VirtualNetworkLink(
                f"{args.name_prefix}-{zone_name}-link",
                private_zone_name=zone.name,
                resource_group_name=args.resource_group_name,
                location="global",
                registration_enabled=False,
                virtual_network=privatedns.SubResourceArgs(id=args.virtual_network_id),
                tags=args.tags,
                opts=child,
            )
            zone_ids[zone_name] = zone.id

        self.endpoints, self.dns_groups = {}, {}
        for target in args.targets:
            endpoint = network.PrivateEndpoint(
                f"{args.name_prefix}-{target.key}-pe",
                private_endpoint_name=f"pe-{args.name_prefix}-{target.key}",
                resource_group_name=args.resource_group_name,
                location=args.location,
                subnet=network.SubnetArgs(id=args.subnet_id),
                private_link_service_connections=[
                    network.PrivateLinkServiceConnectionArgs(
                        name=f"{args.name_prefix}-{target.key}",
                        private_link_service_id=target.resource_id,
                        group_ids=[target.group_id],
                    )
                ],
                tags=args.tags,
                opts=child,
            )
            self.dns_groups[target.key] = network.PrivateDnsZoneGroup(
                f"{args.name_prefix}-{target.key}-dns",
                private_dns_zone_group_name="default",
                private_endpoint_name=endpoint.name,
                resource_group_name=args.resource_group_name,
                private_dns_zone_configs=[
                    network.PrivateDnsZoneConfigArgs(name=z.replace(".", "-"), private_dns_zone_id=zone_ids[z])
                    for z in PRIVATE_DNS_ZONES[target.group_id]
                ],
                # Its records resolve inside the network only once the zones are linked to it (an existing zone is
                # linked by its owner).
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[links[z] for z in PRIVATE_DNS_ZONES[target.group_id] if z in links]),
            )
            self.endpoints[target.key] = endpoint
        self.register_outputs({"privateEndpointIds": {k: e.id for k, e in self.endpoints.items()}})
