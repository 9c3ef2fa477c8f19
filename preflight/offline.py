"""The preflight's offline half: what a stack asks of Azure, from the stack file alone (also written by ``amlgpu plan``
to ``build/<stack>/preflight.json``): the vCPU demand per VM family and tier when every cluster is scaled out, the
permissions the deploying principal needs, the resource providers to register, the training subnet's addresses, and
what the live checks cannot see (a hub's routes, a customer-managed key vault's network)."""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass
from typing import Any, Literal

from azurefacts import skus
from azurefacts.ids import PRIVATE_DNS_ZONES
from azurefacts.naming import arm_region
from stack.config import StackConfig

ROLE_ASSIGNMENTS_WRITE = "Microsoft.Authorization/roleAssignments/write"
BLOB_WRITE = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write"
SUBNET_JOIN = "Microsoft.Network/virtualNetworks/subnets/join/action"
ZONE_JOIN = "Microsoft.Network/privateDnsZones/join/action"
IDENTITY_READ = "Microsoft.ManagedIdentity/userAssignedIdentities/read"
IDENTITY_ASSIGN = "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action"
RESOURCE_GROUP_WRITE = "Microsoft.Resources/subscriptions/resourceGroups/write"
LOCKS_WRITE = "Microsoft.Authorization/locks/write"


PROVIDERS = ("Microsoft.MachineLearningServices", "Microsoft.Storage", "Microsoft.KeyVault",
             "Microsoft.ContainerRegistry", "Microsoft.Insights", "Microsoft.OperationalInsights", "Microsoft.Network")
"""Resource providers every stack creates resources of."""
REGISTERED_EVERYWHERE = ("Microsoft.Resources", "Microsoft.Authorization")
"""Resource providers every subscription has registered (Microsoft Learn, "Resource providers and types")."""


def required_providers(config: StackConfig) -> list[str]:
    """The resource providers the subscription must have registered before the first ``pulumi up``: what the stack
    creates, Microsoft.ManagedIdentity for user-assigned identities, and for a customer-managed key
    Microsoft.DocumentDB and Microsoft.Search (Learn, "Use customer-managed keys with Azure Machine Learning":
    prerequisites)."""
    out = list(PROVIDERS)
    if _user_assigned(config):
        out.append("Microsoft.ManagedIdentity")
    if config.workspace.customer_managed_key:
        out += ["Microsoft.DocumentDB", "Microsoft.Search"]
    return out


# --------------------------------------------------------------------------------------------- offline half


@dataclass(frozen=True)
class ClusterDemand:
    name: str
    size: str
    max_instances: int
    vcpus_per_node: int | None


@dataclass(frozen=True)
class Demand:
    """vCPUs one VM family and tier needs when every cluster in it is scaled out."""

    family: str | None
    tier: Literal["dedicated", "low_priority"]
    region: str
    clusters: tuple[ClusterDemand, ...]

    @property
    def vcpus(self) -> int | None:
        if any(c.vcpus_per_node is None for c in self.clusters):
            return None
        return sum(c.max_instances * (c.vcpus_per_node or 0) for c in self.clusters)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "tier": self.tier, "region": self.region, "vcpus": self.vcpus,
                "clusters": [asdict(c) for c in self.clusters]}


@dataclass(frozen=True)
class Need:
    """One permission the deploying principal needs, where, and why."""

    action: str
    scope: str
    why: str
    data: bool = False
    """A data action (dataActions), not a control-plane action."""


_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


def _family_key(family: str | None) -> str:
    """Families compared as Azure spells them inconsistently: case, spaces and underscores ignored."""
    return "".join(c for c in (family or "").lower() if c in _LOWER_ALNUM)


def demand(config: StackConfig) -> list[Demand]:
    """The vCPU demand per (family, tier, region), largest first; a size of unknown family stands alone."""
    home = arm_region(config.workspace_location)
    rows: list[tuple[str | None, str, str, ClusterDemand]] = [
        (c.sku.family, c.tier, arm_region(c.location) if c.location else home,
         ClusterDemand(c.name, c.size, c.max_instances, c.sku.vcpus)) for c in config.clusters
    ]
    if config.workspace.public_network_access == "Disabled":
        builder = config.workspace.image_build_compute
        vcpus, family = skus.CPU_SIZES.get(builder.size, (None, None))
        rows.append((family, "dedicated", home,
                     ClusterDemand(builder.name, builder.size, builder.max_instances, vcpus)))
    grouped: dict[tuple[str, str, str], tuple[str | None, list[ClusterDemand]]] = {}
    for family, tier, where, cluster in rows:
        key = (_family_key(family) if family else f"?{cluster.size.lower()}", tier, where)
        grouped.setdefault(key, (family, []))[1].append(cluster)
    out = [Demand(family, tier, where, tuple(clusters))  # type: ignore[arg-type]
           for (_, tier, where), (family, clusters) in grouped.items()]
    return sorted(out, key=lambda d: (-(d.vcpus or 0), d.tier, d.region, d.family or ""))


def resource_group_scope(subscription: str | None, config: StackConfig) -> str:
    return f"/subscriptions/{subscription or '<subscription>'}/resourceGroups/{config.workspace.resource_group_name}"


def needs(config: StackConfig, subscription: str | None = None) -> list[Need]:
    """What the principal running ``pulumi up`` must be allowed to do, in the order it is needed."""
    group = resource_group_scope(subscription, config)
    out = [Need(RESOURCE_GROUP_WRITE, f"/subscriptions/{subscription or '<subscription>'}",
                f"create resource group {config.workspace.resource_group_name} and everything in it "
                "(Contributor or Owner on the subscription or the group)")]
    identities = [c.name for c in config.clusters if c.identity.has_system_assigned]
    if config.workspace.public_network_access == "Disabled":
        identities.append(config.workspace.image_build_compute.name)
    builds = sorted(e.name for e in config.environments if e.build is not None)
    grants = [f"Storage Blob Data Contributor for the identities of clusters {', '.join(identities)} (Azure ML grants "
              "their AcrPull on the workspace registry itself)"
              ] if identities else []
    uai = config.workspace.primary_user_assigned_identity
    if uai:
        grants.append("the roles Microsoft documents for the workspace's user-assigned identity on its storage, "
                      "registry, key vault and Application Insights, read back (roleAssignments/read) until they are "
                      "in force")
    if builds:
        grants.append("Storage Blob Data Contributor on the build-context container for the deployer itself")
    if grants:
        out.append(Need(ROLE_ASSIGNMENTS_WRITE, group, "; ".join(grants)
                        + " (Owner, User Access Administrator or Role Based Access Control Administrator)"))
    if builds:
        out.append(Need(BLOB_WRITE, group + "/providers/Microsoft.Storage/storageAccounts/<workspace storage>"
                        "/blobServices/default/containers/environment-builds",
                        f"upload the build contexts of {', '.join(builds)}; pulumi up grants this data role to the "
                        "deployer before the upload", data=True))
    if config.workspace.lock:
        out.append(Need(LOCKS_WRITE, group, "lock the workspace, its storage and key vault against deletion "
                        "(workspace.lock; Owner or User Access Administrator: Contributor cannot create locks)"))
    if uai:
        out.append(Need(IDENTITY_READ, uai, "look up the user-assigned identity's principal to grant it its roles"))
    for identity in _user_assigned(config):
        out.append(Need(IDENTITY_ASSIGN, identity, "attach the user-assigned identity to the workspace or cluster "
                        "that names it (Managed Identity Operator on it)"))
    if config.network.subnet_id:
        out.append(Need(SUBNET_JOIN, config.network.subnet_id,
                        "put the clusters and private endpoints into the existing subnet (Network Contributor on it)"))
    for zone, zone_id in sorted(config.network.private_dns_zone_ids.items()):
        out.append(Need(ZONE_JOIN, zone_id, f"register the private endpoints' records in the existing {zone} zone "
                        "(Private DNS Zone Contributor or Network Contributor on it)"))
    return out


def _user_assigned(config: StackConfig) -> list[str]:
    """Every user-assigned identity the stack attaches (the workspace's and the clusters'), once each."""
    found = [u.resource_id for u in config.workspace.identity.user_assigned_identities]
    found += [u.resource_id for c in config.clusters for u in c.identity.user_assigned_identities]
    return list(dict.fromkeys(found))


AZURE_RESERVED_ADDRESSES = 5
"""Addresses Azure keeps in every subnet (address range): the first four and the last (Microsoft Learn, "Azure
Virtual Network FAQ": "Azure reserves the first four and the last IP address for a total of five IP addresses
within each subnet")."""


@dataclass(frozen=True)
class Addresses:
    """What the stack places in its training subnet: an address per cluster node at full scale (Learn, "Secure an
    Azure Machine Learning training environment": "Each node within a compute cluster ... requires one IP address")
    and per private endpoint (one each at least), besides serverless compute nodes, which scale with jobs."""

    clusters: tuple[tuple[str, int], ...]
    private_endpoints: int

    @property
    def needed(self) -> int:
        return sum(n for _, n in self.clusters) + self.private_endpoints

    def to_json(self) -> dict[str, Any]:
        return {"clusters": dict(self.clusters), "private_endpoints": self.private_endpoints, "needed": self.needed}


def addresses(config: StackConfig) -> Addresses:
    """The training subnet's address demand: every cluster at ``max_instances`` (the image-build cluster of a private
    workspace included) and the stack's private endpoints, one per group id (infra/private_link.py's targets are the
    group ids of :data:`azurefacts.ids.PRIVATE_DNS_ZONES`)."""
    clusters = [(c.name, c.max_instances) for c in config.clusters]
    if config.workspace.public_network_access == "Disabled":
        builder = config.workspace.image_build_compute
        clusters.append((builder.name, builder.max_instances))
    return Addresses(tuple(clusters), len(PRIVATE_DNS_ZONES))


def usable(prefix: str) -> int:
    """Addresses a subnet of ``prefix`` can give out: its size less Azure's five."""
    return max(ipaddress.ip_network(prefix, strict=False).num_addresses - AZURE_RESERVED_ADDRESSES, 0)


HUB_ROUTES = ("the hub's route table and firewall must pass the training subnet's traffic to the service tags "
              "AzureMachineLearning (TCP 443, 8787, 18881 and UDP 5831), BatchNodeManagement.<region> (any protocol, "
              "443) and Storage.<region> (TCP 443), or nodes never join their clusters: a user-defined route that "
              "sends them to a firewall without those rules is not visible from here (Learn, "
              "how-to-secure-training-vnet: no-public-IP compute; docs/operations.md, hub networks)")
CMK_VAULT_NETWORK = ("the customer-managed key's vault must let Azure's trusted services through its firewall "
                     "(networkAcls.bypass: AzureServices): Azure Cosmos DB and the workspace fetch the key from "
                     "outside your network, and a vault with public network access disabled has been reported to "
                     "break the Cosmos DB key setup (hashicorp/terraform-provider-azurerm#18450; "
                     "MicrosoftDocs/azure-docs#93237: network-restricted key vaults need trusted services allowed); "
                     "docs/operations.md")


def network_notes(config: StackConfig) -> list[str]:
    """What the preflight cannot see but the first ``pulumi up`` depends on, for this stack."""
    out = []
    if config.network.subnet_id:
        out.append(HUB_ROUTES)
    if config.workspace.customer_managed_key:
        out.append(CMK_VAULT_NETWORK)
    return out


def offline(config: StackConfig, stack: str, subscription: str | None = None) -> dict[str, Any]:
    """The offline half as JSON (``build/<stack>/preflight.json``): demand, needed permissions, the subnet's
    addresses and the resource providers to register."""
    subnet = addresses(config).to_json()
    if config.network.subnet_prefix:
        subnet |= {"subnet_prefix": config.network.subnet_prefix, "usable": usable(config.network.subnet_prefix)}
    else:
        subnet |= {"subnet_id": config.network.subnet_id}
    return {
        "stack": stack,
        "location": config.workspace_location,
        "workspace": config.workspace.name,
        "resource_group": config.workspace.resource_group_name,
        "demand": [d.to_json() for d in demand(config)],
        "permissions": [asdict(n) for n in needs(config, subscription)],
        "addresses": subnet,
        "providers": required_providers(config),
        "network_notes": network_notes(config),
    }


def render_offline(config: StackConfig, subscription: str | None = None) -> list[str]:
    """The offline half as text lines, for ``amlgpu plan`` and ``amlgpu preflight``."""
    lines = ["vCPU demand when every cluster is scaled out:"]
    for d in demand(config):
        clusters = ", ".join(f"{c.name} {c.max_instances} x {c.size}" for c in d.clusters)
        vcpus = f"{d.vcpus} vCPUs" if d.vcpus is not None else "? vCPUs (size not in the catalogue)"
        lines.append(f"  {d.family or 'unknown family':<28} {d.tier:<12} {d.region:<14} {vcpus:>10}  {clusters}")
    lines.append("The deploying principal needs:")
    for n in needs(config, subscription):
        lines.append(f"  {n.action}{' (data)' if n.data else ''} on {n.scope}")
        lines.append(f"      {n.why}")
    lines.append("The subscription must have registered: " + ", ".join(required_providers(config)))
    need = addresses(config)
    parts = ", ".join(f"{name} {n}" for name, n in need.clusters)
    where = (f"new subnet {config.network.subnet_prefix}: {usable(config.network.subnet_prefix)} usable"
             if config.network.subnet_prefix else "existing subnet: its free addresses are counted by the live checks")
    lines.append(f"Training subnet addresses: {need.needed} needed (max nodes {parts}; {need.private_endpoints} "
                 f"private endpoints), {where}; serverless jobs take more")
    lines += [f"Network: {note}" for note in network_notes(config)]
    return lines
