"""Deploy order: a resource Azure refuses (or that cannot work) unless another exists first is created after it.

``pulumi up`` creates every resource as soon as what it waits for exists, all at the same time otherwise
(:mod:`policies.graph`). Azure documents preconditions the graph must therefore carry; each is a row of
``deploy_order.yaml`` beside this file, and this module is the one function that checks every row on a planned
stack, one mandatory stack rule per row (its sources in the rule's docs).

A row's keys:

* ``subject``: ``type`` (a type token) and optional ``where``: the resources the row constrains;
* ``path``: steps from the subject along the dependency graph. ``uses: T`` finds the resources of type ``T``
  the previous step's resources depend on (their own inputs or ``depends_on``), ``used_by: T`` those of type ``T``
  that depend on them. ``where`` filters a step's resources; ``wait: true`` marks resources the subject must be
  created after (directly or through others); ``required: true`` makes an empty step a finding; ``what`` names the
  step's resources in findings;
* ``failure``: what Azure answers when the subject is created too early; ``title``, ``severity``, ``rationale``,
  ``remediation``; ``sources``: where the precondition is written (the first is the rule's reference).

``where`` maps a dotted camelCase input path (lists are looked into) to a value: a string matches when a value
at the path equals it ignoring case, a boolean when the value is that boolean, ``{endswith: S}`` when a value
ends with ``S`` ignoring case. A value only the deployment knows matches nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from kernel import bounded
from policies.graph import Key
from policies.rule import Rule, Severity, Violation
from policies.stack import Stack
from policies.wire import inputs, is_false, is_true, known, same

TABLE = Path(__file__).with_name("deploy_order.yaml")


def _leaves(value: Any, parts: Sequence[str]) -> Iterator[Any]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item, parts)
        return
    if not parts:
        yield value
        return
    if isinstance(value, Mapping) and parts[0] in value:
        yield from _leaves(value[parts[0]], parts[1:])


def _matches(value: Any, expected: Any) -> bool:
    if not known(value):
        return False
    if isinstance(expected, bool):
        return is_true(value) if expected else is_false(value)
    if isinstance(expected, Mapping):
        suffix = str(expected["endswith"]).lower()
        return isinstance(value, str) and value.lower().endswith(suffix)
    return same(value, str(expected))


def matches(resource: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether every condition of ``where`` holds for the resource's inputs."""
    return all(any(_matches(v, expected) for v in _leaves(inputs(resource), path.split(".")))
               for path, expected in where.items())


@dataclass(frozen=True)
class Step:
    relation: Literal["uses", "used_by"]
    type: str
    what: str
    where: Mapping[str, Any]
    wait: bool = False
    required: bool = False


@dataclass(frozen=True)
class Precondition:
    """One row: a subject, the path to what it waits for, and what Azure answers otherwise."""

    id: str
    title: str
    severity: Severity
    subject_type: str
    subject_where: Mapping[str, Any]
    path: tuple[Step, ...]
    failure: str
    rationale: str
    remediation: str
    sources: tuple[str, ...]

    def violations(self, stack: Stack) -> list[Violation]:
        graph = stack.graph
        out = []
        for subject in stack.of_type(self.subject_type):
            if not matches(subject, self.subject_where):
                continue
            subject_key = (subject["type"], subject["name"])
            waited = graph.waits_for(subject_key)
            current: set[Key] = {subject_key}
            for step in self.path:
                related = set().union(*(graph.direct(k) if step.relation == "uses" else graph.users(k)
                                        for k in current)) if current else set()
                current = {k for k in related if k[0] == step.type and matches(graph.resources[k], step.where)}
                if not current:
                    if step.required:
                        out.append(Violation(subject, f"there is no {step.what} to create it after: {self.failure}"))
                    break
                if step.wait:
                    out += [Violation(subject, f"created without waiting for {step.what} {name!r}: {self.failure}")
                            for kind, name in sorted(current - waited)]
        return out


_ROW_KEYS = {"id", "title", "severity", "subject", "path", "failure", "rationale", "remediation", "sources"}
_STEP_KEYS = {"uses", "used_by", "what", "where", "wait", "required"}


def _step(row_id: str, raw: Mapping[str, Any]) -> Step:
    relations = [k for k in ("uses", "used_by") if k in raw]
    if len(relations) != 1 or set(raw) - _STEP_KEYS or "what" not in raw:
        raise ValueError(f"deploy-order row {row_id}: a step needs exactly one of uses/used_by and `what`, "
                         f"and only the keys {sorted(_STEP_KEYS)}: {dict(raw)}")
    relation: Literal["uses", "used_by"] = "uses" if relations[0] == "uses" else "used_by"
    return Step(relation, str(raw[relation]), str(raw["what"]), dict(raw.get("where") or {}),
                bool(raw.get("wait", False)), bool(raw.get("required", False)))


def precondition(row: Mapping[str, Any]) -> Precondition:
    """One row as a :class:`Precondition` (unknown or missing keys are errors)."""
    if set(row) != _ROW_KEYS:
        raise ValueError(f"deploy-order row {row.get('id')!r}: keys {sorted(row)}, expected {sorted(_ROW_KEYS)}")
    severity: Severity = row["severity"]
    return Precondition(
        id=row["id"], title=row["title"], severity=severity, subject_type=row["subject"]["type"],
        subject_where=dict(row["subject"].get("where") or {}),
        path=tuple(_step(row["id"], s) for s in row["path"]), failure=" ".join(row["failure"].split()),
        rationale=row["rationale"], remediation=row["remediation"], sources=tuple(row["sources"]),
    )


@cache
def preconditions() -> tuple[Precondition, ...]:
    """Every row of :data:`TABLE`, in file order."""
    return tuple(precondition(row) for row in bounded.load_file(TABLE, bounded.DATA_TABLE)["rows"])


def _rule(row: Precondition) -> Rule:
    def check(stack: Stack) -> list[Violation]:
        return row.violations(stack)

    check.__qualname__ = check.__name__ = f"deploy_order[{row.id}]"
    check.__module__ = __name__
    return Rule(
        id=row.id, title=row.title, kind="stack", severity=row.severity, enforcement="mandatory",
        rationale=f"{' '.join(row.rationale.split())} Without it: {row.failure}. Sources: {', '.join(row.sources)}.",
        remediation=" ".join(row.remediation.split()), reference=row.sources[0], check=check,
        family=__name__.rsplit(".", 1)[-1],
    )


TABLE_RULES: tuple[Rule, ...] = tuple(_rule(row) for row in preconditions())
"""One mandatory stack rule per row (collected by :mod:`policies.catalogue`)."""
