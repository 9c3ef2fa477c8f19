"""CrossGuard adapter: the same rules as Pulumi policies, for ``pulumi preview --policy-pack policies``.

Resource and run rules become ``ResourceValidationPolicy`` (run rules on the ``DistributedRun`` component),
stack rules ``StackValidationPolicy``; ``policy-waivers`` and ``policy-waived-findings`` keep waivers honest.
One pack config for both gates, the stack's own (:func:`policies.packconfig.default_path`); waivers and provider
settings are read from the project folder and ``PULUMI_CONFIG``. :func:`plain` turns CrossGuard's proxies into
the wire shape the rules read. Which waivers apply and which are stale is :func:`policies.waivers.ledger`,
shared with the offline gate. Design notes: docs/development.md, "policies/crossguard.py".
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
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

from kernel import bounded
from kernel.errors import ConfigError
from policies.catalogue import BY_ID, RULES
from policies.engine import Finding, describe, fingerprint, violations
from policies.packconfig import RuleSettings, default_path, parameters, resolve
from policies.packconfig import for_stack as pack_config_for_stack
from policies.rule import Rule
from policies.stack import COMPONENT_KINDS, Owner, Stack
from policies.waivers import (
    CONFIG_KEY,
    Candidate,
    Ledger,
    Waivable,
    WaiverSettings,
    check_governance,
    check_references,
    ledger,
    waiver_for,
)
from policies.waivers import settings as waiver_settings
from policies.wire import UNKNOWN
from stack import NAMESPACE
from stack.resolved import RUN_TYPE, ResolvedRun
from stack.stackfile import read as read_stackfile
from stack.waivers import Waiver

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
def _stack_file_config(root: Path, stack: str) -> Mapping[str, Any] | None:
    """The config of ``root``'s ``Pulumi.<stack>.yaml`` (:func:`stack.stackfile.read`), read once for every
    policy of the pack; None when there is no such file. A file that does not read raises its
    :class:`~kernel.errors.ConfigError` each time (errors are not cached)."""
    path = root / f"Pulumi.{stack}.yaml"
    return MappingProxyType(read_stackfile(path).config) if path.is_file() else None


@lru_cache(maxsize=4)
def _pulumi_config(raw: str) -> Mapping[str, Any] | None:
    """``PULUMI_CONFIG``'s JSON object, parsed once per value; None when it is not a JSON object."""
    try:
        parsed = bounded.load_json(raw, "PULUMI_CONFIG")
    except ValueError:  # not JSON (json.JSONDecodeError), or nested too deeply (bounded.BoundedInputError)
        parsed = None
    return MappingProxyType(parsed) if isinstance(parsed, dict) else None


@lru_cache(maxsize=8)
def _stack_waivers(stack: str, root: Path) -> tuple[Waiver, ...]:
    path = root / f"Pulumi.{stack}.yaml"
    config = _stack_file_config(root, stack)
    if config is None:
        return ()
    entries = config.get(f"{NAMESPACE}:waivers") or []
    if not isinstance(entries, list):
        raise ConfigError("expected a list of waivers", file=path.name, key=f"{NAMESPACE}:waivers")
    waivers = []
    for i, entry in enumerate(entries):
        try:
            waivers.append(Waiver.model_validate(entry))
        except ValueError as err:
            raise ConfigError(f"invalid waiver: {err}", file=path.name, key=f"{NAMESPACE}:waivers[{i}]") from None
    return tuple(waivers)


def pack_stack() -> str | None:
    """The stack Pulumi started this pack for (``PULUMI_STACK``, ``org/project/stack`` or ``stack``)."""
    name = os.environ.get("PULUMI_STACK", "")
    return name.rsplit("/", 1)[-1] or None


@lru_cache(maxsize=8)
def _pack_config(root: Path, stack: str | None) -> Mapping[str, Any]:
    """The pack config ``amlgpu plan --stack <stack>`` reads (:func:`policies.packconfig.for_stack`); empty
    when there is none."""
    return MappingProxyType(pack_config_for_stack(root, stack) or {})


@lru_cache(maxsize=8)
def _profile(root: Path, stack: str | None) -> Mapping[str, RuleSettings]:
    """Every rule's enforcement and parameters under the stack's pack config."""
    return MappingProxyType(resolve(dict(_pack_config(root, stack)), source=default_path(root, stack).name))


@lru_cache(maxsize=8)
def _waiver_settings(root: Path, stack: str | None) -> WaiverSettings:
    return waiver_settings(dict(_pack_config(root, stack)), source=default_path(root, stack).name)


def _candidates(stack: str, root: Path) -> list[Candidate]:
    """The platform's waivers for ``stack`` first, then the stack file's with their indices (as the offline gate
    lists them)."""
    return [*((None, w) for w in _waiver_settings(root, stack).for_stack(stack)),
            *enumerate(_stack_waivers(stack, root))]


def _waived(candidates: Sequence[Candidate], rule_id: str, owner: Owner, resource: str, message: str,
            today: dt.date) -> bool:
    """Whether the ledger applies a waiver to this finding (:func:`policies.waivers.waiver_for`)."""
    finding = Waivable(rule_id, owner.name, fingerprint(rule_id, owner, resource, message))
    return waiver_for(candidates, finding, today) is not None


def stack_settings(root: Path, stack: str | None) -> Mapping[str, Any] | None:
    """The stack's config keys outside the project's namespace, with their values: from ``PULUMI_CONFIG``
    (what ``pulumi up`` runs with, whatever file or environment it came from), else from the stack file;
    None when neither is there. Values are compared, never shown."""
    raw = os.environ.get("PULUMI_CONFIG")
    config: Mapping[str, Any] | None = None
    if raw:
        config = _pulumi_config(raw)
    elif stack is not None:
        config = _stack_file_config(root, stack)
    if config is None:
        return None
    return {k: v for k, v in config.items() if isinstance(k, str) and not k.startswith(f"{NAMESPACE}:")}


def _text(rule: Rule, owner: Owner, resource: str, resource_type: str, message: str) -> str:
    return Finding(rule, "mandatory", owner, resource, resource_type, message, ()).text


def _settings(rule: Rule, config: Mapping[str, Any], profile: RuleSettings) -> RuleSettings:
    """The rule's parameters: the stack's pack config's, then what ``--policy-pack-config`` sets. CrossGuard
    applies the enforcement level itself."""
    given = plain(config)
    explicit = parameters(rule, given, source="policy pack config")
    return RuleSettings(profile.enforcement, MappingProxyType({**profile.params,
                                                               **{k: explicit[k] for k in given}}))


def _schema(rule: Rule, profile: RuleSettings) -> PolicyConfigSchema | None:
    if not rule.parameters:
        return None
    properties: dict[str, dict[str, Any]] = {}
    for name, default in profile.params.items():
        if isinstance(default, tuple):
            properties[name] = {"type": "array", "items": {"type": "string"}, "default": list(default)}
        else:
            properties[name] = {"type": "integer", "minimum": 0, "default": default}
    return PolicyConfigSchema(properties=properties)


def _metadata(rule: Rule, profile: RuleSettings) -> dict[str, Any]:
    return {
        "name": rule.id,
        "description": rule.title,
        "enforcement_level": EnforcementLevel(profile.enforcement),
        "config_schema": _schema(rule, profile),
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


def _resource_validator(
    rule: Rule, root: Path, profile: RuleSettings
) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
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
        waivers = _candidates(_stack_name(args.urn), root)
        for message in rule.evaluate(subject, _settings(rule, args.get_config(), profile).params, today):
            if not _waived(waivers, rule.id, owner, args.name, message, today):  # else: policy-waived-findings
                report_violation(_text(rule, owner, args.name, args.resource_type, message), None)

    return validate


def stack_from_args(args: StackValidationArgs, root: Path | None = None) -> tuple[Stack, dict[int, str]]:
    """The planned stack of a stack validation, and each wire resource's URN (by ``id()``); with ``root``,
    the stack's provider and engine settings too (:func:`stack_settings`)."""
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
    name = _stack_of(urns)
    return Stack(resources, runs, name=name, settings=stack_settings(root, name) if root else None), urns


def _urn_of(stack: Stack, urns: Mapping[int, str], subject: Any) -> str | None:
    if isinstance(subject, ResolvedRun):
        subject = stack.run_resource(subject)
    return urns.get(id(subject)) if subject is not None else None


def _stack_of(urns: Mapping[int, str]) -> str | None:
    return _stack_name(next(iter(urns.values()))) if urns else None


def _stack_validator(
    rule: Rule, root: Path, profile: RuleSettings
) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack, urns = stack_from_args(args, root)
        today = dt.date.today()
        name = _stack_of(urns)
        waivers = _candidates(name, root) if name else []
        for violation in rule.evaluate(stack, _settings(rule, args.get_config(), profile).params, today):
            owner, resource, resource_type = describe(stack, violation.subject)
            if not _waived(waivers, rule.id, owner, resource, violation.message, today):
                report_violation(_text(rule, owner, resource, resource_type, violation.message),
                                 _urn_of(stack, urns, violation.subject))

    return validate


def waiver_ledger(stack: Stack, root: Path, name: str,
                  today: dt.date | None = None) -> tuple[Ledger, list[tuple[Finding, Any]]]:
    """Every rule at the stack's pack config's parameters, and what the stack's waivers do to the findings
    (:func:`policies.waivers.ledger`, as the offline gate decides it): what ``policy-waived-findings`` reports.
    Each finding comes with the wire resource or :class:`ResolvedRun` at fault (for its URN), in rule order."""
    today = today or dt.date.today()
    found: list[tuple[Finding, Any]] = []
    for rule, subject, message in violations(stack, _profile(root, name), today):
        owner, resource, resource_type = describe(stack, subject)
        found.append((Finding(rule, "mandatory", owner, resource, resource_type, message, ()), subject))
    return ledger(_candidates(name, root), [f.waivable for f, _ in found], today), found


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
            policy = _waiver_settings(root, name)
            own = _stack_waivers(name, root)
            check_references(own, rules=BY_ID.keys(), names=owners, file=f"Pulumi.{name}.yaml")
            check_governance(own, severities=severities, policy=policy, today=today, file=f"Pulumi.{name}.yaml")
            platform = policy.for_stack(name)
            pack = {"file": default_path(root, name).name, "where": f"{CONFIG_KEY}.waivers",
                    "indices": [i for i, w in enumerate(policy.waivers) if w.stack == name]}
            check_references(platform, rules=BY_ID.keys(), names=owners, **pack)  # type: ignore[arg-type]
            check_governance(platform, severities=severities, policy=policy, today=today, stack_file=False,
                             **pack)  # type: ignore[arg-type]
        except ConfigError as err:
            report_violation(str(err), None)

    def report_waived(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        stack, urns = stack_from_args(args, root)
        name = _stack_of(urns)
        if name is None:
            return
        decided, findings = waiver_ledger(stack, root, name)
        for (finding, subject), candidate in zip(findings, decided.applied, strict=True):
            if candidate is not None:
                waiver = candidate[1]
                report_violation(f"[{finding.rule.id}] waived in the {waiver.origin} ({waiver.reason}, until "
                                 f"{waiver.expires}): {finding.text}", _urn_of(stack, urns, subject))
        for (_, waiver), at in decided.stale:
            finding = findings[at][0]
            report_violation(f"[{waiver.rule}] stale waiver in the {waiver.origin}, not applied: it was approved "
                             f"for finding {waiver.fingerprint or '(no fingerprint)'}, and the finding is now: "
                             f"{finding.text} (fingerprint {finding.fingerprint})", None)

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


def policies(root: Path = PROJECT_ROOT, stack: str | None = None) -> list[Policy]:
    """Every rule as a CrossGuard policy, plus the two waiver policies; ``root`` holds the stack files and
    the pack configs. Each policy's enforcement level and parameter defaults are those of ``stack``'s pack
    config (default: the stack Pulumi started the pack for, :func:`pack_stack`)."""
    profile = _profile(root, stack or pack_stack())
    out: list[Policy] = []
    for rule in RULES:
        setting = profile[rule.id]
        if rule.kind == "stack":
            out.append(StackValidationPolicy(validate=_stack_validator(rule, root, setting),
                                             **_metadata(rule, setting)))
        else:
            out.append(ResourceValidationPolicy(validate=_resource_validator(rule, root, setting),
                                                **_metadata(rule, setting)))
    return out + _waiver_policies(root)
