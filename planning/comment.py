"""The pull-request comment of a plan (``amlgpu plan --format markdown``): a summary table of every stack
planned, then one section per stack holding its ``policy.md``, all within what GitHub accepts as one comment.

Stacks that need a reviewer come first (an internal error, bad input, then a failed mandatory policy) and are
open; passed stacks are folded. When the sections do not all fit, a stack whose section does not is one line pointing
at its ``policy.md`` in the output folder. Stack names and error messages come
from files a pull request controls: names are code spans, errors fenced code blocks, each fence longer
than any run of backticks in what it holds.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from planning.outcome import StackOutcome, worst
from planning.render import figures
from policies.markdown import code, fenced

COMMENT_LIMIT = 60_000
"""Characters: GitHub refuses a comment over 65,536, and the publisher adds a marker line."""
NOTE_ROOM = 300
"""Characters kept for each stack whose section comes later: at least its one-line note always fits."""

_ICONS = {"passed": "✅", "failed": "❌", "bad input": "⛔", "internal error": "💥"}


def _order(outcome: StackOutcome) -> tuple[int, str]:
    return (-outcome.exit_code, outcome.stack)


def _section(outcome: StackOutcome) -> str:
    body = fenced(outcome.error) if outcome.error is not None else (outcome.policy_md or "").rstrip()
    state = " open" if outcome.exit_code else ""
    title = f"{_ICONS[outcome.verdict]} <code>{html.escape(outcome.stack)}</code>: {outcome.verdict}"
    return f"<details{state}>\n<summary>{title}</summary>\n\n{body}\n\n</details>\n"


def _note(outcome: StackOutcome) -> str:
    return (f"- {_ICONS[outcome.verdict]} {code(outcome.stack)}: {outcome.verdict}; its report does not fit in "
            f"this comment: {code(f'{outcome.stack}/policy.md')} in the output folder (in CI: the plan artifact).\n")


def pr_comment(outcomes: Sequence[StackOutcome], *, deleted: Sequence[str] = (), unchanged: int = 0,
               since: str | None = None, limit: int = COMMENT_LIMIT) -> str:
    """The comment: a verdict line, the summary table (stack, verdict, open mandatory and advisory findings,
    cost per hour at max nodes), the stacks left unplanned by ``--changed-since``, then a section per stack."""
    code_ = worst(o.exit_code for o in outcomes)
    n = len(outcomes)
    icon = "✅" if code_ == 0 else "❌"
    lines = [f"## {icon} amlgpu plan: {n} stack{'s' if n != 1 else ''}" + (f" changed since {code(since)}" if since
                                                                          else ""), ""]
    if outcomes or deleted:
        lines += ["| Stack | Verdict | Mandatory | Advisory | Cost/h at max nodes (USD) |", "|---|---|---:|---:|---:|"]
        lines += [f"| {code(o.stack)} | {_ICONS[o.verdict]} {o.verdict} | {' | '.join(figures(o))} |"
                  for o in outcomes]
        lines += [f"| {code(name)} | 🗑️ deleted | - | - | - |" for name in deleted]
        lines.append("")
    if since is not None:
        if not outcomes:
            lines += ["No stack's inputs changed: nothing to plan.", ""]
        if unchanged:
            lines += [f"{unchanged} stack{'s' if unchanged != 1 else ''} unchanged: not planned.", ""]
        if deleted:
            lines += ["A deleted stack is not planned; what it deployed stays until `pulumi destroy` removes it.", ""]
    text = "\n".join(lines) + "\n"
    ordered = sorted(outcomes, key=_order)
    for i, outcome in enumerate(ordered):
        section = _section(outcome)
        later = len(ordered) - i - 1
        text += section if len(text) + len(section) + later * NOTE_ROOM <= limit else _note(outcome)
    if len(text) > limit:  # hundreds of notes: the table above already has every stack
        text = text[: limit - 100].rsplit("\n", 1)[0] + "\n\n(cut: every stack is in the table above)\n"
    return text
