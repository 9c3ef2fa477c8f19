"""One checks registry for ``amlgpu preflight`` (what would stop ``pulumi up``) and ``amlgpu doctor`` (what this
machine can do): the row both print, a registry of named checks run in order, and what a set of rows means for the
exit code."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

Status = Literal["OK", "PROBLEM", "UNKNOWN", "WARN", "MISSING"]
"""Preflight rows are OK, PROBLEM (evidence ``pulumi up`` would fail) or UNKNOWN (could not be read); doctor rows are
OK, WARN (a task this machine cannot do yet) or MISSING (the offline plan cannot run)."""



@dataclass(frozen=True)
class Check:
    """One row: what was checked, its status, what was found, and the fix when it is not OK."""

    name: str
    status: Status
    detail: str
    fix: str = ""
    required: bool = False
    """doctor: needed by the offline plan; a required row that is not OK makes the exit code 1."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


C = TypeVar("C")
S = TypeVar("S")


@dataclass(frozen=True)
class Entry(Generic[C, S]):
    """A registered check: its name (the row said for it when it cannot run), what runs it on a context, and whether
    it applies to a subject (the stack: a check of a customer-managed key only for a stack with one), which is known
    even when no context can be made (no credentials)."""

    name: str
    run: Callable[[C], list[Check]]
    applies: Callable[[S], bool] = lambda _: True


class Registry(Generic[C, S]):
    """Checks of one kind, in the order they are shown."""

    def __init__(self, entries: Sequence[Entry[C, S]]) -> None:
        self.entries = tuple(entries)

    def run(self, context: C, subject: S) -> list[Check]:
        """Every applicable check's rows, in order; each check says its own failures to read as rows."""
        return [row for e in self.entries if e.applies(subject) for row in e.run(context)]

    def unknown(self, subject: S, reason: str, fix: str) -> list[Check]:
        """One UNKNOWN row per applicable check, when none can run for one shared ``reason``."""
        return [Check(e.name, "UNKNOWN", reason, fix) for e in self.entries if e.applies(subject)]


def nothing_checked(rows: Sequence[Check]) -> bool:
    """Every row UNKNOWN (and at least one): the checks ran into one wall, nothing was checked."""
    return bool(rows) and all(r.status == "UNKNOWN" for r in rows)


def shared_cause(rows: Sequence[Check]) -> tuple[str, str] | None:
    """The (detail, fix) every row has, when they all have the same: said once, not once per row."""
    causes = {(r.detail, r.fix) for r in rows}
    return next(iter(causes)) if len(rows) > 1 and len(causes) == 1 else None
