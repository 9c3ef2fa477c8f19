"""Role assignments: the one way the stack grants an identity access, and the ClusterAccess component.

Every assignment is named with a deterministic GUID (:func:`azurefacts.ids.stable_guid`) so re-running the
program never creates a second assignment for the same principal, role and scope (Azure refuses one with
409 RoleAssignmentExists).

A cluster's system-assigned identity gets **Storage Blob Data Contributor** on the workspace storage
(identity-based datastores: there are no keys to fall back on). It gets no AcrPull from the stack: Azure ML
grants a cluster's managed identity AcrPull on the workspace registry itself ("A managed identity is
automatically granted ACRPull role on workspace ACR to enable pulling Docker images for training",
MicrosoftDocs/azure-ai-docs, articles/machine-learning/how-to-identity-based-service-authentication.md @
014addf7c682f2874c82890aed81706cdcdf504b; the exception it names, a compute created before the workspace's
registry, cannot happen here: the registry is created with the workspace, the clusters after it), and a second
assignment for the same principal, role and scope is refused.

User-assigned cluster identities are owned outside the stack: their owner grants these roles.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization

from azurefacts.ids import STORAGE_BLOB_DATA_CONTRIBUTOR, role_definition_id, stable_guid

TYPE = "aml-gpu-training:infra:ClusterAccess"


@dataclass(frozen=True)
class Grant:
    """One role for one principal at one scope."""

    key: str
    """Short name of the grant, part of the logical resource name (``storage-blob-data-contributor``)."""
    role: str
    """Built-in role definition GUID (:mod:`azurefacts.ids`)."""
    scope: pulumi.Input[str]


def grant(
    name: str, grant_: Grant, *, principal_id: pulumi.Input[str], principal_type: pulumi.Input[str],
    subscription_id: pulumi.Input[str], name_seed: tuple[pulumi.Input[str], ...], description: str,
    opts: pulumi.ResourceOptions,
) -> authorization.RoleAssignment:
    """A role assignment named ``<name>-<key>`` whose Azure name is a GUID of ``name_seed`` and the role."""
    return authorization.RoleAssignment(
        f"{name}-{grant_.key}",
        role_assignment_name=pulumi.Output.all(*name_seed).apply(lambda parts: stable_guid(*parts, grant_.role)),
        principal_id=principal_id,
        principal_type=principal_type,
        role_definition_id=pulumi.Output.from_input(subscription_id).apply(
            lambda sub: role_definition_id(sub, grant_.role)
        ),
        scope=grant_.scope,
        description=description,
        opts=opts,
    )


@dataclass(frozen=True)
class ClusterAccessArgs:
    cluster_name: str
    workspace_name: str
    principal_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    storage_account_id: pulumi.Input[str]


class ClusterAccess(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        role = Grant("storage-blob-data-contributor", STORAGE_BLOB_DATA_CONTRIBUTOR, args.storage_account_id)
        grant(
            name, role,
            principal_id=args.principal_id,
            principal_type="ServicePrincipal",  # a managed identity
            subscription_id=args.subscription_id,
            name_seed=(args.workspace_name, args.cluster_name),
            description=f"Cluster {args.cluster_name} of workspace {args.workspace_name}: {role.key}",
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
