"""The gate's verdict as SARIF 2.1.0, for code scanning (GitHub, Azure DevOps) and other tools.

One run, one tool (``aml-gpu-training-policies``) whose driver lists every rule with its metadata;
one result per finding: level ``error`` (mandatory), ``warning`` (advisory) or ``note`` (waived,
with an external, accepted suppression carrying the waiver's reason), located at the line of the
stack file that declares the resource or run. Expired waivers are reported as tool configuration
notifications. No timestamps, ids or absolute paths: the same plan gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from policies.engine import Finding, Report
from policies.rule import Rule

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
TOOL_NAME = "aml-gpu-training-policies"

# GitHub code scanning ranks security results by this numeric property (CVSS-like, as a string).
_SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "3.0"}
_LEVELS = {"mandatory": "error", "advisory": "warning", "disabled": "none"}


def _name(rule_id: str) -> str:
    """SARIF's ``name``: an identifier-like form of the id (``run-timeout-set`` -> ``RunTimeoutSet``)."""
    return "".join(part.capitalize() for part in rule_id.split("-"))


def _rule_descriptor(rule: Rule, report: Report) -> dict[str, Any]:
    setting = report.settings[rule.id]
    properties: dict[str, Any] = {
        "severity": rule.severity,
        "enforcement": setting.enforcement,
        "defaultEnforcement": rule.enforcement,
        "family": rule.family,
        "appliesTo": rule.applies_to,
        "security-severity": _SECURITY_SEVERITY[rule.severity],
        "tags": ["aml-gpu-training", rule.family, rule.severity],
    }
    if setting.params:
        properties["parameters"] = {k: list(v) if isinstance(v, tuple) else v for k, v in setting.params.items()}
    return {
        "id": rule.id,
        "name": _name(rule.id),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.rationale},
        "help": {
            "text": f"{rule.remediation} See {rule.reference}",
            "markdown": f"**Fix:** {rule.remediation}\n\n**Why:** {rule.rationale}\n\n[Reference]({rule.reference})",
        },
        "helpUri": rule.reference,
        "defaultConfiguration": {
            "enabled": setting.enforcement != "disabled",
            "level": _LEVELS[setting.enforcement],
        },
        "properties": properties,
    }


def _location(uri: str, line: int, finding: Finding | None = None) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": max(1, line)}},
    }
    if finding is not None:
        location["logicalLocations"] = [{
            "name": finding.owner.name,
            "fullyQualifiedName": f"{finding.owner.kind}/{finding.owner.name}",
            "kind": "resource",
        }]
    return location


def _result(finding: Finding, index: int, uri: str, line_of: Callable[[tuple[Any, ...]], int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.rule.id,
        "ruleIndex": index,
        "level": finding.level,
        "message": {"text": finding.text},
        "locations": [_location(uri, line_of(finding.location), finding)],
        "partialFingerprints": {"amlgpuFinding/v1": finding.fingerprint},
        "properties": {
            "severity": finding.rule.severity,
            "enforcement": finding.enforcement,
            "owner": f"{finding.owner.kind}/{finding.owner.name}",
            "resource": finding.resource,
            "resourceType": finding.resource_type,
        },
    }
    if finding.waiver is not None:
        expiry = f" (until {finding.waiver.expires.isoformat()})"
        result["suppressions"] = [{
            "kind": "external",
            "status": "accepted",
            "justification": f"{finding.waiver.reason}{expiry}",
        }]
    return result


def to_sarif(report: Report, stackfile_name: str, line_of: Callable[[tuple[Any, ...]], int]) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log; ``line_of`` maps a stack-file path (a finding's location) to a line."""
    index = {rule.id: i for i, rule in enumerate(report.rules)}
    notifications = [
        {
            "level": "warning",
            "descriptor": {"id": "expired-waiver"},
            "message": {"text": f"waiver for rule {w.rule} on {w.resource!r} expired on {w.expires}: it no longer "
                                f"applies ({w.reason})"},
            "locations": [_location(stackfile_name, line_of(("aml-gpu-training:waivers", i)))],
        }
        for i, w in report.expired_waivers
    ] + [
        {
            "level": "warning",
            "descriptor": {"id": "stale-waiver"},
            "message": {"text": stale.why},
            "locations": [_location(stackfile_name, line_of(("aml-gpu-training:waivers", stale.index))
                                    if stale.index is not None else 1)],
        }
        for stale in report.stale_waivers
    ]
    invocation: dict[str, Any] = {"executionSuccessful": True}
    if notifications:
        invocation["toolConfigurationNotifications"] = notifications
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {
                "driver": {
                    "name": TOOL_NAME,
                    "semanticVersion": metadata.version("aml-gpu-training"),
                    "rules": [_rule_descriptor(rule, report) for rule in report.rules],
                },
            },
            "invocations": [invocation],
            "results": [_result(f, index[f.rule.id], stackfile_name, line_of) for f in report.findings],
        }],
    }
