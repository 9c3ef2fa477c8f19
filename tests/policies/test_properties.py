"""Property rules are data (``policies/rules/properties.yaml``) evaluated by one function; they must say
exactly what the hand-written checks they replaced said, value for value."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from policies.catalogue import BY_ID
from policies.properties import Expectation, rule_from_row, table_rules
from tests.conftest import ROOT

GOLDEN = json.loads((ROOT / "tests" / "fixtures" / "property-rules-golden.json").read_text())["cases"]
TODAY = dt.date(2026, 1, 1)


def _resource(case: dict[str, Any]) -> dict[str, Any]:
    resource: dict[str, Any] = {"type": case["type"], "name": "n", "inputs": {}, "options": {}}
    target = resource
    *parents, last = case["path"].split(".")
    for part in parents:
        target = target.setdefault(part, {})
    if case["value"] != "<missing>":
        target[last] = case["value"]
    return resource


@pytest.mark.parametrize("case", GOLDEN, ids=lambda c: f"{c['rule']}={c['value']!r}")
def test_a_table_rule_says_what_the_code_it_replaced_said(case: dict[str, Any]) -> None:
    assert BY_ID[case["rule"]].evaluate(_resource(case), {}, TODAY) == case["findings"]


def test_every_golden_rule_is_a_table_row_and_every_row_is_in_the_catalogue() -> None:
    table = {rule.id for rule in table_rules()}
    assert {case["rule"] for case in GOLDEN} <= table
    assert all(BY_ID[rule_id].check is next(r for r in table_rules() if r.id == rule_id).check for rule_id in table)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"path": "inputs.x", "message": "m"}, "exactly one of must_be, must_not_be, must_be_set"),
        ({"path": "inputs.x", "message": "m", "must_be": ("a",), "must_be_set": True}, "exactly one of"),
    ],
)
def test_a_row_needs_exactly_one_expectation(row: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Expectation(**row)


def test_a_row_with_an_unknown_key_is_refused() -> None:
    row = {
        "id": "x-y", "family": "storage", "title": "t", "severity": "low", "enforcement": "advisory",
        "types": ["azure-native:storage:StorageAccount"], "rationale": "r", "remediation": "f", "reference": "u",
        "path": "inputs.a", "message": "m", "must_be": ["b"], "must_bee": ["c"],
    }
    with pytest.raises(ValueError, match="unknown keys \\['must_bee'\\]"):
        rule_from_row(row)
