"""A first ``pulumi up`` replayed against a fake Azure that enforces documented preconditions: a test oracle.

The replay takes a planned stack (``resources.json``) and creates it as Pulumi's engine schedules it: every
custom resource starts as soon as everything it waits for exists (:class:`policies.graph.DependencyGraph`: its
dependencies, and what its component ancestors wait for), all others at the same time. Each create takes a
duration from a profile; the outcome must not depend on the profile, and the tests run more than one.

The fake Azure judges each create when its request arrives, from what exists at that instant, with rules
written here independently of the stack's precondition rows (it relates resources by their ARM ids and names,
never by the plan's dependency graph). Each rule cites where Azure documents it:

* ``reference``: a resource whose parent (the longest planned ARM id its own id extends: resource group,
  network, account, workspace, private endpoint, zone) or any resource its inputs name by ARM id does not exist
  yet is refused (Microsoft Learn, "Resolve errors for resource not found": ParentResourceNotFound,
  ResourceGroupNotFound, InvalidResourceReference);
* ``registration``: a resource type whose provider namespace the subscription has not registered is refused
  (Learn, "Resource providers and types": MissingSubscriptionRegistration); a workspace with a customer-managed
  key also needs Microsoft.DocumentDB and Microsoft.Search (Learn, "Use customer-managed keys with Azure Machine
  Learning", prerequisites);
* ``no-public-ip compute``: a Compute with ``enableNodePublicIp: false`` needs a private endpoint (group id
  ``amlworkspace``) of its workspace (Learn, "Secure an Azure Machine Learning training environment with
  virtual networks": "You must use a workspace private endpoint for the compute resource"; the refusal as
  reported in Azure/data-product-analytics#70);
* ``cmk identity``: a workspace with a customer-managed key and user-assigned identities fetches the key with
  ``encryption.identity.userAssignedIdentity`` (REST spec, machinelearningservices 2025-12-01
  ``IdentityForCmk``: "UserAssignedIdentity to be used to fetch the encryption key from keyVault"); without
  it the service uses the system-assigned identity, created with the workspace and granted nothing on the vault
  (Learn, CMK how-to: the identity must be given access to the key);
* ``roles in force``: a workspace with a primary user-assigned identity reaches its storage, key vault, registry
  and Application Insights with that identity when it is created; a role the identity holds on one of them whose
  assignment is younger than :data:`RBAC_PROPAGATION_S` is not in force yet, and the workspace is left without its
  default datastores (MicrosoftDocs/azure-docs#111772; Learn, "Troubleshoot Azure RBAC": changes can take up to 10
  minutes). The identity's principal is the one Azure answers for it (:func:`planning.mocks.user_assigned_principal`).
  The clusters' identities use their roles only when jobs run, after the deploy; the deployer's is judged by the
  blob data plane below. The stack's wait (:mod:`infra.role_wait`) runs for real against a fake Resource Manager
  that answers each assignment's GET with the recorded shape (``tests/fixtures/arm-preflight/role-assignment*.json``)
  and its ``createdOn`` at the simulated instant it was made, on the simulated clock;
* ``one zone per name``: a private DNS zone linked to a network that already has a zone of the same name linked
  is refused (Learn, "What is a private Azure DNS zone": a network can be linked to one zone of a name);
* ``blob data plane`` (the build-context upload, run for real over a fake Blob endpoint): a request reaches a
  storage account with public network access disabled only through a blob private endpoint whose
  ``privatelink.blob`` record exists in a zone linked to the caller's network (Learn, "Use private endpoints for
  Azure Storage", "Azure Private Endpoint DNS integration"); with public access enabled and a deny-by-default
  firewall, only from an allowed address, and never from an Azure host in the account's own region, whose
  requests IP rules do not apply to (Learn, "Azure Storage network security": "IP network rules have no effect
  on requests that originate from the same Azure region as the storage account"). Otherwise
  ``403 AuthorizationFailure``. A write needs a data role whose assignment is at least
  :data:`RBAC_PROPAGATION_S` old (Learn, "Troubleshoot Azure RBAC": changes can take up to 10 minutes), else
  ``403 AuthorizationPermissionMismatch``. The answers are the recorded Blob REST responses of
  ``tests/fixtures/blob-rest``, through azure-core's transport: the real upload code retries and fails as it
  would against Azure, on a simulated clock.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.pipeline.transport import HttpTransport, RequestsTransportResponse
from requests.structures import CaseInsensitiveDict

from azurefacts.arm import ArmReader
from azurefacts.ids import STORAGE_BLOB_DATA_CONTRIBUTOR
from azurefacts.naming import arm_region
from infra.build_context import PROPAGATION_WAIT_S, UploadError, upload_context
from infra.role_wait import RoleWaitError, wait_for_roles
from planning.mocks import (
    BUILD_CONTEXT_UPLOAD,
    DEPLOYER_OBJECT_ID,
    ROLES_EFFECTIVE,
    arm_id,
    user_assigned_principal,
)
from policies.graph import DependencyGraph, Key
from stack.config import StackConfig
from tests.replay_http import RECORDED as ARM_RECORDED
from tests.replay_http import Answer, Replay, transport

RECORDED = json.loads((Path(__file__).parent / "fixtures/blob-rest/responses.json").read_text())
RBAC_PROPAGATION_S = 600.0
"""The worst case Microsoft documents for a role assignment to take effect (Troubleshoot Azure RBAC)."""
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""The wall-clock instant the replay's simulated second 0 stands for (the fake ARM's ``createdOn``)."""
DYNAMIC = (BUILD_CONTEXT_UPLOAD, ROLES_EFFECTIVE)

COMPUTE = "azure-native:machinelearningservices:Compute"
WORKSPACE = "azure-native:machinelearningservices:Workspace"
ENDPOINT = "azure-native:network:PrivateEndpoint"
ZONE_GROUP = "azure-native:network:PrivateDnsZoneGroup"
ZONE = "azure-native:privatedns:PrivateZone"
ZONE_LINK = "azure-native:privatedns:VirtualNetworkLink"
ACCOUNT = "azure-native:storage:StorageAccount"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"
BLOB_ZONE = "privatelink.blob.core.windows.net"

PROFILES: dict[str, Mapping[str, float]] = {
    "uniform": {},
    "azure-like": {
        WORKSPACE: 180.0, COMPUTE: 120.0, ENDPOINT: 90.0, ZONE_GROUP: 30.0, ZONE: 45.0, ZONE_LINK: 60.0,
        ASSIGNMENT: 5.0, ACCOUNT: 40.0, "azure-native:storage:BlobContainer": 5.0,
        "azure-native:keyvault:Vault": 50.0, "azure-native:containerregistry:Registry": 70.0,
        "azure-native:network:VirtualNetwork": 10.0, "azure-native:network:Subnet": 10.0,
        "azure-native:network:NatGateway": 40.0, "azure-native:network:PublicIPAddress": 10.0,
    },
}
"""Seconds per create, by type (default :data:`DEFAULT_S`): they shape which race is lost, not whether one is."""
DEFAULT_S = 30.0


def _norm(resource_id: str) -> str:
    """An ARM id compared as Azure does: case-insensitively, and without its subscription (the offline plan's
    engine answers a placeholder where the stack pins none)."""
    parts = resource_id.strip("/").split("/")
    if len(parts) >= 2 and parts[0].lower() == "subscriptions":
        parts = parts[2:]
    return "/".join(parts).lower()


@dataclass(frozen=True)
class Deployer:
    """Where ``pulumi up`` runs: its public address, the Azure region when it is an Azure host, the virtual
    network it sits in, and the private DNS zones already linked to that network (by their owner)."""

    public_ip: str
    azure_region: str | None = None
    network_id: str | None = None
    linked_zones: frozenset[str] = frozenset()


def deployer_of(config: StackConfig) -> Deployer:
    """The network path the stack file states: an operator range (a machine outside Azure, the first address of the
    first range), or an existing subnet (a runner inside that network, in the workspace's region, its hub's zones
    linked); with neither, a machine outside any network and outside every range."""
    ranges = config.network.operator_ip_ranges
    if ranges:
        return Deployer(public_ip=str(next(ipaddress.ip_network(ranges[0], strict=False).hosts(),
                                           ipaddress.ip_network(ranges[0], strict=False).network_address)))
    if config.network.subnet_id:
        return Deployer(public_ip="198.51.100.10", azure_region=arm_region(config.workspace_location),
                        network_id=config.network.subnet_id.split("/subnets/")[0],
                        linked_zones=frozenset(_norm(z) for z in config.network.private_dns_zone_ids.values()))
    return Deployer(public_ip="198.51.100.10")


REGISTERED_BY_DEFAULT = frozenset({"microsoft.resources", "microsoft.authorization"})
"""Namespaces every subscription has registered (Learn, "Resource providers and types")."""


@dataclass(frozen=True)
class Subscription:
    """The subscription's state before the first ``pulumi up``: registered resource providers (lowercase)."""

    registered: frozenset[str]


class Refused(Exception):
    """Azure's answer to a create it refuses."""


@dataclass
class Outcome:
    started: dict[Key, float] = field(default_factory=dict)
    finished: dict[Key, float] = field(default_factory=dict)
    refused: dict[Key, str] = field(default_factory=dict)
    blocked: set[Key] = field(default_factory=set)
    """Never started: something it waits for was refused."""

    @property
    def converged(self) -> bool:
        return not self.refused and not self.blocked

    def failures(self) -> list[str]:
        return [f"{t.rsplit(':', 1)[-1]} {n}: {why}" for (t, n), why in sorted(self.refused.items())]


class FirstDeploy:
    """One first ``pulumi up`` of a planned stack against the fake Azure (see the module docstring)."""

    def __init__(self, resources: list[Mapping[str, Any]], *, root: Path, deployer: Deployer,
                 subscription: Subscription, profile: Mapping[str, float]) -> None:
        self.graph = DependencyGraph(resources)
        self.root = root
        self.deployer = deployer
        self.subscription = subscription
        self.profile = profile
        self.ids: dict[Key, str] = {
            k: _norm(arm_id(k[0], k[1], dict(r.get("inputs") or {}))) for k, r in self.graph.resources.items()
            if k in self.graph.custom() and k[0] not in DYNAMIC
        }
        self.by_id = {i: k for k, i in self.ids.items()}
        self.outcome = Outcome()
        self._finish: dict[Key, float] = {}
        self._running: list[Key] = []

    # ----------------------------------------------------------------------------------- the engine

    def run(self) -> Outcome:
        for key in self.graph.custom():
            self.finish(key)
        return self.outcome

    def finish(self, key: Key) -> float:
        """When ``key`` exists (infinity: refused, or never started)."""
        if key in self._finish:
            return self._finish[key]
        if key in self._running:
            raise AssertionError(f"the replay went round in a circle at {key}: {self._running}")
        self._running.append(key)
        try:
            waits = [self.finish(d) for d in self.graph.before(key)]
            if any(t == float("inf") for t in waits):
                self.outcome.blocked.add(key)
                done = float("inf")
            else:
                start = max(waits, default=0.0)
                self.outcome.started[key] = start
                try:
                    done = self.create(key, start)
                    self.outcome.finished[key] = done
                except Refused as why:
                    self.outcome.refused[key] = str(why)
                    done = float("inf")
        finally:
            self._running.pop()
        self._finish[key] = done
        return done

    def exists(self, key: Key, at: float) -> bool:
        """Whether ``key`` exists at instant ``at`` (seen from the create running now)."""
        if key in self._running or any(r in self.graph.waits_for(key) for r in self._running):
            return False  # it waits for the create asking, or is that create: it cannot exist yet
        return self.finish(key) <= at

    # ----------------------------------------------------------------------------------- Azure

    def resource(self, key: Key) -> Mapping[str, Any]:
        return self.graph.resources[key].get("inputs") or {}

    def create(self, key: Key, at: float) -> float:
        if key[0] == BUILD_CONTEXT_UPLOAD:
            return self.upload(key, at)
        if key[0] == ROLES_EFFECTIVE:
            return self.wait_for_roles(key, at)
        self.check_registration(key)
        self.check_references(key, at)
        if key[0] == COMPUTE:
            self.check_no_public_ip_compute(key, at)
        if key[0] == WORKSPACE:
            self.check_cmk_identity(key)
            self.check_identity_roles_in_force(key, at)
        if key[0] == ZONE_LINK:
            self.check_one_zone_per_name(key, at)
        return at + self.profile.get(key[0], DEFAULT_S)

    def namespace(self, key: Key) -> str:
        parts = self.ids[key].split("/")
        return parts[parts.index("providers") + 1] if "providers" in parts else "microsoft.resources"

    def check_registration(self, key: Key) -> None:
        namespace = self.namespace(key)
        if namespace not in self.subscription.registered | REGISTERED_BY_DEFAULT:
            raise Refused(f"MissingSubscriptionRegistration: the subscription is not registered to use namespace "
                          f"'{namespace}'")
        if key[0] == WORKSPACE and (self.resource(key).get("encryption") or {}).get("status") == "Enabled":
            missing = sorted({"microsoft.documentdb", "microsoft.search"} - self.subscription.registered)
            if missing:
                raise Refused(f"MissingSubscriptionRegistration: a workspace with a customer-managed key needs "
                              f"{', '.join(missing)}")

    def check_references(self, key: Key, at: float) -> None:
        own = self.ids[key]
        parents = [i for i in self.by_id if own.startswith(i + "/")]
        if parents:
            parent = self.by_id[max(parents, key=len)]
            if not self.exists(parent, at):
                raise Refused(f"ParentResourceNotFound: {parent[0].rsplit(':', 1)[-1]} {parent[1]} does not exist")
        for value in _strings(self.resource(key)):
            named = self.by_id.get(_norm(value)) if value.startswith("/subscriptions/") else None
            if named is not None and named != key and not self.exists(named, at):
                raise Refused(f"InvalidResourceReference: {value} does not exist")

    def check_no_public_ip_compute(self, key: Key, at: float) -> None:
        inputs = self.resource(key)
        public_ip = ((inputs.get("properties") or {}).get("properties") or {}).get("enableNodePublicIp")
        if public_ip is not False:
            return
        workspace = _norm(f"/subscriptions/-/resourceGroups/{inputs['resourceGroupName']}/providers/"
                          f"Microsoft.MachineLearningServices/workspaces/{inputs['workspaceName']}")
        if not any(self.exists(e, at) and self.connects(e, workspace, "amlworkspace") for e in self.of(ENDPOINT)):
            raise Refused("Provided EnableNodePublicIp 'False' requires workspace private endpoint")

    def check_cmk_identity(self, key: Key) -> None:
        inputs = self.resource(key)
        encryption = inputs.get("encryption") or {}
        users = [_norm(u) for u in (inputs.get("identity") or {}).get("userAssignedIdentities") or []]
        if encryption.get("status") != "Enabled" or not users:
            return
        chosen = ((encryption.get("identity") or {}).get("userAssignedIdentity")) or ""
        if _norm(chosen) not in users:
            raise Refused("the workspace reached its customer-managed key with its system-assigned identity, which "
                          "holds no access to the key vault (encryption.identity.userAssignedIdentity is not set)")

    def check_identity_roles_in_force(self, key: Key, at: float) -> None:
        inputs = self.resource(key)
        identity = str(inputs.get("primaryUserAssignedIdentity") or "")
        if not identity:
            return
        principal = user_assigned_principal(identity)
        for field_name in ("storageAccount", "keyVault", "containerRegistry", "applicationInsights"):
            target = _norm(str(inputs.get(field_name) or ""))
            for assignment in self.of(ASSIGNMENT):
                role = self.resource(assignment)
                if role.get("principalId") != principal or _norm(str(role.get("scope", ""))) != target:
                    continue
                made = self.finish(assignment)
                if at < made + RBAC_PROPAGATION_S:
                    raise Refused(f"the default datastores were not created: identity {identity.rsplit('/', 1)[-1]}'s "
                                  f"role on its {field_name} was assigned {int(at - made)} s before, not in force yet")

    def check_one_zone_per_name(self, key: Key, at: float) -> None:
        inputs = self.resource(key)
        network = _norm(str((inputs.get("virtualNetwork") or {}).get("id", "")))
        name = str(inputs.get("privateZoneName", "")).lower()
        if self.deployer.network_id and network == _norm(self.deployer.network_id) and any(
                z.endswith("/" + name) for z in self.deployer.linked_zones):
            raise Refused(f"a private DNS zone named {name} is already linked to the network")

    # ----------------------------------------------------------------------------------- relations by value

    def of(self, token: str) -> list[Key]:
        return [k for k in self.ids if k[0] == token]

    def connects(self, endpoint: Key, target_id: str, group: str) -> bool:
        connections = self.resource(endpoint).get("privateLinkServiceConnections") or []
        return any(_norm(str(c.get("privateLinkServiceId", ""))) == target_id
                   and group in [g.lower() for g in c.get("groupIds") or []] for c in connections)

    def resolves_privately(self, account: Key, at: float) -> bool:
        """The account's blob name resolves, from the deployer's network, to a private endpoint in it."""
        network = _norm(self.deployer.network_id) if self.deployer.network_id else None
        if network is None:
            return False
        for endpoint in self.of(ENDPOINT):
            inputs = self.resource(endpoint)
            if not (self.exists(endpoint, at) and self.connects(endpoint, self.ids[account], "blob")
                    and _norm(str((inputs.get("subnet") or {}).get("id", ""))).startswith(network + "/")):
                continue
            for group in self.of(ZONE_GROUP):
                group_inputs = self.resource(group)
                if not (self.exists(group, at)
                        and str(group_inputs.get("privateEndpointName")) == str(inputs.get("privateEndpointName"))):
                    continue
                zones = [_norm(str(c.get("privateDnsZoneId", ""))) for c in group_inputs.get("privateDnsZoneConfigs")
                         or [] if str(c.get("privateDnsZoneId", "")).lower().endswith("/" + BLOB_ZONE)]
                if any(self.zone_linked(z, network, at) for z in zones):
                    return True
        return False

    def zone_linked(self, zone_id: str, network: str, at: float) -> bool:
        if zone_id in self.deployer.linked_zones:
            return True
        return any(self.exists(link, at) and self.ids[link].startswith(zone_id + "/")
                   and _norm(str((self.resource(link).get("virtualNetwork") or {}).get("id", ""))) == network
                   for link in self.of(ZONE_LINK))

    def firewall_admits(self, account: Key) -> bool:
        inputs = self.resource(account)
        if str(inputs.get("publicNetworkAccess", "Enabled")).lower() == "disabled":
            return False
        rules = inputs.get("networkRuleSet") or {}
        if str(rules.get("defaultAction", "Allow")).lower() == "allow":
            return True
        if self.deployer.azure_region and self.deployer.azure_region == arm_region(str(inputs.get("location", ""))):
            return False  # IP network rules have no effect on requests from the account's own region
        address = ipaddress.ip_address(self.deployer.public_ip)
        return any(address in ipaddress.ip_network(str(r.get("iPAddressOrRange")), strict=False)
                   for r in rules.get("ipRules") or [])

    def data_role_since(self, account: Key, container: str) -> float:
        """When the deployer's Storage Blob Data Contributor on the container (or above it) was assigned."""
        times = [self.finish(a) for a in self.of(ASSIGNMENT)
                 if self.resource(a).get("principalId") == DEPLOYER_OBJECT_ID
                 and str(self.resource(a).get("roleDefinitionId", "")).endswith(STORAGE_BLOB_DATA_CONTRIBUTOR)
                 and (container + "/").startswith(_norm(str(self.resource(a).get("scope", ""))) + "/")
                 and not any(r in self.graph.waits_for(a) for r in self._running)]
        return min(times, default=float("inf"))

    # ----------------------------------------------------------------------------------- the role wait

    def wait_for_roles(self, key: Key, at: float) -> float:
        clock = Clock(at)
        arm = ArmReader(EntraToken(), transport=transport(FakeResourceManager(self, clock)), retries=0)
        try:
            wait_for_roles(arm, [str(i) for i in self.resource(key).get("assignmentIds") or []],
                           wait_s=PROPAGATION_WAIT_S, sleep=clock.sleep, clock=clock.now,
                           utcnow=lambda: EPOCH + timedelta(seconds=clock.now()))
        except RoleWaitError as err:
            raise Refused(str(err)) from None
        return clock.now()

    # ----------------------------------------------------------------------------------- the upload

    def upload(self, key: Key, at: float) -> float:
        inputs = self.resource(key)
        account = next(k for k in self.of(ACCOUNT) if self.resource(k).get("accountName") == inputs["accountName"])
        container = f"{self.ids[account]}/blobservices/default/containers/{str(inputs['containerName']).lower()}"
        clock = Clock(at)
        storage = FakeBlobStorage(self, account, container, clock)
        try:
            upload_context(inputs["accountName"], inputs["containerName"], inputs["prefix"],
                           self.root / inputs["source"], inputs["files"], EntraToken(), transport=storage,
                           wait_s=PROPAGATION_WAIT_S, sleep=clock.sleep, clock=clock.now)
        except UploadError as err:
            raise Refused(str(err)) from None
        return clock.now()


class Clock:
    """The simulated time of one running create."""

    def __init__(self, start: float) -> None:
        self.time = start

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.time += seconds


class EntraToken:
    """A credential holding an issued Microsoft Entra token for storage."""

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        return AccessToken("replay-token", 4102444800)

    def get_token_info(self, *scopes: str, **_: Any) -> AccessTokenInfo:
        return AccessTokenInfo("replay-token", 4102444800)


class FakeBlobStorage(HttpTransport):  # type: ignore[type-arg]
    """The Blob endpoint of one account as Azure answers at the simulated instant (recorded responses)."""

    def __init__(self, deploy: FirstDeploy, account: Key, container: str, clock: Clock) -> None:
        self.deploy, self.account, self.container, self.clock = deploy, account, container, clock
        self.stored: dict[str, dict[str, str]] = {}
        self.answers: list[tuple[float, str, str]] = []

    def send(self, request: Any, **_: Any) -> Any:
        now = self.clock.now()
        path = request.url.split("?")[0]
        if not (self.deploy.resolves_privately(self.account, now) or self.deploy.firewall_admits(self.account)):
            key, extra = "forbidden_403_authorization_failure", {}
        elif now < self.deploy.data_role_since(self.account, self.container) + RBAC_PROPAGATION_S:
            key, extra = "forbidden_403_permission_mismatch", {}
        elif request.method == "PUT":
            self.stored[path] = {k: v for k, v in request.headers.items() if k.lower().startswith("x-ms-meta-")}
            key, extra = "put_blob_201", {}
        elif path in self.stored:
            key, extra = "head_blob_200_with_metadata", self.stored[path]
        else:
            key, extra = "head_blob_404", {}
        self.answers.append((now, request.method, key))
        recorded = RECORDED[key]
        response = requests.Response()
        response.status_code = recorded["status"]
        response.headers = CaseInsensitiveDict(
            {k: v for k, v in recorded["headers"].items() if not k.startswith("x-ms-meta-")} | extra)
        response._content = recorded["body"].encode()
        response.url = request.url
        return RequestsTransportResponse(request, response)

    def open(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> FakeBlobStorage:
        return self
    def __exit__(self, *_: Any) -> None: ...


class FakeResourceManager(Replay):
    """Resource Manager's role-assignment GETs as Azure answers them at the simulated instant: the recorded body
    with the assignment's own id, scope, principal and ``createdOn``, or the recorded 404 before it exists."""

    def __init__(self, deploy: FirstDeploy, clock: Clock) -> None:
        super().__init__({})
        self.deploy, self.clock = deploy, clock

    def _answer(self, request: requests.PreparedRequest) -> Answer:
        wanted = _norm(str(request.path_url).split("?")[0])
        now = self.clock.now()
        for assignment in self.deploy.of(ASSIGNMENT):
            if self.deploy.ids[assignment] == wanted and self.deploy.exists(assignment, now):
                inputs = self.deploy.resource(assignment)
                body = json.loads((ARM_RECORDED / "role-assignment.json").read_text())
                created = (EPOCH + timedelta(seconds=self.deploy.finish(assignment))).isoformat().replace(
                    "+00:00", "Z")
                body["properties"].update(scope=inputs["scope"], principalId=inputs["principalId"],
                                          principalType=inputs.get("principalType"), createdOn=created,
                                          updatedOn=created)
                body.update(id=str(request.path_url).split("?")[0], name=wanted.rsplit("/", 1)[-1])
                return Answer(200, body)
        return Answer(404, "role-assignment-not-found.json")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []
