"""Network rules: what reaches the training subnet, and whether private endpoints resolve.

Sources: Checkov (CKV_AZURE_9, CKV_AZURE_10, CKV2_AZURE_31) and Azure's private endpoint DNS guide.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from azurefacts.resource_types import NETWORK_SECURITY_GROUP as NSG
from azurefacts.resource_types import PRIVATE_DNS_ZONE_GROUP as DNS_ZONE_GROUP
from azurefacts.resource_types import PRIVATE_DNS_ZONE_LINK as ZONE_LINK
from azurefacts.resource_types import PRIVATE_ENDPOINT, SECURITY_RULE, SUBNET, VIRTUAL_NETWORK, WORKSPACE
from policies.rule import Message, Violation, resource_rule, stack_rule
from policies.stack import Stack
from policies.wire import get, inputs, is_true, known, same

_ANYWHERE = {"*", "internet", "any", "0.0.0.0/0", "0.0.0.0", "::/0"}
_WELL_KNOWN = {22: "SSH", 3389: "RDP"}


def _sources(rule: Mapping[str, Any]) -> list[str]:
    return [str(s) for s in [get(rule, "sourceAddressPrefix"), *get(rule, "sourceAddressPrefixes", [])] if s]


def _ports(rule: Mapping[str, Any]) -> list[str]:
    return [str(p) for p in [get(rule, "destinationPortRange"), *get(rule, "destinationPortRanges", [])] if p]


def _covers(port_range: str, port: int) -> bool:
    if port_range == "*":
        return True
    low, _, high = port_range.partition("-")
    try:
        return int(low) <= port <= int(high or low)
    except ValueError:
        return False


def _open_inbound(rules: Iterable[Mapping[str, Any]]) -> list[str]:
    out: list[str] = []
    for rule in rules:
        if not (same(get(rule, "direction"), "Inbound") and same(get(rule, "access"), "Allow")):
            continue
        if not any(source.lower() in _ANYWHERE for source in _sources(rule)):
            continue
        ports = _ports(rule) or ["*"]
        named = [f"{port} ({what})" for port, what in _WELL_KNOWN.items() if any(_covers(p, port) for p in ports)]
        exposed = ", ".join(named) if named else "port(s) " + ", ".join(ports)
        # The text names SSH and RDP alone when they are open; a waiver binds to every source and port.
        out.append(Message(f"inbound rule {get(rule, 'name', '(unnamed)')!r} allows traffic from anywhere to {exposed}",
                           (str(get(rule, "name", "")), "sources", *_sources(rule), "ports", *ports)))
    return out


@resource_rule(
    id="nsg-no-internet-inbound",
    types=[NSG, SECURITY_RULE],
    title="Network security groups admit no inbound traffic from the Internet",
    severity="critical",
    enforcement="mandatory",
    rationale="Training nodes need no inbound Internet traffic (Azure ML reaches them through service tags); "
    "an allow rule from anywhere, SSH and RDP above all, exposes every node to scanning and brute force "
    "(Checkov CKV_AZURE_9, CKV_AZURE_10).",
    remediation="Remove the rule, or restrict its source to a service tag or your own ranges.",
    reference="https://learn.microsoft.com/en-us/azure/virtual-network/network-security-groups-overview",
)
def nsg_no_internet_inbound(resource: Mapping[str, Any]) -> list[str]:
    props = inputs(resource)
    rules = get(props, "securityRules", []) if resource["type"] == NSG else [{**props, "name": resource["name"]}]
    return _open_inbound(r for r in rules if isinstance(r, Mapping))


@resource_rule(
    id="subnet-has-nsg",
    types=[SUBNET, VIRTUAL_NETWORK],
    title="Subnets have a network security group",
    severity="medium",
    enforcement="mandatory",
    rationale="A subnet without an NSG has no place for deny rules; the training subnet's NSG is also where "
    "the outbound service tags clusters need are made explicit (Checkov CKV2_AZURE_31).",
    remediation="Attach a network security group to the subnet (the program's network does).",
    reference="https://learn.microsoft.com/en-us/azure/virtual-network/network-security-group-how-it-works",
)
def subnet_has_nsg(resource: Mapping[str, Any]) -> list[str]:
    props = inputs(resource)
    if resource["type"] == SUBNET:
        return [] if get(props, "networkSecurityGroup.id") else ["the subnet has no network security group"]
    return [
        f"inline subnet {get(subnet, 'name', '(unnamed)')!r} has no network security group"
        for subnet in get(props, "subnets", [])
        if isinstance(subnet, Mapping) and not get(subnet, "networkSecurityGroup.id")
    ]


@stack_rule(
    id="private-endpoint-dns",
    title="Private endpoints register in a private DNS zone",
    severity="high",
    enforcement="mandatory",
    rationale="Without a private DNS zone group, the target's name (workspace API, storage, vault, registry) "
    "still resolves to its public address: with public access disabled, jobs and builds fail to connect.",
    remediation="Add a PrivateDnsZoneGroup for each private endpoint, linked to the zone Azure documents for "
    "its group id (the program's private links do).",
    reference="https://learn.microsoft.com/en-us/azure/private-link/private-endpoint-dns",
)
def private_endpoint_dns(stack: Stack) -> list[Violation]:
    groups = stack.of_type(DNS_ZONE_GROUP)
    named = {str(get(inputs(g), "privateEndpointName")).lower() for g in groups}
    # A zone group created with its endpoint's name output cannot name it before deployment; count those
    # per owner and let each stand for one endpoint of the same owner.
    unresolved = Counter(stack.owner(g) for g in groups if not known(get(inputs(g), "privateEndpointName")))
    out = []
    for endpoint in stack.of_type(PRIVATE_ENDPOINT):
        name = str(get(inputs(endpoint), "privateEndpointName", endpoint["name"])).lower()
        if name in named:
            continue
        owner = stack.owner(endpoint)
        if unresolved[owner] > 0:
            unresolved[owner] -= 1
            continue
        out.append(Violation(endpoint, f"private endpoint {endpoint['name']!r} has no private DNS zone group"))
    return out


@stack_rule(
    id="private-dns-zones-on-existing-network",
    title="Private DNS zones of an existing (hub) network are referenced, not created again",
    severity="medium",
    enforcement="advisory",
    rationale="Azure refuses to link a second private DNS zone of the same name to one virtual network. In a "
    "hub-and-spoke network the hub usually links central privatelink.* zones already; a stack deploying into an "
    "existing subnet that creates and links its own zones then fails at `pulumi up` (or, linked to a different "
    "network, resolves the workspace to addresses the hub does not see).",
    remediation="List the hub's zones in network.private_dns_zone_ids (zone name -> resource id): the private "
    "endpoints use them and the stack neither creates nor links them. `amlgpu preflight` shows the zones already "
    "linked to the network.",
    reference="https://learn.microsoft.com/en-us/azure/private-link/private-endpoint-dns-integration",
)
def private_dns_zones_on_existing_network(stack: Stack) -> list[Violation]:
    if stack.of_type(VIRTUAL_NETWORK):
        return []  # the stack's own network: nothing else links zones to it
    out = []
    for link in stack.of_type(ZONE_LINK):
        network = get(inputs(link), "virtualNetwork.id")
        zone = get(inputs(link), "privateZoneName", link["name"])
        where = f"existing network {str(network).rsplit('/', 1)[-1]!r}" if known(network) else "an existing network"
        out.append(Violation(link, f"creates zone {zone} and links it to {where}: a hub with a zone of that name "
                                   "linked already refuses it; use network.private_dns_zone_ids"))
    return out



def _denies_internet_out(rule: Mapping[str, Any]) -> bool:
    destinations = [str(d).lower() for d in
                    [get(rule, "destinationAddressPrefix"), *get(rule, "destinationAddressPrefixes", [])] if d]
    return (same(get(rule, "direction"), "Outbound") and same(get(rule, "access"), "Deny")
            and any(d in _ANYWHERE for d in destinations) and "*" in (_ports(rule) or ["*"])
            and str(get(rule, "protocol", "*")) == "*")


@stack_rule(
    id="egress-restricted-for-hbi",
    title="A high-business-impact workspace's training subnet denies outbound Internet traffic",
    severity="high",
    enforcement="mandatory",
    rationale="Without an outbound deny, every job reaches the whole Internet through the NAT gateway and can send "
    "the workspace's data anywhere; Microsoft's secure training guide warns that outbound Storage alone can carry "
    "data to any account. A workspace flagged high business impact holds the data that must not leave.",
    remediation="Leave network.egress.restrict at its default (on for high_business_impact) and list what jobs "
    "need in network.egress.allow; docs/operations.md (egress) says what a job then cannot reach.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-prevent-data-loss-exfiltration",
    config_key=("egress",),
)
def egress_restricted_for_hbi(stack: Stack) -> list[Violation]:
    if not any(is_true(get(inputs(w), "hbiWorkspace")) for w in stack.of_type(WORKSPACE)):
        return []
    out = []
    for nsg in stack.of_type(NSG):
        rules = [r for r in get(inputs(nsg), "securityRules", []) if isinstance(r, Mapping)]
        if not any(_denies_internet_out(r) for r in rules):
            out.append(Violation(nsg, f"{nsg['name']!r} lets the training subnet reach the whole Internet "
                                      "(no outbound deny below the allows) for a high-business-impact workspace"))
    return out
