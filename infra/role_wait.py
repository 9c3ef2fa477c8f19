"""Wait until fresh role assignments can have taken effect, before the resource that relies on them is created.

Azure RBAC: "Role assignment changes can take up to 10 minutes" (Microsoft Learn, "Troubleshoot Azure RBAC"). A
workspace created seconds after its user-assigned identity's roles on its storage, key vault, registry and
Application Insights can find them not yet in force (MicrosoftDocs/azure-docs#111772: the default datastores of a
private-link workspace not created). Nothing in Azure reports when another principal's access takes effect, so the
wait is a bounded poll of what can be read: :func:`wait_for_roles` GETs each assignment from Resource Manager until
it is visible and its ``createdOn`` (REST spec Microsoft.Authorization 2022-04-01, RoleAssignmentProperties) lies
:data:`TAKES_EFFECT_S` in the past. An assignment made earlier (a later ``pulumi up``) is old already: no wait.

:class:`RolesEffective` runs it from a Pulumi dynamic provider, on the machine running ``pulumi up``, with the
credential the upload uses (:func:`azurefacts.arm.default_credential`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

from azurefacts.arm import ArmError, ArmReader
from infra.build_context import PROPAGATION_WAIT_S, RETRY_EVERY_S

AUTHORIZATION_API = "2022-04-01"
TAKES_EFFECT_S = 600.0
"""Microsoft's documented worst case for a role assignment to take effect (Troubleshoot Azure RBAC)."""


class RoleWaitError(Exception):
    """The assignments cannot be read, or are not in force within the bound; the message says which and why."""


def _created(body: dict[str, Any]) -> datetime | None:
    text = str((body.get("properties") or {}).get("createdOn") or "")
    try:
        created = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return created if created.tzinfo else created.replace(tzinfo=UTC)


def wait_for_roles(
    arm: ArmReader,
    assignment_ids: Sequence[str],
    *,
    wait_s: float = PROPAGATION_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    utcnow: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> float:
    """Poll until every assignment of ``assignment_ids`` is visible and :data:`TAKES_EFFECT_S` old; the seconds
    waited. A 404 (not replicated yet) is polled again; any other refusal, or the bound passing, raises."""
    started = clock()
    deadline = started + wait_s
    while True:
        pending: list[str] = []
        for assignment in assignment_ids:
            try:
                body = arm.get(assignment, AUTHORIZATION_API)
            except ArmError as err:
                if err.status == 404:
                    pending.append(f"{assignment.rsplit('/', 1)[-1]} not visible yet")
                    continue
                raise RoleWaitError(f"cannot read role assignment {assignment}: {err.status} {err.code} (the "
                                    "deployer needs Microsoft.Authorization/roleAssignments/read on its scope)"
                                    ) from None
            created = _created(body)
            age = (utcnow() - created).total_seconds() if created else 0.0
            if age < TAKES_EFFECT_S:
                pending.append(f"{assignment.rsplit('/', 1)[-1]} assigned {int(age)} s ago")
        if not pending:
            return clock() - started
        if clock() >= deadline:
            raise RoleWaitError(f"role assignments not in force after {int(wait_s)} s: {'; '.join(pending)}")
        sleep(RETRY_EVERY_S)


class RolesEffectiveProvider(ResourceProvider):
    """Create: wait for the assignments (:func:`wait_for_roles`). Nothing to delete: the wait leaves nothing."""

    serialize_as_secret_always = False

    def create(self, props: dict[str, Any]) -> CreateResult:
        from azurefacts.arm import default_credential

        ids = [str(i) for i in props["assignmentIds"]]
        try:
            waited = wait_for_roles(ArmReader(default_credential()), ids)
        except RoleWaitError as err:
            raise Exception(str(err)) from None  # the engine shows the message alone
        return CreateResult(id_=f"roles-effective-{len(ids)}", outs={**props, "waitedS": int(waited)})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = sorted(olds.get("assignmentIds") or []) != sorted(news.get("assignmentIds") or [])
        # A new assignment is a new wait; the ones made before are old already and pass at once.
        return DiffResult(changes=changed, replaces=["assignmentIds"] if changed else [],
                          delete_before_replace=False)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class RolesEffective(pulumi.dynamic.Resource, module="amlgpu", name="RolesEffective"):
    """Exists once every role assignment of ``assignments`` can have taken effect: what waits for it, waits."""

    def __init__(self, name: str, *, assignments: Sequence[pulumi.CustomResource], purpose: str,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            RolesEffectiveProvider(),
            name,
            {"assignmentIds": [a.id for a in assignments], "purpose": purpose, "waitedS": None},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(assignments))),
        )
