"""infra.role_wait over recorded Resource Manager answers, through the real ArmReader and azure-core transport, on a
simulated clock: an assignment not visible yet, visible but young, old already; a refusal; the bound passing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from azurefacts.arm import SCOPE, ArmReader
from infra.role_wait import TAKES_EFFECT_S, RoleWaitError, wait_for_roles
from tests.replay_http import RECORDED, Answer, RecordedToken, Replay, transport

ASSIGNMENT = ("/subscriptions/22222222-2222-2222-2222-222222222222/resourceGroups/rg/providers/Microsoft.Storage/"
              "storageAccounts/st/providers/Microsoft.Authorization/roleAssignments/b0f43c54-e787-4862-89b1-a653fa9cf747")
URL = "https://management.azure.com" + ASSIGNMENT
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def utc(self) -> datetime:
        return NOW + timedelta(seconds=self.t)


def created(seconds_before_now: float) -> dict[str, Any]:
    body = json.loads((RECORDED / "role-assignment.json").read_text())
    stamp = (NOW - timedelta(seconds=seconds_before_now)).isoformat().replace("+00:00", "Z")
    body["properties"]["createdOn"] = stamp
    return dict(body)


def run(answers: list[Answer]) -> tuple[float, Clock, Replay]:
    replay = Replay({f"GET {URL}": answers})
    clock = Clock()
    arm = ArmReader(RecordedToken(SCOPE), transport=transport(replay), retries=0)
    waited = wait_for_roles(arm, [ASSIGNMENT], sleep=clock.sleep, clock=clock.now, utcnow=clock.utc)
    return waited, clock, replay


def test_an_old_assignment_passes_at_once() -> None:
    waited, _, replay = run([Answer(200, created(3600))])
    assert waited == 0.0 and len(replay.sent("GET", URL)) == 1
    assert replay.query(replay.sent("GET", URL)[0])["api-version"] == ["2022-04-01"]


def test_a_fresh_assignment_is_polled_until_it_is_ten_minutes_old() -> None:
    # Not replicated yet (404), then visible, created 10 s before the wait began.
    waited, _, replay = run([Answer(404, "role-assignment-not-found.json"), Answer(200, created(10))])
    assert TAKES_EFFECT_S - 10 <= waited <= TAKES_EFFECT_S - 10 + 15
    assert len(replay.sent("GET", URL)) == int(waited // 15) + 1


def test_a_refusal_is_said_not_waited_out() -> None:
    with pytest.raises(RoleWaitError, match=r"cannot read role assignment .* 403 AuthorizationFailed"):
        run([Answer(403, {"error": {"code": "AuthorizationFailed", "message": "no read"}})])


def test_the_wait_is_bounded() -> None:
    with pytest.raises(RoleWaitError, match=r"not in force after 660 s: b0f43c54-.* not visible yet"):
        run([Answer(404, "role-assignment-not-found.json")])
