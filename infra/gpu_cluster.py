"""The GpuCluster component (and the ImageBuilder): one AmlCompute cluster, locked down, scaled to zero.

Secure by default: no node public IPs, SSH off, local (key) auth off, nodes in the training subnet. Azure ML
refuses a cluster without node public IPs until the workspace has a private endpoint, so such a cluster is created
after the endpoint and its DNS zone group (:attr:`ComputePlacement.after`).
Azure cannot change a cluster's size, priority, subnet or public-IP setting in place: a change to
any of them replaces the cluster (deleting first, since the name must stay the same for the runs
that target it) instead of failing at update time or drifting silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.machinelearningservices as ml

from azurefacts.ids import identity_type, iso_duration
from stack.infrastructure import Cluster, Identity, ImageBuildCompute

TYPE = "aml-gpu-training:infra:GpuCluster"
IMAGE_BUILDER_TYPE = "aml-gpu-training:infra:ImageBuilder"

IMMUTABLE_PROPERTIES = (
    "properties.properties.vmSize",
    "properties.properties.vmPriority",
    "properties.properties.subnet",
    "properties.properties.enableNodePublicIp",
)
"""Wire paths Azure refuses to update on an existing AmlCompute."""


@dataclass(frozen=True)
class ComputePlacement:
    """Where a cluster goes: its workspace, resource group, region and subnet."""

    workspace_name: pulumi.Input[str]
    resource_group_name: pulumi.Input[str]
    location: str
    subnet_id: pulumi.Input[str]
    tags: dict[str, str] | None = None
    after: tuple[pulumi.Resource, ...] = ()
    """What a cluster without node public IPs is created after: the workspace's private endpoint and its DNS zone
    group ("You must use a workspace private endpoint for the compute resource", Microsoft Learn,
    how-to-secure-training-vnet; the precondition row deploy-order-compute-after-workspace-endpoint)."""


def aml_compute(
    name: str, cfg: Cluster | ImageBuildCompute, where: ComputePlacement, parent: pulumi.Resource
) -> ml.Compute:
    """An AmlCompute with the secure settings every cluster of the stack shares."""
    training = cfg if isinstance(cfg, Cluster) else None
    identity = training.identity if training is not None else Identity()
    public_ip = training.enable_node_public_ip if training is not None else False
    return ml.Compute(
        name,
        compute_name=cfg.name,
        workspace_name=where.workspace_name,
        resource_group_name=where.resource_group_name,
        location=(training.location if training is not None else None) or where.location,
        identity=ml.ManagedServiceIdentityArgs(
            type=identity_type(identity.type),
            user_assigned_identities=[u.resource_id for u in identity.user_assigned_identities] or None,
        ),
        properties=ml.AmlComputeArgs(
            compute_type="AmlCompute",
            description=training.description
            if training is not None
            else "Builds environment images inside the private network",
            disable_local_auth=True,
            properties=ml.AmlComputePropertiesArgs(
                vm_size=cfg.size,
                vm_priority="LowPriority" if training is not None and training.tier == "low_priority" else "Dedicated",
                os_type="Linux",
                enable_node_public_ip=public_ip,
                remote_login_port_public_access="Enabled"
                if training is not None and training.ssh_public_access_enabled
                else "Disabled",
                subnet=ml.ResourceIdArgs(id=where.subnet_id),
                scale_settings=ml.ScaleSettingsArgs(
                    min_node_count=training.min_instances if training is not None else 0,
                    max_node_count=cfg.max_instances,
                    node_idle_time_before_scale_down=iso_duration(
                        training.idle_time_before_scale_down if training is not None else 300
                    ),
                ),
            ),
        ),
        tags={**(where.tags or {}), **(training.tags if training is not None else {})},
        opts=pulumi.ResourceOptions(
            parent=parent,
            replace_on_changes=list(IMMUTABLE_PROPERTIES),
            # The name must stay the same for the runs that target it: delete, then create.
            delete_before_replace=True,
            depends_on=None if public_ip else list(where.after),
        ),
    )


class _ClusterComponent(pulumi.ComponentResource):
    """A component holding one AmlCompute; subclasses name the component type."""

    TYPE: str
    compute: ml.Compute
    principal_id: pulumi.Output[str | None]

    def __init__(
        self, name: str, cfg: Cluster | ImageBuildCompute, where: ComputePlacement,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(self.TYPE, name, None, opts)
        self.compute = aml_compute(name, cfg, where, self)
        self.principal_id = self.compute.identity.apply(lambda i: i.principal_id if i else None)
        self.register_outputs({"computeId": self.compute.id, "principalId": self.principal_id})


class GpuCluster(_ClusterComponent):
    """One declared training cluster."""

    TYPE = TYPE


class ImageBuilder(_ClusterComponent):
    """The small CPU cluster a private workspace builds environment images on."""

    TYPE = IMAGE_BUILDER_TYPE
