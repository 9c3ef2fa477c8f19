"""The gate's verdict as Markdown, fit for a pull-request comment: verdict, counts, findings with their
fix, waived findings with their reasons, and waivers that expired or excuse nothing."""

from __future__ import annotations

from policies.engine import Finding, Report


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _rule_link(finding: Finding) -> str:
    return f"[`{finding.rule.id}`]({finding.rule.reference})"


def _subject(finding: Finding) -> str:
    return _cell(finding.subject)


def _verdict(report: Report, stack: str) -> str:
    if report.mandatory_failures:
        n = report.mandatory_failures
        return f"## ❌ Policy check failed for stack `{stack}`: {n} mandatory finding{'s' if n != 1 else ''}"
    return f"## ✅ Policy check passed for stack `{stack}`: no mandatory finding"


def markdown(report: Report, stack: str) -> str:
    """The PR-comment summary of ``report`` for ``stack`` (deterministic, no timestamps)."""
    counts = report.counts
    lines = [
        _verdict(report, stack),
        "",
        "| Outcome | Count |",
        "|---|---:|",
        f"| Mandatory failures (block) | {counts['mandatory']} |",
        f"| Advisory warnings | {counts['advisory']} |",
        f"| Waived | {counts['waived']} |",
        f"| Rules evaluated | {counts['rules_evaluated']} ({counts['rules_disabled']} disabled) |",
    ]
    open_findings = [f for f in report.findings if not f.waived]
    if open_findings:
        lines += [
            "",
            "### Findings",
            "",
            "| | Rule | Severity | Resource | Finding | Fix |",
            "|---|---|---|---|---|---|",
        ]
        for f in open_findings:
            mark = "❌ mandatory" if f.enforcement == "mandatory" else "⚠️ advisory"
            lines.append(
                f"| {mark} | {_rule_link(f)} | {f.rule.severity} | {_subject(f)} | {_cell(f.message)} "
                f"| {_cell(f.rule.remediation)} |"
            )
    waived = [f for f in report.findings if f.waived]
    if waived:
        lines += ["", "### Waived", "", "| Rule | Severity | Resource | Finding | Reason | Expires |",
                  "|---|---|---|---|---|---|"]
        for f in waived:
            assert f.waiver is not None
            expires = f.waiver.expires.isoformat() if f.waiver.expires else "never"
            lines.append(
                f"| {_rule_link(f)} | {f.rule.severity} | {_subject(f)} | {_cell(f.message)} "
                f"| {_cell(f.waiver.reason)} | {expires} |"
            )
    if report.expired_waivers:
        lines += ["", "### Expired waivers (no longer applied)", ""]
        lines += [
            f"- `waivers[{i}]`: `{w.rule}` for `{w.resource}` expired on {w.expires}: {_cell(w.reason)}"
            for i, w in report.expired_waivers
        ]
    if report.unused_waivers:
        lines += ["", "### Unused waivers (nothing to excuse: remove them)", ""]
        lines += [f"- `waivers[{i}]`: `{w.rule}` for `{w.resource}`" for i, w in report.unused_waivers]
    lines += ["", "Rules and their rationale: `docs/policies.md` (`amlgpu policy list`)."]
    return "\n".join(lines) + "\n"
