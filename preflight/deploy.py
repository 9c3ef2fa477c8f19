"""The preflight's live half: what would stop the first ``pulumi up`` of a stack, read from Azure before it runs.

Read-only calls to Azure Resource Manager with the deployer's own credential, each an OK / PROBLEM / UNKNOWN row
with a one-line fix (:data:`LIVE`, in the order shown): resource providers registered; the size offered in the
region and by Azure ML; quota per family and regional totals; permissions on the resource group (or the
subscription before it exists) and on what the stack joins elsewhere; a soft-deleted workspace or key vault
holding a name; a customer-managed key's vault; ``privatelink.*`` zones already linked to an existing network; an
existing subnet's free addresses; the network path of the build-context upload. The offline half is
:mod:`preflight.offline`.

What cannot be read (no permission, an API error) is UNKNOWN, never PROBLEM: a PROBLEM row is evidence that
``pulumi up`` would fail.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from azurefacts.arm import ArmError, ArmReader
from azurefacts.ids import PRIVATE_DNS_ZONES
from azurefacts.naming import arm_region
from kernel import regex as linear
from preflight.checks import Check, Entry, Registry, Status
from preflight.offline import (
    BLOB_WRITE,
    CMK_VAULT_NETWORK,
    IDENTITY_ASSIGN,
    IDENTITY_READ,
    LOCKS_WRITE,
    RESOURCE_GROUP_WRITE,
    ROLE_ASSIGNMENTS_WRITE,
    SUBNET_JOIN,
    ZONE_JOIN,
    Need,
    _family_key,
    addresses,
    demand,
    needs,
    required_providers,
    resource_group_scope,
    usable,
)
from stack.config import StackConfig

MLS_API = "2024-10-01"
COMPUTE_SKUS_API = "2021-07-01"
AUTHORIZATION_API = "2022-04-01"
ACTIVITY_LOG_API = "2015-04-01"
PRIVATE_DNS_API = "2024-06-01"
SOFT_DELETE_DAYS = 14
"""Azure ML keeps a deleted workspace soft-deleted this long by default (Microsoft Learn, concept-soft-delete)."""



# --------------------------------------------------------------------------------------------- live half


@dataclass
class Context:
    """What the live checks share: the reader, where the stack deploys, and facts read once."""

    config: StackConfig
    arm: ArmReader
    subscription: str
    public_ip: Callable[[], str]
    now: datetime
    private_dns_zone_ids: Mapping[str, str] = field(default_factory=dict)
    principal_id: str | None = None
    """The object id of the principal the credential signs in as (its token's ``oid`` claim), when known."""
    instance_metadata: Callable[[], Mapping[str, Any] | None] = lambda: None
    """This machine's Azure instance metadata (IMDS ``/metadata/instance``), None when it is no Azure VM."""
    _cache: dict[str, Any] = field(default_factory=dict)

    def once(self, key: str, read: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = read()
        return self._cache[key]

    @property
    def location(self) -> str:
        return arm_region(self.config.workspace_location)

    @property
    def regions(self) -> list[str]:
        return sorted({d.region for d in demand(self.config)})

    @property
    def group(self) -> str:
        return resource_group_scope(self.subscription, self.config)


def _unknown(name: str, err: ArmError, what: str) -> Check:
    """The UNKNOWN row of a check that could not read ``what``; a refused token (401) ends every check."""
    if err.status == 401:
        raise err
    if err.status == 403:
        fix = f"grant the deploying principal read access to {what} (Reader on the subscription), or check by hand"
    else:
        fix = f"retry; if it persists, check {what} by hand"
    return Check(name, "UNKNOWN", f"could not read {what}: {err.status} {err.code}: {err.message[:160]}", fix)


def _resource_skus(ctx: Context, where: str) -> dict[str, dict[str, Any]]:
    def read() -> dict[str, dict[str, Any]]:
        items = ctx.arm.list(f"/subscriptions/{ctx.subscription}/providers/Microsoft.Compute/skus",
                             COMPUTE_SKUS_API, **{"$filter": f"location eq '{where}'"})
        return {str(i.get("name", "")).lower(): i for i in items if i.get("resourceType") == "virtualMachines"}

    return dict(ctx.once(f"skus:{where}", read))


def check_sizes(ctx: Context) -> list[Check]:
    """Each cluster's size is offered in its region to this subscription (resource SKU restrictions)."""
    out = []
    for where in ctx.regions:
        try:
            offered = _resource_skus(ctx, where)
        except ArmError as err:
            out.append(_unknown("size offered", err, f"the resource SKUs of {where}"))
            continue
        for cluster in ctx.config.clusters:
            if (arm_region(cluster.location) if cluster.location else ctx.location) != where:
                continue
            out.append(_size_offered(cluster.name, cluster.size, offered.get(cluster.size.lower()), where))
    return out


def _size_offered(cluster: str, size: str, sku: Mapping[str, Any] | None, where: str) -> Check:
    name = f"size {size} ({cluster})"
    if sku is None:
        return Check(name, "PROBLEM", f"{size} is not offered in {where}",
                     f"pick a region that offers it (az vm list-skus --size {size}) or another size")
    restrictions = sku.get("restrictions") or []
    blocked = [r for r in restrictions
               if r.get("type") == "Location" and where in [v.lower() for v in r.get("values") or []]]
    if blocked:
        reason = blocked[0].get("reasonCode") or "restricted"
        return Check(name, "PROBLEM", f"{size} is restricted in {where} for this subscription ({reason})",
                     "ask Azure support to enable the size for the subscription in the region "
                     "(quota request, 'NotAvailableForSubscription'), or use another region")
    zones = [r for r in restrictions if r.get("type") == "Zone"]
    return Check(name, "OK", f"offered in {where}" + (" (some zones restricted)" if zones else ""))


_I = r"[i\x{130}\x{131}]"  # Python's case-blind i also takes the dotted and dotless i; RE2's does not
_USAGE = linear.compile(rf"(?i)^(?P<family>.+?)[{linear.SPACE}]*Cluster[{linear.SPACE}]+"
                        rf"(?P<tier>Ded{_I}cated|LowPr{_I}or{_I}ty)[{linear.SPACE}]+vCPUs$")


def _usage_key(name: str) -> tuple[str, str] | None:
    """('<family key>', 'dedicated'|'low_priority') of a per-family usage name, or None."""
    match = _USAGE.match(name.strip())
    if not match:
        return None
    tier = "dedicated" if match["tier"].lower() == "dedicated" else "low_priority"
    return _family_key(match["family"]), tier


def check_quota(ctx: Context) -> list[Check]:
    """Demand per family and tier against each region's Azure ML compute quota minus what is in use."""
    return [row for where in ctx.regions for row in _quota_in(ctx, where)]


def _quota_in(ctx: Context, where: str) -> list[Check]:
    suffix = "" if where == ctx.location else f" in {where}"
    try:
        usages = ctx.arm.list(f"/subscriptions/{ctx.subscription}/providers/Microsoft.MachineLearningServices"
                              f"/locations/{where}/usages", MLS_API)
    except ArmError as err:
        return [_unknown("quota" + suffix, err, f"Azure ML usages in {where}")]
    try:
        live_families = {size: _family_key(sku.get("family")) for size, sku in _resource_skus(ctx, where).items()}
    except ArmError:
        live_families = {}
    per_family: dict[tuple[str, str], dict[str, Any]] = {}
    totals: dict[str, dict[str, Any]] = {}
    for usage in usages:
        if "/workspaces/" in str(usage.get("id", "")):
            continue  # a workspace's or cluster's own share, not the subscription's regional quota
        label = str((usage.get("name") or {}).get("value", ""))
        if label == "Total Cluster Dedicated Regional vCPUs":
            totals["dedicated"] = usage
        elif label == "Total Cluster LowPriority Regional vCPUs":
            totals["low_priority"] = usage
        elif (key := _usage_key(label)) is not None:
            per_family[key] = usage
    out = []
    demands = [d for d in demand(ctx.config) if d.region == where]
    wanted = {"dedicated": 0, "low_priority": 0}
    for d in demands:
        sizes = {c.size.lower() for c in d.clusters}
        family = next((live_families[s] for s in sizes if live_families.get(s)), _family_key(d.family))
        label = f"quota {d.family or '/'.join(sorted(sizes))} {d.tier.replace('_', '-')}{suffix}"
        if d.vcpus is None or not family:
            out.append(Check(label, "UNKNOWN", "the family or vCPU count of " + ", ".join(sorted(sizes))
                             + f" is not known offline and not offered in {where}",
                             "check the size's quota in Azure ML studio > Quota"))
            continue
        wanted[d.tier] += d.vcpus
        if d.tier == "low_priority":
            continue  # only a regional total (per-family limits are -1): checked below
        found = per_family.get((family, d.tier))
        if found is None:
            out.append(Check(label, "UNKNOWN", f"no quota entry for family {d.family} in {where}",
                             "check the family's quota in Azure ML studio > Quota"))
            continue
        out.append(_against(label, d.vcpus, found, f"{d.family} in {where}", ", ".join(c.name for c in d.clusters)))
    for tier, vcpus in wanted.items():
        if vcpus == 0:
            continue
        label = f"quota regional total {tier.replace('_', '-')}{suffix}"
        total = totals.get(tier)
        if total is None:
            out.append(Check(label, "UNKNOWN", f"no regional {tier} total in {where}'s usages",
                             "check it in Azure ML studio > Quota"))
            continue
        clusters = ", ".join(c.name for d in demands if d.tier == tier for c in d.clusters)
        out.append(_against(label, vcpus, total, f"{tier.replace('_', '-')} vCPUs in {where}", clusters))
    return out


def _against(label: str, vcpus: int, usage: Mapping[str, Any], what: str, clusters: str) -> Check:
    limit, used = int(usage.get("limit") or 0), int(usage.get("currentValue") or 0)
    if limit < 0:
        return Check(label, "OK", f"needs {vcpus} vCPUs; no separate limit ({used} in use)")
    free = limit - used
    detail = f"needs {vcpus} vCPUs, {free} free (limit {limit}, {used} in use)"
    if vcpus <= free:
        return Check(label, "OK", detail)
    return Check(label, "PROBLEM", detail + f": {clusters} cannot scale out fully",
                 f"request at least {vcpus + used} vCPUs of {what} (Azure ML studio > Quota > Request quota), "
                 "or lower max_instances")


def _allowed(permissions: Iterable[Mapping[str, Any]], action: str, data: bool = False) -> bool:
    """Whether any permission entry grants ``action`` (Azure RBAC: actions minus notActions, wildcards)."""
    grant, deny = ("dataActions", "notDataActions") if data else ("actions", "notActions")

    def matches(patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), p.lower()) for p in patterns)

    return any(matches(p.get(grant) or []) and not matches(p.get(deny) or []) for p in permissions)


def check_permissions(ctx: Context) -> list[Check]:
    """Role assignments and the build-context data role, on the stack's resource group (and the subnet's); before
    the group exists, on the subscription (:func:`check_permissions_before_the_group`)."""
    group = ctx.config.workspace.resource_group_name
    try:
        permissions = ctx.arm.list(f"{ctx.group}/providers/Microsoft.Authorization/permissions", AUTHORIZATION_API)
    except ArmError as err:
        if err.code == "ResourceGroupNotFound":
            return check_permissions_before_the_group(ctx)
        return [_unknown("permissions", err, f"your permissions on resource group {group}")]
    return _permission_rows(ctx, permissions, group) + _elsewhere_rows(ctx)


def _permission_rows(ctx: Context, permissions: list[dict[str, Any]], where: str) -> list[Check]:
    """The role-assignment and build-context rows for ``permissions`` held on ``where``."""
    out: list[Check] = []
    group = where
    required = {n.action: n for n in needs(ctx.config, ctx.subscription)}
    can_assign = _allowed(permissions, ROLE_ASSIGNMENTS_WRITE)
    if ROLE_ASSIGNMENTS_WRITE in required:
        out.append(Check("permission: create role assignments", "OK" if can_assign else "PROBLEM",
                         f"{ROLE_ASSIGNMENTS_WRITE} on {group} is {'granted' if can_assign else 'not granted'}",
                         "" if can_assign else "have an Owner grant you User Access Administrator or Role Based "
                         f"Access Control Administrator on {group}"))
    if BLOB_WRITE in required:
        holds = _allowed(permissions, BLOB_WRITE, data=True)
        status: Status = "OK" if holds or can_assign else "PROBLEM"
        detail = ("holds the blob write data action already" if holds else
                  "will hold it: pulumi up grants Storage Blob Data Contributor on the container first"
                  if can_assign else "holds no blob write data action and cannot be granted one")
        out.append(Check("permission: build-context upload (data role)", status, detail,
                         "" if status == "OK" else f"grant it Storage Blob Data Contributor on {group}, "
                         "or the right to create role assignments (above)"))
    if LOCKS_WRITE in required:
        locks = _allowed(permissions, LOCKS_WRITE)
        out.append(Check("permission: create locks", "OK" if locks else "PROBLEM",
                         f"{LOCKS_WRITE} on {group} is {'granted' if locks else 'not granted'} (workspace.lock)",
                         "" if locks else f"have an Owner grant you User Access Administrator on {group}, or set "
                         "workspace.lock: false and lock the resources yourself"))
    return out


def _elsewhere_rows(ctx: Context) -> list[Check]:
    return [_check_elsewhere(ctx, n) for n in needs(ctx.config, ctx.subscription) if n.action in _ELSEWHERE]


_ELSEWHERE = {
    SUBNET_JOIN: ("join the existing subnet", "ask the network's owner for Network Contributor on {scope}"),
    ZONE_JOIN: ("join private DNS zone {name}", "ask the zone's owner for Private DNS Zone Contributor on {scope}"),
    IDENTITY_READ: ("read the user-assigned identity", "ask for Reader (or Managed Identity Operator) on {scope}"),
    IDENTITY_ASSIGN: ("assign user-assigned identity {name}", "ask the identity's owner for Managed Identity "
                      "Operator on {scope}"),
}
"""Permissions needed on resources outside the stack's resource group: (row name, fix)."""


def _check_elsewhere(ctx: Context, need: Need) -> Check:
    """``need.action`` on a resource in another resource group (or subscription): asked of that group."""
    title, fix = _ELSEWHERE[need.action]
    name = "permission: " + title.format(name=need.scope.rsplit("/", 1)[-1])
    group_scope = "/".join(need.scope.split("/")[:5])
    try:
        permissions = ctx.once(f"permissions:{group_scope.lower()}", lambda: ctx.arm.list(
            f"{group_scope}/providers/Microsoft.Authorization/permissions", AUTHORIZATION_API))
    except ArmError as err:
        return _unknown(name, err, f"your permissions on {group_scope}")
    granted = _allowed(permissions, need.action)
    return Check(name, "OK" if granted else "PROBLEM",
                 f"{need.action} on {group_scope} is {'granted' if granted else 'not granted'}",
                 "" if granted else fix.format(scope=need.scope))


def check_soft_deleted(ctx: Context) -> list[Check]:
    """A workspace of the same name deleted within the retention period blocks the name."""
    ws = ctx.config.workspace
    workspace_id = f"{ctx.group}/providers/Microsoft.MachineLearningServices/workspaces/{ws.name}"
    name = "soft-deleted workspace"
    try:
        ctx.arm.get(workspace_id, MLS_API)
        return [Check(name, "OK", f"workspace {ws.name} exists: pulumi up updates it in place")]
    except ArmError as err:
        if err.status != 404:
            return [_unknown(name, err, f"workspace {ws.name}")]
    since = (ctx.now - timedelta(days=SOFT_DELETE_DAYS)).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        events = ctx.arm.list(f"/subscriptions/{ctx.subscription}/providers/Microsoft.Insights/eventtypes/management"
                              "/values", ACTIVITY_LOG_API,
                              **{"$filter": f"eventTimestamp ge '{since}' and resourceUri eq '{workspace_id}'"})
    except ArmError as err:
        return [_unknown(name, err, "the subscription's activity log")]
    deletes = sorted(
        (str(e.get("eventTimestamp", "")) for e in events
         if str((e.get("operationName") or {}).get("value", "")).lower()
         == "microsoft.machinelearningservices/workspaces/delete"
         and str((e.get("status") or {}).get("value", "")).lower() == "succeeded"
         and str(e.get("resourceId", workspace_id)).lower() == workspace_id.lower()),
        reverse=True,
    )
    if deletes:
        return [Check(name, "PROBLEM", f"workspace {ws.name} was deleted on {deletes[0][:10]} and is soft-deleted "
                      f"for {SOFT_DELETE_DAYS} days: Azure refuses the name ('Soft-deleted workspace exists')",
                      "recover or permanently delete it: Azure portal > Azure Machine Learning > Recently deleted "
                      "workspaces, then re-run")]
    return [Check(name, "OK", f"no delete of workspace {ws.name} in the activity log since {since[:10]}")]


def _private_zones() -> tuple[str, ...]:
    return tuple(sorted({z for zones in PRIVATE_DNS_ZONES.values() for z in zones}))


def check_dns_links(ctx: Context) -> list[Check]:
    """``privatelink.*`` zones already linked to an existing network, which the stack would link again."""
    out: list[Check] = []
    for zone_name, zone_id in sorted(ctx.private_dns_zone_ids.items()):
        try:
            ctx.arm.get(zone_id, PRIVATE_DNS_API)
        except ArmError as err:
            if err.status == 404:
                out.append(Check(f"private DNS zone {zone_name}", "PROBLEM", f"{zone_id} does not exist "
                                 f"({err.code})", f"fix network.private_dns_zone_ids.{zone_name} or create the zone"))
            else:
                out.append(_unknown(f"private DNS zone {zone_name}", err, zone_id))
    subnet_id = ctx.config.network.subnet_id
    if not subnet_id:
        return [*out, Check("private DNS zones", "OK", "the stack creates its own network: no zone is linked to "
                            "it yet")]
    vnet_id = subnet_id.split("/subnets/")[0]
    subscriptions = dict.fromkeys([vnet_id.split("/")[2], ctx.subscription])
    wanted = set(_private_zones())
    given = {k.lower() for k in ctx.private_dns_zone_ids}
    linked: list[tuple[str, str]] = []
    try:
        for subscription in subscriptions:
            zones = ctx.arm.list(f"/subscriptions/{subscription}/providers/Microsoft.Network/privateDnsZones",
                                 PRIVATE_DNS_API)
            for zone in zones:
                if str(zone.get("name", "")).lower() not in wanted:
                    continue
                links = ctx.arm.list(f"{zone['id']}/virtualNetworkLinks", PRIVATE_DNS_API)
                if any(str(((link.get("properties") or {}).get("virtualNetwork") or {}).get("id", "")).lower()
                       == vnet_id.lower() for link in links):
                    linked.append((str(zone["name"]), str(zone["id"])))
    except ArmError as err:
        return [_unknown("private DNS zones", err, f"the private DNS zones linked to {vnet_id.split('/')[-1]}")]
    for zone_name, zone_id in sorted(linked):
        if zone_name.lower() in given:
            out.append(Check(f"private DNS zone {zone_name}", "OK", "linked to the network and given in "
                             "network.private_dns_zone_ids: used, not created"))
        else:
            out.append(Check(f"private DNS zone {zone_name}", "PROBLEM", f"{zone_id} is already linked to "
                             f"{vnet_id.split('/')[-1]}; Azure refuses a second {zone_name} zone linked to it",
                             f"add it to network.private_dns_zone_ids: {{{zone_name}: {zone_id}}}"))
    if not linked:
        out.append(Check("private DNS zones", "OK", f"no privatelink zone is linked to {vnet_id.split('/')[-1]} "
                         f"in subscription(s) {', '.join(subscriptions)}"))
    return out




# --------------------------------------------------------------------------------------------- first deployment

RESOURCES_API = "2021-04-01"
KEY_VAULT_API = "2023-07-01"
NETWORK_API = "2024-05-01"
COSMOS_DB_APP = "a232010e-820c-4083-83bb-3ace5fc29d0b"
"""The Azure Cosmos DB first-party application (Azure public cloud), which needs get, wrapKey and unwrapKey on a
workspace's customer-managed key (Microsoft Learn, "Use customer-managed keys with Azure Machine Learning")."""


def check_providers(ctx: Context) -> list[Check]:
    """Each required resource provider is registered (``GET /subscriptions/{id}/providers/{namespace}``)."""
    name = "resource providers"
    states: dict[str, str] = {}
    for namespace in required_providers(ctx.config):
        try:
            found = ctx.arm.get(f"/subscriptions/{ctx.subscription}/providers/{namespace}", RESOURCES_API)
        except ArmError as err:
            return [_unknown(name, err, f"the registration of {namespace}")]
        states[namespace] = str(found.get("registrationState") or "unknown")
    missing = {ns: state for ns, state in states.items() if state.lower() != "registered"}
    if not missing:
        return [Check(name, "OK", "registered: " + ", ".join(states))]
    return [Check(name, "PROBLEM", "not registered: " + ", ".join(f"{ns} ({state})" for ns, state in missing.items())
                  + ": pulumi up stops with MissingSubscriptionRegistration",
                  "; ".join(f"az provider register --namespace {ns}" for ns in missing)
                  + " (Registering takes a few minutes; re-run the preflight)")]


def _aml_sizes(ctx: Context, where: str) -> dict[str, dict[str, Any]]:
    def read() -> dict[str, dict[str, Any]]:
        items = ctx.arm.list(f"/subscriptions/{ctx.subscription}/providers/Microsoft.MachineLearningServices"
                             f"/locations/{where}/vmSizes", MLS_API)
        return {str(i.get("name", "")).lower(): i for i in items}

    return dict(ctx.once(f"aml-sizes:{where}", read))


def check_aml_sizes(ctx: Context) -> list[Check]:
    """Each cluster's size is one Azure ML offers for compute clusters in its region (AmlCompute's own list,
    ``Microsoft.MachineLearningServices/locations/{region}/vmSizes``: a size the Compute SKU list offers may still
    be refused for AmlCompute), low-priority capable for a low-priority cluster."""
    clusters: list[tuple[str, str, str, str]] = [
        (c.name, c.size, c.tier, arm_region(c.location) if c.location else ctx.location) for c in ctx.config.clusters]
    if ctx.config.workspace.public_network_access == "Disabled":
        builder = ctx.config.workspace.image_build_compute
        clusters.append((builder.name, builder.size, "dedicated", ctx.location))
    out = []
    for where in sorted({c[3] for c in clusters}):
        try:
            sizes = _aml_sizes(ctx, where)
        except ArmError as err:
            out.append(_unknown("Azure ML size", err, f"Azure ML's VM sizes in {where}"))
            continue
        for cluster, size, tier, region in clusters:
            if region != where:
                continue
            name = f"Azure ML size {size} ({cluster})"
            found = sizes.get(size.lower())
            if found is None or "AmlCompute" not in (found.get("supportedComputeTypes") or ["AmlCompute"]):
                out.append(Check(name, "PROBLEM", f"Azure ML does not offer {size} for compute clusters in {where}",
                                 f"pick a size Azure ML lists there (az ml compute list-sizes --location {where}) "
                                 "or another region"))
            elif tier == "low_priority" and found.get("lowPriorityCapable") is False:
                out.append(Check(name, "PROBLEM", f"{size} is not low-priority capable in {where}",
                                 "set tier: dedicated, or pick a low-priority capable size"))
            else:
                out.append(Check(name, "OK", f"offered for compute clusters in {where}"))
    return out


def check_permissions_before_the_group(ctx: Context) -> list[Check]:
    """The permission rows when the stack's resource group does not exist yet: Azure lists a caller's permissions
    per resource group, so they are read from the caller's role assignments on the subscription (and above it:
    management groups) and those roles' definitions (``roleAssignments?$filter=assignedTo('{oid}')``)."""
    group = ctx.config.workspace.resource_group_name
    if not ctx.principal_id:
        return [Check("permissions", "UNKNOWN", f"resource group {group} does not exist yet, and the credential does "
                      "not say who signed in", f"create it first (az group create -n {group} -l {ctx.location}) and "
                      "re-run the preflight")]
    subscription = f"/subscriptions/{ctx.subscription}"
    try:
        assignments = ctx.arm.list(f"{subscription}/providers/Microsoft.Authorization/roleAssignments",
                                   AUTHORIZATION_API, **{"$filter": f"assignedTo('{ctx.principal_id}')"})
        # At the subscription or above it (a management group): those hold on a group created in it.
        roles = sorted({str((a.get("properties") or {}).get("roleDefinitionId", "")) for a in assignments
                        if not str((a.get("properties") or {}).get("scope", "")).lower().startswith(
                            subscription.lower() + "/")} - {""})
        permissions: list[dict[str, Any]] = []
        for role in roles:
            definition = ctx.once(f"role:{role.lower()}", partial(ctx.arm.get, role, AUTHORIZATION_API))
            permissions += (definition.get("properties") or {}).get("permissions") or []
    except ArmError as err:
        return [_unknown("permissions", err, "your role assignments on the subscription")]
    creates = _allowed(permissions, RESOURCE_GROUP_WRITE)
    row = Check("permission: create the resource group", "OK" if creates else "PROBLEM",
                f"{RESOURCE_GROUP_WRITE} on the subscription is {'granted' if creates else 'not granted'} "
                f"(resource group {group} does not exist yet)",
                "" if creates else f"ask for Contributor on the subscription, or have {group} created for you "
                f"(az group create -n {group} -l {ctx.location}) with Contributor on it")
    return [row, *_permission_rows(ctx, permissions, f"the subscription {ctx.subscription}"), *_elsewhere_rows(ctx)]


def check_deleted_key_vault(ctx: Context) -> list[Check]:
    """The workspace key vault's name (derived from the workspace and group names) is not held by a deleted vault
    (``Microsoft.KeyVault/locations/{region}/deletedVaults/{name}``): purge protection keeps it for up to 90
    days, and a re-created stack would be refused the name (Microsoft Learn, "Azure Key Vault soft-delete
    overview")."""
    vault = ctx.config.workspace.key_vault_name
    name = "soft-deleted key vault"
    try:
        deleted = ctx.arm.get(f"/subscriptions/{ctx.subscription}/providers/Microsoft.KeyVault/locations/"
                              f"{ctx.location}/deletedVaults/{vault}", KEY_VAULT_API)
    except ArmError as err:
        if err.status == 404:
            return [Check(name, "OK", f"no deleted vault holds the name {vault} in {ctx.location}")]
        return [_unknown(name, err, f"the deleted key vaults of {ctx.location}")]
    props = deleted.get("properties") or {}
    purge = str(props.get("scheduledPurgeDate", ""))[:10] or "its purge date"
    protected = props.get("purgeProtectionEnabled") is True
    return [Check(name, "PROBLEM", f"the key vault name {vault} is held by a vault deleted on "
                  f"{str(props.get('deletionDate', ''))[:10] or 'an earlier date'}"
                  + (f", purge-protected until {purge}" if protected else f", kept until {purge}"),
                  f"recover it (az keyvault recover --name {vault}) and import it into the stack (docs/operations.md, "
                  "the key vault)" + ("" if protected else f", or purge it (az keyvault purge --name {vault})")
                  + ", or change workspace.name or workspace.resource_group")]


def check_customer_managed_key(ctx: Context) -> list[Check]:
    """A customer-managed key's vault has soft delete and purge protection (Microsoft Learn, "Use customer-managed
    keys with Azure Machine Learning": the vault "must enable soft delete and purge protection"), and the key access
    Azure Cosmos DB and the workspace's identity need, which Resource Manager cannot show (object ids only)."""
    key = ctx.config.workspace.customer_managed_key
    if key is None:
        return []
    name = "customer-managed key vault"
    vault_name = key.key_vault.rsplit("/", 1)[-1]
    try:
        vault = ctx.arm.get(key.key_vault, KEY_VAULT_API)
    except ArmError as err:
        if err.status == 404:
            return [Check(name, "PROBLEM", f"{key.key_vault} does not exist ({err.code})",
                          "fix workspace.customer_managed_key.key_vault")]
        return [_unknown(name, err, f"key vault {vault_name}")]
    props = vault.get("properties") or {}
    missing = [what for what, on in (("soft delete", props.get("enableSoftDelete", True) is not False),
                                     ("purge protection", props.get("enablePurgeProtection") is True)) if not on]
    rows = [Check(name, "PROBLEM" if missing else "OK",
                  f"{vault_name} has " + ("no " + " and no ".join(missing) if missing
                                          else "soft delete and purge protection"),
                  "" if not missing else f"az keyvault update --name {vault_name} --enable-purge-protection true "
                  "(soft delete is on for every vault created since 2020; it cannot be turned on later)")]
    acls = props.get("networkAcls") or {}
    closed = str(props.get("publicNetworkAccess", "Enabled")).lower() == "disabled" or str(
        acls.get("defaultAction", "Allow")).lower() == "deny"
    if closed and str(acls.get("bypass", "AzureServices")).lower() != "azureservices":
        rows.append(Check("customer-managed key vault network", "PROBLEM", f"{vault_name}'s firewall admits no trusted "
                          f"Azure service (networkAcls.bypass: {acls.get('bypass')})", f"az keyvault update --name "
                          f"{vault_name} --bypass AzureServices; {CMK_VAULT_NETWORK}"))
    elif str(props.get("publicNetworkAccess", "Enabled")).lower() == "disabled":
        rows.append(Check("customer-managed key vault network", "UNKNOWN", f"{vault_name} has public network access "
                          "disabled: whether Azure Cosmos DB can set the key up through the trusted-services exception "
                          "is not visible from here", f"if the workspace create fails on the key, enable public access "
                          f"with default action Deny and bypass AzureServices; {CMK_VAULT_NETWORK}"))
    else:
        rows.append(Check("customer-managed key vault network", "OK", f"{vault_name} admits trusted Azure services"
                          + (" (firewall deny by default, bypass AzureServices)" if closed else "")))
    identity = ctx.config.workspace.primary_user_assigned_identity
    grantees = f"Azure Cosmos DB (application {COSMOS_DB_APP})" + (
        f" and the workspace identity {identity.rsplit('/', 1)[-1]}" if identity else "")
    model = "Key Vault Crypto Service Encryption User role" if props.get("enableRbacAuthorization") else \
        "access policy with key permissions get, wrapKey, unwrapKey"
    rows.append(Check("customer-managed key access", "UNKNOWN",
                      f"{grantees} need get, wrapKey and unwrapKey on the key; Resource Manager shows grants by object "
                      "id only, so this is not checked here",
                      f"grant each a {model} on {vault_name} before pulumi up (docs/operations.md, customer-managed "
                      "key)"))
    return rows


def _network_exists(ctx: Context) -> bool | None:
    """Whether the network the stack creates exists already (a later ``pulumi up``); None when unreadable."""
    vnet = f"{ctx.group}/providers/Microsoft.Network/virtualNetworks/vnet-{ctx.config.workspace.name}"
    try:
        ctx.arm.get(vnet, NETWORK_API)
        return True
    except ArmError as err:
        if err.status == 404:
            return False
        if err.status == 401:
            raise
        return None


def check_upload_path(ctx: Context) -> list[Check]:
    """The build-context upload reaches the workspace storage from this machine, by the path the stack states.

    The storage account refuses public traffic unless ``network.operator_ip_ranges`` lists addresses (then its
    firewall admits only those). So: with ranges, this machine's public address must be inside them, and it must
    not be an Azure VM in the account's region, whose requests IP rules do not apply to (Microsoft Learn, "Azure
    Storage network security"; the region from the instance metadata service). Without ranges the upload goes
    through the blob private endpoint: impossible while the network is the one this ``pulumi up`` creates, and
    otherwise a matter of where this machine sits, which is not visible from here.
    """
    name = "build-context network path"
    builds = [e.name for e in ctx.config.environments if e.build is not None]
    if not builds:
        return [Check(name, "OK", "no environment has a build context: nothing is uploaded")]
    network = ctx.config.network
    host = ctx.instance_metadata()
    host_region = arm_region(str((host or {}).get("compute", {}).get("location", ""))) or None
    if network.operator_ip_ranges:
        if host_region == ctx.location:
            return [Check(name, "PROBLEM", f"this machine is an Azure VM in {ctx.location}, the storage account's "
                          "region: IP rules do not apply to requests from the account's own region, so "
                          "network.operator_ip_ranges cannot let it through",
                          f"run pulumi up from a machine outside {ctx.location} whose address is in "
                          "network.operator_ip_ranges, or deploy into an existing network (network.subnet_id) and run "
                          "it inside")]
        try:
            address = ipaddress.ip_address(ctx.public_ip())
        except (ArmError, ValueError, KeyError, OSError) as err:
            return [Check(name, "UNKNOWN", f"could not learn this machine's public IP ({err})",
                          "pass --public-ip, or run pulumi up from inside the network")]
        inside = [r for r in network.operator_ip_ranges if address in ipaddress.ip_network(r, strict=False)]
        if inside:
            return [Check(name, "OK", f"{address} is inside network.operator_ip_ranges ({inside[0]})")]
        return [Check(name, "PROBLEM", f"this machine's public IP {address} is not in network.operator_ip_ranges "
                      f"({', '.join(network.operator_ip_ranges)}): the storage firewall refuses the upload of "
                      f"{', '.join(builds)}", f"add {address} to network.operator_ip_ranges, or run pulumi up from a "
                      "machine whose address is listed")]
    if network.creates_network:
        exists = _network_exists(ctx)
        if exists is False:
            return [Check(name, "PROBLEM", f"the storage account refuses public traffic and the network "
                          f"vnet-{ctx.config.workspace.name} is created by this pulumi up: no machine is inside it "
                          f"while {', '.join(builds)} are uploaded",
                          "list this machine's public address in network.operator_ip_ranges (amlgpu init "
                          "--operator-ip-range), or deploy into an existing network (network.subnet_id) and run "
                          "pulumi up inside it")]
        where = f"vnet-{ctx.config.workspace.name}"
    else:
        where = str(network.subnet_id).split("/subnets/")[0].rsplit("/", 1)[-1]
    return [Check(name, "UNKNOWN", f"the storage account refuses public traffic: the upload needs this machine "
                  f"inside {where} or a network peered to it, with the privatelink.blob zone linked, which is not "
                  "visible from here" + ("" if host else " (this machine is no Azure VM)"),
                  f"run pulumi up on a runner inside {where} (the deploy workflow's DEPLOY_RUNNER_LABELS)")]


def check_subnet_addresses(ctx: Context) -> list[Check]:
    """An existing subnet has a free address for every node of every cluster at full scale and every private
    endpoint (:func:`addresses`): its address ranges less Azure's five each, less the IP configurations already in
    it (``Microsoft.Network/virtualNetworks/subnets`` GET: ``addressPrefix(es)``, ``ipConfigurations``)."""
    subnet_id = ctx.config.network.subnet_id
    name = "training subnet addresses"
    need = addresses(ctx.config)
    if not subnet_id:
        size = usable(str(ctx.config.network.subnet_prefix))
        return [Check(name, "OK" if need.needed <= size else "PROBLEM",
                      f"the new subnet {ctx.config.network.subnet_prefix} has {size} usable, {need.needed} needed",
                      "" if need.needed <= size else "a larger network.subnet_prefix, or lower max_instances")]
    try:
        subnet = ctx.arm.get(subnet_id, NETWORK_API)
    except ArmError as err:
        if err.status == 404:
            return [Check(name, "PROBLEM", f"{subnet_id} does not exist ({err.code})", "fix network.subnet_id")]
        return [_unknown(name, err, f"subnet {subnet_id.rsplit('/', 1)[-1]}")]
    props = subnet.get("properties") or {}
    prefixes = [str(p) for p in (props.get("addressPrefixes") or [props.get("addressPrefix")]) if p]
    size = sum(usable(p) for p in prefixes)
    used = len(props.get("ipConfigurations") or [])
    free = size - used
    nodes = ", ".join(f"{n} {c}" for n, c in need.clusters)
    detail = (f"{free} free of {size} usable in {', '.join(prefixes)} ({used} in use); {need.needed} needed (max nodes "
              f"{nodes}; {need.private_endpoints} private endpoints)")
    if free >= need.needed:
        return [Check(name, "OK", detail)]
    return [Check(name, "PROBLEM", detail + ": clusters cannot scale out fully (Azure ML reports the subnet out of "
                  "addresses when nodes are added)", "ask the network's owner for a larger subnet, or lower "
                  "max_instances (a re-run counts this stack's own endpoints and nodes among those in use)")]


LIVE: Registry[Context, StackConfig] = Registry([
    Entry("resource providers", check_providers),
    Entry("size offered", check_sizes),
    Entry("Azure ML size", check_aml_sizes),
    Entry("quota", check_quota),
    Entry("permissions", check_permissions),
    Entry("soft-deleted workspace", check_soft_deleted),
    Entry("soft-deleted key vault", check_deleted_key_vault),
    Entry("customer-managed key vault", check_customer_managed_key,
          applies=lambda config: config.workspace.customer_managed_key is not None),
    Entry("private DNS zones", check_dns_links),
    Entry("training subnet addresses", check_subnet_addresses),
    Entry("build-context network path", check_upload_path),
])
"""Every live check, in the order shown; each one's failure to read is its own UNKNOWN row."""


def live_checks(ctx: Context) -> list[Check]:
    """Every live check's rows, in order."""
    return LIVE.run(ctx, ctx.config)


def unknown_rows(config: StackConfig, reason: str, fix: str) -> list[Check]:
    """The live checks' rows when none can run (no credentials, no subscription, a refused token)."""
    return LIVE.unknown(config, reason, fix)


def now() -> datetime:
    return datetime.now(UTC)
