"""Waivers: a stack's reviewed, counted exceptions to a policy rule for one named resource or run.

A waiver names a rule id and the declared name of what it excuses (the workspace's name,
``network``, a cluster, the image-build cluster, an environment or a run), gives a reason, and may
expire. Waived findings stay in every report, counted as waived; an expired waiver no longer
applies and is reported; a waiver naming an unknown rule or name is a config error.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence

from model import NAMESPACE
from model.errors import ConfigError
from model.waivers import Waiver


def _hint(value: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(value, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(known)) or 'none'}"


def check_references(
    waivers: Sequence[Waiver], *, rules: Collection[str], names: Collection[str], file: str | None = None
) -> None:
    """Raise :class:`~model.errors.ConfigError` (key ``aml-gpu-training:waivers[i].rule`` or
    ``.resource``) for the first waiver naming an unknown rule or an undeclared resource."""
    for i, waiver in enumerate(waivers):
        where = f"{NAMESPACE}:waivers[{i}]"
        if waiver.rule not in rules:
            message = f"unknown rule {waiver.rule!r}{_hint(waiver.rule, rules)}"
            raise ConfigError(message, file=file, key=f"{where}.rule")
        if waiver.resource not in names:
            raise ConfigError(
                f"no resource or run is declared as {waiver.resource!r}{_hint(waiver.resource, names)}",
                file=file,
                key=f"{where}.resource",
            )
