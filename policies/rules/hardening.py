"""Settings that open the door: an identity the platform did not hand out attached to a cluster or the
workspace, a storage firewall open to the internet, a run's container given the host, interactive services on
the nodes without a key or the user's identity.

Each is one line of a stack file that plans cleanly and deploys; what it opens is documented by the
platform it configures (Azure Storage's firewall, Docker's run reference, Azure ML's interactive jobs).
"""

from __future__ import annotations

import csv
import fnmatch
import ipaddress
from collections.abc import Mapping
from typing import Any

from analysis import docker_run
from azurefacts.resource_types import STORAGE_ACCOUNT as STORAGE
from azurefacts.resource_types import USER_ASSIGNED_IDENTITY
from kernel import bounded
from policies.rule import Message, Violation, resource_rule, run_rule, stack_rule
from policies.stack import WORKSPACE_TYPE, Stack
from policies.wire import get, inputs, known
from stack import NAMESPACE
from stack.resolved import ResolvedRun
from stack.stackfile import SECRET_PLACEHOLDER

IDENTITY_DOCS = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-identity-based-service-authentication"
DOCKER_RUN = "https://docs.docker.com/reference/cli/docker/container/run/"
INTERACTIVE_JOBS = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-interactive-jobs"


def _attached_identities(resource: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, resource id) of every user-assigned identity ``resource`` attaches: ``identity``'s
    ``userAssignedIdentities`` (a list, as the provider takes it, or ARM's map keyed by id), the workspace's
    ``primaryUserAssignedIdentity`` and a customer-managed key's ``encryption.identity.userAssignedIdentity``."""
    values = inputs(resource)
    found: list[tuple[str, str]] = []
    listed = get(values, "identity.userAssignedIdentities", [])
    for rid in (listed if isinstance(listed, list) else list(listed) if isinstance(listed, Mapping) else []):
        found.append(("identity.user_assigned_identities", rid))
    found.append(("primary_user_assigned_identity", get(values, "primaryUserAssignedIdentity")))
    found.append(("customer_managed_key identity", get(values, "encryption.identity.userAssignedIdentity")))
    seen: set[str] = set()
    out = []
    for where, rid in found:
        if isinstance(rid, str) and known(rid) and rid.lower() not in seen:
            seen.add(rid.lower())
            out.append((where, rid))
    return out


def _allowed_for(stack: str | None, entries: tuple[str, ...]) -> set[str]:
    """The identity ids (lower case) ``entries`` allow for ``stack``: ``<resource id>`` for every stack,
    ``<stack>:<resource id>`` for that one."""
    allowed = set()
    for entry in entries:
        scope, sep, rid = entry.partition(":/")
        if entry.startswith("/"):
            allowed.add(entry.lower())
        elif sep and scope == stack:
            allowed.add(("/" + rid).lower())
    return allowed


def _created_by(stack: Stack) -> set[tuple[str, str]]:
    """(resource group, name), lower case, of every user-assigned identity the stack itself creates."""
    out = set()
    for identity in stack.of_type(USER_ASSIGNED_IDENTITY):
        group, name = get(inputs(identity), "resourceGroupName"), get(inputs(identity), "resourceName")
        if isinstance(group, str) and isinstance(name, str):
            out.add((group.lower(), name.lower()))
    return out


def _group_and_name(rid: str) -> tuple[str, str]:
    parts = rid.strip("/").split("/")
    lower = [p.lower() for p in parts]
    group = parts[lower.index("resourcegroups") + 1] if "resourcegroups" in lower[:-1] else ""
    return group.lower(), parts[-1].lower()


@stack_rule(
    id="identity-attached-allowed",
    title="Only identities the stack creates or the platform allows are attached to clusters and the workspace",
    severity="critical",
    enforcement="mandatory",
    rationale="A cluster's managed identities are what every job on it runs as: Azure ML jobs and the cluster's "
    "own data access use them, so any code a run executes can take the identity's tokens and use its roles. A "
    "stack file may name any identity's resource id, and Azure only checks that the deploying principal may "
    "assign it (the userAssignedIdentities/*/assign/action permission, part of Contributor and Managed Identity "
    "Operator): naming the deployer's own identity, or "
    "another team's, hands its roles (the deployer's Contributor and Role Based Access Control Administrator on the "
    "subscription) to whoever can submit a job. So an attached user-assigned identity must be one the stack creates "
    "or one the platform owners allow-list for the stack in the pack config.",
    remediation="Remove the identity (the cluster's and workspace's system-assigned identities need no approval), "
    "or have the platform owners add \"<stack>:<resource id>\" (one stack) or the resource id (every stack) to "
    "identity-attached-allowed.allowed_identities in the pack config (policies/config.json or "
    "policies/config.<stack>.json).",
    reference=IDENTITY_DOCS,
    config_key=("identity",),
)
def identity_attached_allowed(stack: Stack, *, allowed_identities: tuple[str, ...] = ()) -> list[Violation]:
    allowed = _allowed_for(stack.name, allowed_identities)
    created = _created_by(stack)
    out = []
    for resource in stack.resources:
        for where, rid in _attached_identities(resource):
            if rid.lower() in allowed or _group_and_name(rid) in created:
                continue
            entry = f"{stack.name}:{rid}" if stack.name else rid
            out.append(Violation(resource, (
                f"{where} attaches user-assigned identity {rid}, which the stack does not create and the pack config "
                f"does not allow: every job here could use its tokens and roles. The platform owners approve it by "
                f"adding \"{entry}\" to identity-attached-allowed.allowed_identities")))
    return out


DEFAULT_PROVIDER_KEYS = ("azure-native:location", "azure-native:subscriptionId")
"""The settings outside the project's namespace a stack file may hold unless the pack config says otherwise:
the region and the subscription, which the README's first deployment sets."""
PULUMI_CONFIG_DOCS = "https://www.pulumi.com/registry/packages/azure-native/installation-configuration/"


def _allowed_settings(stack: str | None, entries: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(key pattern, value or None for any) ``entries`` allow for ``stack``: ``key``, ``key=value``, each
    optionally scoped to one stack as ``<stack>/key...``; ``*`` in a key matches any characters."""
    out = []
    for entry in entries:
        scope, slash, rest = entry.partition("/")
        if slash and ":" not in scope:
            if scope != stack:
                continue
            entry = rest
        key, eq, value = entry.partition("=")
        out.append((key, value if eq else None))
    return out


@stack_rule(
    id="stack-provider-settings-allowed",
    title="A stack file sets provider and engine settings only where the pack config allows",
    severity="critical",
    enforcement="mandatory",
    rationale="Keys outside the project's namespace configure the Azure provider and the Pulumi engine, not the "
    "stack: azure-native:subscriptionId moves the whole deployment to another subscription (another team's, or "
    "prod's) with the deployer's credentials, azure-native:clientId/tenantId/useMsi/auxiliaryTenantIds change who "
    "deploys, pulumi:* keys change how the engine runs. In a multi-team repository each team approves its own "
    "stack file alone, so which of these a stack file may set, and to what, is the platform's decision, kept in "
    "the pack config.",
    remediation="Remove the key from the stack file, or have the platform owners allow it in the pack config: "
    "stack-provider-settings-allowed.allowed_keys takes \"key\" (any value), \"key=value\" (that value) and "
    "\"<stack>/key=value\" (one stack), * matching any characters in a key.",
    reference=PULUMI_CONFIG_DOCS,
)
def stack_provider_settings_allowed(
    stack: Stack, *, allowed_keys: tuple[str, ...] = DEFAULT_PROVIDER_KEYS
) -> list[Violation]:
    if stack.settings is None:
        return []
    workspace = next(iter(stack.of_type(WORKSPACE_TYPE)), None)
    if workspace is None:
        return []
    allowed = _allowed_settings(stack.name, allowed_keys)
    out = []
    for key, value in sorted(stack.settings.items()):
        if key.startswith(f"{NAMESPACE}:"):
            continue
        patterns = [(pattern, pinned) for pattern, pinned in allowed if fnmatch.fnmatchcase(key, pattern)]
        if not patterns:
            out.append(Violation(workspace, f"the stack file sets {key}, a provider or engine setting the pack config "
                                            "does not allow for this stack"))
            continue
        if any(pinned is None for _, pinned in patterns):
            continue
        values = sorted({pinned for _, pinned in patterns if pinned is not None})
        if value == SECRET_PLACEHOLDER:  # how an encrypted (``secure:``) value reads offline
            out.append(Violation(workspace, f"the stack file sets {key} to an encrypted value, which cannot be checked "
                                            f"against the values the pack config allows ({', '.join(values)}): "
                                            "set it in plain text"))
        elif not isinstance(value, str) or value.lower() not in {v.lower() for v in values}:
            out.append(Violation(workspace, f"the stack file sets {key} to a value the pack config does not allow "
                                            f"for this stack (allowed: {', '.join(values)})"))
    return out


_MAPPED_V4 = ipaddress.IPv6Network("::ffff:0:0/96")
"""IPv4-mapped IPv6 addresses: ``::ffff:0.0.0.0/96`` is all of IPv4 written as IPv6."""


def _network(value: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """An address or CIDR range as a network (a single address as /32 or /128; an IPv4-mapped IPv6 range
    as the IPv4 range it is); None when it is neither."""
    try:
        network = ipaddress.ip_network(value.strip(), strict=False)
    except ValueError:
        return None
    if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED_V4):
        return ipaddress.IPv4Network((int(network.network_address) & 0xFFFFFFFF, network.prefixlen - 96))
    return network


def _union_size(networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> int:
    """How many addresses ``networks`` (one family) cover together, overlaps counted once."""
    v4 = [n for n in networks if isinstance(n, ipaddress.IPv4Network)]
    v6 = [n for n in networks if isinstance(n, ipaddress.IPv6Network)]
    return (sum(n.num_addresses for n in ipaddress.collapse_addresses(v4))
            + sum(n.num_addresses for n in ipaddress.collapse_addresses(v6)))


def _share(addresses: int, bits: int) -> str:
    if addresses >= 2**bits:
        return "the whole internet" if bits == 32 else "all of IPv6"
    exponent = addresses.bit_length() - 1
    return f"2^{exponent} addresses" if addresses == 2**exponent else f"{addresses:,} addresses"


@resource_rule(
    id="storage-operator-ranges-not-open",
    types=[STORAGE],
    title="The storage firewall's operator ranges are not the internet",
    severity="critical",
    enforcement="mandatory",
    rationale="network.operator_ip_ranges become the storage account's firewall IP rules: 0.0.0.0/0 (or any "
    "set of ranges that together cover more addresses than one range of the parameter's prefix length: all of "
    "IPv4 written as 256 /8s is still the internet) lets the whole internet reach the workspace's datastores, "
    "job outputs and environment build contexts, with only the account's authentication in the way.",
    remediation="List the public addresses that run `pulumi up` (a /32 or a small CIDR), or deploy from inside "
    "the network and remove operator_ip_ranges.",
    reference="https://learn.microsoft.com/en-us/azure/storage/common/storage-network-security",
    config_key=("operator_ip_ranges",),
)
def storage_operator_ranges_not_open(
    resource: Mapping[str, Any], *, min_prefix_length: int = 8, min_prefix_length_ipv6: int = 32
) -> list[str]:
    rules = get(inputs(resource), "networkRuleSet.ipRules", [])
    if not known(rules):
        return []
    by_family: dict[int, list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]]] = {4: [], 6: []}
    for rule in rules or []:
        value = str(get(rule, "iPAddressOrRange", "") or "")
        network = _network(value)
        if network is not None:
            by_family[network.version].append((value.strip(), network))
    out: list[str] = []
    for version, shortest in ((4, min_prefix_length), (6, min_prefix_length_ipv6)):
        listed = by_family[version]
        bits = 32 if version == 4 else 128
        # The union, not each range: 256 /8s are all of IPv4 though each one is "a /8".
        addresses = _union_size([n for _, n in listed])
        if addresses <= 2 ** (bits - min(shortest, bits)):
            continue
        share = _share(addresses, bits)
        # The text shows eight ranges; a waiver binds to every one of them and to the count (issue 36).
        facts = (f"IPv{version}", f"{addresses} addresses", f"at most one /{shortest}", *(v for v, _ in listed))
        if len(listed) == 1:
            out.append(Message(f"operator range {listed[0][0]} lets {share} through the storage firewall "
                               f"(the shortest allowed prefix is /{shortest})", facts))
        else:
            shown = ", ".join(value for value, _ in listed[:8]) + (f" and {len(listed) - 8} more" if len(listed) > 8
                                                                    else "")
            out.append(Message(f"operator ranges {shown} together let {share} through the storage firewall "
                               f"(together they may cover at most one /{shortest})", facts))
    return out


_HOST_NAMESPACES = ("--network", "--net", "--pid", "--uts", "--userns", "--cgroupns")
_UNCONFINED = ("seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined", "label=disable")
_HOST_PATH_START = ("/", ".", "~", "$", "\\")
"""How a host path starts in a volume's source: absolute, relative (docker/cli makes ``./x`` absolute), the
home folder or a variable (expanded by a shell, if one runs the command), a Windows path."""
_TRUE = frozenset({"1", "t", "true"})
"""What Go's strconv.ParseBool reads as true (case-folded), for ``--privileged=<value>``."""


def _mount_fields(value: str) -> dict[str, str]:
    """``--mount``'s comma-separated ``key=value`` fields (CSV, as docker/cli's opts/mount.go reads them;
    ``volume-opt`` may repeat and is kept as ``volume-opt:<name>``)."""
    try:
        fields = next(csv.reader([value]), [])
    except csv.Error:
        fields = value.split(",")
    out: dict[str, str] = {}
    for field in fields:
        key, _, val = field.partition("=")
        if key == "volume-opt":
            name, _, option = val.partition("=")
            out[f"volume-opt:{name}"] = option
        else:
            out[key] = val
    return out


def _mount_door(value: str) -> str | None:
    fields = _mount_fields(value)
    kind = fields.get("type", "volume").lower()
    source = fields.get("source", fields.get("src", ""))
    if kind == "bind":
        return f"--mount {value} binds the node's {source or 'path'} into the container"
    if kind == "volume" and (fields.get("volume-opt:device") or "bind" in fields.get("volume-opt:o", "").split(",")):
        return (f"--mount {value} makes a volume of the node's {fields.get('volume-opt:device') or 'path'} "
                "(local driver options device/o=bind)")
    return None


def _door(flag: str, value: str | None) -> str | None:
    if flag == "--privileged" and (value is None or value.strip().lower() in _TRUE):
        return "--privileged gives the container every capability and every host device"
    if flag == "--cap-add" and value:
        return f"--cap-add {value} adds kernel capabilities the container does not have by default"
    if flag in _HOST_NAMESPACES and value == "host":
        return f"{flag} host shares the node's {flag.strip('-').removesuffix('ns')} namespace with the container"
    if flag == "--device" and value:
        return f"--device {value} hands a host device to the container"
    if flag == "--device-cgroup-rule" and value:
        return (f"--device-cgroup-rule {value} lets the container use host devices it creates nodes for "
                "(a privileged-equivalent)")
    if flag == "--volume" and value and value.startswith(_HOST_PATH_START):
        return f"-v {value} mounts the node's {value.split(':')[0]} into the container"
    if flag == "--volumes-from" and value:
        return f"--volumes-from {value} mounts another container's volumes, host paths included"
    if flag == "--mount" and value:
        return _mount_door(value)
    if flag == "--security-opt" and value and value.replace(":", "=", 1) in _UNCONFINED:
        return f"--security-opt {value} lifts the container's confinement"
    return None


@run_rule(
    id="run-docker-args-confined",
    title="A run's docker_args do not hand the node to its container",
    severity="high",
    enforcement="mandatory",
    rationale="resources.docker_args go straight to `docker run` on every node. --privileged, --cap-add, host "
    "namespaces (--network/--pid host), host devices and device cgroup rules, bind mounts of the node's paths "
    "(-v, --mount type=bind, a local volume over a host device or folder, --volumes-from) and lifted "
    "seccomp/AppArmor confinement let the run's code leave its container: read other jobs' data, the node's "
    "credentials and the managed identity's tokens. Options are read as docker/cli reads them (spf13/pflag "
    "short-option groups, --mount's CSV fields).",
    remediation="Remove the option. For shared memory use resources.shm_size; GPUs and InfiniBand devices are "
    "given to the container by Azure ML already.",
    reference=DOCKER_RUN,
    config_key=("resources", "docker_args"),
)
def run_docker_args_confined(run: ResolvedRun) -> list[str]:
    args = (run.spec.get("resources") or {}).get("docker_args")
    if not args:
        return []
    words = bounded.split_words(str(args))
    return [door for flag, value in docker_run.options(words) if (door := _door(flag, value))]


def _services(run: ResolvedRun) -> list[tuple[str, Mapping[str, Any]]]:
    return sorted((run.spec.get("services") or {}).items())


@run_rule(
    id="run-ssh-service-has-key",
    title="An SSH service on a run's nodes names the key allowed in",
    severity="high",
    enforcement="mandatory",
    rationale="services of type ssh start an SSH server in the run's container on its nodes; the container holds "
    "the run's data, code and identity. Without ssh_public_keys nobody's key is named, so the service is either "
    "unusable or opened by whatever the image's sshd accepts.",
    remediation="Set ssh_public_keys to the public key of the person debugging the run, or remove the service.",
    reference=INTERACTIVE_JOBS,
    config_key=("services",),
)
def run_ssh_service_has_key(run: ResolvedRun) -> list[str]:
    return [f"service {name!r} opens SSH on the nodes with no ssh_public_keys"
            for name, service in _services(run) if service.get("type") == "ssh" and not service.get("ssh_public_keys")]


@run_rule(
    id="run-notebook-service-user-identity",
    title="JupyterLab and VS Code services run as the user, not the cluster",
    severity="medium",
    enforcement="advisory",
    rationale="A jupyter_lab or vs_code service is a shell on the run's nodes. Unless the run declares "
    "identity: user_identity, what the session does in Azure it does with the job's or cluster's identity, shared "
    "by everyone who can open the session, rather than as the person who opened it.",
    remediation="Set identity: {type: user_identity} on the run, or remove the service once debugging is done.",
    reference=INTERACTIVE_JOBS,
    config_key=("services",),
)
def run_notebook_service_user_identity(run: ResolvedRun) -> list[str]:
    identity = (run.spec.get("identity") or {}).get("type")
    if identity == "user_identity":
        return []
    return [f"service {name!r} ({service.get('type')}) runs with identity {identity or 'unset'}, not user_identity"
            for name, service in _services(run) if service.get("type") in ("jupyter_lab", "vs_code")]
