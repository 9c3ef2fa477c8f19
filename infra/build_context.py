"""Environment build contexts uploaded with Microsoft Entra ID, never with the storage account key.

The workspace storage account has shared-key access off (``allowSharedKeyAccess: false``), and
pulumi-azure-native's ``storage:Blob`` uploads with the account key (its custom blob resource calls
``ListKeys``; provider issues pulumi/pulumi-azure-native#2015 and #2948), so it fails there with
``KeyBasedAuthenticationNotPermitted``. This module uploads over the Blob REST API with a bearer token
instead (azure-storage-blob + azure-identity), from a Pulumi dynamic provider:

* :class:`BuildContexts`: the private ``environment-builds`` container and the deploying
  principal's **Storage Blob Data Contributor** role on it (the data role the upload needs; role id from
  Azure's built-in roles list), which every upload depends on;
* :class:`BuildContextUpload` (dynamic resource): one environment's context folder, **content-addressed**:
  blobs go under ``<environment>/<version>/<digest>/`` where the digest covers every file's path and
  SHA-256, so an unchanged context is neither diffed nor uploaded again, and a changed one gets a new
  URI (the immutable environment version built from the old one keeps its files);
* :func:`upload_context`: the upload itself, skipping a blob already holding the same content (its
  ``sha256`` metadata), retrying while a fresh role assignment propagates (Azure RBAC: changes can take
  up to 10 minutes) and while a fresh private endpoint's network path settles, and failing with one line that
  says what to fix.

The upload runs from the machine running ``pulumi up``, after the deployer's data role and, for a private
account, after the blob private endpoint and its DNS zone group (``BuildContextsArgs.network_ready``): the
storage firewall must let that machine through (``network.operator_ip_ranges``) or it must run inside the
network (docs/operations.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.storage as storage
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from azurefacts.ids import STORAGE_BLOB_DATA_CONTRIBUTOR, STORAGE_FIREWALL_CODES, firewall_refusal
from infra.access import Grant, grant
from kernel.paths import files_inside

CONTAINER = "environment-builds"
DIGEST_LENGTH = 16
"""Hex characters of the context digest in the blob prefix (64 bits: collisions are not a concern)."""

PROPAGATION_WAIT_S = 660.0
"""How long an upload keeps retrying a refusal that a fresh grant or a fresh network path explains: Microsoft
Learn, "Troubleshoot Azure RBAC": role assignment changes can take up to 10 minutes; one retry interval more, so
that the last attempt falls after those 10 minutes rather than on them."""
RETRY_EVERY_S = 15.0
RETRIED = frozenset({"AuthorizationPermissionMismatch", "AuthorizationFailure"})
"""Refusals retried for :data:`PROPAGATION_WAIT_S`: no data role yet (the stack grants it just before), and the
account's firewall refusing the caller, which a private endpoint or firewall rule created just before ends."""


# --------------------------------------------------------------------------------------------- content


def context_files(folder: Path) -> dict[str, str]:
    """Every file of a build context: path relative to ``folder`` (POSIX) -> SHA-256 of its bytes.

    A symbolic link that leads outside the context is neither read nor uploaded: the context is the
    stack's, the rest of the machine is not (:func:`kernel.paths.files_inside`)."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(files_inside(folder))
    }


def context_digest(files: Mapping[str, str]) -> str:
    """One digest for a whole context: paths and contents, order-independent."""
    lines = "".join(f"{path}\0{sha}\n" for path, sha in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()[:DIGEST_LENGTH]


def blob_prefix(environment: str, version: str, files: Mapping[str, str]) -> str:
    """Where a context's blobs go: ``<environment>/<version>/<digest>/``."""
    return f"{environment}/{version}/{context_digest(files)}/"


def account_url(account_name: str) -> str:
    return f"https://{account_name}.blob.core.windows.net"


# --------------------------------------------------------------------------------------------- upload


class UploadError(Exception):
    """An upload that cannot succeed as configured; the message says what to change."""


@dataclass(frozen=True)
class UploadResult:
    uploaded: tuple[str, ...]
    skipped: tuple[str, ...]


def _explain(err: Any, account: str) -> str:
    code = getattr(err, "error_code", None) or ""
    if code == "AuthorizationPermissionMismatch":
        return (f"the deploying principal has no data role on storage account {account} yet "
                f"(needs Storage Blob Data Contributor on container {CONTAINER}; the stack grants it, "
                "propagation can take up to 10 minutes)")
    if code in STORAGE_FIREWALL_CODES:
        return firewall_refusal(account, command="pulumi up")
    if code == "KeyBasedAuthenticationNotPermitted":
        return f"storage account {account} refuses shared keys; the upload must use Microsoft Entra ID"
    status = getattr(err, "status_code", None)
    return f"storage account {account} answered {status or ''} {code or type(err).__name__}".strip()


def upload_context(
    account_name: str,
    container: str,
    prefix: str,
    source: Path,
    files: Mapping[str, str],
    credential: Any,
    *,
    transport: Any = None,
    wait_s: float = PROPAGATION_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> UploadResult:
    """Upload each file of ``files`` (relative path -> SHA-256) from ``source`` to ``<container>/<prefix>``.

    A blob whose ``sha256`` metadata already matches is skipped. Authentication is the bearer token of
    ``credential`` (a ``TokenCredential``); ``transport`` replaces the HTTP transport (tests replay
    recorded Blob REST responses through it).
    """
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
    from azure.storage.blob import ContainerClient

    options: dict[str, Any] = {"retry_total": 0} if transport is not None else {}
    client = ContainerClient(account_url(account_name), container, credential=credential, transport=transport,
                             **options)
    deadline = clock() + wait_s
    uploaded: list[str] = []
    skipped: list[str] = []
    for relative, sha in sorted(files.items()):
        path = source / relative
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            raise UploadError(f"build context file {path} changed or disappeared since the plan; run it again")
        blob = client.get_blob_client(prefix + relative)
        while True:
            try:
                try:
                    if blob.get_blob_properties().metadata.get("sha256") == sha:
                        skipped.append(relative)
                        break
                except ResourceNotFoundError:
                    pass
                blob.upload_blob(path.read_bytes(), blob_type="BlockBlob", overwrite=True, metadata={"sha256": sha})
                uploaded.append(relative)
                break
            except ClientAuthenticationError as err:
                if isinstance(err, HttpResponseError) and getattr(err, "status_code", None):
                    raise UploadError(f"uploading {prefix}{relative}: {_explain(err, account_name)}") from None
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise UploadError(
                    "no Microsoft Entra token for the build-context upload (sign in with `az login`, or set the "
                    f"AZURE_* or ARM_* service principal variables pulumi up uses): {first}"
                ) from None
            except HttpResponseError as err:
                if getattr(err, "error_code", None) in RETRIED and clock() < deadline:
                    sleep(RETRY_EVERY_S)
                    continue
                raise UploadError(f"uploading {prefix}{relative}: {_explain(err, account_name)}") from None
    return UploadResult(tuple(uploaded), tuple(skipped))


# --------------------------------------------------------------------------------------------- provider


_REPLACE_ON = ("accountName", "containerName", "prefix", "source")


class BuildContextProvider(ResourceProvider):
    """CRUD for one uploaded build context. The resource id is the context's URI.

    Deleting removes nothing: the environment version built from the context is retained
    (``retain_on_delete``) and Azure ML rebuilds images from it, so its files stay too.
    """

    serialize_as_secret_always = False  # the provider holds no secret; its state stays readable

    def create(self, props: dict[str, Any]) -> CreateResult:
        from azurefacts.arm import default_credential  # azure-identity only when something is uploaded

        try:
            result = upload_context(
                props["accountName"], props["containerName"], props["prefix"], Path(props["source"]),
                props["files"], default_credential(),
            )
        except UploadError as err:
            raise Exception(str(err)) from None  # the engine shows the message alone
        uri = f"{account_url(props['accountName'])}/{props['containerName']}/{props['prefix']}"
        return CreateResult(id_=uri, outs={**props, "contextUri": uri, "uploaded": len(result.uploaded)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in (*_REPLACE_ON, "files") if olds.get(k) != news.get(k)]
        # Any change is a new context (a new digest means a new prefix): create the new one, keep the old.
        return DiffResult(changes=bool(changed), replaces=changed, delete_before_replace=False)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class BuildContextUpload(pulumi.dynamic.Resource, module="amlgpu", name="BuildContextUpload"):
    """One environment's build context, uploaded by :class:`BuildContextProvider`."""

    def __init__(
        self, name: str, *, account_name: pulumi.Input[str], container_name: pulumi.Input[str], prefix: str,
        source: str, files: Mapping[str, str], opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            BuildContextProvider(),
            name,
            {
                "accountName": account_name,
                "containerName": container_name,
                "prefix": prefix,
                # Relative to the project root, where Pulumi runs the program and its dynamic providers:
                # the plan is the same on every machine.
                "source": source,
                "files": dict(files),
                "contextUri": None,
                "uploaded": None,
            },
            opts,
        )
        self.context_prefix = prefix
        """Blob prefix of the context inside its container (known at plan time)."""


# --------------------------------------------------------------------------------------------- component


@dataclass(frozen=True)
class BuildContextsArgs:
    workspace_name: str
    account_name: pulumi.Input[str]
    resource_group_name: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    deployer_object_id: pulumi.Input[str]
    """The principal running ``pulumi up`` (``authorization.get_client_config().object_id``)."""
    deployer_principal_type: pulumi.Input[str]
    """``User`` or ``ServicePrincipal`` (:func:`azurefacts.ids.principal_type`)."""
    network_ready: tuple[pulumi.Resource, ...] = ()
    """What the uploads wait for besides the data role: for a private account, its blob private endpoint and that
    endpoint's DNS zone group (the precondition row deploy-order-upload-after-blob-endpoint)."""


class BuildContexts:
    """The build-context container and the deploying principal's data role on it.

    Not a component of its own: both resources are part of the workspace's setup and are parented to the
    workspace component (``parent``), so policy findings and waivers name the workspace.
    """

    account_name: pulumi.Output[str]
    container: storage.BlobContainer
    uploader_role: authorization.RoleAssignment

    def __init__(self, name: str, args: BuildContextsArgs, parent: pulumi.Resource) -> None:
        self.account_name = pulumi.Output.from_input(args.account_name)
        self.network_ready = args.network_ready
        self.container = storage.BlobContainer(
            CONTAINER,
            container_name=CONTAINER,
            account_name=args.account_name,
            resource_group_name=args.resource_group_name,
            public_access="None",
            opts=pulumi.ResourceOptions(parent=parent),
        )
        # Scoped to the one container: the deployer can write build contexts, not the workspace's data.
        # Named after the deployer too: another deployer gets an assignment of its own (Azure cannot move an
        # existing assignment to another principal).
        self.uploader_role = grant(
            name,
            Grant("uploader", STORAGE_BLOB_DATA_CONTRIBUTOR, self.container.id),
            principal_id=args.deployer_object_id,
            principal_type=args.deployer_principal_type,
            subscription_id=args.subscription_id,
            name_seed=(args.workspace_name, "build-context-uploader", args.deployer_object_id),
            description=f"Deployer of workspace {args.workspace_name}: uploads environment build contexts",
            opts=pulumi.ResourceOptions(parent=parent),
        )

    def upload(
        self, name: str, environment: str, version: str, root: Path, folder: str, parent: pulumi.Resource
    ) -> BuildContextUpload:
        """Upload ``folder`` (relative to ``root``) as ``environment``'s context, after the role and the network
        path exist."""
        files = context_files(root / folder)
        return BuildContextUpload(
            name,
            account_name=self.account_name,
            container_name=self.container.name,
            prefix=blob_prefix(environment, version, files),
            source=Path(folder).as_posix(),
            files=files,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[self.uploader_role, *self.network_ready]),
        )
