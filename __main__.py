"""The Pulumi program: read the stack's config, wire the components, export what submitters need.

Run by `pulumi up` / `pulumi preview` (the Python language host runs this file with
``runpy.run_path(<project dir>, run_name="__main__")``) and, identically, by `amlgpu plan` under
Pulumi's mock engine. Nothing here decides anything: the model validates, components build.
"""

from pathlib import Path
from typing import cast

import pulumi
import pulumi_azure_native.authorization as authorization

from azurefacts.ids import UNKNOWN_SUBSCRIPTION, principal_type
from infra.access import ClusterAccess, ClusterAccessArgs
from infra.build_context import BuildContexts, BuildContextsArgs
from infra.environment import Environment, EnvironmentArgs
from infra.gpu_cluster import ComputePlacement, GpuCluster, ImageBuilder
from infra.network import Network, NetworkArgs
from infra.private_link import PrivateLinks, PrivateLinksArgs, PrivateTarget
from infra.workspace import Workspace, WorkspaceArgs
from jobs.component import declare_runs
from kernel.errors import ConfigError
from stack import NAMESPACE
from stack.config import from_pulumi_config

ROOT = Path(__file__).resolve().parent

try:
    config = from_pulumi_config(pulumi.get_stack(), ROOT)
except ConfigError as err:
    # RunError prints the message alone: the user sees the file and key, not a traceback.
    raise pulumi.RunError(str(err)) from None


client = authorization.get_client_config()
mismatch = (
    config.subscription_mismatch(client.subscription_id) if client.subscription_id != UNKNOWN_SUBSCRIPTION else None
)
if mismatch:
    # The ids the workspace needs in its own subscription, against the one `pulumi up` deploys to.
    raise pulumi.RunError(str(ConfigError(mismatch[1], file=f"Pulumi.{pulumi.get_stack()}.yaml",
                                          key=f"{NAMESPACE}:{mismatch[0]}")))
location = config.workspace_location
# The workspace's tags (e.g. a required cost-center) go on every taggable resource of the stack.
tags = {"project": NAMESPACE, "stack": pulumi.get_stack(), "managed-by": "pulumi", **config.workspace.tags}
private = config.workspace.public_network_access == "Disabled"

workspace = Workspace(
    config.workspace.name,
    WorkspaceArgs(
        config=config.workspace,
        location=location,
        tenant_id=client.tenant_id,
        subscription_id=client.subscription_id,
        operator_ip_ranges=tuple(config.network.operator_ip_ranges),
        tags=tags,
    ),
)
network = Network(
    "network",
    NetworkArgs(
        config=config.network,
        name_prefix=config.workspace.name,
        resource_group_name=workspace.resource_group_name,
        location=location,
        tags=tags,
        restrict_egress=config.network.egress.restricted(config.workspace.high_business_impact),
        storage_account_id=workspace.storage_account.id,
    ),
)
workspace.complete(serverless_subnet_id=network.subnet_id)
links = PrivateLinks(
    "private-links",
    PrivateLinksArgs(
        name_prefix=config.workspace.name,
        resource_group_name=workspace.resource_group_name,
        location=location,
        subnet_id=network.subnet_id,
        virtual_network_id=network.virtual_network_id,
        existing_zone_ids=config.network.private_dns_zone_ids,
        targets=(
            PrivateTarget("workspace", workspace.workspace.id, "amlworkspace"),
            PrivateTarget("storage-blob", workspace.storage_account.id, "blob"),
            PrivateTarget("storage-file", workspace.storage_account.id, "file"),
            PrivateTarget("key-vault", workspace.key_vault.id, "vault"),
            PrivateTarget("registry", workspace.registry.id, "registry"),
        ),
        tags=tags,
    ),
)

placement = ComputePlacement(
    workspace_name=workspace.workspace_name,
    resource_group_name=workspace.resource_group_name,
    location=location,
    subnet_id=network.subnet_id,
    tags=tags,
    after=(links.endpoints["workspace"], links.dns_groups["workspace"]),
)
clusters: dict[str, GpuCluster | ImageBuilder] = {c.name: GpuCluster(c.name, c, placement) for c in config.clusters}
builder = None
if private:
    builder = ImageBuilder(config.workspace.image_build_compute.name, config.workspace.image_build_compute, placement)
    clusters[config.workspace.image_build_compute.name] = builder

system_assigned = {c.name for c in config.clusters if c.identity.has_system_assigned}
if builder is not None:
    system_assigned.add(config.workspace.image_build_compute.name)
for name in sorted(system_assigned):
    ClusterAccess(
        f"{name}-access",
        ClusterAccessArgs(
            cluster_name=name,
            workspace_name=config.workspace.name,
            # A system-assigned identity always has a principal once the cluster exists.
            principal_id=cast("pulumi.Output[str]", clusters[name].principal_id),
            subscription_id=client.subscription_id,
            storage_account_id=workspace.storage_account.id,
        ),
        opts=pulumi.ResourceOptions(parent=clusters[name]),
    )

contexts = (
    BuildContexts(
        "build-contexts",
        BuildContextsArgs(
            workspace_name=config.workspace.name,
            account_name=workspace.storage_account.name,
            resource_group_name=workspace.resource_group_name,
            subscription_id=client.subscription_id,
            deployer_object_id=client.object_id,
            deployer_principal_type=principal_type(client.client_id, config.workspace.deployer_principal_type),
            network_ready=(links.endpoints["storage-blob"], links.dns_groups["storage-blob"]),
        ),
        parent=workspace,
    )
    if any(e.build for e in config.environments)
    else None
)
environments = {
    e.name: Environment(
        e.name,
        EnvironmentArgs(
            config=e,
            root=ROOT,
            workspace_name=workspace.workspace_name,
            resource_group_name=workspace.resource_group_name,
            contexts=contexts,
        ),
        # A private workspace builds images on its image-build cluster: it must exist first.
        opts=pulumi.ResourceOptions(depends_on=[builder]) if builder is not None and e.build else None,
    )
    for e in config.environments
}
runs = declare_runs(config, ROOT)

pulumi.export(
    "workspace",
    {
        "subscription_id": client.subscription_id,
        "resource_group": workspace.resource_group_name,
        "name": workspace.workspace_name,
        "location": location,
        "id": workspace.workspace.id,
    },
)
pulumi.export("network", {"subnet_id": network.subnet_id, "virtual_network_id": network.virtual_network_id})
pulumi.export(
    "clusters",
    {
        c.name: {
            "id": clusters[c.name].compute.id,
            "size": c.size,
            "gpus_per_node": c.sku.gpus,
            "infiniband": c.sku.infiniband,
            "min_instances": c.min_instances,
            "max_instances": c.max_instances,
            "tier": c.tier,
        }
        for c in config.clusters
    },
)
pulumi.export("environments", {name: env.asset_id for name, env in environments.items()})
pulumi.export("jobs", {name: run.spec for name, run in runs.items()})
