"""The plan as a service below the CLI: :func:`plan_stack` plans one stack (the program under the mock engine,
its runs' job files, the policy verdict, the cost and, against a base, the diff) into a :class:`Plan`, and
:func:`write` writes that plan's artifacts into a folder, all at once or not at all.

``amlgpu plan`` (which parses the flags, plans several stacks and prints), ``amlgpu submit``'s gate,
``amlgpu import --write`` and the tests call these; what each artifact holds is described in
:mod:`amlgpu.commands.plan`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from analysis.code_scan import outside_links as code_outside_links
from azurefacts.prices import DEFAULT_TABLE, PriceTable, PriceTableError
from azurefacts.prices import load as load_table
from jobs.pipeline_render import composite_yaml
from jobs.pipelines import PIPELINE_TYPE, SWEEP_TYPE, ResolvedComposite
from jobs.render import job_yaml
from kernel.errors import EXIT_OK, EXIT_POLICY, ConfigError, Problem, UserError
from kernel.secrets import mask, mask_data
from planning.artifacts import OutputLayout, atomic_directory, canonical_json, check_replaceable, shown_path, write_text
from planning.base import Base, load_base, read_plan_folder
from planning.outcome import StackOutcome
from planning.render import azure_resource_count
from planning.review import cost_change, cost_markdown, diff, diff_markdown
from policies.catalogue import BY_ID, RULES
from policies.cost import CostReport, estimate
from policies.engine import Report, evaluate
from policies.packconfig import for_stack
from policies.sarif import to_sarif
from policies.stack import Owner, Stack
from policies.summary import markdown
from policies.waivers import governance_problems, reference_problems, to_records
from policies.waivers import settings as waiver_settings
from preflight.offline import offline
from stack import NAMESPACE, stackfile
from stack.project import LoadedStack, find_root, load_stack
from stack.resolved import RUN_TYPE, ResolvedRun
from stack.waivers import Waiver

if TYPE_CHECKING:
    from planning.engine import ProgramRun

OUTPUT_LAYOUT: OutputLayout = {
    "resources.json": None, "outputs.json": None, "policy.sarif": None, "policy.md": None, "jobs": ".yml",
    "cost.json": None, "diff.json": None, "preflight.json": None, "waivers.json": None,
}
"""What :func:`write` puts in an output folder: all an earlier plan can have left there, so all the folder may
hold before it is replaced."""

OUT_KEY = "--out"
"""The flag an output folder's mistakes are reported under."""


@dataclass(frozen=True)
class PlanOptions:
    """What a stack is planned with."""

    out: Path
    """The folder the plan is written to: each job file's ``code`` is made relative to its ``jobs/``, as
    ``az ml job create -f`` resolves it."""
    pack_config: dict[str, Any] | None = None
    """The policy pack config (:func:`pack_config`); None: every rule as the pack declares it."""
    prices: PriceTable | None = None
    """The pricing table (:func:`load_prices`); None: the shipped one."""
    base: Base | None = None
    """The plan to compare with (``--base``, :mod:`planning.base`); None: no diff."""


@dataclass(frozen=True)
class Plan:
    """Everything one plan produces, ready to be written (:func:`write`) or shown (:mod:`planning.render`)."""

    stack: LoadedStack
    out: Path
    engine: ProgramRun
    """The registrations as the mock engine recorded them (the terminal report draws their tree)."""
    resources: list[dict[str, Any]]
    """``resources.json``: every registration in the provider's wire shape."""
    outputs: dict[str, Any]
    runs: list[ResolvedRun]
    job_files: dict[str, str]
    """Each run's, pipeline's and sweep's job file (``jobs/<name>.yml``), secrets masked."""
    report: Report
    cost: CostReport
    diff: dict[str, Any] | None = None
    """``diff.json`` against the base (its ``cost`` the change in cost); None without a base."""
    base_waivers: list[Waiver] | None = None
    """The base plan's waivers (its ``waivers.json``), when planned against a base that recorded them."""
    base: Base | None = None
    """The base itself (the terminal tree marks what it lacks, has and loses); None without one."""

    @property
    def exit_code(self) -> int:
        """1 when a mandatory policy fails, else 0."""
        return EXIT_POLICY if self.report.mandatory_failures else EXIT_OK


def plan_stack(stack: LoadedStack, options: PlanOptions) -> Plan:
    """Run the program under mocks, resolve the runs, render their job files, evaluate the policies, price the
    stack and, against ``options.base``, diff it. Writes nothing; bad input raises a UserError."""
    # The Pulumi engine (and its gRPC and telemetry threads) loads only once a stack file has been read and
    # validated: a stack file that is bad input, an alias bomb included, is refused within a small address
    # space (tests/hostile/test_inputs.py runs the console script under 1 GiB).
    from planning.engine import run_program

    engine = run_program(stack.name, stack.file, stack.root)
    runs = sorted((ResolvedRun.from_props(r.inputs) for r in engine.by_type(RUN_TYPE)), key=lambda r: r.name)
    # A pipeline's steps (a sweep's trial) are written in its own file. A secret is masked before rendering,
    # so the file stays valid YAML.
    folder = options.out.resolve() / "jobs"
    job_files = {run.name: job_yaml(mask_data(run.spec), code_relative_to=folder, root=stack.root)
                 for run in runs if run.part_of is None}
    for composite in [*engine.by_type(PIPELINE_TYPE), *engine.by_type(SWEEP_TYPE)]:
        job = ResolvedComposite.from_props(composite.inputs)
        job_files[job.name] = composite_yaml(mask_data(job.spec), code_relative_to=folder, root=stack.root)
    report = evaluate(
        [r.to_json() for r in engine.resources], runs, stack.config, pack_config=options.pack_config,
        source=stack.file.display, stack_name=stack.name, prices=options.prices,
        stack_settings={k: v for k, v in stack.file.config.items() if not k.startswith(f"{NAMESPACE}:")},
        locate=stack.file.position_of,
    )
    resources = [r.to_json() for r in engine.resources]
    plan = Plan(stack, options.out, engine, resources, engine.outputs, runs, job_files, report,
                estimate(Stack(resources, runs), options.prices))
    return _against(plan, options.base, options.prices) if options.base is not None else plan


def _against(plan: Plan, base: Base, prices: PriceTable | None) -> Plan:
    """``plan`` with the diff against ``base`` and the change in cost."""
    changes = diff(base.resources, plan.resources, base_label=base.label)
    try:
        base_runs = [ResolvedRun.from_props(r["inputs"]) for r in base.resources if r["type"] == RUN_TYPE]
    except (KeyError, TypeError, ValueError):
        base_runs = []  # a base planned by older code: its runs' cost cannot be read back
    changes["cost"] = cost_change(estimate(Stack(base.resources, base_runs), prices), plan.cost)
    return replace(plan, diff=changes, base_waivers=base.waivers, base=base)


@dataclass(frozen=True)
class Request:
    """What ``amlgpu plan`` plans each stack with (:func:`plan_into`)."""

    policy_config: Path | None = None
    prices: PriceTable | None = None
    base: str | None = None
    """``--base``: a plan folder or a git ref (:func:`planning.base.load_base`)."""
    several: bool = False
    """Several stacks: the output folder and a ``--base`` folder hold one folder per stack."""


def plan_into(name: str, out: Path | None, request: Request, note: Callable[[str], None]) -> Plan:
    """Plan stack ``name`` into ``out`` (default ``build/<name>``): read it, run the program, check the
    policies, diff against the base, write every artifact at once; what it does on the way, to ``note``. Bad
    input raises a UserError with nothing written."""
    stack = load_checked(name, request.policy_config)
    out = out or stack.root / "build" / stack.name
    check_out(stack, out)
    config = pack_config(stack, request.policy_config)
    base = _base(request, stack, note)
    if not request.several:
        note(f"Planning stack {stack.name!r} offline (Pulumi mock engine; no Azure calls)...")
    plan = plan_stack(stack, PlanOptions(out, config, request.prices, base))
    write(plan, out)
    for folder, links in outside_links(plan).items():
        note(
            f"note: code folder {folder!r}: symbolic links leading outside it are neither scanned nor "
            f"uploaded: {', '.join(links)}"
        )
    return plan


def _base(request: Request, stack: LoadedStack, note: Callable[[str], None]) -> Base | None:
    """The base ``stack`` is compared with (None without ``--base``): with several stacks, a folder's
    ``<stack>/`` (None when it holds no plan of the stack: a new stack, or one the base could not plan)."""
    if not request.base:
        return None
    if request.several and Path(request.base).is_dir():
        folder = Path(request.base) / stack.name
        if not (folder / "resources.json").is_file():
            note(f"note: {request.base} holds no plan of stack {stack.name!r} ({folder}/resources.json): "
                 "planned without a diff")
            return None
        return read_plan_folder(folder)
    if Path(request.base).is_dir():
        note(f"Reading the base plan from {request.base}/resources.json...")
    else:
        note(f"Planning the base {request.base!r} (the git ref, with its own code, in a temporary worktree)...")
    return load_base(request.base, stack.root, stack.name)


def check_out(plan_or_stack: Plan | LoadedStack, folder: Path) -> None:
    """Raise a UserError (naming ``--out``) unless ``folder`` holds nothing but an earlier plan, so that
    replacing it whole deletes nothing else (see :func:`planning.artifacts.check_replaceable`)."""
    stack = plan_or_stack.stack if isinstance(plan_or_stack, Plan) else plan_or_stack
    check_replaceable(folder, OUTPUT_LAYOUT, keep=(stack.root, Path.cwd()), key=OUT_KEY)


def write(plan: Plan, folder: Path) -> None:
    """Write ``plan``'s artifacts into ``folder`` (normally ``plan.out``, which the job files' code paths are
    relative to), replacing it whole once every file is written: a failure or an interrupt leaves the earlier
    output as it was. A folder that holds anything else, a full disk or a read-only folder: a UserError."""
    check_out(plan, folder)
    try:
        with atomic_directory(folder) as staging:
            _write_files(plan, staging)
    except OSError as err:  # a full disk or a read-only folder: the earlier output is still there
        where = f" ({err.filename})" if err.filename else ""
        raise UserError(f"cannot write the plan to {folder}: {err.strerror or err}{where}", key=OUT_KEY) from None


def _write_files(plan: Plan, folder: Path) -> None:
    write_text(folder / "resources.json", canonical_json(plan.resources))
    write_text(folder / "outputs.json", canonical_json(plan.outputs))
    for name, text in sorted(plan.job_files.items()):
        write_text(folder / "jobs" / f"{name}.yml", text)
    sarif = to_sarif(plan.report, plan.stack.file.display, plan.stack.file.line_of)
    write_text(folder / "policy.sarif", canonical_json(sarif))
    write_text(folder / "policy.md", policy_markdown(plan))
    write_text(folder / "waivers.json", canonical_json(to_records(plan.report.waivers)))
    write_text(folder / "cost.json", canonical_json(plan.cost.to_json()))
    if plan.diff is not None:
        write_text(folder / "diff.json", canonical_json(plan.diff))
    write_text(folder / "preflight.json", canonical_json(preflight(plan)))


def policy_markdown(plan: Plan) -> str:
    """``policy.md``: the diff against the base (when there is one), the policy verdict, the cost."""
    top = diff_markdown(plan.diff) + "\n" if plan.diff is not None else ""
    change = plan.diff["cost"] if plan.diff is not None else None
    return top + markdown(plan.report, plan.stack.name, base_waivers=plan.base_waivers) + cost_markdown(
        plan.cost, change)


def preflight(plan: Plan) -> dict[str, Any]:
    """``preflight.json``, the preflight's offline half (``amlgpu preflight``): vCPU demand per family,
    permissions needed."""
    subscription = plan.stack.file.config.get("azure-native:subscriptionId")
    return offline(plan.stack.config, plan.stack.name, subscription if isinstance(subscription, str) else None)


def summary(plan: Plan) -> dict[str, Any]:
    """One stack's entry of ``amlgpu plan --format json``."""
    resources = plan.resources
    return {
        "stack": plan.stack.name,
        "out": shown_path(plan.out),
        "resources": azure_resource_count(resources),
        "components": len(resources) - azure_resource_count(resources),
        "protected": sum(1 for r in resources if r.get("options", {}).get("protect")),
        "runs": sorted(plan.job_files),
        "policy": {
            "mandatory_failures": plan.report.mandatory_failures,
            "advisory": plan.report.advisory_failures,
            "waived": plan.report.waived,
        },
        "cost": plan.cost.to_json()["stack"],
        **({"diff": plan.diff["verdict"]} if plan.diff is not None else {}),
    }


def outcome(plan: Plan, format: str) -> StackOutcome:
    """What is kept of ``plan`` when several stacks are planned (figures, and the ``format``'s document: the JSON
    summary or ``policy.md``), masked now, while the stack's own secrets are known."""
    report, cost = plan.report, plan.cost
    return StackOutcome(
        stack=plan.stack.name, exit_code=plan.exit_code, out=shown_path(plan.out),
        mandatory=report.mandatory_failures, advisory=report.advisory_failures, waived=report.waived,
        ceiling_usd_per_hour=cost.ceiling_usd_per_hour, priced_ceiling_usd_per_hour=cost.priced_ceiling_usd_per_hour,
        diff=plan.diff["verdict"] if plan.diff is not None else None,
        policy_md=mask(policy_markdown(plan)) if format == "markdown" else None,
        summary=mask_data(summary(plan)) if format == "json" else {},
    )


def outside_links(plan: Plan) -> dict[str, tuple[str, ...]]:
    """Each run's code folder holding symbolic links that lead outside it, with those links (neither scanned
    nor uploaded)."""
    folders = sorted({run.spec["code"] for run in plan.runs if run.spec.get("code") is not None})
    found = {folder: code_outside_links(plan.stack.root / folder) for folder in folders}
    return {folder: links for folder, links in found.items() if links}


def job_report(plan: Plan, job: str) -> Report:
    """The verdict on one run, pipeline or sweep (``amlgpu submit``'s gate): its own findings and, for a
    pipeline or sweep, every step's (named ``<job>/<step>``)."""
    mine = {Owner("run", job), Owner("pipeline", job), Owner("sweep", job)}
    steps = f"{job}/"
    return replace(plan.report, findings=tuple(
        f for f in plan.report.findings
        if f.owner in mine or (f.owner.kind == "run" and f.owner.name.startswith(steps))))


def pack_config(stack: LoadedStack, given: Path | None = None) -> dict[str, Any] | None:
    """The pack config ``stack``'s gate uses: ``given`` (``--policy-config``), else the project's for the stack,
    else none (:func:`policies.packconfig.for_stack`)."""
    return for_stack(stack.root, stack.name, given)


def load_prices(path: Path | None) -> PriceTable:
    """The shipped pricing table, overridden figure by figure by the ``--prices`` file when one is given."""
    shipped = load_table(DEFAULT_TABLE)
    if path is None:
        return shipped
    try:
        return shipped.overridden_by(load_table(path))
    except FileNotFoundError:
        raise UserError("pricing table not found", file=str(path), key="--prices") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the pricing table: {err}", file=str(path), key="--prices") from None
    except PriceTableError as err:
        raise UserError(str(err), file=str(path), key=err.key) from None


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


def _waiver_problems(name: str, policy_config: Path | None) -> list[Problem]:
    """The rule and governance problems of the stack file's waivers that are otherwise valid."""
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
