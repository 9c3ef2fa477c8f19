"""Waivers: reviewed, counted, expiring exceptions to a policy rule for one named resource or run.

Two places hold them, owned by different people (docs/policies.md, "Where waivers live"):

* a stack file's ``aml-gpu-training:waivers`` (:class:`Waiver`): the stack's owners propose them, and
  never for a critical rule;
* the pack config's ``policy-waivers.waivers`` (:class:`PlatformWaiver`, naming its ``stack``): the
  platform owners grant them, critical rules included.

Every waiver has a reason with real content and an expiry; how far ahead an expiry may be is the pack
config's (``policy-waivers.max_days``). The model only; :mod:`policies.waivers` checks what a waiver
names, how long it runs and where it may live, and the engine applies it.
"""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kernel import regex as linear

REASON_MIN_CHARS = 20
REASON_MIN_WORDS = 3
_WORD = linear.compile(r"\pL{2,}")
"""A word: two or more letters (any script)."""


def real_reason(value: str) -> str:
    """``value`` when it says something: at least 20 characters besides whitespace and at least three
    distinct words of two or more letters. Raises ValueError echoing the value otherwise."""
    text = " ".join(value.split())
    words = {w.casefold() for w in _WORD.findall(text)}
    if len(text.replace(" ", "")) < REASON_MIN_CHARS or len(words) < REASON_MIN_WORDS:
        raise ValueError(
            f"reason {value!r} does not say why: write what is accepted and why (at least {REASON_MIN_WORDS} "
            f"different words, {REASON_MIN_CHARS} characters), e.g. a ticket and the plan to remove the waiver"
        )
    return text


class Waiver(BaseModel):
    """``waivers:`` entry in a stack file. Waived findings are still reported and counted."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    rule: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    resource: str
    """The declared name of the resource or run: the workspace's name, ``network``, a cluster, the
    image-build cluster, an environment or a run."""
    reason: str
    """Why the exception is acceptable: at least 3 different words and 20 characters (a ticket and the plan to
    remove it); whitespace is collapsed."""
    expires: dt.date
    """Last day the waiver applies (inclusive). Required, at most policy-waivers.max_days (default 90) ahead."""
    fingerprint: str | None = Field(default=None, pattern=r"^[0-9a-f]{12,32}$")
    """The fingerprint of the one finding the waiver excuses (the plan shows it beside each finding; its first
    12 characters or more): the rule, the thing and the finding's evidence. When what was approved changes (one
    warm node becomes sixteen), the fingerprint no longer matches and the waiver is stale: reported, not applied."""

    @field_validator("reason")
    @classmethod
    def _reason(cls, value: str) -> str:
        return real_reason(value)

    @property
    def origin(self) -> str:
        """Where the waiver was granted, in words."""
        return "stack file"

    def active(self, today: dt.date) -> bool:
        return today <= self.expires

    def covers(self, rule_id: str, name: str) -> bool:
        """Whether this waiver is about ``rule_id`` for the thing declared as ``name``."""
        return self.rule == rule_id and self.resource == name

    def binds(self, fingerprint: str) -> bool:
        """Whether this waiver was approved for the finding whose fingerprint is ``fingerprint``."""
        return self.fingerprint is not None and fingerprint.startswith(self.fingerprint)

    def key(self) -> tuple[str, str, str]:
        """What the waiver is about (its origin, rule and resource): how a change to it is recognised."""
        return (self.origin, self.rule, self.resource)


class PlatformWaiver(Waiver):
    """``policy-waivers.waivers`` entry in the pack config: granted by the platform owners for one stack."""

    stack: str = Field(min_length=1)

    @property
    def origin(self) -> str:
        return "pack config"
