"""Waivers: a stack's reviewed, counted exceptions to a policy rule for one named resource or run."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field


class Waiver(BaseModel):
    """``waivers:`` entry in a stack file. Waived findings are still reported and counted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    resource: str
    """The declared name of the resource or run (a cluster, environment, run, or ``workspace``)."""
    reason: str = Field(min_length=10)
    expires: dt.date | None = None

    def active(self, today: dt.date) -> bool:
        return self.expires is None or today <= self.expires
