"""The Workspace component: a secure Azure ML workspace and the resources it depends on.

Children: resource group, Log Analytics + Application Insights, storage account, key vault,
container registry, the workspace itself and its diagnostic settings. Secure by default:

* no public network access to the workspace, key vault or registry (private endpoints are added by
  :mod:`infra.private_link`); the storage account denies public traffic except the operator ranges
  a stack lists (Pulumi uploads environment build contexts from the operator's machine);
* identity everywhere: shared keys off on storage, identity-based system datastores, RBAC key vault,
  registry admin user off;
* data-holding resources (resource group, workspace, storage, key vault) are protected from
  deletion unless the stack sets ``workspace.protect: false``;
* a primary **user-assigned** workspace identity gets the roles Microsoft documents for it (Azure gives a
  user-assigned identity nothing by itself), on the dependencies before the workspace is created (which waits
  until they can be in force: :mod:`infra.role_wait`) and on the workspace after it: :data:`USER_ASSIGNED_GRANTS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.applicationinsights as appinsights
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.containerregistry as acr
import pulumi_azure_native.keyvault as keyvault
import pulumi_azure_native.machinelearningservices as ml
import pulumi_azure_native.managedidentity as managedidentity
import pulumi_azure_native.monitor as monitor
import pulumi_azure_native.operationalinsights as loganalytics
import pulumi_azure_native.resources as resources
import pulumi_azure_native.storage as storage

from azurefacts import naming
from azurefacts.ids import (
    CONTRIBUTOR,
    KEY_VAULT_ADMINISTRATOR,
    STORAGE_BLOB_DATA_CONTRIBUTOR,
    identity_type,
    storage_public_network_access,
)
from infra.access import Grant, grant
from infra.role_wait import RolesEffective
from stack.infrastructure import Workspace as WorkspaceConfig

TYPE = "aml-gpu-training:infra:Workspace"

USER_ASSIGNED_GRANTS: tuple[tuple[str, str, str], ...] = (
    ("storage", "contributor", CONTRIBUTOR),
    ("storage", "storage-blob-data-contributor", STORAGE_BLOB_DATA_CONTRIBUTOR),
    ("key_vault", "contributor", CONTRIBUTOR),
    ("key_vault", "key-vault-administrator", KEY_VAULT_ADMINISTRATOR),  # the vault uses the RBAC model
    ("registry", "contributor", CONTRIBUTOR),
    ("insights", "contributor", CONTRIBUTOR),
    ("workspace", "contributor", CONTRIBUTOR),
)
"""(resource, key, role) the workspace's primary user-assigned identity needs: the table "required on your
user-assigned managed identity" of MicrosoftDocs/azure-ai-docs
articles/machine-learning/how-to-identity-based-service-authentication.md @ 014addf7c682f2874c82890aed81706cdcdf504b
(workspace: Contributor; storage: Contributor + Storage Blob Data Contributor; key vault with the RBAC model:
Contributor + Key Vault Administrator; registry: Contributor; Application Insights: Contributor)."""


def _identity_principal(resource_id: str, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The principal (object) id of a user-assigned identity, looked up from its resource id.

    The lookup runs in the deployment subscription; the stack model refuses an identity in another one
    (:meth:`stack.config.StackConfig.subscription_mismatch`).
    """
    parts = resource_id.split("/")  # /subscriptions/<s>/resourceGroups/<rg>/providers/<ns>/<type>/<name>
    found = managedidentity.get_user_assigned_identity_output(
        resource_group_name=parts[4], resource_name=parts[8], opts=pulumi.InvokeOutputOptions(parent=parent)
    )
    principal: pulumi.Output[str] = found.principal_id
    return principal


@dataclass(frozen=True)
class WorkspaceArgs:
    config: WorkspaceConfig
    location: str
    tenant_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    operator_ip_ranges: tuple[str, ...] = ()
    tags: dict[str, str] | None = None


class Workspace(pulumi.ComponentResource):
    """An Azure ML workspace with its storage, key vault, registry and monitoring."""

    resource_group_name: pulumi.Output[str]
    workspace_name: pulumi.Output[str]
    storage_account: storage.StorageAccount
    key_vault: keyvault.Vault
    registry: acr.Registry
    workspace: ml.Workspace

    def __init__(self, name: str, args: WorkspaceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        cfg = args.config
        tags = {**(args.tags or {}), **cfg.tags}
        child = pulumi.ResourceOptions(parent=self)
        # Data lives in these: `pulumi destroy` must not take them by accident (workspace.protect).
        keep = pulumi.ResourceOptions(parent=self, protect=cfg.protect)
        rg_name = cfg.resource_group_name

        group = resources.ResourceGroup(
            f"{name}-rg", resource_group_name=rg_name, location=args.location, tags=tags, opts=keep
        )
        self.resource_group_name = group.name

        logs = loganalytics.Workspace(
            f"{name}-logs",
            workspace_name=f"log-{cfg.name}",
            resource_group_name=group.name,
            location=args.location,
            sku=loganalytics.WorkspaceSkuArgs(name="PerGB2018"),
            retention_in_days=cfg.log_retention_days,
            # Azure Policy 6c53d030 / e15effd4: no public ingestion or query, Entra ID only.
            public_network_access_for_ingestion=cfg.monitoring_access,
            public_network_access_for_query=cfg.monitoring_access,
            features=loganalytics.WorkspaceFeaturesArgs(disable_local_auth=True),
            tags=tags,
            opts=child,
        )
        insights = appinsights.Component(
            f"{name}-insights",
            resource_name_=f"appi-{cfg.name}",
            resource_group_name=group.name,
            location=args.location,
            kind="web",
            application_type="web",
            ingestion_mode="LogAnalytics",
            workspace_resource_id=logs.id,
            # Azure Policy 1bc02227 / 199d5677: no public ingestion or query, Entra ID only.
            public_network_access_for_ingestion=cfg.monitoring_access,
            public_network_access_for_query=cfg.monitoring_access,
            disable_local_auth=True,
            # Azure Policy 0c4bd2e8: profiler and snapshot debugger data only in the customer's own storage. The
            # stack runs no profiler; the setting keeps Application Insights from keeping such data itself.
            force_customer_storage_for_profiler=True,
            tags=tags,
            opts=child,
        )

        deny_public = {"bypass": "AzureServices", "default_action": "Deny"}
        self.storage_account = storage.StorageAccount(
            f"{name}-storage",
            account_name=naming.global_name("st", cfg.name, rg_name, 24, hyphens=False),
            resource_group_name=group.name,
            location=args.location,
            kind="StorageV2",
            sku=storage.SkuArgs(name=cfg.storage_replication),
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            allow_cross_tenant_replication=False,
            default_to_o_auth_authentication=True,
            enable_https_traffic_only=True,
            minimum_tls_version="TLS1_2",
            # Azure Policy b2982f36: public network access off unless operator ranges must reach the firewall
            # (build-context uploads from outside the network); then the firewall denies all but them.
            public_network_access=storage_public_network_access(args.operator_ip_ranges),
            # Azure Policy bc1b984e / 7aa1c9d5: SAS (user delegation only: shared keys are off) at most 7 days.
            sas_policy=storage.SasPolicyArgs(sas_expiration_period="7.00:00:00", expiration_action="Block"),
            network_rule_set=storage.NetworkRuleSetArgs(
                bypass=deny_public["bypass"],
                default_action=deny_public["default_action"],
                ip_rules=[storage.IPRuleArgs(i_p_address_or_range=r, action="Allow") for r in args.operator_ip_ranges],
            ),
            encryption=storage.EncryptionArgs(
                key_source="Microsoft.Storage",
                require_infrastructure_encryption=True,
                services=storage.EncryptionServicesArgs(
                    blob=storage.EncryptionServiceArgs(enabled=True, key_type="Account"),
                    file=storage.EncryptionServiceArgs(enabled=True, key_type="Account"),
                ),
            ),
            tags=tags,
            opts=keep,
        )
        self.key_vault = keyvault.Vault(
            f"{name}-kv",
            vault_name=cfg.key_vault_name,
            resource_group_name=group.name,
            location=args.location,
            properties=keyvault.VaultPropertiesArgs(
                tenant_id=args.tenant_id,
                sku=keyvault.SkuArgs(family="A", name="standard"),
                enable_rbac_authorization=True,
                enable_soft_delete=True,
                soft_delete_retention_in_days=90,
                enable_purge_protection=True,
                public_network_access="Disabled",
                network_acls=keyvault.NetworkRuleSetArgs(**deny_public),
            ),
            tags=tags,
            opts=keep,
        )
        self.registry = acr.Registry(
            f"{name}-acr",
            registry_name=naming.global_name("cr", cfg.name, rg_name, 50, hyphens=False),
            resource_group_name=group.name,
            location=args.location,
            # Premium is the tier that supports private endpoints and disabling public access.
            sku=acr.SkuArgs(name="Premium"),
            admin_user_enabled=False,
            anonymous_pull_enabled=False,
            public_network_access="Disabled",
            network_rule_bypass_options="AzureServices",
            # Azure Policy 524b0254 (exports off), 42781ec6 (no ARM-audience tokens), 9d2b0a20 (zone redundant;
            # Premium in a region with availability zones; set at creation only).
            policies=acr.PoliciesArgs(
                export_policy=acr.ExportPolicyArgs(status="disabled"),
                azure_ad_authentication_as_arm_policy=acr.AzureADAuthenticationAsArmPolicyArgs(status="disabled"),
            ),
            zone_redundancy="Enabled",
            tags=tags,
            opts=child,
        )

        uai_grants = self._grant_user_assigned(
            name, args, {"storage": self.storage_account.id, "key_vault": self.key_vault.id,
                         "registry": self.registry.id, "insights": insights.id},
        )
        # Azure RBAC takes up to 10 minutes to apply an assignment: the workspace is created once its identity's
        # roles can be in force (infra.role_wait), not seconds after they were made.
        roles_in_force: list[pulumi.Resource] = [RolesEffective(
            f"{name}-identity-roles-effective", assignments=uai_grants,
            purpose=f"workspace {cfg.name}'s user-assigned identity on its dependencies",
            opts=pulumi.ResourceOptions(parent=self),
        )] if uai_grants else []

        self._pending = (name, args, group, logs, insights, [*uai_grants, *roles_in_force])

    def complete(self, serverless_subnet_id: pulumi.Input[str]) -> None:
        """Create the workspace itself, once the network exists: serverless compute is pinned to the stack's subnet
        (``serverlessComputeSettings``), which must exist when the workspace is created."""
        name, args, group, logs, insights, waits_for = self._pending
        cfg = args.config
        tags = {**(args.tags or {}), **cfg.tags}
        child = pulumi.ResourceOptions(parent=self)
        cmk = cfg.customer_managed_key
        private = cfg.public_network_access == "Disabled"
        self.workspace = ml.Workspace(
            f"{name}-workspace",
            workspace_name=cfg.name,
            resource_group_name=group.name,
            location=args.location,
            kind="Default",
            sku=ml.SkuArgs(name=cfg.sku, tier=cfg.sku),
            description=cfg.description,
            friendly_name=cfg.name,
            identity=ml.ManagedServiceIdentityArgs(
                type=identity_type(cfg.identity.type),
                user_assigned_identities=[u.resource_id for u in cfg.identity.user_assigned_identities] or None,
            ),
            primary_user_assigned_identity=cfg.primary_user_assigned_identity,
            storage_account=self.storage_account.id,
            key_vault=self.key_vault.id,
            container_registry=self.registry.id,
            application_insights=insights.id,
            public_network_access=cfg.public_network_access,
            allow_public_access_when_behind_vnet=False,
            # The network is the stack's own (or its hub's), not Azure ML's managed one: said explicitly, as Azure
            # Policy 6ddb1705 (default parameter isolationMode: Disabled) compares the field the request carries.
            managed_network=ml.ManagedNetworkSettingsArgs(isolation_mode="Disabled"),
            hbi_workspace=cfg.high_business_impact,
            # Jobs and the studio reach the default datastores with their own identity, never account keys.
            system_datastores_auth_mode="identity",
            # Serverless jobs run in the stack's subnet, their nodes without public IPs, as the clusters' do (Learn,
            # how-to-secure-training-vnet.md: serverless_compute custom_subnet and no_public_ip; wire names of
            # pulumi-azure-native 3.29's ServerlessComputeSettingsArgs, API 2025-12-01, as AVM's workspace module
            # sends them). Left out, serverless jobs of this private workspace would run outside its network.
            serverless_compute_settings=ml.ServerlessComputeSettingsArgs(
                serverless_compute_custom_subnet=serverless_subnet_id, serverless_compute_no_public_ip=True,
            ),
            # A private workspace cannot build images on Azure's shared build pool: it needs a cluster in the VNet.
            image_build_compute=cfg.image_build_compute.name if private else None,
            encryption=ml.EncryptionPropertyArgs(
                status="Enabled",
                key_vault_properties=ml.KeyVaultPropertiesArgs(
                    key_vault_arm_id=cmk.key_vault, key_identifier=cmk.key_uri
                ),
                # The identity that fetches the key (REST spec IdentityForCmk.userAssignedIdentity): the primary
                # user-assigned one, which the key's owner grants access; left out, Azure ML would use the
                # system-assigned identity, created with the workspace and granted nothing on the vault.
                identity=ml.IdentityForCmkArgs(user_assigned_identity=cfg.primary_user_assigned_identity)
                if cfg.primary_user_assigned_identity
                else None,
            )
            if cmk
            else None,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=cfg.protect,
                # The workspace's name is its identity for every job and datastore: replace it only by
                # deleting first, and never on a change Azure can make in place.
                delete_before_replace=True,
                # What Azure cannot change on an existing workspace, a replacement (a new workspace: the old one's
                # runs, models, data assets, environments and clusters go with it), which `protect` then blocks:
                # hbi_workspace "can only be set when a workspace is created" (Learn, concept-data-encryption); the
                # customer-managed key "can only be updated to another key in the original Azure Key Vault
                # resource" (Learn, concept-customer-managed-keys, limitations): turning it on or off, or another
                # vault, replaces; a new key version in the same vault (rotation) updates in place. Pulumi matches
                # replaceOnChanges paths against the provider's diff paths at or below them, so adding the whole
                # encryption block to an existing workspace is judged by `amlgpu plan --base` (planning.review
                # compares paths both ways) and refused by Azure, not replaced.
                replace_on_changes=["hbiWorkspace", "encryption.status", "encryption.keyVaultProperties.keyVaultArmId"],
                # A user-assigned identity must reach the dependencies when the workspace is created: its roles
                # made and in force.
                depends_on=waits_for,
            ),
        )
        self.workspace_name = self.workspace.name
        self._grant_user_assigned(name, args, {"workspace": self.workspace.id})

        if cfg.lock:
            # Azure refuses to delete what is locked, whoever asks (Microsoft Learn, "Lock your resources"): the data
            # holders, not the resource group, whose lock would keep the clusters from scaling down.
            for key, target in (("workspace", self.workspace), ("storage", self.storage_account),
                                ("kv", self.key_vault)):
                authorization.ManagementLockByScope(
                    f"{name}-{key}-lock",
                    lock_name="do-not-delete",
                    level="CanNotDelete",
                    scope=target.id,
                    notes=f"Workspace {cfg.name} (stack setting workspace.lock): lift the lock before deleting it; "
                    "docs/operations.md, locks",
                    opts=child,
                )

        # Resource logs of the workspace, its key vault (Azure Policy cf820ca0) and its blob service, to Log
        # Analytics. Diagnostic settings are platform ingestion: unaffected by the public-access settings above.
        diagnosed = (
            ("diagnostics", self.workspace.id),
            ("kv-diagnostics", self.key_vault.id),
            ("blob-diagnostics", pulumi.Output.concat(self.storage_account.id, "/blobServices/default")),
        )
        for key, resource_uri in diagnosed:
            monitor.DiagnosticSetting(
                f"{name}-{key}",
                name="send-to-log-analytics",
                resource_uri=resource_uri,
                workspace_id=logs.id,
                logs=[monitor.DiagnosticsLogSettingsArgs(category_group="allLogs", enabled=True)],
                # The blob service's metrics already reach Azure Monitor without a setting; the rest send all.
                metrics=None if key == "blob-diagnostics"
                else [monitor.DiagnosticsMetricSettingsArgs(category="AllMetrics", enabled=True)],
                opts=child,
            )

        self.register_outputs(
            {
                "resourceGroupName": group.name,
                "workspaceName": self.workspace.name,
                "workspaceId": self.workspace.id,
                "storageAccountId": self.storage_account.id,
                "keyVaultId": self.key_vault.id,
                "registryId": self.registry.id,
            }
        )

    def _grant_user_assigned(
        self, name: str, args: WorkspaceArgs, scopes: dict[str, pulumi.Input[str]]
    ) -> list[pulumi.CustomResource]:
        """The :data:`USER_ASSIGNED_GRANTS` on ``scopes`` for the primary user-assigned identity, if any."""
        uai = args.config.primary_user_assigned_identity
        if not uai:
            return []
        if not hasattr(self, "_uai_principal"):
            self._uai_principal = _identity_principal(uai, self)
        return [
            grant(
                f"{name}-identity-{resource.replace('_', '-')}",
                Grant(key, role, scopes[resource]),
                principal_id=self._uai_principal,
                principal_type="ServicePrincipal",  # a managed identity
                subscription_id=args.subscription_id,
                name_seed=(args.config.name, "workspace-identity", uai, resource),
                description=f"Workspace {args.config.name}'s user-assigned identity on its {resource}: {key}",
                opts=pulumi.ResourceOptions(parent=self),
            )
            for resource, key, role in USER_ASSIGNED_GRANTS
            if resource in scopes
        ]
