"""Compute rules: how AmlCompute clusters (and compute instances) are exposed, authenticated and scaled.

Sources: Azure Policy built-ins of category "Machine Learning", Checkov (CKV_AZURE_142, CKV_AZURE_150),
PSRule for Azure (Azure.ML.DisableLocalAuth, Azure.ML.ComputeVnet, Azure.ML.ComputeIdleShutdown), the
insecure defaults of other tools (terraform azurerm and azure-ai-ml enable node public IPs and local
auth unless told otherwise) and the project's GPU size catalogue.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from azurefacts import availability, skus
from azurefacts.resource_types import COMPUTE
from kernel import regex as linear
from policies.rule import resource_rule
from policies.wire import get, inputs, is_false, is_true, known, same

PSRULE = "https://azure.github.io/PSRule.Rules.Azure/en/rules/"
CLUSTER_DOCS = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-create-attach-compute-cluster"

DEFAULT_MAX_NODES = 32
"""Nodes one cluster may scale to unless the pack config says otherwise (32 x 8 GPUs = 256 GPUs)."""


def _type(resource: Mapping[str, Any]) -> str:
    return str(get(inputs(resource), "properties.computeType", ""))


def _aml(resource: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The AmlCompute properties, or None for other compute types."""
    if not same(_type(resource), "AmlCompute"):
        return None
    props: Mapping[str, Any] = get(inputs(resource), "properties.properties", {})
    return props


def _instance(resource: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not same(_type(resource), "ComputeInstance"):
        return None
    props: Mapping[str, Any] = get(inputs(resource), "properties.properties", {})
    return props


_DURATION = linear.compile(rf"P(?:([{linear.DIGIT}]+)D)?(?:T(?:([{linear.DIGIT}]+)H)?(?:([{linear.DIGIT}]+)M)?"
                           rf"(?:([{linear.DIGIT}]+)S)?)?")


def _minutes(duration: Any) -> float | None:
    """An ISO 8601 duration such as ``PT15M`` or ``PT1H30M`` in minutes (None when unreadable)."""
    match = _DURATION.fullmatch(str(duration or ""))
    if not match or duration in ("P", "PT"):
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return days * 1440 + hours * 60 + minutes + seconds / 60


@resource_rule(
    id="compute-in-virtual-network",
    types=[COMPUTE],
    title="Clusters and compute instances are placed in a virtual network subnet",
    severity="high",
    enforcement="mandatory",
    rationale="Outside a subnet, nodes get public addresses and cannot reach a private workspace's storage "
    "and registry (Azure Policy 'Azure Machine Learning Computes should be in a virtual network', PSRule "
    "Azure.ML.ComputeVnet).",
    remediation="Set properties.properties.subnet.id to the training subnet (the program does).",
    reference=PSRULE + "Azure.ML.ComputeVnet/",
)
def compute_in_virtual_network(resource: Mapping[str, Any]) -> list[str]:
    props = _aml(resource) or _instance(resource)
    if props is None or get(props, "subnet.id"):
        return []
    return ["the compute is not in a virtual network subnet"]


@resource_rule(
    id="compute-no-node-public-ip",
    types=[COMPUTE],
    title="Cluster nodes have no public IP addresses",
    severity="high",
    enforcement="mandatory",
    rationale="Nodes with public IPs are reachable from the Internet and bypass the VNet's egress control; "
    "azure-ai-ml and terraform azurerm enable them unless told otherwise, so the value must be explicit.",
    remediation="Set clusters[].enable_node_public_ip: false (the default).",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-secure-training-vnet",
    config_key=("enable_node_public_ip",),
)
def compute_no_node_public_ip(resource: Mapping[str, Any]) -> list[str]:
    props = _aml(resource) or _instance(resource)
    if props is None:
        return []
    value = get(props, "enableNodePublicIp")
    if not known(value) or is_false(value):
        return []
    return ["node public IPs are " + ("enabled" if is_true(value) else "not explicitly disabled (Azure enables them)")]


@resource_rule(
    id="compute-ssh-disabled",
    types=[COMPUTE],
    title="SSH to cluster nodes is closed to public access",
    severity="high",
    enforcement="mandatory",
    rationale="An open SSH port on every GPU node invites brute force; debugging belongs in the job's "
    "services or a jump host inside the VNet.",
    remediation="Set clusters[].ssh_public_access_enabled: false (the default).",
    reference=CLUSTER_DOCS,
    config_key=("ssh_public_access_enabled",),
)
def compute_ssh_disabled(resource: Mapping[str, Any]) -> list[str]:
    aml = _aml(resource)
    if aml is not None:
        value = get(aml, "remoteLoginPortPublicAccess")
        if known(value) and not same(value, "Disabled"):
            return [f"SSH public access is {value or 'NotSpecified (open when an admin user is set)'}"]
        return []
    instance = _instance(resource)
    if instance is not None and same(get(instance, "sshSettings.sshPublicAccess"), "Enabled"):
        return ["SSH public access is Enabled"]
    return []


@resource_rule(
    id="compute-managed-identity",
    types=[COMPUTE],
    title="Clusters have a managed identity",
    severity="medium",
    enforcement="mandatory",
    rationale="With the registry admin user and storage account keys disabled, a cluster pulls images and "
    "reads datastores only through its managed identity; without one, jobs fail at image pull.",
    remediation="Give the cluster an identity (clusters[].identity; system_assigned is the default).",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-identity-based-service-authentication",
    config_key=("identity",),
)
def compute_managed_identity(resource: Mapping[str, Any]) -> list[str]:
    if _aml(resource) is None:
        return []
    kind = get(inputs(resource), "identity.type")
    if not known(kind) or (kind and not same(kind, "None")):
        return []
    return ["the cluster has no managed identity"]


@resource_rule(
    id="compute-scale-settings-valid",
    types=[COMPUTE],
    title="Cluster scale settings are a valid range",
    severity="high",
    enforcement="mandatory",
    rationale="azure-ai-ml does not range-check scale settings offline: a negative minimum, a zero maximum or "
    "a minimum above the maximum fails only at deployment.",
    remediation="Use 0 <= min_instances <= max_instances and max_instances >= 1.",
    reference=CLUSTER_DOCS,
    config_key=("max_instances",),
)
def compute_scale_settings_valid(resource: Mapping[str, Any]) -> list[str]:
    aml = _aml(resource)
    if aml is None:
        return []
    low, high = get(aml, "scaleSettings.minNodeCount", 0), get(aml, "scaleSettings.maxNodeCount")
    if high is None:
        return ["maxNodeCount is not set"]
    if not (isinstance(low, int) and isinstance(high, int)):
        return []  # not known before deployment
    out = []
    if low < 0:
        out.append(f"minNodeCount {low} is negative")
    if high < 1:
        out.append(f"maxNodeCount {high} is below 1")
    if low > high:
        out.append(f"minNodeCount {low} is greater than maxNodeCount {high}")
    return out


@resource_rule(
    id="compute-scale-to-zero",
    types=[COMPUTE],
    title="Clusters scale to zero nodes when idle",
    severity="medium",
    enforcement="advisory",
    rationale="A minimum above zero keeps GPU nodes billed around the clock whether or not anything runs "
    "(Checkov CKV_AZURE_150).",
    remediation="Set clusters[].min_instances: 0, or waive the rule for a cluster that must stay warm.",
    reference=CLUSTER_DOCS,
    config_key=("min_instances",),
)
def compute_scale_to_zero(resource: Mapping[str, Any]) -> list[str]:
    aml = _aml(resource)
    low = get(aml, "scaleSettings.minNodeCount", 0) if aml is not None else 0
    if isinstance(low, int) and low > 0:
        size = get(aml, "vmSize", "") if aml is not None else ""
        sized = f"{low} {size} node(s)" if isinstance(size, str) and size and known(size) else f"{low} node(s)"
        return [f"keeps {sized} running when idle (minNodeCount {low})"]
    return []


@resource_rule(
    id="compute-idle-scale-down",
    types=[COMPUTE],
    title="Idle cluster nodes scale down promptly",
    severity="low",
    enforcement="advisory",
    rationale="Nodes linger, billed, for nodeIdleTimeBeforeScaleDown after the last job; a long idle time on "
    "GPU sizes costs hours of idle GPUs per run.",
    remediation="Set clusters[].idle_time_before_scale_down to at most max_idle_minutes (pack parameter).",
    reference=CLUSTER_DOCS,
    config_key=("idle_time_before_scale_down",),
)
def compute_idle_scale_down(resource: Mapping[str, Any], *, max_idle_minutes: int = 60) -> list[str]:
    aml = _aml(resource)
    idle = get(aml, "scaleSettings.nodeIdleTimeBeforeScaleDown") if aml is not None else None
    if idle is None or not known(idle):
        return []
    minutes = _minutes(idle)
    if minutes is None:
        return [f"nodeIdleTimeBeforeScaleDown {idle!r} is not an ISO 8601 duration"]
    if minutes > max_idle_minutes:
        return [f"idle nodes stay up {minutes:g} minutes (more than {max_idle_minutes})"]
    return []


@resource_rule(
    id="compute-instance-idle-shutdown",
    types=[COMPUTE],
    title="Compute instances shut down when idle",
    severity="medium",
    enforcement="mandatory",
    rationale="A forgotten GPU compute instance runs and bills until someone stops it (Azure Policy 'Azure "
    "Machine Learning Compute Instance should have idle shutdown', PSRule Azure.ML.ComputeIdleShutdown).",
    remediation="Set properties.properties.idleTimeBeforeShutdown (e.g. PT60M) or a stop schedule.",
    reference=PSRULE + "Azure.ML.ComputeIdleShutdown/",
)
def compute_instance_idle_shutdown(resource: Mapping[str, Any]) -> list[str]:
    instance = _instance(resource)
    if instance is None:
        return []
    if get(instance, "idleTimeBeforeShutdown") or get(instance, "schedules.computeStartStop"):
        return []
    return ["the compute instance has no idle shutdown or stop schedule"]


@resource_rule(
    id="compute-allowed-sizes",
    types=[COMPUTE],
    title="GPU clusters use an allowed VM size",
    severity="medium",
    enforcement="advisory",
    rationale="Platform teams limit GPU sizes to those with quota, support and a known interconnect. By "
    "default the allowed sizes are the project's catalogue, whose InfiniBand and GPU facts the run rules "
    "depend on; set allowed_sizes in the pack config to narrow it.",
    remediation="Use one of allowed_sizes, or ask the platform team to allow the size.",
    reference="https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/overview",
    config_key=("size",),
)
def compute_allowed_sizes(
    resource: Mapping[str, Any], *, allowed_sizes: tuple[str, ...] = tuple(skus.CATALOGUE)
) -> list[str]:
    aml = _aml(resource) or _instance(resource)
    size = get(aml, "vmSize") if aml is not None else None
    # GPU-accelerated Azure sizes are the N family; CPU sizes (the image-build cluster) are out of scope.
    if not isinstance(size, str) or not known(size) or not size.lower().startswith("standard_n"):
        return []
    if size.lower() in {s.lower() for s in allowed_sizes}:
        return []
    return [f"GPU size {size} is not in the allowed sizes"]


@resource_rule(
    id="compute-size-not-retired",
    types=[COMPUTE],
    title="Clusters do not use retired VM sizes",
    severity="high",
    enforcement="mandatory",
    rationale="Azure stops allocating retired sizes: a cluster on one cannot scale up and its runs queue "
    "forever. Retirement dates come from the project's size catalogue.",
    remediation="Move the cluster to a current size (e.g. Standard_ND96isr_H100_v5 for multi-node InfiniBand).",
    reference="https://learn.microsoft.com/en-us/azure/virtual-machines/sizes/retirement/retired-sizes-list",
    config_key=("size",),
)
def compute_size_not_retired(resource: Mapping[str, Any], *, today: dt.date) -> list[str]:
    aml = _aml(resource) or _instance(resource)
    size = get(aml, "vmSize") if aml is not None else None
    if not isinstance(size, str):
        return []
    try:
        retired = skus.lookup(size).retired
    except skus.UnknownSizeError:
        return []
    if retired is None:
        return []
    if retired == "retired" or dt.date.fromisoformat(retired) <= today:
        return [f"{size} is retired ({retired})"]
    return []


@resource_rule(
    id="compute-size-offered-in-region",
    types=[COMPUTE],
    title="GPU clusters use a size sold in the stack's region",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML creates a cluster of a size its region does not sell without complaint, then cannot "
    "allocate a node: runs queue forever. Where each size's series is sold comes from Microsoft's "
    "'Products available by region' table (azurefacts/availability.json, with the date it was read); a "
    "size or region the table does not cover is not judged.",
    remediation="Move the stack to a region the finding lists (azure-native:location) or choose a size sold "
    "in this one; if the subscription's resource SKUs show the size there (amlgpu preflight asks Azure), "
    "waive the finding, naming the table's date.",
    reference="https://azure.microsoft.com/en-us/explore/global-infrastructure/products-by-region/table",
    config_key=("size",),
)
def compute_size_offered_in_region(resource: Mapping[str, Any]) -> list[str]:
    aml = _aml(resource)
    size = get(aml, "vmSize") if aml is not None else None
    region = get(inputs(resource), "location")
    if not isinstance(size, str) or not isinstance(region, str) or not known(size) or not known(region):
        return []
    why = availability.not_offered(size, region)
    return [why] if why else []


@resource_rule(
    id="compute-max-nodes",
    types=[COMPUTE],
    title="Clusters stay within the node cap",
    severity="medium",
    enforcement="advisory",
    rationale="A cluster's maximum is a spending limit: one runaway sweep can scale it to the maximum. The "
    "cap (max_nodes_per_cluster) is the platform team's; raise it deliberately.",
    remediation="Lower clusters[].max_instances, or raise max_nodes_per_cluster in the pack config.",
    reference=CLUSTER_DOCS,
    config_key=("max_instances",),
)
def compute_max_nodes(resource: Mapping[str, Any], *, max_nodes_per_cluster: int = DEFAULT_MAX_NODES) -> list[str]:
    aml = _aml(resource)
    high = get(aml, "scaleSettings.maxNodeCount") if aml is not None else None
    if isinstance(high, int) and high > max_nodes_per_cluster:
        return [f"can scale to {high} nodes, above the cap of {max_nodes_per_cluster}"]
    return []
