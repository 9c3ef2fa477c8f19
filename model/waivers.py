"""The ``waivers:`` entries of a stack file: reviewed, counted exceptions to a policy rule.

The model only; :mod:`policies.waivers` checks what a waiver names and applies it.
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field


class Waiver(BaseModel):
    """``waivers:`` entry in a stack file. Waived findings are still reported and counted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    resource: str
    """The declared name of the resource or run: the workspace's name, ``network``, a cluster, the
    image-build cluster, an environment or a run."""
    reason: str = Field(min_length=10)
    expires: dt.date | None = None
    """Last day the waiver applies (inclusive); None for no expiry."""

    def active(self, today: dt.date) -> bool:
        return self.expires is None or today <= self.expires

    def covers(self, rule_id: str, name: str) -> bool:
        """Whether this waiver is about ``rule_id`` for the thing declared as ``name``."""
        return self.rule == rule_id and self.resource == name
