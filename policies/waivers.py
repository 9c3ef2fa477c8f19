"""Waivers: who may excuse which finding, for how long, and whether a waiver names real things.

A waiver names a rule id and the declared name of what it excuses (the workspace's name,
``network``, a cluster, the image-build cluster, an environment or a run), gives a reason, and
expires. Waived findings stay in every report, counted as waived; an expired waiver no longer
applies and is reported; a waiver naming an unknown rule or name is a config error.

Governance (issue 19: the change that a gate reviews cannot switch the gate off) comes from the pack
config, which belongs to the platform owners (CODEOWNERS), under the key ``policy-waivers``::

    "policy-waivers": {
      "max_days": 90,                 # no waiver may expire further ahead than this
      "stack_file": "non-critical",   # what a stack file may waive: "non-critical" or "none"
      "waivers": [                    # the platform owners' own waivers, critical rules included
        {"stack": "prod", "rule": "...", "resource": "...", "reason": "...", "expires": "2027-01-31"}
      ]
    }

A stack file can never waive a critical rule: such a waiver, one expiring too far ahead, or any
stack-file waiver where ``stack_file`` is ``none`` is a config error naming the file and the key.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from kernel.errors import ConfigError, Problem
from stack import NAMESPACE
from stack.waivers import PlatformWaiver, Waiver

CONFIG_KEY = "policy-waivers"
"""The pack config key (and CrossGuard policy name) that governs waivers."""
DEFAULT_MAX_DAYS = 90
StackFileWaivers = Literal["non-critical", "none"]
STACK_FILE_CHOICES: tuple[StackFileWaivers, ...] = ("non-critical", "none")


@dataclass(frozen=True)
class WaiverSettings:
    """The pack config's ``policy-waivers`` entry, checked."""

    max_days: int = DEFAULT_MAX_DAYS
    stack_file: StackFileWaivers = "non-critical"
    waivers: tuple[PlatformWaiver, ...] = ()

    def for_stack(self, stack: str | None) -> tuple[PlatformWaiver, ...]:
        return tuple(w for w in self.waivers if w.stack == stack)


def settings(pack_config: Mapping[str, Any] | None, *, source: str = "policy pack config") -> WaiverSettings:
    """The ``policy-waivers`` entry of ``pack_config`` (defaults when absent); a ConfigError naming
    ``source`` and the key for anything malformed."""
    entry = (pack_config or {}).get(CONFIG_KEY)
    if entry is None:
        return WaiverSettings()
    if not isinstance(entry, Mapping):
        raise ConfigError("expected a mapping with max_days, stack_file and waivers", file=source, key=CONFIG_KEY)
    unknown = sorted(set(entry) - {"max_days", "stack_file", "waivers", "enforcementLevel"})
    if unknown:
        raise ConfigError("unknown setting (known: max_days, stack_file, waivers)", file=source,
                          key=f"{CONFIG_KEY}.{unknown[0]}")
    max_days = entry.get("max_days", DEFAULT_MAX_DAYS)
    if isinstance(max_days, float) and max_days.is_integer():
        max_days = int(max_days)  # CrossGuard hands numbers over as floats
    if not isinstance(max_days, int) or isinstance(max_days, bool) or max_days < 1:
        raise ConfigError(f"expected a positive number of days (got {max_days!r})", file=source,
                          key=f"{CONFIG_KEY}.max_days")
    stack_file = entry.get("stack_file", "non-critical")
    if stack_file not in STACK_FILE_CHOICES:
        raise ConfigError(f"expected one of {', '.join(STACK_FILE_CHOICES)} (got {stack_file!r})", file=source,
                          key=f"{CONFIG_KEY}.stack_file")
    raw = entry.get("waivers", [])
    if not isinstance(raw, list):
        raise ConfigError("expected a list of waivers", file=source, key=f"{CONFIG_KEY}.waivers")
    waivers = []
    for i, item in enumerate(raw):
        try:
            waivers.append(PlatformWaiver.model_validate(item))
        except ValidationError as err:
            error = err.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            raise ConfigError(error["msg"].removeprefix("Value error, "), file=source,
                              key=f"{CONFIG_KEY}.waivers[{i}]" + (f".{where}" if where else "")) from None
    return WaiverSettings(max_days, stack_file, tuple(waivers))


def _hint(value: str, known: Collection[str], *, listing: str | None = None) -> str:
    """A did-you-mean, else the known values (or ``listing``, where to see them, when given)."""
    close = difflib.get_close_matches(value, sorted(known), n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; {listing}" if listing else f"; known: {', '.join(sorted(known)) or 'none'}"


Locate = Callable[[tuple[str | int, ...]], tuple[int, int]]
"""``(line, column)`` of a path in the stack file ((0, 0) when unknown): ``StackFile.position_of``."""


def _problem(where: str, i: int, field: str | None, message: str, locate: Locate | None) -> Problem:
    key = f"{where}[{i}]" + (f".{field}" if field else "")
    path: tuple[str | int, ...] = (where, i, field) if field else (where, i)
    line, column = locate(path) if locate else (0, 0)
    return Problem(key, message, line, column)


def raise_all(problems: list[Problem], file: str | None) -> None:
    """One :class:`~kernel.errors.ConfigError` holding ``problems`` in file order (none: nothing raised)."""
    if problems:
        raise ConfigError(file=file, problems=problems)


def reference_problems(
    waivers: Sequence[Waiver], *, rules: Collection[str], names: Collection[str] | None,
    where: str = f"{NAMESPACE}:waivers", indices: Sequence[int] | None = None, locate: Locate | None = None,
) -> list[Problem]:
    """Every waiver naming an unknown rule or (``names`` given) an undeclared resource, as problems at key
    ``<where>[i].rule`` / ``.resource``. ``indices``: each waiver's index in the list ``where`` names
    (default: its position in ``waivers``); ``locate``: positions in the stack file."""
    found = []
    for i, waiver in zip(indices or range(len(waivers)), waivers, strict=True):
        if waiver.rule not in rules:
            found.append(_problem(where, i, "rule", f"unknown rule {waiver.rule!r}"
                                  f"{_hint(waiver.rule, rules, listing='`amlgpu policy list` shows every rule')}",
                                  locate))
        if names is not None and waiver.resource not in names:
            found.append(_problem(where, i, "resource", f"no resource or run is declared as {waiver.resource!r}"
                                  f"{_hint(waiver.resource, names)}", locate))
    return found


def check_references(
    waivers: Sequence[Waiver], *, rules: Collection[str], names: Collection[str], file: str | None = None,
    where: str = f"{NAMESPACE}:waivers", indices: Sequence[int] | None = None, locate: Locate | None = None,
) -> None:
    """Raise :class:`~kernel.errors.ConfigError` holding every :func:`reference_problems`."""
    raise_all(reference_problems(waivers, rules=rules, names=names, where=where, indices=indices, locate=locate),
               file)


def governance_problems(
    waivers: Sequence[Waiver], *, severities: Mapping[str, str], policy: WaiverSettings, today: dt.date,
    where: str = f"{NAMESPACE}:waivers", stack_file: bool = True, indices: Sequence[int] | None = None,
    locate: Locate | None = None,
) -> list[Problem]:
    """Every waiver the pack config does not allow: (stack files only) any waiver where ``stack_file`` is
    ``none``, or one of a critical rule; any waiver expiring more than ``max_days`` after ``today``.
    ``severities`` maps rule ids to severities; ``indices`` and ``locate`` as for :func:`reference_problems`."""
    found = []
    for i, waiver in zip(indices or range(len(waivers)), waivers, strict=True):
        if stack_file and policy.stack_file == "none":
            found.append(_problem(where, i, None, (
                "this project takes no waivers from stack files (policy-waivers.stack_file is 'none' in the pack "
                "config): ask the platform owners for a waiver in the pack config (docs/policies.md)"), locate))
            continue
        if stack_file and severities.get(waiver.rule) == "critical":
            found.append(_problem(where, i, "rule", (
                f"rule {waiver.rule} is critical: a stack file cannot waive it. Fix the finding, or ask the "
                "platform owners for a waiver in the pack config's policy-waivers (docs/policies.md)"), locate))
        ahead = (waiver.expires - today).days
        if ahead > policy.max_days:
            found.append(_problem(where, i, "expires", (
                f"expires {waiver.expires.isoformat()} is {ahead} days ahead; a waiver may run at most "
                f"{policy.max_days} days (policy-waivers.max_days in the pack config): pick a date on or before "
                f"{(today + dt.timedelta(days=policy.max_days)).isoformat()} and renew it when it runs out"), locate))
    return found


def check_governance(
    waivers: Sequence[Waiver], *, severities: Mapping[str, str], policy: WaiverSettings, today: dt.date,
    file: str | None = None, where: str = f"{NAMESPACE}:waivers", stack_file: bool = True,
    indices: Sequence[int] | None = None, locate: Locate | None = None,
) -> None:
    """Raise :class:`~kernel.errors.ConfigError` holding every :func:`governance_problems`."""
    raise_all(governance_problems(waivers, severities=severities, policy=policy, today=today, where=where,
                                   stack_file=stack_file, indices=indices, locate=locate), file)


def changed(base: Sequence[Waiver] | None, head: Sequence[Waiver]) -> dict[tuple[str, str, str], str]:
    """``new`` or ``changed`` for each of ``head``'s waivers that ``base`` lacks or has otherwise
    (reason, expiry or fingerprint); empty when ``base`` is None (no base to compare with)."""
    if base is None:
        return {}
    before = {w.key(): w for w in base}
    out = {}
    for waiver in head:
        old = before.get(waiver.key())
        if old is None:
            out[waiver.key()] = "new"
        elif (old.reason, old.expires, old.fingerprint) != (waiver.reason, waiver.expires, waiver.fingerprint):
            out[waiver.key()] = "changed"
    return out


def to_records(waivers: Sequence[Waiver]) -> list[dict[str, Any]]:
    """Waivers as JSON records (``waivers.json`` of a plan), for comparing with a later plan."""
    return [{"origin": w.origin, **w.model_dump(mode="json")} for w in waivers]


def from_records(records: Any, *, source: str) -> list[Waiver]:
    """Waivers read back from :func:`to_records` output; a ConfigError naming ``source`` if malformed."""
    if not isinstance(records, list):
        raise ConfigError("expected a list of waivers", file=source)
    out: list[Waiver] = []
    for i, record in enumerate(records):
        try:
            fields = {k: v for k, v in dict(record).items() if k != "origin"}
            model = PlatformWaiver if record.get("origin") == "pack config" else Waiver
            # Recorded waivers were valid when planned; their expiry and reason are compared, not re-judged.
            out.append(model.model_construct(**{**fields, "expires": dt.date.fromisoformat(fields["expires"])}))
        except (TypeError, ValueError, KeyError, AttributeError):
            raise ConfigError("not a recorded waiver", file=source, key=f"[{i}]") from None
    return out


# ------------------------------------------------------------------------------------------ the ledger

Candidate = tuple[int | None, Waiver]
"""A waiver that may apply, with its index in the stack file's ``waivers`` (None: the pack config's)."""


@dataclass(frozen=True)
class Waivable:
    """What a waiver is matched against in a finding: its rule, the declared thing's name, its fingerprint."""

    rule: str
    name: str
    fingerprint: str


def waiver_for(candidates: Sequence[Candidate], finding: Waivable, today: dt.date) -> Candidate | None:
    """The waiver applied to ``finding``: the first of ``candidates`` (the platform's come first) that is active on
    ``today``, is about the finding's rule and thing, and names its fingerprint."""
    return next((c for c in candidates if c[1].active(today) and c[1].covers(finding.rule, finding.name)
                 and c[1].binds(finding.fingerprint)), None)


@dataclass(frozen=True)
class Ledger:
    """What a list of waivers does to a list of findings (:func:`ledger`); the one decision of the offline gate
    and of CrossGuard."""

    applied: tuple[Candidate | None, ...]
    """The waiver applied to each finding (None: open), in the findings' order."""
    stale: tuple[tuple[Candidate, int], ...]
    """Each stale waiver, with the index of the first finding of its rule and thing (the one to review)."""
    unused: tuple[Candidate, ...]
    """Active waivers neither applied nor stale: their rule and thing have no finding, or the finding they name is
    excused by an earlier waiver (the platform's, or a duplicate)."""
    expired: tuple[Candidate, ...]
    """Waivers past their expiry: never applied."""


def ledger(candidates: Sequence[Candidate], findings: Sequence[Waivable], today: dt.date) -> Ledger:
    """Apply ``candidates`` to ``findings``. A finding takes the first active waiver of its rule and thing that
    names its fingerprint (:func:`waiver_for`). An active waiver is **stale** when its rule and thing have
    findings and its fingerprint (or the lack of one) names none of them: what was approved changed. Whether a
    waiver is stale depends on the findings alone, never on the other waivers or their order."""
    applied = tuple(waiver_for(candidates, f, today) for f in findings)
    used = {id(c[1]) for c in applied if c is not None}
    stale: list[tuple[Candidate, int]] = []
    unused: list[Candidate] = []
    for candidate in candidates:
        waiver = candidate[1]
        if not waiver.active(today) or id(waiver) in used:
            continue
        covered = [i for i, f in enumerate(findings) if waiver.covers(f.rule, f.name)]
        if covered and not any(waiver.binds(findings[i].fingerprint) for i in covered):
            stale.append((candidate, covered[0]))
        else:
            unused.append(candidate)
    expired = tuple(c for c in candidates if not c[1].active(today))
    return Ledger(applied, tuple(stale), tuple(unused), expired)
