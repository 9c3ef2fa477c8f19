"""``amlgpu plan``: what ``pulumi up`` would create for a stack, planned offline and checked by policy.

Writes into ``--out`` (default ``build/<stack>/``), all at once or not at all:

* ``resources.json``: every resource the engine would register, inputs in the provider's wire shape;
* ``outputs.json``: the stack outputs (secrets masked);
* ``jobs/<run>.yml``: each declared run, pipeline and sweep as an Azure ML CLI v2 job file (``az ml job create -f``);
* ``policy.sarif`` and ``policy.md``: the policy verdict, for code scanning and for the PR;
* ``waivers.json``: the waivers that applied (the stack file's and the platform's), for a later ``--base``;
* ``cost.json``: what each cluster and run can cost at list price (``azurefacts/prices.json``, or ``--prices``);
* ``diff.json`` (with ``--base``): what changes against a base plan folder or git ref, what gets replaced,
  and a one-line verdict; ``policy.md`` then opens with it (see :mod:`planning.review`).

Exit 0 when no mandatory policy fails, 1 when one does (every artifact still written), 2 on bad input
(nothing written), 3 on an internal error (a bug: named with its stack, nothing written for that stack).

Several stacks in one process: ``--stack`` repeated or ``--all``, and of those, with ``--changed-since
GIT_REF``, only the ones whose inputs changed (:mod:`planning.changes`); each into ``<out>/<stack>/``, and
``--base DIR`` reads ``DIR/<stack>/``. A stack with bad input or an internal error is reported and the others
still planned; the exit code is the worst stack's (3 over 2 over 1 over 0), and a summary table ends the output.

``--format json`` prints one document of one shape however many stacks are planned: ``{"stacks": [...],
"exit_code": N}``, one entry per stack (its summary and exit code, or its error), plus ``changed_since``
(the ref, its commit, the stacks unchanged and deleted) with ``--changed-since``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel import secrets
from kernel.errors import EXIT_INTERNAL, UserError, internal_error
from planning import service
from planning.artifacts import canonical_json, shown_path
from planning.base import resolve_ref
from planning.changes import Selection, select
from planning.comment import pr_comment
from planning.outcome import StackOutcome, json_document, worst
from planning.render import findings_text, stack_report, stale_waivers_text, summary_table
from preflight.offline import render_offline
from stack.project import find_root, stack_names


def register(sub: Any) -> None:
    parser = sub.add_parser("plan", description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", "-s", action="append", dest="stacks", metavar="STACK",
                       help="stack name: reads Pulumi.<stack>.yaml; repeat it to plan several stacks in one process")
    which.add_argument("--all", action="store_true", help="plan every Pulumi.<stack>.yaml of the project")
    parser.add_argument("--changed-since", metavar="GIT_REF",
                        help="of those stacks, plan only the ones whose inputs changed since GIT_REF: the stack file, "
                        "the folders and files it names, its pack config; a change to the program or the policies "
                        "plans them all")
    parser.add_argument("--out", type=Path,
                        help="output folder (default: build/<stack>); when several stacks are planned (--stack "
                        "repeated, --all or --changed-since), the folder holding a <stack>/ folder for each")
    parser.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                        help="stdout format; json: {\"stacks\": [one entry per stack], \"exit_code\": N}, one stack "
                        "or several; markdown: the pull-request comment (a summary table, then each stack's policy.md)")
    parser.add_argument("--policy-config", type=Path,
                        help="policy pack config (JSON): enforcement, parameters, platform waivers "
                        "(default: policies/config.<stack>.json, else policies/config.json, when the project has one)")
    parser.add_argument("--base", metavar="DIR_OR_GIT_REF",
                        help="compare with a base: an earlier plan folder, or a git ref planned in a temporary "
                        "worktree with its own code; writes diff.json and a diff section atop policy.md. With "
                        "several stacks, DIR holds a plan folder per stack (DIR/<stack>/; a stack it lacks is "
                        "planned without a diff)")
    parser.add_argument("--prices", type=Path, metavar="FILE",
                        help="pricing table overriding azurefacts/prices.json figure by figure (e.g. negotiated rates)")
    parser.set_defaults(func=run)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


FULL_COLLECTION_EVERY = 1000
"""Collections of the middle generation between two full collections (Python's default: 10). See :func:`run`."""


@dataclass(frozen=True)
class Settings(service.Request):
    """What every stack of one command is planned with, and how it is shown."""

    format: str = "text"


def run(args: argparse.Namespace) -> int:
    return plan_stacks(args.stacks or (), every=args.all, changed_since=args.changed_since, out=args.out,
                       format=args.format, policy_config=args.policy_config, base=args.base, prices=args.prices)


def plan_stacks(names: Sequence[str], *, every: bool = False, changed_since: str | None = None,
                out: Path | None = None, format: str = "text", policy_config: Path | None = None,
                base: str | None = None, prices: Path | None = None) -> int:
    """``amlgpu plan`` with these flags (``names``: ``--stack``, ``every``: ``--all``): plan, write, print;
    the exit code."""
    started = time.monotonic()
    # A plan loads pulumi_azure_native and azure-ai-ml, over 400,000 long-lived objects, and then the
    # mock engine churns through Outputs and futures: with Python's default thresholds a full collection
    # walked that whole heap again and again, 1.9 s of a 9 s dev plan and 5 s at 1000 runs. The young
    # generations are still collected as often as before and free the cyclic garbage: peak memory is unchanged.
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    names = list(dict.fromkeys(names))
    several = bool(every or changed_since or len(names) > 1)
    settings = Settings(policy_config, service.load_prices(prices), base, several, format)
    if several:
        code = _plan_several(names, settings, out=out, changed_since=changed_since, prices=prices)
    else:
        try:
            plan = service.plan_into(names[0], out, settings, _progress)
        except UserError:
            raise
        except Exception as err:  # a bug is reported as one, with its own exit code
            print(f"error: {secrets.mask(internal_error(err, stack=names[0]))}", file=sys.stderr)
            return EXIT_INTERNAL
        _show(plan, settings)
        code = plan.exit_code
    _progress(f"Done in {time.monotonic() - started:.1f}s.")
    return code


def _show(plan: service.Plan, settings: Settings) -> None:
    """One stack's report on the terminal (``--format text``) or, when stdout is a document (JSON, markdown),
    what failed on stderr; a single stack's document too."""
    stack = plan.stack
    if settings.format == "text":
        print(stack_report(plan, shown_path(plan.out)))
        print("\n".join(render_offline(stack.config)))
        return
    if not settings.several:
        shown = [service.outcome(plan, settings.format)]
        print(canonical_json(json_document(shown)) if settings.format == "json" else pr_comment(shown), end="")
    # stdout is the document; the terminal still shows what failed.
    for line in findings_text(plan.report, stack.file.display, stack.file.line_of):
        print(line, file=sys.stderr)
    for line in stale_waivers_text(plan.report):
        print(line, file=sys.stderr)


def _plan_several(names: list[str], settings: Settings, *, out: Path | None, changed_since: str | None,
                  prices: Path | None) -> int:
    """Plan each selected stack in turn; then the summary table (or the JSON / markdown document)."""
    root = find_root()
    candidates = names or stack_names(root)
    if not candidates:
        raise UserError(f"no stack file (Pulumi.<stack>.yaml) in {root}", key="--all")
    if settings.base and not Path(settings.base).is_dir():
        resolve_ref(root, settings.base)  # a --base that is neither a folder nor a ref: refused once, up front
    since: str | None = None
    changes: dict[str, Any] | None = None
    deleted: list[str] = []
    selected = candidates
    if changed_since:
        given = [p for p in (settings.policy_config, prices) if p is not None]
        selection = _changed(root, changed_since, candidates, everything=not names, given=given)
        selected, deleted, since = list(selection.planned), list(selection.deleted), selection.changes.label
        changes = {"ref": changed_since, "commit": selection.changes.commit}
    outcomes: list[StackOutcome] = []
    try:
        for i, name in enumerate(selected, 1):
            _progress(f"[{i}/{len(selected)}] Planning stack {name!r} offline...")
            outcomes.append(_plan_in_turn(name, out / name if out else None, settings, first=i == 1))
            if i < len(selected):
                _collect(first=i == 1)
    finally:
        gc.unfreeze()
    unchanged = len(candidates) - len(selected)
    if settings.format == "json":
        if changes is not None:
            changes.update(unchanged=sorted(set(candidates) - set(selected)), deleted=deleted)
        print(canonical_json(json_document(outcomes, changes)), end="")
    elif settings.format == "markdown":
        print(pr_comment(outcomes, deleted=deleted, unchanged=unchanged, since=since), end="")
    else:
        print(("\n" if outcomes else "") + summary_table(outcomes, deleted=deleted, unchanged=unchanged, since=since))
    return worst(o.exit_code for o in outcomes)


def _plan_in_turn(name: str, out: Path | None, settings: Settings, *, first: bool) -> StackOutcome:
    """One of several stacks: planned and reported, or, on bad input, refused and reported, or, on an internal
    error (any other exception: a bug), reported as one (:func:`kernel.errors.internal_error`) while the next
    stacks are still planned. :func:`planning.service.write` writes all or nothing, so such a stack's folder is
    as it was.

    It starts with no secret remembered, as in a process of its own: another stack's secrets neither mask
    its artifacts nor count towards its limit (:data:`kernel.secrets.MAX_REMEMBERED`). What is kept for the
    end (the error, ``policy.md``, the JSON summary) is masked now, while its own secrets are known."""
    secrets.forget_all()
    try:
        with warnings.catch_warnings():  # a warning shown for one stack is shown again for the next
            plan = service.plan_into(name, out, settings, _progress)
    except UserError as err:
        print(err.report(), file=sys.stderr)
        return StackOutcome(stack=name, exit_code=err.exit_code, error=secrets.mask(str(err)))
    except Exception as err:  # one stack's bug (RecursionError, MemoryError...) stops only that stack
        message = secrets.mask(internal_error(err, stack=name))
        print(f"error: {message}", file=sys.stderr)
        return StackOutcome(stack=name, exit_code=EXIT_INTERNAL, error=message)
    if settings.format == "text" and not first:
        print()
    _show(plan, settings)
    return service.outcome(plan, settings.format)  # only figures are kept: one plan in memory at a time


def _collect(*, first: bool) -> None:
    """Between two stacks: free what the last one left behind. Much of it is cycles (Outputs, futures) that only
    a full collection frees, and a full collection walks every object the libraries hold (over 400,000, half a
    second). So after the first stack everything is frozen (``gc.freeze``: never walked again; the first
    stack's garbage stays, a few MiB), and after each later one a full collection walks only what that stack
    made: the peak memory of many stacks stays near that of one, and no stack pays for the libraries' heap."""
    if first:
        gc.freeze()
    else:
        gc.collect()


def _changed(root: Path, since: str, candidates: list[str], *, everything: bool, given: list[Path]) -> Selection:
    """The candidates whose inputs changed since ``--changed-since`` and the stacks deleted since (when the
    candidates are every stack); why each is planned on stderr."""
    selection = select(root, since, candidates, every_stack=everything, read_by_every_plan=given)
    for line in selection.notes(len(candidates)):
        _progress(line)
    return selection
