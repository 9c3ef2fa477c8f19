"""The infrastructure half of the stack model: workspace, network, clusters and environments.

Keys use Azure ML's CLI v2 vocabulary (``size``, ``min_instances``, ``tier``...) so a team can paste
what it already writes in ``az ml compute create -f`` files. Defaults are the secure ones; every
relaxation is an explicit key in the stack file, visible in review.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from azurefacts import capabilities, naming, regions, skus
from azurefacts.capabilities import Capabilities
from azurefacts.enums import AnyCase, CamelOrSnakeCase, SnakeOrPascalCase
from azurefacts.ids import PRIVATE_DNS_ZONES
from kernel import regex as linear
from kernel.paths import files_inside

_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))

_ZONE_ID = linear.compile(
    r"^/subscriptions/[^/]+/resource[Gg]roups/[^/]+/providers/Microsoft\.Network/privateDnsZones/(?P<zone>[^/]+)$"
)


Region = Annotated[str, AfterValidator(regions.check)]
"""An Azure region, as ARM names it (``westeurope``) or by its display name (``West Europe``): see
:mod:`azurefacts.regions`."""


class Model(BaseModel):
    """Base for every config section: unknown keys are errors, values are immutable once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# --------------------------------------------------------------------------------------------- identity


class UserAssignedIdentity(Model):
    resource_id: str = Field(pattern=r"^/subscriptions/[^/]+/resource[Gg]roups/[^/]+/providers/"
                                    r"Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+$")


class Identity(Model):
    """Managed identity, as in CLI v2: ``type`` plus ``user_assigned_identities``."""

    type: Annotated[
        Literal["system_assigned", "user_assigned", "system_assigned,user_assigned"], CamelOrSnakeCase
    ] = "system_assigned"
    user_assigned_identities: list[UserAssignedIdentity] = []

    @model_validator(mode="after")
    def _user_assigned_listed(self) -> Identity:
        if "user_assigned" in self.type and not self.user_assigned_identities:
            raise ValueError(f"identity type {self.type!r} needs at least one user_assigned_identities entry")
        if "user_assigned" not in self.type and self.user_assigned_identities:
            raise ValueError("user_assigned_identities is set but identity type is 'system_assigned'")
        return self

    @property
    def has_system_assigned(self) -> bool:
        return "system_assigned" in self.type


# --------------------------------------------------------------------------------------------- workspace


class CustomerManagedKey(Model):
    """Workspace encryption with a key the customer holds (CLI v2 ``customer_managed_key``)."""

    key_vault: str = Field(pattern=r"^/subscriptions/.+/providers/Microsoft\.KeyVault/vaults/[^/]+$")
    key_uri: str = Field(pattern=r"^https://[^/]+\.vault\.azure\.net/keys/[^/]+(/[^/]+)?$")


class ImageBuildCompute(Model):
    """The small CPU cluster that builds environment images when the workspace is private."""

    name: naming.ClusterName = "image-builder"
    size: str = "Standard_DS3_v2"
    max_instances: Annotated[StrictInt, Field(ge=1, le=10)] = 1


class Workspace(Model):
    name: naming.WorkspaceName
    location: Region | None = None
    """Azure region; defaults to the ``azure-native:location`` provider setting."""
    resource_group: naming.ResourceGroupName | None = None
    """Defaults to ``rg-<workspace name>``."""
    sku: Literal["Basic", "Standard", "Premium"] = "Basic"
    description: str | None = None
    public_network_access: Annotated[Literal["Disabled", "Enabled"], SnakeOrPascalCase] = "Disabled"
    identity: Identity = Identity()
    primary_user_assigned_identity: str | None = None
    high_business_impact: StrictBool = False
    customer_managed_key: CustomerManagedKey | None = None
    image_build_compute: ImageBuildCompute = ImageBuildCompute()
    tags: dict[str, str] = {}
    protect: StrictBool = True
    """Protect the workspace, its storage and key vault from deletion (``pulumi destroy`` refuses)."""
    lock: StrictBool = False
    """A ``CanNotDelete`` management lock on the workspace, its storage account and key vault: Azure itself refuses
    their deletion, from the portal or the CLI too, until the lock is removed (``protect`` stops only ``pulumi
    destroy``). The resource group is not locked: Microsoft Learn ("Lock your resources") warns that such a lock
    keeps Azure ML clusters from scaling down. A locked workspace's clusters cannot be deleted or replaced, nor
    role assignments on the locked resources removed, until the lock is lifted (docs/operations.md, locks)."""
    log_retention_days: Annotated[StrictInt, Field(ge=30, le=730)] = 30
    monitoring_public_network_access: Literal["Disabled", "Enabled"] | None = None
    """Public ingestion and query of Application Insights and Log Analytics; defaults to
    ``public_network_access``. Disabled, logs are read from inside the network (Azure Monitor private link
    scope) or through the workspace's diagnostic settings, not from the portal outside it."""
    storage_sku: Literal["Standard_LRS", "Standard_ZRS", "Standard_GRS", "Standard_GZRS", "Standard_RAGRS",
                         "Standard_RAGZRS"] | None = None
    """Replication of the workspace storage; defaults to Standard_ZRS for a high-business-impact workspace,
    Standard_LRS otherwise (a dev stack)."""
    deployer_principal_type: Literal["User", "ServicePrincipal"] | None = None
    """What runs ``pulumi up``: the stack grants it a data role on the build-context container, and Azure
    refuses a role assignment whose principalType does not match (UnmatchedPrincipalType). Left out, it is
    ``User`` when the Azure CLI or Azure PowerShell signed in, else ``ServicePrincipal``."""

    @model_validator(mode="after")
    def _primary_identity(self) -> Workspace:
        if "user_assigned" in self.identity.type and not self.primary_user_assigned_identity:
            # Azure requires a primary identity once the workspace has user-assigned identities.
            object.__setattr__(
                self, "primary_user_assigned_identity", self.identity.user_assigned_identities[0].resource_id
            )
        if self.primary_user_assigned_identity and self.primary_user_assigned_identity not in {
            u.resource_id for u in self.identity.user_assigned_identities
        }:
            raise ValueError("primary_user_assigned_identity must be one of identity.user_assigned_identities")
        return self

    @property
    def resource_group_name(self) -> str:
        return self.resource_group or f"rg-{self.name}"

    @property
    def key_vault_name(self) -> str:
        """The workspace key vault's name: global, and reserved for 90 days after a delete (purge protection)."""
        return naming.global_name("kv", self.name, self.resource_group_name, 24, hyphens=True)

    @property
    def monitoring_access(self) -> str:
        return self.monitoring_public_network_access or self.public_network_access

    @property
    def storage_replication(self) -> str:
        return self.storage_sku or ("Standard_ZRS" if self.high_business_impact else "Standard_LRS")


# --------------------------------------------------------------------------------------------- network

_SERVICE_TAG = linear.compile(r"^[A-Z][A-Za-z0-9]*(\.[A-Za-z0-9]+)?$")
"""A service tag as Azure spells them (``Storage``, ``Storage.WestEurope``, ``AzureFrontDoor.FirstParty``): a host name
(lower case) is not one."""


class EgressAllow(Model):
    """Outbound traffic a team's jobs need beyond Azure ML's own (a package index, a model hub, a storage account in
    another region): an NSG rule, so destinations are addresses or service tags, not host names."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$")]
    """Part of the NSG rule's name (``allow-team-<name>-out``)."""
    destinations: Annotated[list[str], Field(min_length=1, max_length=100)]
    """IPv4 addresses or CIDR ranges, or Azure service tags (``Storage.EastUS``, ``AzureFrontDoor.Frontend``)."""
    ports: Annotated[list[Annotated[StrictInt, Field(ge=1, le=65535)]], Field(min_length=1)] = [443]
    """Destination ports."""
    protocol: Literal["Tcp", "Udp", "*"] = "Tcp"
    """The NSG rule's protocol (``*``: any)."""

    @field_validator("destinations")
    @classmethod
    def _addresses_or_tags(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if _SERVICE_TAG.match(entry) and entry.lower() not in {"internet", "any"}:
                    continue
                raise ValueError(f"{entry!r} is neither an IPv4 address or CIDR range nor a service tag (an NSG "
                                 "rule matches addresses, not host names: list the host's addresses, or route "
                                 "through a firewall with FQDN rules; docs/operations.md, egress)") from None
            if network.version != 4:
                raise ValueError(f"{entry!r}: the training subnet is IPv4 only")
            if network.prefixlen == 0:
                raise ValueError(f"{entry!r} is the whole Internet: set egress.restrict: false instead, in review")
        return value


class Egress(Model):
    """What the training subnet may reach outside Azure ML's own service tags (a new network's NSG)."""

    restrict: StrictBool | None = None
    """Deny outbound Internet traffic below the service tags Azure ML needs and ``allow``. Left out: on for a
    high-business-impact workspace, off otherwise."""
    allow: Annotated[list[EgressAllow], Field(max_length=100)] = []
    """Outbound rules of the team's own, above the deny (package indexes, model hubs, datasets elsewhere)."""
    storage_endpoint_policy: StrictBool = False
    """A service endpoint policy on the subnet: storage reached through its service endpoint is only the workspace's
    account, ``storage_accounts`` and the Microsoft-managed accounts of Azure ML's alias (Microsoft Learn, "Azure
    Machine Learning data exfiltration prevention")."""
    storage_accounts: list[Annotated[str, Field(pattern=r"^/subscriptions/[^/]+/resource[Gg]roups/[^/]+/providers/"
                                                        r"Microsoft\.Storage/storageAccounts/[^/]+$")]] = []
    """More storage accounts the endpoint policy admits (datasets a team reads)."""

    @model_validator(mode="after")
    def _accounts_need_policy(self) -> Egress:
        if self.storage_accounts and not self.storage_endpoint_policy:
            raise ValueError("storage_accounts are admitted by the storage endpoint policy: set "
                             "storage_endpoint_policy: true")
        return self

    def restricted(self, high_business_impact: bool) -> bool:
        return self.restrict if self.restrict is not None else high_business_impact


class Network(Model):
    """A new virtual network (``address_space`` + ``subnet_prefix``) or an existing ``subnet_id``."""

    address_space: str | None = "10.40.0.0/16"
    subnet_prefix: str | None = "10.40.0.0/20"
    operator_ip_ranges: list[str] = []
    """Public IPv4 addresses or CIDR ranges allowed through the storage firewall: where ``pulumi up`` uploads build
    contexts from when it does not run inside the network. Azure applies them to requests from outside the
    account's region only."""
    subnet_id: str | None = Field(
        default=None,
        pattern=r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/"
                r"virtualNetworks/[^/]+/subnets/[^/]+$",
    )

    nat_gateway_id: str | None = Field(
        default=None,
        pattern=r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/natGateways/[^/]+$",
    )
    """An existing NAT gateway for the new training subnet's outbound traffic, instead of the one the stack
    creates."""
    default_outbound_access: StrictBool = False
    """Azure's default outbound access for the new training subnet. False (the default): the subnet is private
    (Azure Policy 7bca8353 "Subnets should be private") and no-public-IP nodes reach Azure ML's service tags through
    ``nat_gateway_id`` or a NAT gateway the stack creates. True: Azure's default outbound access and no NAT gateway.
    Fixed when the subnet is created."""
    egress: Egress = Egress()
    """Outbound traffic of a new training subnet (its NSG); an existing subnet's is its owner's."""
    private_dns_zone_ids: dict[str, str] = {}
    """Existing private DNS zones (zone name -> resource id), e.g. a hub's central zones: the private endpoints
    use them and the stack neither creates nor links them. Zones not listed are created and linked to the
    network."""

    @field_validator("operator_ip_ranges")
    @classmethod
    def _storage_ip_rules(cls, value: list[str]) -> list[str]:
        # What a storage account's IP rule accepts (REST spec IPRule: "Only IPV4 address is allowed"; Microsoft
        # Learn, "Azure Storage firewall guidelines and limitations": no /31 or /32 range, give the address; no
        # private (RFC 1918) addresses, which reach the account through its private endpoint instead).
        for entry in value:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IPv4 address or CIDR range") from None
            if network.version != 4:
                raise ValueError(f"{entry!r}: storage firewall rules take IPv4 addresses only")
            if any(network.subnet_of(p) for p in _RFC1918):  # type: ignore[arg-type]
                raise ValueError(f"{entry!r} is a private (RFC 1918) range: storage firewall rules take public "
                                 "addresses; a machine inside the network reaches the storage through its private "
                                 "endpoint and needs no rule")
            if "/" in entry and network.prefixlen > 30:
                raise ValueError(f"{entry!r}: storage firewall rules take no /31 or /32 range; give the address "
                                 f"itself ({network.network_address})")
        return value

    @field_validator("private_dns_zone_ids")
    @classmethod
    def _known_zones(cls, value: dict[str, str]) -> dict[str, str]:
        known = sorted({z for zones in PRIVATE_DNS_ZONES.values() for z in zones})
        for zone, resource_id in value.items():
            if zone not in known:
                raise ValueError(
                    f"{zone!r} is not a zone the workspace's private endpoints use (one of {', '.join(known)})"
                )
            match = _ZONE_ID.match(resource_id)
            if not match:
                raise ValueError(
                    f"{zone}: {resource_id!r} is not a private DNS zone id "
                    "(/subscriptions/<s>/resourceGroups/<rg>/providers/Microsoft.Network/privateDnsZones/<zone>)"
                )
            if match.group("zone").lower() != zone.lower():
                raise ValueError(f"{zone}: the id names zone {match.group('zone')!r}, not {zone!r}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _existing_subnet_replaces_new_network(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("subnet_id"):
            extra = [k for k in ("address_space", "subnet_prefix") if data.get(k)]
            if extra:
                raise ValueError(f"give either subnet_id or {' and '.join(extra)}, not both")
            return {**data, "address_space": None, "subnet_prefix": None}
        return data

    @model_validator(mode="after")
    def _prefix_inside_space(self) -> Network:
        if self.subnet_id:
            given = [k for k in ("nat_gateway_id", "default_outbound_access", "egress") if k in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{given[0]} applies to a new subnet; an existing subnet_id keeps its owner's settings"
                )
            return self
        if self.nat_gateway_id and self.default_outbound_access:
            raise ValueError("nat_gateway_id carries the subnet's outbound traffic: default_outbound_access: true "
                             "contradicts it (leave it out)")
        if not (self.address_space and self.subnet_prefix):
            raise ValueError("a new network needs both address_space and subnet_prefix (or give subnet_id)")
        try:
            space = ipaddress.ip_network(self.address_space)
            prefix = ipaddress.ip_network(self.subnet_prefix)
        except ValueError as err:
            raise ValueError(f"not a CIDR block: {err}") from None
        if not prefix.subnet_of(space):  # type: ignore[arg-type]
            raise ValueError(f"subnet_prefix {self.subnet_prefix} is not inside address_space {self.address_space}")
        if prefix.prefixlen > 24:
            # AmlCompute needs an address per node plus Azure's 5 reserved ones; /24 is the floor
            # the Azure ML network-isolation guide recommends for training clusters.
            raise ValueError(
                f"subnet_prefix {self.subnet_prefix} is too small for training clusters (use /24 or larger)"
            )
        return self

    @property
    def creates_network(self) -> bool:
        return self.subnet_id is None

    @property
    def subnet_default_outbound(self) -> bool:
        return self.default_outbound_access

    @property
    def creates_nat_gateway(self) -> bool:
        """A new private subnet without an existing NAT gateway gets one of the stack's."""
        return self.creates_network and not self.default_outbound_access and self.nat_gateway_id is None


# --------------------------------------------------------------------------------------------- clusters


INT32_MAX = 2**31 - 1
"""AmlCompute's scale settings are 32-bit integers in the ARM API; larger values would also lose digits on
Pulumi's wire, which carries every number as a double."""


class Cluster(Model):
    """One AmlCompute cluster (CLI v2 ``type: amlcompute``)."""

    name: naming.ClusterName
    size: str
    min_instances: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = 0
    max_instances: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)]
    tier: Annotated[Literal["dedicated", "low_priority"], AnyCase] = "dedicated"
    idle_time_before_scale_down: Annotated[StrictInt, Field(ge=0)] = 900
    enable_node_public_ip: StrictBool = False
    ssh_public_access_enabled: StrictBool = False
    identity: Identity = Identity()
    location: Region | None = None
    description: str | None = None
    tags: dict[str, str] = {}

    @field_validator("size")
    @classmethod
    def _known_size(cls, value: str) -> str:
        return skus.lookup(value).size  # canonical spelling; raises with close matches

    @model_validator(mode="after")
    def _scale_range(self) -> Cluster:
        if self.min_instances > self.max_instances:
            raise ValueError(
                f"min_instances ({self.min_instances}) is greater than max_instances ({self.max_instances})"
            )
        return self

    @property
    def sku(self) -> skus.GpuSku:
        return skus.lookup(self.size)


# --------------------------------------------------------------------------------------------- environments

Capability = Literal[
    "cuda", "rocm", "nccl", "rccl", "mpi", "mpi4py", "horovod", "deepspeed",
    "pytorch", "lightning", "transformers", "accelerate", "tensorflow", "infiniband",
]

def infer_capabilities(reference: str) -> frozenset[str]:
    """Capabilities a well-known image or curated/registry reference is known to have (empty when unknown);
    see :mod:`azurefacts.capabilities` for the evidence table and what is known to be absent."""
    return capabilities.of_reference(reference).present


class BuildContext(Model):
    path: str
    """Folder, relative to the project root, uploaded to the workspace's storage as the build context."""
    dockerfile_path: str = "Dockerfile"


_REGISTRY_REF = linear.compile(
    r"^azureml://registries/(?P<registry>[^/]+)/environments/(?P<name>[^/]+)"
    r"(/versions/(?P<version>[^/]+)|/labels/(?P<label>[^/]+))?$"
)
_WORKSPACE_REF = linear.compile(
    r"^azureml:(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)(:(?P<version>[^:@/]+)|@(?P<label>[^:@/]+))$"
)
"""A workspace environment, curated ones included: ``azureml:<name>:<version>`` or ``azureml:<name>@<label>``."""


def reference_version(reference: str) -> str | None:
    """The pinned version of an environment reference (None for a label such as ``latest`` or none)."""
    match = _REGISTRY_REF.match(reference) or _WORKSPACE_REF.match(reference)
    version = match.group("version") if match else None
    return version if version and version != "latest" else None


def is_reference(value: str) -> bool:
    """``value`` names an existing environment (workspace/curated or registry)."""
    return bool(_REGISTRY_REF.match(value) or _WORKSPACE_REF.match(value))


class Environment(Model):
    """A training environment: an image, a Docker build context, or a registry environment."""

    name: naming.EnvironmentName
    version: naming.AssetVersion | None = None
    image: str | None = None
    build: BuildContext | None = None
    reference: str | None = None
    """An existing environment: a registry one (``azureml://registries/<r>/environments/<n>/versions/<v>``)
    or a workspace/curated one (``azureml:AzureML-acpt-pytorch-2.8-cuda12.6:15``, ``azureml:<name>@latest``)."""
    conda_file: str | None = None
    description: str | None = None
    provides: list[Capability] | None = None
    tags: dict[str, str] = {}

    @field_validator("reference")
    @classmethod
    def _registry_reference(cls, value: str | None) -> str | None:
        if value is not None and not is_reference(value):
            raise ValueError(
                f"reference {value!r} is not an environment reference "
                "(azureml://registries/<registry>/environments/<name>/versions/<version>, "
                "azureml:<name>:<version> or azureml:<name>@latest)"
            )
        return value

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Environment:
        given = [k for k in ("image", "build", "reference") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of image, build or reference"
                + (f" (got {' and '.join(given)})" if given else "")
            )
        if self.reference is not None and (self.conda_file or self.version):
            raise ValueError("a reference carries its own version and conda file; remove version/conda_file")
        return self

    @property
    def capabilities(self) -> frozenset[str]:
        """What the environment is known to offer without reading files: inferred from the image or
        reference (:mod:`azurefacts.capabilities`) plus the declared ``provides``."""
        return infer_capabilities(self.image or self.reference or "") | frozenset(self.provides or ())

    def evidence(self, root: Path) -> Capabilities:
        """Known present / known absent capabilities, reading the build context and conda file under ``root``."""
        return environment_evidence(
            image=self.image, reference=self.reference, build=self.build, conda_file=self.conda_file,
            provides=self.provides, root=root,
        )

    @property
    def is_pinned(self) -> bool:
        """Pinned to an exact image (digest or explicit tag other than latest) or a reference's version."""
        if self.reference is not None:
            return reference_version(self.reference) is not None
        if self.image is not None:
            return image_pinned(self.image)
        return True  # a build context is pinned by the environment version

    def with_content_version(self, root: Path) -> Environment:
        """This environment with ``version`` defaulted to :func:`content_version` (unchanged when given)."""
        if self.version is not None or self.reference is not None:
            return self
        return self.model_copy(update={"version": content_version(self.image, self.build, self.conda_file, root)})

    @property
    def asset_id(self) -> str:
        """How a job names it: ``azureml:<name>:<version>`` or the registry reference."""
        return self.reference or f"azureml:{self.name}:{self.version}"


def image_pinned(image: str) -> bool:
    """An image reference with a digest or an explicit tag other than ``latest``."""
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and not last.endswith(":latest")


def content_version(image: str | None, build: BuildContext | None, conda_file: str | None, root: Path) -> str:
    """A version derived from what the environment is made of, as Azure ML names anonymous environments
    (a SHA-256 hex digest): the image, the conda file's bytes, and every build-context file's relative
    path and bytes. The same on every machine: no timestamps, no absolute paths, files in sorted order."""
    digest = hashlib.sha256(b"aml-gpu-training environment content v1\0")
    if image is not None:
        digest.update(b"image\0" + image.encode() + b"\0")
    if conda_file is not None:
        digest.update(b"conda\0" + (root / conda_file).read_bytes() + b"\0")
    if build is not None:
        folder = root / build.path
        digest.update(b"dockerfile\0" + build.dockerfile_path.encode() + b"\0")
        for file in files_inside(folder):
            digest.update(file.relative_to(folder).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def environment_evidence(
    *, image: str | None, reference: str | None, build: BuildContext | None, conda_file: str | None,
    provides: Sequence[str] | None, root: Path,
) -> Capabilities:
    """Tri-state capabilities of an environment made of these parts (see :mod:`azurefacts.capabilities`)."""
    caps = capabilities.of_reference(image or reference or "")
    if build is not None:
        dockerfile = root / build.path / build.dockerfile_path
        try:
            caps = capabilities.read_dockerfile(dockerfile.read_text(encoding="utf-8", errors="replace"),
                                                root / build.path).capabilities
        except OSError:
            caps = capabilities.Capabilities()
    if conda_file is not None:
        try:
            caps = caps.plus(capabilities.of_conda_file((root / conda_file).read_text(encoding="utf-8")))
        except OSError:
            caps = caps.plus(set(), opaque=True)
    return caps.plus(set(provides or ()))
