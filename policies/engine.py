"""The offline gate: every rule over a planned stack, with pack config and the stack's waivers applied.

:func:`evaluate` is what ``amlgpu plan`` calls. The result, :class:`Report`, lists each finding with
the declared thing it is about (workspace, network, cluster, environment, run), where that is in
the stack file, its effective enforcement and, when waived, the waiver. Findings are sorted the
same way on every machine; nothing depends on time except which waivers have expired.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from azurefacts.prices import PriceTable
from policies.catalogue import BY_ID, RULES
from policies.packconfig import RuleSettings, resolve
from policies.rule import SEVERITIES, Rule, Violation, evidence
from policies.stack import Owner, Stack
from policies.waivers import (
    CONFIG_KEY,
    Candidate,
    Locate,
    Waivable,
    check_governance,
    check_references,
    governance_problems,
    ledger,
    raise_all,
    reference_problems,
)
from policies.waivers import settings as waiver_settings
from stack import NAMESPACE
from stack.config import StackConfig
from stack.pipelines import job_parts, qualified
from stack.resolved import RUN_TYPE, ResolvedRun
from stack.runs import Run
from stack.waivers import PlatformWaiver, Waiver

Level = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Finding:
    """One violation of one rule by one resource or run."""

    rule: Rule
    enforcement: Literal["mandatory", "advisory"]
    owner: Owner
    """The declared thing the finding is about (it names the finding, and waivers refer to it)."""
    resource: str
    """Logical name of the resource at fault (the run's name for run findings)."""
    resource_type: str
    message: str
    location: tuple[str | int, ...]
    """Path of the owner's entry (and the rule's key below it) in the stack file, for line numbers."""
    waiver: Waiver | None = None

    @property
    def waived(self) -> bool:
        return self.waiver is not None

    @property
    def level(self) -> Level:
        """SARIF level: error (mandatory), warning (advisory), note (waived)."""
        if self.waived:
            return "note"
        return "error" if self.enforcement == "mandatory" else "warning"

    @property
    def subject(self) -> str:
        """The finding's subject in words: ``cluster 'gpu-a100'``, plus the resource when it is a child."""
        text = f"{self.owner.kind} '{self.owner.name}'"
        if self.resource != self.owner.name:
            text += f" ({self.resource_type.rsplit(':', 1)[-1]} '{self.resource}')"
        return text

    @property
    def text(self) -> str:
        return f"{self.subject}: {self.message}"

    @property
    def fingerprint(self) -> str:
        """What a waiver binds to (:func:`fingerprint`); also SARIF's ``partialFingerprints``."""
        return fingerprint(self.rule.id, self.owner, self.resource, self.message)

    @property
    def waivable(self) -> Waivable:
        """What waivers are matched against (:func:`policies.waivers.ledger`)."""
        return Waivable(self.rule.id, self.owner.name, self.fingerprint)

    def sort_key(self) -> tuple[Any, ...]:
        return (
            self.waived,
            self.enforcement != "mandatory",
            SEVERITIES.index(self.rule.severity),
            self.rule.id,
            self.owner,
            self.resource,
            self.message,
        )


def fingerprint(rule_id: str, owner: Owner, resource: str, message: str) -> str:
    """32 hex digits naming one finding: its rule, the declared thing and resource it is about, and its complete
    evidence (:func:`policies.rule.evidence`): the message where it states every fact (``keeps 1
    Standard_ND96isr_H200_v5 node(s) running``), else the facts a :class:`~policies.rule.Message` carries (every
    operator range, not the eight its text shows). The same in the offline gate and in CrossGuard; any change to
    the evidence is a new fingerprint, so a waiver approved for the old one goes stale."""
    facts = evidence(message)
    # A plain message is its own evidence (its fingerprint is what it always was); facts are marked apart.
    stated = facts if facts == (message,) else ("\x01facts", *facts)
    key = "\0".join((rule_id, owner.kind, owner.name, resource, *stated))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class StaleWaiver:
    """A waiver for a rule and thing that has a finding, but not the finding it was approved for."""

    index: int | None
    """Its index in the stack file's waivers (None: the pack config's)."""
    waiver: Waiver
    finding: Finding

    @property
    def why(self) -> str:
        """What changed, and how to re-approve."""
        if self.waiver.fingerprint is None:
            what = "names no fingerprint, so it cannot say which finding was approved"
        else:
            what = (f"was approved for finding {self.waiver.fingerprint}, and the finding is now "
                    f"{self.finding.fingerprint} (its evidence changed)")
        return (f"waiver of {self.waiver.rule} for {self.waiver.resource!r} ({self.waiver.origin}) {what}: not "
                f"applied. Review the finding ({self.finding.message}); to approve it, set the waiver's fingerprint to "
                f"{self.finding.fingerprint}")


@dataclass(frozen=True)
class Report:
    """What the gate found. ``mandatory_failures`` decides the exit code."""

    findings: tuple[Finding, ...]
    settings: Mapping[str, RuleSettings]
    """Effective enforcement and parameters of every rule (disabled ones included)."""
    expired_waivers: tuple[tuple[int, Waiver], ...] = ()
    """Waivers past their expiry date (index in the stack's waivers list): they no longer apply."""
    unused_waivers: tuple[tuple[int, Waiver], ...] = ()
    """The stack file's active waivers that apply to no finding and are not stale: their rule and thing have no
    finding, or an earlier waiver excuses the finding they name (candidates for removal)."""
    platform_waivers: tuple[PlatformWaiver, ...] = ()
    """The pack config's waivers for this stack (``policy-waivers.waivers``)."""
    stale_waivers: tuple[StaleWaiver, ...] = ()
    """Active waivers whose rule and thing have findings, none of them the one they were approved for (their
    fingerprint differs or is missing): not applied, listed with the fingerprint to approve
    (:func:`policies.waivers.ledger`)."""

    @property
    def waivers(self) -> tuple[Waiver, ...]:
        """Every waiver that could apply: the platform's, then the stack file's (see :func:`evaluate`)."""
        return (*self.platform_waivers, *self.stack_waivers)

    stack_waivers: tuple[Waiver, ...] = ()
    """The stack file's waivers, as declared."""

    @property
    def rules(self) -> tuple[Rule, ...]:
        return RULES

    @property
    def mandatory_failures(self) -> int:
        return sum(1 for f in self.findings if not f.waived and f.enforcement == "mandatory")

    @property
    def advisory_failures(self) -> int:
        return sum(1 for f in self.findings if not f.waived and f.enforcement == "advisory")

    @property
    def waived(self) -> int:
        return sum(1 for f in self.findings if f.waived)

    @property
    def passed(self) -> bool:
        return self.mandatory_failures == 0

    @property
    def counts(self) -> dict[str, Any]:
        """Counts for summaries: by outcome, by severity (unwaived), and rules evaluated/disabled."""
        enabled = [r for r in RULES if self.settings[r.id].enforcement != "disabled"]
        return {
            "mandatory": self.mandatory_failures,
            "advisory": self.advisory_failures,
            "waived": self.waived,
            "total": len(self.findings),
            "by_severity": {
                s: sum(1 for f in self.findings if not f.waived and f.rule.severity == s) for s in SEVERITIES
            },
            "rules_evaluated": len(enabled),
            "rules_disabled": len(RULES) - len(enabled),
            "expired_waivers": len(self.expired_waivers),
        }


class _Locator:
    """Maps owners to their entries in the stack file."""

    def __init__(self, config: StackConfig) -> None:
        self._paths: dict[Owner, tuple[str | int, ...]] = {
            Owner("workspace", config.workspace.name): (f"{NAMESPACE}:workspace",),
            Owner("network", "network"): (f"{NAMESPACE}:network",),
            Owner("image-build-compute", config.workspace.image_build_compute.name):
                (f"{NAMESPACE}:workspace", "image_build_compute"),
        }
        for section, kind in (("clusters", "cluster"), ("environments", "environment"), ("jobs", "run")):
            for i, item in enumerate(getattr(config, section)):
                self._paths[Owner(kind, item.name)] = (f"{NAMESPACE}:{section}", i)  # type: ignore[arg-type]
        for i, job in enumerate(config.jobs):
            if not isinstance(job, Run):  # a pipeline or sweep, and each run inside it
                self._paths[Owner(job.type, job.name)] = (f"{NAMESPACE}:jobs", i)
                self._paths.update({Owner("run", qualified(job.name, part)): (f"{NAMESPACE}:jobs", i, *below)
                                    for part, below in job_parts(job)})

    @property
    def names(self) -> set[str]:
        return {owner.name for owner in self._paths}

    def path(self, owner: Owner, rule: Rule) -> tuple[str | int, ...]:
        base = self._paths.get(owner)
        return (*base, *rule.config_key) if base is not None else ()


def violations(stack: Stack, settings: Mapping[str, RuleSettings], today: dt.date) -> list[tuple[Rule, Any, str]]:
    """(rule, subject, message) for every violation of every enabled rule; the subject is the wire
    resource or the :class:`ResolvedRun` at fault."""
    out: list[tuple[Rule, Any, str]] = []
    for rule in RULES:
        setting = settings[rule.id]
        if setting.enforcement == "disabled":
            continue
        if rule.kind == "resource":
            for resource in stack.of_type(*rule.resource_types):
                out += [(rule, resource, m) for m in rule.evaluate(resource, setting.params, today)]
        elif rule.kind == "run":
            for run in stack.runs:
                out += [(rule, run, m) for m in rule.evaluate(run, setting.params, today)]
        else:
            violations: list[Violation] = rule.evaluate(stack, setting.params, today)
            out += [(rule, v.subject, v.message) for v in violations]
    return out


def describe(stack: Stack, subject: Any) -> tuple[Owner, str, str]:
    """A violation subject's owner, logical name and type token."""
    if isinstance(subject, ResolvedRun):
        return Owner("run", subject.name), subject.name, RUN_TYPE
    return stack.owner(subject), subject["name"], subject["type"]


def evaluate(
    resources: list[dict[str, Any]],
    runs: list[ResolvedRun],
    config: StackConfig,
    *,
    pack_config: dict[str, Any] | None = None,
    today: dt.date | None = None,
    source: str | None = None,
    stack_name: str | None = None,
    prices: PriceTable | None = None,
    stack_settings: Mapping[str, Any] | None = None,
    locate: Locate | None = None,
) -> Report:
    """Evaluate every rule on a planned stack.

    ``resources``: the plan's resources in wire shape (``resources.json``); ``runs``: the stack's
    resolved runs; ``config``: the stack model (waivers, and where things are declared);
    ``pack_config``: CrossGuard-shaped per-rule settings (see :mod:`policies.packconfig`); ``today``:
    the date waivers expire against (default: today); ``source``: the stack file's name, used in
    error messages; ``stack_name``: which of the pack config's waivers (``policy-waivers.waivers``) are
    this stack's; ``prices``: the pricing table for budget rules (default: the shipped one); ``stack_settings``:
    the stack file's config keys outside the project's namespace, with their values (:attr:`Stack.settings`);
    ``locate``: positions in the stack file, for the waivers' problems.

    Raises :class:`~kernel.errors.ConfigError` for an unknown rule or parameter in ``pack_config``, and,
    all at once, for every waiver naming an unknown rule or resource (key ``aml-gpu-training:waivers[i]...``)
    or that the pack config's governance refuses (:func:`policies.waivers.check_governance`: a
    critical rule waived in a stack file, an expiry too far ahead).
    """
    today = today or dt.date.today()
    settings = resolve(pack_config)
    policy = waiver_settings(pack_config)
    stack = Stack(resources, runs, prices, name=stack_name, settings=stack_settings)
    locator = _Locator(config)
    owners = {stack.owner(r).name for r in stack.resources}
    names = locator.names | owners
    severities = {r.id: r.severity for r in RULES}
    # Every waiver problem of the stack file at once, each at its line.
    problems = reference_problems(config.waivers, rules=BY_ID.keys(), names=names, locate=locate)
    problems += governance_problems(config.waivers, severities=severities, policy=policy, today=today, locate=locate)
    raise_all(problems, source)
    platform = policy.for_stack(stack_name)
    # Keys name the pack config's list, which holds every stack's waivers: index this stack's within it.
    indices = [i for i, w in enumerate(policy.waivers) if w.stack == stack_name]
    pack = {"file": "policy pack config", "where": f"{CONFIG_KEY}.waivers", "indices": indices}
    check_references(platform, rules=BY_ID.keys(), names=names, **pack)  # type: ignore[arg-type]
    check_governance(platform, severities=severities, policy=policy, today=today, stack_file=False,
                     **pack)  # type: ignore[arg-type]
    # The platform's waivers come first: a finding both excuse is the platform's decision.
    candidates: list[Candidate] = [(None, w) for w in platform]
    candidates += list(enumerate(config.waivers))

    findings = []
    for rule, subject, message in violations(stack, settings, today):
        owner, resource, resource_type = describe(stack, subject)
        findings.append(Finding(
            rule=rule,
            enforcement=settings[rule.id].enforcement,  # type: ignore[arg-type]
            owner=owner,
            resource=resource,
            resource_type=resource_type,
            message=message,
            location=locator.path(owner, rule),
        ))
    decided = ledger(candidates, [f.waivable for f in findings], today)
    stale = tuple(StaleWaiver(i, w, findings[at]) for (i, w), at in decided.stale)
    findings = [replace(f, waiver=c[1]) if c is not None else f for f, c in zip(findings, decided.applied, strict=True)]
    findings.sort(key=Finding.sort_key)
    expired = tuple((i, w) for i, w in decided.expired if i is not None)
    unused = tuple((i, w) for i, w in decided.unused if i is not None)
    return Report(tuple(findings), settings, expired, unused, platform_waivers=platform,
                  stack_waivers=tuple(config.waivers), stale_waivers=stale)

