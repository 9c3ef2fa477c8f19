"""The human-readable plan: a tree of what would be created, then the clusters, runs and policy verdict."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from azurefacts import resource_types, skus
from azurefacts.prices import DEFAULT_TABLE, load, provenance
from planning.outcome import StackOutcome, worst
from policies.cost import CostReport

if TYPE_CHECKING:  # the service imports this module to render its plans; the engine loads Pulumi
    from planning.engine import PlannedResource
    from planning.service import Plan

RUN_PREFIX = "aml-gpu-training:jobs:"
"""Runs' component types: the tree leaves them out, the Runs section lists them with their topology."""

# The input holding each resource's Azure name, where it differs from the logical name.
_OWN_NAME = {
    resource_types.WORKSPACE: "workspaceName",
    resource_types.COMPUTE: "computeName",
    resource_types.ENVIRONMENT_VERSION: "version",
    resource_types.STORAGE_ACCOUNT: "accountName",
    resource_types.BLOB_CONTAINER: "containerName",
    "pulumi-python:dynamic/amlgpu:BuildContextUpload": "prefix",
    resource_types.KEY_VAULT: "vaultName",
    resource_types.CONTAINER_REGISTRY: "registryName",
    resource_types.RESOURCE_GROUP: "resourceGroupName",
    resource_types.VIRTUAL_NETWORK: "virtualNetworkName",
    resource_types.SUBNET: "subnetName",
    resource_types.NETWORK_SECURITY_GROUP: "networkSecurityGroupName",
    resource_types.PRIVATE_ENDPOINT: "privateEndpointName",
    resource_types.PRIVATE_DNS_ZONE: "privateZoneName",
    resource_types.LOG_ANALYTICS_WORKSPACE: "workspaceName",
    resource_types.APPLICATION_INSIGHTS: "resourceName",
}


def _short_type(token: str) -> str:
    # azure-native tokens keep their module: "operationalinsights:Workspace" vs "machinelearningservices:Workspace".
    package, module, kind = token.split(":")
    return f"{module}:{kind}" if package == "azure-native" else kind


def _line(type_: str, name: str, inputs: dict[str, Any], options: dict[str, Any]) -> str:
    label = f"{_short_type(type_)} {name}"
    own = _OWN_NAME.get(type_)
    azure_name = inputs.get(own) if own else None
    if azure_name and azure_name != name:
        label += f" ({azure_name})"
    flags = [flag for flag, on in (
        ("protected", options.get("protect")),
        ("kept on delete", options.get("retainOnDelete")),
        ("replaced on immutable change", options.get("replaceOnChanges")),
    ) if on]
    return label + (f"  [{', '.join(flags)}]" if flags else "")


# What `pulumi preview` prints before a resource for each step and in its summary (pulumi/pulumi,
# pkg/resource/deploy/step.go: RawPrefix "+ " create, "~ " update, "+-" replace, "- " delete, "  " same; Color:
# create green, update yellow, replace bright magenta, delete red, same plain; pkg/backend/display/diff.go,
# renderSummaryEvent: "<prefix><count> to <op>" per kind in the order of deploy.StepOps (same, create, update,
# delete, replace), then "<n> unchanged"). amlgpu.terminal paints them when colour is on.
GLYPHS = {"create": "+ ", "update": "~ ", "delete": "- ", "replace": "+-", "same": "  "}
_ACTIONS = {"add": "create", "update": "update", "replace": "replace", "remove": "delete"}
"""diff.json's action -> Pulumi's step."""


@dataclass(frozen=True)
class _Node:
    key: tuple[str, str]
    """(type, name): what a child's parent reference names."""
    parent: tuple[str, str] | None
    type: str
    name: str
    inputs: dict[str, Any]
    options: dict[str, Any]
    step: str


def _nodes(result: Plan) -> list[_Node]:
    """Every resource of the plan with its step against the base (all "create" without one), and those of the base
    the plan no longer has ("delete"), each with its parent's (type, name)."""
    by_urn = {r.urn: r for r in result.engine.resources}

    def parent_of(resource: PlannedResource) -> tuple[str, str] | None:
        parent = by_urn.get(resource.parent_urn or "")
        return (parent.type, parent.name) if parent is not None else None

    if result.diff is None or result.base is None:
        return [_Node((r.type, r.name), parent_of(r), r.type, r.name, r.inputs, r.options, "create")
                for r in result.engine.resources]
    steps = {(d["type"], d["name"], d.get("parent")): _ACTIONS[d["action"]] for d in result.diff["resources"]}
    base = {(r["type"], r["name"], r.get("parent")) for r in result.base.resources}
    nodes: list[_Node] = []
    here = set()
    for r in result.engine.resources:
        key = (r.type, r.name, r.parent)
        here.add(key)
        # Components are not in the diff (no Azure resource): created when the base lacks them, else the same.
        step = steps.get(key) or ("same" if key in base else "create")
        nodes.append(_Node((r.type, r.name), parent_of(r), r.type, r.name, r.inputs, r.options, step))
    for gone in result.base.resources:
        key = (gone["type"], gone["name"], gone.get("parent"))
        if key in here or gone["type"].startswith(RUN_PREFIX):
            continue
        parent = (gone["parentType"], gone["parent"]) if gone.get("parentType") and gone.get("parent") else None
        nodes.append(_Node((gone["type"], gone["name"]), parent, gone["type"], gone["name"], gone.get("inputs") or {},
                           gone.get("options") or {}, "delete"))
    return nodes


def change_summary(diff: dict[str, Any], azure_resources: int) -> str:
    """``Resources: + 2 to create, ~ 1 to update, - 1 to delete, +-1 to replace, 40 unchanged``, Azure resources
    only (as diff.json counts them), in ``pulumi preview``'s words and order."""
    counts = diff["counts"]
    steps = {"create": counts["add"], "update": counts["update"], "delete": counts["remove"],
             "replace": counts["replace"]}
    pieces = [f"{GLYPHS[step]}{n} to {step}" for step, n in steps.items() if n]
    unchanged = azure_resources - counts["add"] - counts["update"] - counts["replace"]
    pieces.append(f"{unchanged} unchanged")
    return "Resources: " + ", ".join(pieces)


def azure_resource_count(resources: list[dict[str, Any]]) -> int:
    """Resources Azure would hold: the program's own component resources (``aml-gpu-training:*``) left out.
    The text and the JSON summary both count this way."""
    return sum(1 for r in resources if not r["type"].startswith("aml-gpu-training:"))


ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")
"""Words ending in a full stop that end no sentence."""


def first_sentence(text: str) -> str:
    """The first sentence of ``text``, on one line: it ends at a full stop followed by a space outside
    parentheses, never at an abbreviation (``e.g.``), so a fix line is never cut mid-sentence."""
    flat = " ".join(text.split())
    depth = 0
    for at, char in enumerate(flat):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "." and depth <= 0 and flat[at + 1:at + 2] == " " and not flat[:at + 1].endswith(ABBREVIATIONS):
            return flat[:at + 1]
    return flat


ADVISORY_SHOWN = 10
"""Advisory findings the terminal lists before "N more in policy.md" (all of them are in policy.md)."""


def _finding_line(finding: Any, file: str, line_of: Callable[[tuple[str | int, ...]], int]) -> str:
    return (f"{file}:{line_of(finding.location)}  {finding.rule.id}  [{finding.rule.severity}]  "
            f"{finding.subject}: {' '.join(finding.message.split())}")


def findings_text(report: Any, file: str, line_of: Callable[[tuple[str | int, ...]], int]) -> list[str]:
    """Each open mandatory finding as ``file:line  rule-id  [severity]  subject: message`` with its fix below
    (as ruff, Checkov and tflint print theirs), then the count line; empty when nothing mandatory failed."""
    mandatory = [f for f in report.findings if not f.waived and f.enforcement == "mandatory"]
    if not mandatory:
        return []
    lines = []
    for finding in mandatory:
        lines.append(_finding_line(finding, file, line_of))
        lines.append(f"    fix: {first_sentence(finding.rule.remediation)}")
    n, advisory = len(mandatory), report.advisory_failures
    lines.append(f"{n} mandatory failure{'s' if n != 1 else ''} (exit 1); {advisory} advisory warning"
                 f"{'s' if advisory != 1 else ''} and the full report in policy.md.")
    return lines


def stale_waivers_text(report: Any) -> list[str]:
    """One line per stale waiver (approved for a finding that has since changed): what changed, how to approve."""
    return [f"note: {stale.why}" for stale in report.stale_waivers]


def advisory_text(report: Any, file: str, line_of: Callable[[tuple[str | int, ...]], int], *,
                  policy_md: str = "policy.md", shown: int = ADVISORY_SHOWN) -> list[str]:
    """The open advisory findings, most severe first, one line each, at most ``shown`` of them and then how
    many more ``policy_md`` lists; empty when there is none."""
    advisory = [f for f in report.findings if not f.waived and f.enforcement == "advisory"]
    if not advisory:
        return []
    lines = [f"Advisory findings (reported, not blocking; fixes in {policy_md}):"]
    lines += [f"  {_finding_line(f, file, line_of)}" for f in advisory[:shown]]
    if len(advisory) > shown:
        lines.append(f"  {len(advisory) - shown} more in {policy_md}.")
    return lines


def waivers_text(report: Any) -> list[str]:
    """The waivers in effect (what each excuses, until when, who granted it) and those that expired. A stale
    waiver (:func:`stale_waivers_text`) is in neither list."""
    expired = [w for _, w in report.expired_waivers]
    stale = [s.waiver for s in report.stale_waivers]  # listed on their own, with the fingerprint to approve
    lines = []
    active = [w for w in report.waivers if not any(w is e for e in (*expired, *stale))]
    if active:
        lines.append("Waivers in effect:")
        for waiver in active:
            excused = sum(1 for f in report.findings if f.waiver is waiver)
            lines.append(f"  {waiver.rule} for {waiver.resource} until {waiver.expires.isoformat()} ({waiver.origin}, "
                         f"{excused} finding{'s' if excused != 1 else ''} waived): {first_sentence(waiver.reason)}")
    if report.expired_waivers:
        lines.append("Expired waivers (no longer applied: renew or remove them):")
        lines += [f"  waivers[{i}]: {w.rule} for {w.resource} expired on {w.expires.isoformat()}"
                  for i, w in report.expired_waivers]
    return lines


def _usd(value: float) -> str:
    return f"{value:,.2f}"


def cost_text(cost: CostReport) -> list[str]:
    """What the stack costs at list price: the priced figure, and each cluster the table has no price for."""
    unpriced = [c for c in cost.clusters if c.node_usd_per_hour is None and c.max_instances]
    priced = [(c, c.node_usd_per_hour) for c in cost.clusters if c.node_usd_per_hour is not None]
    floor = cost.floor_usd_per_month
    floor_text = f"{_usd(floor)} USD/month idle floor" if isinstance(floor, float) else "idle floor unknown"
    parts = ", ".join(f"{c.name} {c.max_instances} x {_usd(price)}" for c, price in priced)
    dated = priced_at([c for c, _ in priced])
    if not unpriced:
        return [f"Cost at list price: {_usd(cost.priced_ceiling_usd_per_hour)} USD/h with every cluster at max "
                f"nodes ({parts}), {floor_text} (cost.json).", *dated]
    if priced:
        lines = [f"Cost at list price: at least {_usd(cost.priced_ceiling_usd_per_hour)} USD/h with every cluster "
                 f"at max nodes ({parts}), {floor_text} (cost.json).", *dated]
    else:
        lines = [f"Cost at list price: unknown: no cluster of this stack has a price in the table; {floor_text}."]
    regions = ", ".join(load(DEFAULT_TABLE).regions)
    missing = ", ".join(f"{c.name} ({c.size} in {c.region}, {c.tier})" for c in unpriced)
    lines.append(f"  Not priced: {missing}. The shipped table covers {regions}; add figures with "
                 "`amlgpu prices refresh --region R` or `--prices FILE`.")
    return lines


def priced_at(priced: list[Any]) -> list[str]:
    """The line under the cost naming the prices' sources and dates, and a warning line when they are stale."""
    said, stale = provenance(((c.price_date, c.price_source) for c in priced), today=dt.date.today())
    if not priced:
        return []
    return [f"  Prices: {said}; `amlgpu prices show` lists them.", *([f"  warning: {stale}"] if stale else [])]


def plan_tree(result: Plan, out: str) -> str:
    resources: list[dict[str, Any]] = result.resources
    nodes = _nodes(result)
    known = {node.key for node in nodes}
    children: dict[tuple[str, str] | None, list[_Node]] = defaultdict(list)
    for node in nodes:
        children[node.parent if node.parent in known else None].append(node)
    lines = [f"Plan for stack {result.stack.name} (offline: Pulumi mock engine, nothing sent to Azure)", ""]

    def walk(parent: tuple[str, str] | None, depth: int, seen: frozenset[tuple[str, str]]) -> None:
        for node in sorted(children.get(parent, []), key=lambda n: (n.type, n.name, n.step)):
            if node.type.startswith(RUN_PREFIX) or node.key in seen:
                continue  # runs are listed below, with their topology
            # The step's column first, then the tree's indentation, as pulumi preview lays it out.
            lines.append(f"{GLYPHS[node.step]} {'  ' * depth}{_line(node.type, node.name, node.inputs, node.options)}")
            walk(node.key, depth + 1, seen | {node.key})

    walk(None, 0, frozenset())
    config = result.stack.config
    lines += ["", "Clusters:"]
    for cluster in config.clusters:
        sku = skus.lookup(cluster.size)
        fabric = f"InfiniBand {sku.ib_generation}" if sku.infiniband else "no InfiniBand"
        lines.append(
            f"  {cluster.name:<20} {cluster.size:<28} {sku.gpus}x {sku.gpu_model} {sku.gpu_memory_gb}GB, {fabric}, "
            f"{cluster.min_instances}..{cluster.max_instances} nodes, {cluster.tier}"
        )
    if result.runs:
        lines += ["", "Runs:"]
        for run in result.runs:
            dist = run.distribution
            lines.append(
                f"  {run.name:<28} {dist['type']:<10} {run.instance_count} node(s) x {run.processes_per_node} "
                f"process(es) on {run.cluster.name}, launcher {run.launcher}"
                + (f" (from {run.launcher_script})" if run.launcher_script else "")
            )
            lines += [f"    added by the project: {note}" for note in run.defaults]
    report = result.report
    protected = sum(1 for r in resources if r.get("options", {}).get("protect"))
    custom = azure_resource_count(resources)
    counted = (f"{custom} Azure resources to create" if result.diff is None else
               f"{change_summary(result.diff, custom)}\n{custom} Azure resources in the plan")
    lines += [
        "",
        f"{counted} ({protected} protected from deletion), {len(result.runs)} run(s).",
        f"Policy: {report.mandatory_failures} mandatory failure(s), {report.advisory_failures} advisory warning(s), "
        f"{report.waived} waived.",
        f"Wrote {out}/: resources.json, outputs.json, policy.sarif, policy.md"
        + (f", jobs/*.yml ({len(result.job_files)})" if result.job_files else ""),
    ]
    file, line_of = result.stack.file.display, result.stack.file.line_of
    failures = findings_text(report, file, line_of)
    if failures:
        lines += ["", "Mandatory policy failures:", *failures]
    stale = stale_waivers_text(report)
    if stale:
        stale = ["Stale waivers (the finding changed since approval; not applied):", *stale]
    advisory = advisory_text(report, file, line_of, policy_md=f"{out}/policy.md")
    waivers = waivers_text(report)
    for block in (stale, advisory, waivers):
        if block:
            lines += ["", *block]
    return "\n".join(lines)


def stack_report(result: Plan, out: str) -> str:
    """The terminal report of one planned stack (``result``: a :class:`~planning.service.Plan`):
    what would be created, the policy verdict (mandatory findings with their fix, advisory findings, waivers),
    the cost at list price and, against a base, the change. ``out``: the output folder as shown."""
    lines = [plan_tree(result, out), "", *cost_text(result.cost)]
    unsold = [f"{c.name} ({c.size} in {c.region})" for c in result.cost.not_listed]
    if unsold:
        lines.append(f"Not listed as sold in its region (Microsoft's products-by-region table): "
                     f"{', '.join(unsold)}; the cluster may not deploy there (amlgpu preflight asks Azure).")
    if result.diff is not None:
        lines.append(f"Against {result.diff['base']}: {result.diff['verdict']} (diff.json)")
    return "\n".join(lines)


def hourly_cost(outcome: StackOutcome) -> str:
    """A stack's ceiling per hour: the figure, or the least it is when a cluster has no price."""
    ceiling = outcome.ceiling_usd_per_hour
    if isinstance(ceiling, float | int):
        return _usd(ceiling)
    if ceiling is None:
        return "-"
    least = outcome.priced_ceiling_usd_per_hour
    return f"{ceiling} (>= {_usd(least)})" if least else str(ceiling)


def figures(outcome: StackOutcome) -> tuple[str, str, str]:
    """A stack's open mandatory and advisory findings and its cost per hour, as table cells ("-" for a stack
    whose plan stopped at bad input or an internal error)."""
    if outcome.error is not None:
        return ("-", "-", "-")
    return (str(outcome.mandatory), str(outcome.advisory), hourly_cost(outcome))


def summary_table(outcomes: Sequence[StackOutcome], *, deleted: Sequence[str] = (), unchanged: int = 0,
                  since: str | None = None) -> str:
    """The table that ends a plan of several stacks: one line per stack with its verdict, its open mandatory
    and advisory findings and its cost per hour with every cluster at max nodes; the stacks deleted since
    ``since`` (``--changed-since``); then the count per verdict and the exit code (the worst stack's)."""
    header = ("Stack", "Verdict", "Mandatory", "Advisory", "Cost/h (USD)")
    rows = [(o.stack, o.verdict, *figures(o)) for o in outcomes]
    rows += [(name, "deleted", "-", "-", "-") for name in deleted]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(cells).rstrip()

    lines = [line(header), *(line(row) for row in rows)]
    verdicts = ("passed", "failed", "bad input", "internal error")
    counts = {v: sum(1 for o in outcomes if o.verdict == v) for v in verdicts}
    n = len(outcomes)
    internal = f", {counts['internal error']} internal error" if counts["internal error"] else ""
    lines.append(f"{n} stack{'s' if n != 1 else ''} planned: {counts['passed']} passed, {counts['failed']} failed "
                 f"a mandatory policy, {counts['bad input']} bad input{internal} "
                 f"(exit {worst(o.exit_code for o in outcomes)}).")
    if since is not None:
        if unchanged:
            lines.append(f"{unchanged} stack{'s' if unchanged != 1 else ''} unchanged since {since}: not planned.")
        if deleted:
            lines.append(f"Deleted since {since}: {', '.join(deleted)}. Nothing is planned for a deleted stack; what "
                         "it deployed stays until `pulumi destroy` removes it.")
    return "\n".join(lines)
