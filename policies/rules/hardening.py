"""Settings that open the door: a storage firewall open to the internet, a run's container given the
host, interactive services on the nodes without a key or the user's identity.

Each is one line of a stack file that plans cleanly and deploys; what it opens is documented by the
platform it configures (Azure Storage's firewall, Docker's run reference, Azure ML's interactive jobs).
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Mapping
from typing import Any

from jobs.launchers import shlex_can_read
from jobs.resolved import ResolvedRun
from policies.rule import resource_rule, run_rule
from policies.wire import get, inputs, known

STORAGE = "azure-native:storage:StorageAccount"
DOCKER_RUN = "https://docs.docker.com/reference/cli/docker/container/run/"
INTERACTIVE_JOBS = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-interactive-jobs"


def _prefix_length(value: str) -> int | None:
    """The prefix length of an IPv4 address or CIDR range (32 for an address); None if it is neither."""
    try:
        return ipaddress.ip_network(value.strip(), strict=False).prefixlen
    except ValueError:
        return None


@resource_rule(
    id="storage-operator-ranges-not-open",
    types=[STORAGE],
    title="The storage firewall's operator ranges are not the internet",
    severity="critical",
    enforcement="mandatory",
    rationale="network.operator_ip_ranges become the storage account's firewall IP rules: 0.0.0.0/0 (or any "
    "range shorter than the parameter) lets the whole internet reach the workspace's datastores, job outputs and "
    "environment build contexts, with only the account's authentication in the way.",
    remediation="List the public addresses that run `pulumi up` (a /32 or a small CIDR), or deploy from inside "
    "the network and remove operator_ip_ranges.",
    reference="https://learn.microsoft.com/en-us/azure/storage/common/storage-network-security",
    config_key=("operator_ip_ranges",),
)
def storage_operator_ranges_not_open(resource: Mapping[str, Any], *, min_prefix_length: int = 8) -> list[str]:
    rules = get(inputs(resource), "networkRuleSet.ipRules", [])
    if not known(rules):
        return []
    out = []
    for rule in rules or []:
        value = str(get(rule, "iPAddressOrRange", "") or "")
        length = _prefix_length(value)
        if length is not None and length < min_prefix_length:
            share = "the whole internet" if length == 0 else f"2^{32 - length} addresses"
            out.append(f"operator range {value} lets {share} through the storage firewall "
                       f"(the shortest allowed prefix is /{min_prefix_length})")
    return out


_HOST_NAMESPACES = ("--network", "--net", "--pid", "--uts", "--userns", "--cgroupns")
_UNCONFINED = ("seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined", "label=disable")


def _options(args: str) -> list[tuple[str, str | None]]:
    """docker run options as (flag, value); ``--flag=value`` and ``--flag value`` alike."""
    try:
        tokens = shlex.split(args) if shlex_can_read(args) else args.split()
    except ValueError:
        tokens = args.split()
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("-"):
            flag, eq, value = token.partition("=")
            if eq:
                out.append((flag, value))
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                out.append((flag, tokens[i + 1]))
                i += 1
            else:
                out.append((flag, None))
        i += 1
    return out


def _door(flag: str, value: str | None) -> str | None:
    if flag == "--privileged" and (value is None or value.lower() != "false"):
        return "--privileged gives the container every capability and every host device"
    if flag == "--cap-add" and value:
        return f"--cap-add {value} adds kernel capabilities the container does not have by default"
    if flag in _HOST_NAMESPACES and value == "host":
        return f"{flag} host shares the node's {flag.strip('-').removesuffix('ns')} namespace with the container"
    if flag == "--device" and value:
        return f"--device {value} hands a host device to the container"
    if flag in ("-v", "--volume") and value and value.startswith("/"):
        return f"{flag} {value} mounts the node's {value.split(':')[0]} into the container"
    if flag == "--mount" and value and ("type=bind" in value or "bind-propagation" in value):
        return f"--mount {value} binds a host path into the container"
    if flag == "--security-opt" and value and value in _UNCONFINED:
        return f"--security-opt {value} lifts the container's confinement"
    return None


@run_rule(
    id="run-docker-args-confined",
    title="A run's docker_args do not hand the node to its container",
    severity="high",
    enforcement="mandatory",
    rationale="resources.docker_args go straight to `docker run` on every node. --privileged, --cap-add, host "
    "namespaces (--network/--pid host), host devices and bind mounts of the node's paths let the run's "
    "code leave its container: read other jobs' data, the node's credentials and the managed identity's tokens.",
    remediation="Remove the option. For shared memory use resources.shm_size; GPUs and InfiniBand devices are "
    "given to the container by Azure ML already.",
    reference=DOCKER_RUN,
    config_key=("resources", "docker_args"),
)
def run_docker_args_confined(run: ResolvedRun) -> list[str]:
    args = (run.spec.get("resources") or {}).get("docker_args")
    if not args:
        return []
    return [door for flag, value in _options(str(args)) if (door := _door(flag, value))]


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
