"""What planning one stack came to, when one command plans several: the row of the summary table
(:func:`planning.render.summary_table`), of the JSON document and of the pull-request comment
(:mod:`planning.comment`).

Only figures and texts are kept, not the plan itself, so planning a hundred stacks holds one plan in
memory at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernel.errors import EXIT_INTERNAL, EXIT_OK, EXIT_POLICY, EXIT_USAGE


@dataclass(frozen=True)
class StackOutcome:
    """One stack's verdict: planned (exit 0 or 1, its counts and cost), refused (exit 2, the error) or stopped by
    an internal error (exit 3, the error naming the exception)."""

    stack: str
    exit_code: int
    out: str | None = None
    """The output folder, as shown (None: nothing was written)."""
    mandatory: int = 0
    advisory: int = 0
    waived: int = 0
    ceiling_usd_per_hour: float | str | None = None
    """Every cluster at max nodes (``"unknown"`` when a cluster has no price; None: not planned)."""
    priced_ceiling_usd_per_hour: float = 0.0
    """The same over the clusters that have a price: the least it can cost when the ceiling is unknown."""
    diff: str | None = None
    """The one-line verdict against the base (``--base``), when there was one."""
    error: str | None = None
    """Bad input or an internal error: the error as the command printed it."""
    policy_md: str | None = None
    """The stack's ``policy.md``, kept when the pull-request comment is asked for."""
    summary: dict[str, Any] = field(default_factory=dict)
    """The stack's JSON summary (``--format json``), as one stack's plan prints it."""

    @property
    def verdict(self) -> str:
        if self.exit_code == EXIT_INTERNAL:
            return "internal error"
        if self.exit_code == EXIT_USAGE:
            return "bad input"
        if self.exit_code == EXIT_POLICY:
            return "failed"
        return "passed"

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"stack": self.stack, "exit_code": self.exit_code, "error": self.error}
        return {**self.summary, "stack": self.stack, "exit_code": self.exit_code}


def json_document(outcomes: Sequence[StackOutcome], changed_since: dict[str, Any] | None = None) -> dict[str, Any]:
    """``amlgpu plan --format json``, one shape for one stack or several: each stack's entry, the worst exit
    code and, with ``--changed-since``, what it selected (``changed_since``)."""
    document: dict[str, Any] = {"stacks": [o.to_json() for o in outcomes], "exit_code": worst(
        o.exit_code for o in outcomes)}
    return document if changed_since is None else {**document, "changed_since": changed_since}


def worst(codes: Iterable[int]) -> int:
    """The exit code of several stacks' plans: an internal error (3) over bad input (2) over a mandatory failure
    (1) over success (0)."""
    return max(codes, default=EXIT_OK)
