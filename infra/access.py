"""The ClusterAccess component: the role assignments a cluster's managed identity needs to train.

Reading images from the workspace registry (AcrPull) and reading/writing the workspace storage
(Storage Blob Data Contributor; the workspace uses identity-based datastores, so there are no keys to
fall back on). Assignments are named with deterministic GUIDs so re-running the program never
creates duplicates.

User-assigned identities are owned outside the stack: their owner grants these roles.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization

from infra.azure import ACR_PULL, STORAGE_BLOB_DATA_CONTRIBUTOR, role_definition_id, stable_guid

TYPE = "aml-gpu-training:infra:ClusterAccess"


@dataclass(frozen=True)
class ClusterAccessArgs:
    cluster_name: str
    workspace_name: str
    principal_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    registry_id: pulumi.Input[str]
    storage_account_id: pulumi.Input[str]


class ClusterAccess(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        grants = (
            ("acr-pull", ACR_PULL, args.registry_id),
            ("storage-blob-data-contributor", STORAGE_BLOB_DATA_CONTRIBUTOR, args.storage_account_id),
        )
        for key, role, scope in grants:
            authorization.RoleAssignment(
                f"{name}-{key}",
                role_assignment_name=stable_guid(args.workspace_name, args.cluster_name, role),
                principal_id=args.principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=pulumi.Output.from_input(args.subscription_id).apply(
                    lambda sub, role=role: role_definition_id(sub, role)
                ),
                scope=scope,
                description=f"Cluster {args.cluster_name} of workspace {args.workspace_name}: {key}",
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({})
