"""``amlgpu plan``: what ``pulumi up`` would create for a stack, planned offline and checked by policy.

Writes into ``--out`` (default ``build/<stack>/``), all at once or not at all:

* ``resources.json``: every resource the engine would register, inputs in the provider's wire shape;
* ``outputs.json``: the stack outputs (secrets masked);
* ``jobs/<run>.yml``: each declared run, pipeline and sweep as an Azure ML CLI v2 job file (``az ml job create -f``);
* ``policy.sarif`` and ``policy.md``: the policy verdict, for code scanning and for the PR;
* ``waivers.json``: the waivers that applied (the stack file's and the platform's), so a later plan
  against this one as its base can put the waivers a change adds or changes at the top of its verdict.
* ``cost.json``: what each cluster and run can cost at list price (``azurefacts/prices.json``, or ``--prices``);
* ``diff.json`` (with ``--base``): what changes against a base plan folder or git ref, what gets replaced,
  and a one-line verdict; ``policy.md`` then opens with it (see :mod:`planning.review`).

Exit 0 when no mandatory policy fails, 1 when one does (every artifact still written), 2 on bad input
(nothing written).

Several stacks in one process: ``--stack`` repeated or ``--all`` (every ``Pulumi.<stack>.yaml``), and
of those, with ``--changed-since GIT_REF``, only the ones whose inputs changed (:mod:`planning.changes`).
The libraries are loaded once; each stack is planned on its own (the engine's settings, stack config and
registrations start afresh for each, see :func:`planning.engine.run_program`) into ``<out>/<stack>/``
(``--out`` is then the folder holding one per stack; default ``build/<stack>/``), and ``--base DIR``
reads ``DIR/<stack>/``. A stack with bad input is reported and the others are still planned. The exit
code is the worst stack's (2 over 1 over 0); a summary table ends the output.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel.errors import EXIT_OK, EXIT_POLICY, ConfigError, UserError
from planning.artifacts import OutputLayout, atomic_directory, canonical_json, check_replaceable, write_text
from planning.outcome import StackOutcome, worst
from stack.project import LoadedStack, find_root, load_stack, stack_names

if TYPE_CHECKING:
    from planning.changes import Selection

OUTPUT_LAYOUT: OutputLayout = {
    "resources.json": None, "outputs.json": None, "policy.sarif": None, "policy.md": None, "jobs": ".yml",
    "cost.json": None, "diff.json": None, "preflight.json": None, "waivers.json": None,
}
"""What :meth:`PlanResult.write` puts in an output folder: all an earlier plan can have left there, so all
``--out`` may hold before it is replaced."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "plan",
        help="plan a stack offline (Pulumi mock engine) and check it against the policy pack",
        description=__doc__,
    )
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
                        help="stdout format; markdown: the pull-request comment (a summary table, then each "
                        "stack's policy.md)")
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
class Settings:
    """What every stack of one command is planned with."""

    policy_config: Path | None
    prices: Any
    base: str | None
    format: str
    several: bool
    """Several stacks: ``--out`` and a ``--base`` folder hold one folder per stack."""


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    # A plan loads pulumi_azure_native and azure-ai-ml, over 400,000 long-lived objects, and then the
    # mock engine churns through Outputs and futures: with Python's default thresholds a full collection
    # walked that whole heap again and again, 1.9 s of a 9 s dev plan and 5 s at 1000 runs. The young
    # generations are still collected as often as before and free the cyclic garbage: peak memory is unchanged.
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    names = list(dict.fromkeys(args.stacks or ()))  # argparse: --stack (repeated) or --all, one of them
    several = bool(args.all or args.changed_since or len(names) > 1)
    settings = Settings(args.policy_config, _prices(args.prices), args.base, args.format, several)
    if several:
        code = _plan_several(args, names, settings)
    else:
        result, out = plan_one(names[0], args.out, settings)
        _show(result, out, settings)
        code = _exit_code(result)
    _progress(f"Done in {time.monotonic() - started:.1f}s.")
    return code


def _exit_code(result: PlanResult) -> int:
    return EXIT_POLICY if result.report.mandatory_failures else EXIT_OK


def plan_one(name: str, out: Path | None, settings: Settings) -> tuple[PlanResult, Path]:
    """Plan stack ``name`` into ``out`` (default ``build/<name>``): read it, run the program, check the
    policies, diff against the base, write every artifact at once. Bad input raises a UserError with
    nothing written."""
    stack = load_checked(name, settings.policy_config)
    out = out or stack.root / "build" / stack.name
    check_replaceable(out, OUTPUT_LAYOUT, keep=(stack.root, Path.cwd()), key="--out")
    from policies.packconfig import for_stack

    pack_config = for_stack(stack.root, stack.name, settings.policy_config)
    base = _base(settings, stack)
    if not settings.several:
        _progress(f"Planning stack {stack.name!r} offline (Pulumi mock engine; no Azure calls)...")
    result = plan_stack(stack, out, pack_config=pack_config, prices=settings.prices)
    result.review(settings.prices, base)
    try:
        with atomic_directory(out) as staging:
            result.write(staging)
    except OSError as err:  # a full disk or a read-only folder: the earlier output is still there
        where = f" ({err.filename})" if err.filename else ""
        raise UserError(f"cannot write the plan to {out}: {err.strerror or err}{where}", key="--out") from None

    for folder, links in result.outside_links().items():
        _progress(
            f"note: code folder {folder!r}: symbolic links leading outside it are neither scanned nor "
            f"uploaded: {', '.join(links)}"
        )
    return result, out


def _base(settings: Settings, stack: LoadedStack) -> Any:
    """The base ``stack`` is compared with (None without ``--base``): with several stacks, a folder's
    ``<stack>/`` (None when it holds no plan of the stack: a new stack, or one the base could not plan)."""
    if not settings.base:
        return None
    from planning.base import load_base, read_plan_folder

    if settings.several and Path(settings.base).is_dir():
        folder = Path(settings.base) / stack.name
        if not (folder / "resources.json").is_file():
            _progress(f"note: {settings.base} holds no plan of stack {stack.name!r} ({folder}/resources.json): "
                      "planned without a diff")
            return None
        return read_plan_folder(folder)
    _progress(f"Planning the base {settings.base!r}...")
    return load_base(settings.base, stack.root, stack.name)


def _show(result: PlanResult, out: Path, settings: Settings) -> None:
    """One stack's report on the terminal (``--format text``) or, when stdout is a document (JSON, markdown),
    what failed on stderr; a single stack's document too."""
    stack = result.stack
    if settings.format == "text":
        from preflight.offline import render_offline

        print(result.render_text(out))
        print("\n".join(render_offline(stack.config)))
        return
    if not settings.several:
        if settings.format == "json":
            print(canonical_json(result.summary(out)), end="")
        else:
            from planning.comment import pr_comment

            print(pr_comment([_outcome(result, out, settings)]), end="")
    from planning.render import findings_text, stale_waivers_text

    # stdout is the document; the terminal still shows what failed.
    for line in findings_text(result.report, stack.file.display, stack.file.line_of):
        print(line, file=sys.stderr)
    for line in stale_waivers_text(result.report):
        print(line, file=sys.stderr)


def _outcome(result: PlanResult, out: Path, settings: Settings) -> StackOutcome:
    from kernel import secrets

    report, cost = result.report, result.cost
    return StackOutcome(
        stack=result.stack.name, exit_code=_exit_code(result), out=_display_path(out),
        mandatory=report.mandatory_failures, advisory=report.advisory_failures, waived=report.waived,
        ceiling_usd_per_hour=cost.ceiling_usd_per_hour if cost is not None else None,
        priced_ceiling_usd_per_hour=cost.priced_ceiling_usd_per_hour if cost is not None else 0.0,
        diff=result.diff["verdict"] if result.diff is not None else None,
        policy_md=secrets.mask(result.policy_markdown()) if settings.format == "markdown" else None,
        summary=secrets.mask_data(result.summary(out)) if settings.format == "json" else {},
    )


def _plan_several(args: argparse.Namespace, names: list[str], settings: Settings) -> int:
    """Plan each selected stack in turn; then the summary table (or the JSON / markdown document)."""
    root = find_root()
    candidates = names or stack_names(root)
    if not candidates:
        raise UserError(f"no stack file (Pulumi.<stack>.yaml) in {root}", key="--all")
    if settings.base and not Path(settings.base).is_dir():
        from planning.base import resolve_ref

        resolve_ref(root, settings.base)  # a --base that is neither a folder nor a ref: refused once, up front
    since: str | None = None
    changes: dict[str, Any] = {}
    deleted: list[str] = []
    selected = candidates
    if args.changed_since:
        selection = _changed(root, args, candidates, everything=not names)
        selected, deleted, since = list(selection.planned), list(selection.deleted), selection.changes.label
        changes = {"ref": args.changed_since, "commit": selection.changes.commit}
    outcomes: list[StackOutcome] = []
    try:
        for i, name in enumerate(selected, 1):
            _progress(f"[{i}/{len(selected)}] Planning stack {name!r} offline...")
            outcomes.append(_plan_in_turn(name, args.out / name if args.out else None, settings, first=i == 1))
            if i < len(selected):
                _collect(first=i == 1)
    finally:
        gc.unfreeze()
    unchanged = len(candidates) - len(selected)
    if settings.format == "json":
        document: dict[str, Any] = {"stacks": [o.to_json() for o in outcomes], "exit_code": worst(
            o.exit_code for o in outcomes)}
        if since is not None:
            document["changed_since"] = {**changes, "unchanged": sorted(set(candidates) - set(selected)),
                                         "deleted": deleted}
        print(canonical_json(document), end="")
    elif settings.format == "markdown":
        from planning.comment import pr_comment

        print(pr_comment(outcomes, deleted=deleted, unchanged=unchanged, since=since), end="")
    else:
        from planning.render import summary_table

        print(("\n" if outcomes else "") + summary_table(outcomes, deleted=deleted, unchanged=unchanged, since=since))
    return worst(o.exit_code for o in outcomes)


def _plan_in_turn(name: str, out: Path | None, settings: Settings, *, first: bool) -> StackOutcome:
    """One of several stacks: planned and reported, or, on bad input, refused and reported.

    It starts with no secret remembered, as in a process of its own: another stack's secrets neither mask
    its artifacts nor count towards its limit (:data:`kernel.secrets.MAX_REMEMBERED`). What is kept for the
    end (the error, ``policy.md``, the JSON summary) is masked now, while its own secrets are known."""
    from kernel import secrets

    secrets.forget_all()
    try:
        with warnings.catch_warnings():  # a warning shown for one stack is shown again for the next
            result, out = plan_one(name, out, settings)
    except UserError as err:
        print(err.report(), file=sys.stderr)
        return StackOutcome(stack=name, exit_code=err.exit_code, error=secrets.mask(str(err)))
    if settings.format == "text" and not first:
        print()
    _show(result, out, settings)
    return _outcome(result, out, settings)  # only figures are kept: one plan in memory at a time


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


def _changed(root: Path, args: argparse.Namespace, candidates: list[str], *, everything: bool) -> Selection:
    """The candidates whose inputs changed since ``--changed-since`` and the stacks deleted since (when the
    candidates are every stack); why each is planned on stderr."""
    from planning.changes import select

    given = [p for p in (args.policy_config, args.prices) if p is not None]
    selection = select(root, args.changed_since, candidates, every_stack=everything, read_by_every_plan=given)
    label = selection.changes.label
    if selection.impact.program:
        program = selection.impact.program
        shown = ", ".join(program[:3]) + (f" and {len(program) - 3} more" if len(program) > 3 else "")
        _progress(f"Changed since {label}: the program ({shown}): every stack is planned.")
    else:
        why = "; ".join(f"{name} ({reason})" for name, reason in selection.reasons().items())
        _progress(f"Changed since {label}: {len(selection.planned)} of {len(candidates)} stack(s) to plan"
                  + (f": {why}" if why else "") + ".")
    for name in selection.deleted:
        _progress(f"Deleted since {label}: stack {name!r} (Pulumi.{name}.yaml): nothing to plan.")
    return selection


def load_checked(name: str, policy_config: Path | None = None) -> LoadedStack:
    """:func:`~stack.project.load_stack`; when the stack file has mistakes, its waivers' own mistakes are added
    (an unknown rule, what the pack config's governance refuses), which the policy engine would otherwise
    report only once the rest is fixed: one run says everything it can, each at its line."""
    try:
        return load_stack(name)
    except ConfigError as err:
        extra = _waiver_problems(name, policy_config) if err.problems else []
        if not extra:
            raise
        raise ConfigError(file=err.file, problems=[*err.problems, *extra]) from None


def _waiver_problems(name: str, policy_config: Path | None) -> list[Any]:
    """The rule and governance problems of the stack file's waivers that are otherwise valid."""
    import datetime as dt

    from pydantic import ValidationError

    from policies.catalogue import BY_ID, RULES
    from policies.packconfig import for_stack
    from policies.waivers import governance_problems, reference_problems
    from policies.waivers import settings as waiver_settings
    from stack import NAMESPACE, stackfile
    from stack.waivers import Waiver

    root = find_root()
    try:
        parsed = stackfile.read(root / f"Pulumi.{name}.yaml")
        policy = waiver_settings(for_stack(root, name, policy_config))
    except UserError:
        return []  # the pack config's own mistakes are reported when the stack is planned
    raw = parsed.config.get(f"{NAMESPACE}:waivers")
    valid: list[tuple[int, Waiver]] = []
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        try:
            valid.append((i, Waiver.model_validate(item)))
        except ValidationError:
            continue  # reported with the stack file's other mistakes
    waivers, indices = [w for _, w in valid], [i for i, _ in valid]
    if not waivers:
        return []
    found = reference_problems(waivers, rules=BY_ID.keys(), names=None, indices=indices, locate=parsed.position_of)
    return found + governance_problems(waivers, severities={r.id: r.severity for r in RULES}, policy=policy,
                                       today=dt.date.today(), indices=indices, locate=parsed.position_of)


class PlanResult:
    """Everything one plan produces, ready to be written or shown."""

    def __init__(self, stack: LoadedStack, plan: Any, runs: list[Any], job_files: dict[str, str], report: Any) -> None:
        self.stack = stack
        self.plan = plan
        self.resources = [r.to_json() for r in plan.resources]
        self.outputs = plan.outputs
        self.runs = runs
        self.job_files = job_files
        self.report = report
        self.cost: Any = None
        self.diff: dict[str, Any] | None = None
        self._cost_change: dict[str, Any] | None = None
        self.base_waivers: list[Any] | None = None
        """The base plan's waivers (its ``waivers.json``), when planned against a base that recorded them."""

    def review(self, prices: Any, base: Any = None) -> None:
        """Work out the cost (and, against ``base``, the diff and the change in cost) for the artifacts."""
        from planning.review import cost_change, diff
        from policies.cost import estimate
        from policies.stack import Stack
        from stack.resolved import RUN_TYPE, ResolvedRun

        self.cost = estimate(Stack(self.resources, self.runs), prices)
        if base is not None:
            self.base_waivers = base.waivers
            self.diff = diff(base.resources, self.resources, base_label=base.label)
            try:
                base_runs = [ResolvedRun.from_props(r["inputs"]) for r in base.resources if r["type"] == RUN_TYPE]
            except (KeyError, TypeError, ValueError):
                base_runs = []  # a base planned by older code: its runs' cost cannot be read back
            self._cost_change = cost_change(estimate(Stack(base.resources, base_runs), prices), self.cost)
            self.diff["cost"] = self._cost_change

    def write(self, folder: Path) -> None:
        from policies.sarif import to_sarif
        from policies.waivers import to_records

        write_text(folder / "resources.json", canonical_json(self.resources))
        write_text(folder / "outputs.json", canonical_json(self.outputs))
        for name, text in sorted(self.job_files.items()):
            write_text(folder / "jobs" / f"{name}.yml", text)
        sarif = to_sarif(self.report, self.stack.file.display, self.stack.file.line_of)
        write_text(folder / "policy.sarif", canonical_json(sarif))
        write_text(folder / "policy.md", self.policy_markdown())
        write_text(folder / "waivers.json", canonical_json(to_records(self.report.waivers)))
        if self.cost is not None:
            write_text(folder / "cost.json", canonical_json(self.cost.to_json()))
        if self.diff is not None:
            write_text(folder / "diff.json", canonical_json(self.diff))
        write_text(folder / "preflight.json", canonical_json(self.preflight()))

    def policy_markdown(self) -> str:
        """``policy.md``: the diff against the base (with ``--base``), the policy verdict, the cost."""
        from planning.review import cost_markdown, diff_markdown
        from policies.summary import markdown

        top = diff_markdown(self.diff) + "\n" if self.diff is not None else ""
        bottom = cost_markdown(self.cost, self._cost_change) if self.cost is not None else ""
        return top + markdown(self.report, self.stack.name, base_waivers=self.base_waivers) + bottom

    def preflight(self) -> dict[str, Any]:
        """The preflight's offline half (``amlgpu preflight``): vCPU demand per family, permissions needed."""
        from preflight.offline import offline

        subscription = self.stack.file.config.get("azure-native:subscriptionId")
        return offline(self.stack.config, self.stack.name, subscription if isinstance(subscription, str) else None)

    def outside_links(self) -> dict[str, tuple[str, ...]]:
        """Each runs' code folder holding symbolic links that lead outside it, with those links."""
        from analysis.code_scan import outside_links

        folders = sorted({run.spec["code"] for run in self.runs if run.spec.get("code") is not None})
        found = {folder: outside_links(self.stack.root / folder) for folder in folders}
        return {folder: links for folder, links in found.items() if links}

    def summary(self, out: Path) -> dict[str, Any]:
        from planning.render import azure_resource_count

        return {
            "stack": self.stack.name,
            "out": _display_path(out),
            "resources": azure_resource_count(self.resources),
            "components": len(self.resources) - azure_resource_count(self.resources),
            "protected": sum(1 for r in self.resources if r.get("options", {}).get("protect")),
            "runs": sorted(self.job_files),
            "policy": {
                "mandatory_failures": self.report.mandatory_failures,
                "advisory": self.report.advisory_failures,
                "waived": self.report.waived,
            },
            **({"cost": self.cost.to_json()["stack"]} if self.cost is not None else {}),
            **({"diff": self.diff["verdict"]} if self.diff is not None else {}),
        }

    def render_text(self, out: Path) -> str:
        from planning.render import stack_report

        return stack_report(self, _display_path(out))


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _prices(path: Path | None) -> Any:
    """The shipped pricing table, overridden figure by figure by the ``--prices`` file when one is given."""
    from azurefacts.prices import DEFAULT_TABLE, PriceTableError, load

    shipped = load(DEFAULT_TABLE)
    if path is None:
        return shipped
    try:
        return shipped.overridden_by(load(path))
    except FileNotFoundError:
        raise UserError("pricing table not found", file=str(path), key="--prices") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the pricing table: {err}", file=str(path), key="--prices") from None
    except PriceTableError as err:
        raise UserError(str(err), file=str(path), key=err.key) from None


def plan_stack(
    stack: LoadedStack, out: Path, *, pack_config: dict[str, Any] | None = None, prices: Any = None
) -> PlanResult:
    """Run the program under mocks, resolve the runs, render their job files and evaluate the policies."""
    from jobs.pipeline_render import composite_yaml
    from jobs.pipelines import PIPELINE_TYPE, SWEEP_TYPE, ResolvedComposite
    from jobs.render import job_yaml
    from kernel.secrets import mask_data
    from planning.engine import run_program
    from policies.engine import evaluate
    from stack import NAMESPACE
    from stack.resolved import RUN_TYPE, ResolvedRun

    plan = run_program(stack.name, stack.file, stack.root)
    runs = sorted((ResolvedRun.from_props(r.inputs) for r in plan.by_type(RUN_TYPE)), key=lambda r: r.name)
    # Job files land in <out>/jobs/: the renderer makes each `code` relative to that folder, as
    # `az ml job create -f` resolves it. A pipeline's steps (a sweep's trial) are written in its own file. A secret
    # is masked before rendering, so the file stays valid YAML.
    folder = out.resolve() / "jobs"
    job_files = {run.name: job_yaml(mask_data(run.spec), code_relative_to=folder, root=stack.root)
                 for run in runs if run.part_of is None}
    for composite in [*plan.by_type(PIPELINE_TYPE), *plan.by_type(SWEEP_TYPE)]:
        job = ResolvedComposite.from_props(composite.inputs)
        job_files[job.name] = composite_yaml(mask_data(job.spec), code_relative_to=folder, root=stack.root)
    report = evaluate(
        [r.to_json() for r in plan.resources], runs, stack.config, pack_config=pack_config, source=stack.file.display,
        stack_name=stack.name,
        prices=prices,
        stack_settings={k: v for k, v in stack.file.config.items() if not k.startswith(f"{NAMESPACE}:")},
        locate=stack.file.position_of,
    )
    return PlanResult(stack, plan, runs, job_files, report)
