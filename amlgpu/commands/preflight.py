"""``amlgpu preflight``: what would stop the first ``pulumi up`` of a stack, before it runs. Read-only.

Offline half (also printed by ``amlgpu plan`` and written to ``build/<stack>/preflight.json``): the vCPU
demand per VM family and tier, and what the deploying principal must be allowed to do.

Live half (skipped with ``--offline``): read-only Azure Resource Manager calls with the credential
``pulumi up`` uses (azure-identity's DefaultAzureCredential: ``az login``, ARM_*/AZURE_* variables, a
managed identity), each an OK / PROBLEM / UNKNOWN row with a one-line fix: resource providers registered, GPU
quota per family against the region's Azure ML quota and usage, the size offered in the region and by Azure ML
for compute clusters, permission to create the resource group, role assignments and the build-context data role
(on the subscription while the group does not exist), to assign user-assigned identities, a soft-deleted
workspace or key vault holding a name, a customer-managed key's vault, privatelink zones already linked to an
existing network, and the network path of the build-context upload from this machine.

The subscription: ``--subscription``, else the stack's ``azure-native:subscriptionId``, else
``AZURE_SUBSCRIPTION_ID`` / ``ARM_SUBSCRIPTION_ID``. Credentials are looked up only for the live half.

Exit 0 when nothing is a PROBLEM (UNKNOWN rows included), 1 when something is, or with ``--strict`` when
something is UNKNOWN; 3 when nothing could be checked (every live row UNKNOWN: no credentials, no subscription, a
refused token), the shared cause said once; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from kernel.errors import EXIT_NOTHING_CHECKED, EXIT_OK, EXIT_POLICY
from stack.project import LoadedStack, load_stack

SUBSCRIPTION_KEY = "azure-native:subscriptionId"
SUBSCRIPTION_VARIABLES = ("AZURE_SUBSCRIPTION_ID", "ARM_SUBSCRIPTION_ID")
LOGIN_HINT = "run `az login` (or set AZURE_CLIENT_ID, AZURE_TENANT_ID and a secret, certificate or OIDC token)"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "preflight",
        help="read-only checks of what would stop the first pulumi up (providers, quota, sizes, permissions, names, "
        "keys, DNS, the upload's network path)",
        description=__doc__,
    )
    parser.add_argument("--stack", "-s", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--offline", action="store_true", help="only the offline half: no credentials, no calls")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a check is UNKNOWN too")
    parser.add_argument("--subscription", help="subscription id (default: the stack's, then AZURE_SUBSCRIPTION_ID)")
    parser.add_argument("--public-ip", help="this machine's public IP, instead of asking api.ipify.org")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="stdout format")
    parser.set_defaults(func=run)


def subscription_of(stack: LoadedStack, given: str | None, environ: dict[str, str] | None = None) -> str | None:
    environ = dict(os.environ) if environ is None else environ
    configured = stack.file.config.get(SUBSCRIPTION_KEY)
    for candidate in (given, configured if isinstance(configured, str) else None,
                      *(environ.get(v) for v in SUBSCRIPTION_VARIABLES)):
        if candidate:
            return candidate
    return None


def run(args: argparse.Namespace, *, credential: Any = None, transport: Any = None) -> int:
    """The command; tests hand in a ``credential`` and a replaying ``transport``, users get the defaults."""
    from preflight.checks import Check, nothing_checked, shared_cause
    from preflight.offline import offline, render_offline

    stack = load_stack(args.stack)
    subscription = subscription_of(stack, args.subscription)
    report = offline(stack.config, stack.name, subscription)
    checks: list[Check] = []
    if not args.offline:
        checks = _live(stack, subscription, args.public_ip, credential, transport)
    cause = shared_cause(checks) if nothing_checked(checks) else None
    report["checks"] = [c.to_json() for c in checks]
    report["nothing_checked"] = nothing_checked(checks)
    if args.format == "json":
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        lines = [f"Preflight of stack {stack.name!r} (subscription {subscription or 'unknown'}):",
                 *render_offline(stack.config, subscription)]
        if cause:
            lines += [f"Nothing could be checked: {cause[0]}", f"  fix: {cause[1]}",
                      "  not checked: " + ", ".join(c.name for c in checks)]
        elif checks:
            lines.append("Checks:")
            for c in checks:
                lines.append(f"  {c.status:<8} {c.name}: {c.detail}")
                if c.fix:
                    lines.append(f"           fix: {c.fix}")
        print("\n".join(lines))
    statuses = {c.status for c in checks}
    if nothing_checked(checks):
        return EXIT_NOTHING_CHECKED
    if "PROBLEM" in statuses or (args.strict and "UNKNOWN" in statuses):
        return EXIT_POLICY
    return EXIT_OK


def _live(stack: LoadedStack, subscription: str | None, given_ip: str | None, credential: Any,
          transport: Any) -> list[Any]:
    from azure.core.exceptions import ClientAuthenticationError

    from azurefacts.arm import SCOPE, ArmError, ArmReader, instance_metadata, public_ip, token_object_id
    from preflight import deploy as preflight

    if not subscription:
        reason = f"no subscription: set {SUBSCRIPTION_KEY}, AZURE_SUBSCRIPTION_ID or --subscription"
        return preflight.unknown_rows(stack.config, reason, "give the subscription and re-run")
    if credential is None:  # looked up only now: --offline never gets here
        from azurefacts.arm import default_credential

        credential = default_credential()
    try:
        token = credential.get_token(SCOPE)
    except ClientAuthenticationError as err:
        first = str(err.message if hasattr(err, "message") else err).strip().splitlines()[0][:200]
        reason = f"no usable Azure credentials ({first})"
        return preflight.unknown_rows(stack.config, reason, LOGIN_HINT)
    arm = ArmReader(credential, transport=transport)
    ctx = preflight.Context(
        config=stack.config, arm=arm, subscription=subscription, now=preflight.now(),
        public_ip=(lambda: given_ip) if given_ip else (lambda: public_ip(transport=transport)),
        private_dns_zone_ids=stack.config.network.private_dns_zone_ids,
        principal_id=token_object_id(token.token),
        instance_metadata=lambda: instance_metadata(transport=transport),
    )
    try:
        return preflight.live_checks(ctx)
    except ArmError as err:
        if err.status == 401:  # the token was refused: every call would be
            reason = f"Azure refused the credentials ({err.code}: {err.message[:160]})"
            return preflight.unknown_rows(stack.config, reason, LOGIN_HINT)
        raise
