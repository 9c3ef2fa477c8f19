"""CrossGuard adapter: the same rules as Pulumi policies, for ``pulumi preview --policy-pack policies``.

* each resource rule becomes a ``ResourceValidationPolicy`` on its resource types;
* each run rule becomes a ``ResourceValidationPolicy`` on the ``DistributedRun`` component, whose
  props are the resolved run (:meth:`ResolvedRun.from_props`);
* each stack rule becomes a ``StackValidationPolicy``;
* two more stack policies keep waivers honest: ``policy-waivers`` (mandatory) rejects a waiver
  naming an unknown rule or resource, or one the governance refuses (a critical rule waived in a stack
  file, an expiry too far ahead: :func:`policies.waivers.check_governance`), and
  ``policy-waived-findings`` (advisory) reports every finding a waiver excuses, so waived findings are
  never silent in CrossGuard either.

Waivers live in the stack file (``aml-gpu-training:waivers``) and in the project's pack config
(``policies/config.json``, key ``policy-waivers``), neither of which CrossGuard hands to a policy's
validation: they are read from the project folder this pack sits in, the stack's name taken from the
resource URNs. Enforcement levels and parameters come from the pack config
(``--policy-pack-config``), exactly as for the offline gate.

Props arrive as CrossGuard proxies (values unknown during preview raise when read) with numbers as
floats; :func:`plain` turns them into the wire shape the rules read (unknowns as
:data:`~policies.wire.UNKNOWN`, integral numbers as ints).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Severity,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import proxy as policy_proxy
from pulumi_policy.policy import Policy

from jobs.resolved import RUN_TYPE, ResolvedRun
from model import NAMESPACE
from model.errors import ConfigError
from model.stackfile import read as read_stackfile
from model.waivers import Waiver
from policies.catalogue import BY_ID, RULES
from policies.engine import Finding, describe, violations
from policies.packconfig import DEFAULT_PATH, RuleSettings, parameters
from policies.packconfig import load as load_pack_config
from policies.rule import Rule
from policies.stack import COMPONENT_KINDS, Owner, Stack
from policies.waivers import CONFIG_KEY, WaiverSettings, check_governance, check_references
from policies.waivers import settings as waiver_settings
from policies.wire import UNKNOWN

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The Pulumi project this pack belongs to (where ``Pulumi.<stack>.yaml`` files are)."""

_UNKNOWN_SENTINELS = frozenset({
    policy_proxy.UNKNOWN_BOOLEAN_VALUE, policy_proxy.UNKNOWN_NUMBER_VALUE, policy_proxy.UNKNOWN_STRING_VALUE,
    policy_proxy.UNKNOWN_ARRAY_VALUE, policy_proxy.UNKNOWN_ASSET_VALUE, policy_proxy.UNKNOWN_ARCHIVE_VALUE,
    policy_proxy.UNKNOWN_OBJECT_VALUE,
})


def plain(value: Any) -> Any:
    """CrossGuard props (proxies, unknown sentinels, float numbers) as plain wire values."""
    if isinstance(value, policy_proxy._DictProxy | policy_proxy._ListProxy):
        value = value["__target"]  # the proxies' documented escape hatch: reading it raises nothing
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _urn_type_and_name(urn: str) -> tuple[str, str]:
    """``urn:pulumi:<stack>::<project>::<parent$type>::<name>`` -> (type, name)."""
    parts = urn.split("::")
    return parts[2].rsplit("$", 1)[-1], "::".join(parts[3:])


def _stack_name(urn: str) -> str:
    return urn.split("::", 1)[0].split(":", 2)[2]


def _options(opts: Any) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if getattr(opts, "protect", False):
        options["protect"] = True
    if getattr(opts, "delete_before_replace", None):
        options["deleteBeforeReplace"] = True
    return options


def wire_resource(
    resource_type: str, name: str, props: Any, parent: tuple[str, str] | None, opts: Any
) -> dict[str, Any]:
    """One resource in the wire shape the rules read (as the offline plan records it)."""
    wire = {"type": resource_type, "name": name, "parent": parent[1] if parent else None,
            "inputs": plain(props), "options": _options(opts)}
    if parent:
        wire["parentType"] = parent[0]
    return wire


@lru_cache(maxsize=8)
def _stack_waivers(stack: str, root: Path) -> tuple[Waiver, ...]:
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        return ()
    entries = read_stackfile(path).config.get(f"{NAMESPACE}:waivers") or []
    if not isinstance(entries, list):
        raise ConfigError("expected a list of waivers", file=path.name, key=f"{NAMESPACE}:waivers")
    waivers = []
    for i, entry in enumerate(entries):
        try:
            waivers.append(Waiver.model_validate(entry))
        except ValueError as err:
            raise ConfigError(f"invalid waiver: {err}", file=path.name, key=f"{NAMESPACE}:waivers[{i}]") from None
    return tuple(waivers)


@lru_cache(maxsize=2)
def _waiver_settings(root: Path) -> WaiverSettings:
    path = root / DEFAULT_PATH
    return waiver_settings(load_pack_config(path), source=path.name) if path.is_file() else WaiverSettings()


def _all_waivers(stack: str, root: Path) -> tuple[Waiver, ...]:
    """The platform's waivers for ``stack`` first, then the stack file's (as the offline gate orders them)."""
    return (*_waiver_settings(root).for_stack(stack), *_stack_waivers(stack, root))


def _waived(waivers: Iterable[Waiver], rule_id: str, owner: Owner, today: dt.date) -> bool:
    return any(w.covers(rule_id, owner.name) and w.active(today) for w in waivers)


def _text(rule: Rule, owner: Owner, resource: str, resource_type: str, message: str) -> str:
    return Finding(rule, "mandatory", owner, resource, resource_type, message, ()).text


def _settings(rule: Rule, config: Mapping[str, Any]) -> RuleSettings:
    # CrossGuard applies the enforcement level itself; only the parameters are ours to read.
    return RuleSettings(rule.enforcement, parameters(rule, plain(config), source="policy pack config"))


def _schema(rule: Rule) -> PolicyConfigSchema | None:
    if not rule.parameters:
        return None
    properties: dict[str, dict[str, Any]] = {}
    for name, default in rule.parameters.items():
        if isinstance(default, tuple):
            properties[name] = {"type": "array", "items": {"type": "string"}, "default": list(default)}
        else:
            properties[name] = {"type": "integer", "minimum": 0, "default": default}
    return PolicyConfigSchema(properties=properties)


def _metadata(rule: Rule) -> dict[str, Any]:
    return {
        "name": rule.id,
        "description": rule.title,
        "enforcement_level": EnforcementLevel(rule.enforcement),
        "config_schema": _schema(rule),
        "severity": Severity(rule.severity),
        "remediation_steps": rule.remediation,
        "url": rule.reference,
        "tags": [NAMESPACE, rule.family],
    }


def _owner(urn: str, parent_urn: str | None) -> Owner:
    own_type, own_name = _urn_type_and_name(urn)
    if own_type in COMPONENT_KINDS:
        return Owner(COMPONENT_KINDS[own_type], own_name)
    if parent_urn:
        parent_type, parent_name = _urn_type_and_name(parent_urn)
        if parent_type in COMPONENT_KINDS:
            return Owner(COMPONENT_KINDS[parent_type], parent_name)
    return Owner("resource", own_name)


def _resource_validator(rule: Rule, root: Path) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if rule.kind == "run":
            if args.resource_type != RUN_TYPE:
                return
            subject: Any = ResolvedRun.from_props(plain(args.props))
        elif args.resource_type in rule.resource_types:
            subject = wire_resource(args.resource_type, args.name, args.props, None, args.opts)
        else:
            return
        today = dt.date.today()
        owner = _owner(args.urn, getattr(args.opts, "parent", None))
        if _waived(_all_waivers(_stack_name(args.urn), root), rule.id, owner, today):
            return  # reported by policy-waived-findings
        for message in rule.evaluate(subject, _settings(rule, args.get_config()).params, today):
            report_violation(_text(rule, owner, args.name, args.resource_type, message), None)

    return validate


def stack_from_args(args: StackValidationArgs) -> tuple[Stack, dict[int, str]]:
    """The planned stack of a stack validation, and each wire resource's URN (by ``id()``)."""
    resources, urns = [], {}
    for r in args.resources:
        parent = (r.parent.resource_type, r.parent.name) if r.parent is not None else None
        wire = wire_resource(r.resource_type, r.name, r.props, parent, r.opts)
        # What the engine waits for before creating it, as the offline plan records it (policies.graph).
        waits = sorted({(d.resource_type, d.name) for d in getattr(r, "dependencies", None) or []})
        if waits:
            wire["options"]["dependsOn"] = [{"type": t, "name": n} for t, n in waits]
        resources.append(wire)
        urns[id(wire)] = r.urn
    runs = [ResolvedRun.from_props(w["inputs"]) for w in resources if w["type"] == RUN_TYPE]
    return Stack(resources, runs), urns


def _urn_of(stack: Stack, urns: Mapping[int, str], subject: Any) -> str | None:
    if isinstance(subject, ResolvedRun):
        subject = stack.run_resource(subject)
    return urns.get(id(subject)) if subject is not None else None


def _stack_of(urns: Mapping[int, str]) -> str | None:
    return _stack_name(next(iter(urns.values()))) if urns else None


def _stack_validator(rule: Rule, root: Path) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack, urns = stack_from_args(args)
        today = dt.date.today()
        name = _stack_of(urns)
        waivers = _all_waivers(name, root) if name else ()
        for violation in rule.evaluate(stack, _settings(rule, args.get_config()).params, today):
            owner, resource, resource_type = describe(stack, violation.subject)
            if not _waived(waivers, rule.id, owner, today):
                report_violation(_text(rule, owner, resource, resource_type, violation.message),
                                 _urn_of(stack, urns, violation.subject))

    return validate


def _waiver_policies(root: Path) -> list[Policy]:
    def check_valid(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack, urns = stack_from_args(args)
        name = _stack_of(urns)
        if name is None:
            return
        owners = {stack.owner(r).name for r in stack.resources}
        severities = {r.id: r.severity for r in RULES}
        today = dt.date.today()
        try:
            policy = _waiver_settings(root)
            own = _stack_waivers(name, root)
            check_references(own, rules=BY_ID.keys(), names=owners, file=f"Pulumi.{name}.yaml")
            check_governance(own, severities=severities, policy=policy, today=today, file=f"Pulumi.{name}.yaml")
            platform = policy.for_stack(name)
            pack = {"file": DEFAULT_PATH.name, "where": f"{CONFIG_KEY}.waivers",
                    "indices": [i for i, w in enumerate(policy.waivers) if w.stack == name]}
            check_references(platform, rules=BY_ID.keys(), names=owners, **pack)  # type: ignore[arg-type]
            check_governance(platform, severities=severities, policy=policy, today=today, stack_file=False,
                             **pack)  # type: ignore[arg-type]
        except ConfigError as err:
            report_violation(str(err), None)

    def report_waived(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack, urns = stack_from_args(args)
        name = _stack_of(urns)
        if name is None:
            return
        today = dt.date.today()
        waivers = _all_waivers(name, root)
        # Every rule at its default parameters: the waived findings CrossGuard's own policies skipped.
        settings = {r.id: RuleSettings(r.enforcement, r.parameters) for r in RULES}
        for rule, subject, message in violations(stack, settings, today):
            owner, resource, resource_type = describe(stack, subject)
            for waiver in waivers:
                if waiver.covers(rule.id, owner.name) and waiver.active(today):
                    report_violation(
                        f"[{rule.id}] waived in the {waiver.origin} ({waiver.reason}, until {waiver.expires}): "
                        f"{_text(rule, owner, resource, resource_type, message)}",
                        _urn_of(stack, urns, subject),
                    )
                    break

    return [
        StackValidationPolicy(
            name=CONFIG_KEY,
            description="Waivers name known rules and declared resources, expire in time, and waive no critical "
            "rule from a stack file",
            validate=check_valid,
            enforcement_level=EnforcementLevel.MANDATORY,
            severity=Severity.HIGH,
            config_schema=PolicyConfigSchema(properties={
                "max_days": {"type": "integer", "minimum": 1, "default": 90},
                "stack_file": {"type": "string", "enum": ["non-critical", "none"], "default": "non-critical"},
                "waivers": {"type": "array", "items": {"type": "object"}, "default": []},
            }),
            remediation_steps="Fix the waiver's rule id, resource name or expiry; critical rules are waived only "
            "in the pack config (policies/config.json, policy-waivers), by the platform owners.",
        ),
        StackValidationPolicy(
            name="policy-waived-findings",
            description="Findings excused by the stack's waivers (reported, never silent)",
            validate=report_waived,
            enforcement_level=EnforcementLevel.ADVISORY,
            severity=Severity.LOW,
            remediation_steps="Remove the waiver once the finding is fixed; waivers may expire.",
        ),
    ]


def policies(root: Path = PROJECT_ROOT) -> list[Policy]:
    """Every rule as a CrossGuard policy, plus the two waiver policies; ``root`` holds the stack files."""
    out: list[Policy] = []
    for rule in RULES:
        if rule.kind == "stack":
            out.append(StackValidationPolicy(validate=_stack_validator(rule, root), **_metadata(rule)))
        else:
            out.append(ResourceValidationPolicy(validate=_resource_validator(rule, root), **_metadata(rule)))
    return out + _waiver_policies(root)
