"""The gate's verdict as Markdown, fit for a pull-request comment: verdict, the waivers the change adds
or changes (at the top, so a reviewer sees first what the change excuses), counts, findings with their
fix, waived findings with their reasons, and waivers that expired or excuse nothing."""

from __future__ import annotations

from collections.abc import Sequence

from policies.engine import Finding, Report
from policies.markdown import code
from policies.markdown import text as markdown_text
from policies.rule import SEVERITIES
from policies.waivers import changed
from stack.waivers import Waiver


def _rule_link(finding: Finding) -> str:
    return f"[`{finding.rule.id}`]({finding.rule.reference})"


def _subject(finding: Finding) -> str:
    return markdown_text(finding.subject)


def _verdict(report: Report, stack: str) -> str:
    if report.mandatory_failures:
        n = report.mandatory_failures
        return f"## ❌ Policy check failed for stack {code(stack)}: {n} mandatory finding{'s' if n != 1 else ''}"
    return f"## ✅ Policy check passed for stack {code(stack)}: no mandatory finding"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def waiver_lines(report: Report, base_waivers: Sequence[Waiver] | None = None) -> list[str]:
    """One line per waiver the reviewer must approve: with ``base_waivers`` (the base plan's), the new
    and changed ones; without, every waiver in effect. Each says what it waives, until when, and where
    it was granted: "this change waives 1 high finding until 2026-07-31 (new, stack file): ..."."""
    marks = changed(base_waivers, report.waivers)
    expired = [w for _, w in report.expired_waivers]
    out = []
    for waiver in report.waivers:
        if base_waivers is not None and waiver.key() not in marks:
            continue
        if base_waivers is None and any(waiver is w for w in expired):
            continue  # no longer in effect: listed under "Expired waivers"
        excused = [f for f in report.findings if f.waiver is waiver]
        by_severity = [(s, sum(1 for f in excused if f.rule.severity == s)) for s in SEVERITIES]
        what = ", ".join(_plural(n, f"{s} finding") for s, n in by_severity if n) or "no finding (yet)"
        subject = "this change waives" if base_waivers is not None else "waives"
        status = f"{marks[waiver.key()]}, " if marks else ""
        out.append(
            f"- ⚠️ {subject} **{what} until {waiver.expires.isoformat()}** ({status}{waiver.origin}): "
            f"{code(waiver.rule)} for {code(waiver.resource)}: {markdown_text(waiver.reason)}"
        )
    return out


def markdown(report: Report, stack: str, *, base_waivers: Sequence[Waiver] | None = None) -> str:
    """The PR-comment summary of ``report`` for ``stack`` (deterministic, no timestamps).

    ``base_waivers``: the base plan's waivers, when there is a base: the top then lists only the waivers
    this change adds or changes; without one it lists every waiver in effect."""
    counts = report.counts
    waivers = waiver_lines(report, base_waivers)
    lines = [_verdict(report, stack), ""]
    if waivers:
        title = "Waivers this change adds or changes" if base_waivers is not None else "Waivers in effect"
        lines += [f"### {title} (approved by the platform owners: docs/policies.md)", "", *waivers, ""]
    lines += [
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
                f"| {mark} | {_rule_link(f)} | {f.rule.severity} | {_subject(f)} | {markdown_text(f.message)}"
                f"<br>fingerprint `{f.fingerprint}` | {markdown_text(f.rule.remediation)} |"
            )
    waived = [f for f in report.findings if f.waived]
    if waived:
        lines += ["", "### Waived", "", "| Rule | Severity | Resource | Finding | Reason | Expires |",
                  "|---|---|---|---|---|---|"]
        for f in waived:
            assert f.waiver is not None
            expires = f.waiver.expires.isoformat()
            lines.append(
                f"| {_rule_link(f)} | {f.rule.severity} | {_subject(f)} | {markdown_text(f.message)} "
                f"| {markdown_text(f.waiver.reason)} | {expires} |"
            )
    if report.stale_waivers:
        lines += ["", "### Stale waivers (not applied: what they were approved for has changed)", ""]
        for stale in report.stale_waivers:
            where = f"`waivers[{stale.index}]`" if stale.index is not None else "pack config"
            approved = f"approved for `{stale.waiver.fingerprint}`" if stale.waiver.fingerprint else "no fingerprint"
            lines.append(
                f"- {where}: {code(stale.waiver.rule)} for {code(stale.waiver.resource)}, {approved}; the finding is "
                f"now `{stale.finding.fingerprint}`: {markdown_text(stale.finding.message)}. After review, approve it "
                f"again with `fingerprint: {stale.finding.fingerprint}`"
            )
    if report.expired_waivers:
        lines += ["", "### Expired waivers (no longer applied)", ""]
        lines += [
            f"- `waivers[{i}]`: {code(w.rule)} for {code(w.resource)} expired on {w.expires}: {markdown_text(w.reason)}"
            for i, w in report.expired_waivers
        ]
    if report.unused_waivers:
        lines += ["", "### Unused waivers (nothing to excuse: remove them)", ""]
        lines += [f"- `waivers[{i}]`: {code(w.rule)} for {code(w.resource)}" for i, w in report.unused_waivers]
    lines += ["", "Rules and their rationale: `docs/policies.md` (`amlgpu policy list`)."]
    return "\n".join(lines) + "\n"
