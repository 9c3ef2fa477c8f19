"""Property rules: the rules that only compare one planned property with what it must (not) be.

Such a rule is data, not code (as in Checkov's and PSRule's YAML rules): a row of
``policies/rules/properties.yaml`` names the rule's metadata, the resource types, the property's
dotted path from the resource's root (``inputs.minimumTlsVersion``, ``options.protect``) and one
expectation, and :func:`check` is the one function that evaluates every row. Code stays for rules
with logic (cross-resource checks, parsing, parameters).

A row's expectation is exactly one of:

* ``must_be: [values]``: the property must equal one of them;
* ``must_not_be: [values]``: the property must equal none of them;
* ``must_be_set: true``: the property must hold a non-empty value.

Strings compare case-insensitively (Azure ignores case in enum values). For a boolean expectation a
value counts as set only when it is a wire boolean (``true``/``false``, strings of them included);
anything else counts as not set. ``if_unset`` (``fail`` for ``must_be`` and ``must_be_set``,
``pass`` for ``must_not_be``) decides about a property the program does not set, ``if_unknown``
(default ``pass``) about a value only the deployment knows (:data:`policies.wire.UNKNOWN`).
``message`` is the finding, with ``{value}`` standing for the planned value; ``unset_message``,
when given, is the finding for a property that is not set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from kernel import bounded
from policies.rule import Enforcement, Rule, Severity
from policies.wire import get, is_false, is_true, known, same

TABLE = Path(__file__).parent / "rules" / "properties.yaml"
"""The rows, one per rule."""

_NOT_SET = object()


@dataclass(frozen=True)
class Expectation:
    """What one row requires of its property."""

    path: str
    message: str
    must_be: tuple[Any, ...] = ()
    must_not_be: tuple[Any, ...] = ()
    must_be_set: bool = False
    if_unset: Literal["pass", "fail"] = "fail"
    if_unknown: Literal["pass", "fail"] = "pass"
    unset_message: str | None = None

    def __post_init__(self) -> None:
        given = sum((bool(self.must_be), bool(self.must_not_be), self.must_be_set))
        if given != 1:
            raise ValueError(f"{self.path}: a row needs exactly one of must_be, must_not_be, must_be_set")

    @property
    def _boolean(self) -> bool:
        return any(isinstance(v, bool) for v in (*self.must_be, *self.must_not_be))

    def _planned(self, resource: Mapping[str, Any]) -> Any:
        value = get(resource, self.path)
        if self._boolean:
            return True if is_true(value) else False if is_false(value) else _NOT_SET if known(value) else value
        if self.must_be_set:
            return value if value else _NOT_SET
        return _NOT_SET if value is None else value

    def violations(self, resource: Mapping[str, Any]) -> list[str]:
        """The finding for one resource: empty when the property is as required (or cannot be known)."""
        value = self._planned(resource)
        if value is not _NOT_SET and not known(value):
            return [self.message.format(value=value)] if self.if_unknown == "fail" else []
        if value is _NOT_SET:
            if self.if_unset == "pass":
                return []
            return [self.unset_message or self.message.format(value="not set")]
        if self.must_be_set:
            return []
        if self.must_be and any(_equal(value, expected) for expected in self.must_be):
            return []
        if self.must_not_be and not any(_equal(value, forbidden) for forbidden in self.must_not_be):
            return []
        return [self.message.format(value=value)]


def _equal(value: Any, expected: Any) -> bool:
    if isinstance(expected, bool):
        return value is expected
    if isinstance(expected, str):
        return same(value, expected)
    return bool(value == expected)


_RULE_KEYS = ("id", "family", "title", "severity", "enforcement", "types", "rationale", "remediation", "reference")
_CHECK_KEYS = ("path", "message", "must_be", "must_not_be", "must_be_set", "if_unset", "if_unknown", "unset_message")


def _expectation(row: Mapping[str, Any]) -> Expectation:
    fields: dict[str, Any] = {key: row[key] for key in _CHECK_KEYS if key in row}
    for key in ("must_be", "must_not_be"):
        if key in fields:
            fields[key] = tuple(fields[key])
    if "if_unset" not in fields and fields.get("must_not_be"):
        fields["if_unset"] = "pass"
    return Expectation(**fields)


def _check(expectation: Expectation) -> Callable[[Mapping[str, Any]], list[str]]:
    def check(resource: Mapping[str, Any]) -> list[str]:
        return expectation.violations(resource)

    check.__qualname__ = check.__name__ = f"property_rule[{expectation.path}]"
    return check


def rule_from_row(row: Mapping[str, Any]) -> Rule:
    """One :class:`~policies.rule.Rule` from one table row (unknown or missing keys are errors)."""
    unknown = set(row) - {*_RULE_KEYS, *_CHECK_KEYS, "config_key"}
    missing = [key for key in (*_RULE_KEYS, "path", "message") if key not in row]
    if unknown or missing:
        raise ValueError(f"property rule {row.get('id')!r}: unknown keys {sorted(unknown)}, missing {missing}")
    severity: Severity = row["severity"]
    enforcement: Enforcement = row["enforcement"]
    return Rule(
        id=row["id"],
        title=row["title"],
        kind="resource",
        severity=severity,
        enforcement=enforcement,
        rationale=row["rationale"],
        remediation=row["remediation"],
        reference=row["reference"],
        check=_check(_expectation(row)),
        family=row["family"],
        resource_types=tuple(row["types"]),
        config_key=tuple(row.get("config_key", ())),
    )


@cache
def table_rules() -> tuple[Rule, ...]:
    """Every row of :data:`TABLE` as a rule, in file order."""
    rows: Sequence[Mapping[str, Any]] = bounded.load_file(TABLE, bounded.DATA_TABLE)["rules"]
    return tuple(rule_from_row(row) for row in rows)
