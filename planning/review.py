"""The reviewer's view of a plan: what changes against a base plan, what gets replaced, what it costs.

:func:`diff` compares two plans' resources (``resources.json``) the way ``pulumi preview`` would judge
them, without credentials:

* a resource is identified by its type, logical name and parent type (what its URN is made of);
* an input change **replaces** the resource when the input (or a parent of it) is in the resource's
  ``replaceOnChanges`` option, or when the provider forces a replacement for it: the inputs of the
  resource's ARM path and its force-new properties (``azurefacts/replacements.json``, taken from
  pulumi-azure-native's own diff rules); changes below ``ignoreChanges`` paths are not changes;
* a replacement shows whether the old resource is deleted first (``deleteBeforeReplace``);
* a ``protect``\\ ed resource that would be deleted or replaced is **blocked**: ``pulumi up`` refuses;
* runs (the stack's declared jobs) are compared by what they resolve to: cluster, nodes, processes
  per node, environment, launcher, and the rest of their job spec.

:func:`verdict` sums it up in one line for the pull request. :func:`diff_markdown` and
:func:`cost_markdown` are the sections of ``policy.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from azurefacts import availability, resource_types
from azurefacts.resource_types import COMPUTE
from policies.cost import UNBOUNDED, UNKNOWN, CostReport
from policies.markdown import code
from policies.markdown import text as markdown_text
from stack.resolved import RUN_TYPE

REPLACEMENTS = Path(__file__).resolve().parent.parent / "azurefacts" / "replacements.json"
DESTROYS = {
    resource_types.WORKSPACE: "a new workspace: the old one's run history, registered models, data assets, "
    "environments and clusters are deleted with it",
}
"""What replacing a resource of a type destroys besides the resource, said beside the replacement."""
PROJECT_PREFIX = "aml-gpu-training:"
"""Component types: logical groupings with no Azure resource of their own (runs are diffed apart)."""
LIFECYCLE_OPTIONS = ("protect", "deleteBeforeReplace", "retainOnDelete", "replaceOnChanges", "ignoreChanges")
CLUSTER_WORDS = {
    "properties.properties.vmSize": "size",
    "properties.properties.vmPriority": "tier",
    "properties.properties.subnet.id": "subnet",
    "properties.properties.subnet": "subnet",
    "properties.properties.enableNodePublicIp": "node public IP",
    "location": "region",
}
"""Compute inputs in the words of the stack file, for the verdict."""


@cache
def force_new() -> Mapping[str, frozenset[str]]:
    """Type token -> top-level inputs whose change makes the provider replace the resource."""
    data = json.loads(REPLACEMENTS.read_text(encoding="utf-8"))
    return {t: frozenset(v["path"]) | frozenset(v["forceNew"]) for t, v in data["types"].items()}


def _key(resource: Mapping[str, Any]) -> tuple[str, str, str]:
    return (resource["type"], resource["name"], resource.get("parentType", ""))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _under(path: str, roots: Iterable[str]) -> str | None:
    """The first of ``roots`` that is ``path``, a parent of it or a child of it (``*`` matches all)."""
    for root in roots:
        if root == "*" or path == root or path.startswith(root + ".") or root.startswith(path + "."):
            return root
    return None


def _changes(old: Mapping[str, Any], new: Mapping[str, Any], ignored: Sequence[str]) -> list[dict[str, Any]]:
    before, after = _flatten(old.get("inputs") or {}), _flatten(new.get("inputs") or {})
    out = []
    for path in sorted(before.keys() | after.keys()):
        a, b = before.get(path), after.get(path)
        if a == b or _under(path, ignored):
            continue
        out.append({"input": path, "old": a, "new": b})
    return out


def _replace_reason(resource_type: str, path: str, replace_on_changes: Sequence[str]) -> str | None:
    if _under(path, replace_on_changes):
        return "replaceOnChanges"
    if path.split(".", 1)[0] in force_new().get(resource_type, frozenset()):
        return "provider: immutable"
    return None


def _options(resource: Mapping[str, Any]) -> Mapping[str, Any]:
    return resource.get("options") or {}


def diff_resources(base: Sequence[Mapping[str, Any]], head: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every Azure resource added, removed, updated in place or replaced, sorted by type and name."""
    old = {_key(r): r for r in base if not r["type"].startswith(PROJECT_PREFIX)}
    new = {_key(r): r for r in head if not r["type"].startswith(PROJECT_PREFIX)}
    out: list[dict[str, Any]] = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        entry: dict[str, Any] = {"type": key[0], "name": key[1], "parent": (b or a or {}).get("parent")}
        if a is None:
            assert b is not None
            out.append({**entry, "action": "add"})
            continue
        if b is None:
            protected = bool(_options(a).get("protect"))
            out.append({**entry, "action": "remove", "blocked": protected,
                        **({"retainOnDelete": True} if _options(a).get("retainOnDelete") else {})})
            continue
        changes = _changes(a, b, _options(b).get("ignoreChanges") or ())
        replace_on = _options(b).get("replaceOnChanges") or ()
        for change in changes:
            reason = _replace_reason(key[0], change["input"], replace_on)
            if reason:
                change["replaces"] = reason
        options = {
            k: {"old": _options(a).get(k), "new": _options(b).get(k)}
            for k in LIFECYCLE_OPTIONS if _options(a).get(k) != _options(b).get(k)
        }
        if not changes and not options:
            continue
        replaced = any("replaces" in c for c in changes)
        action = "replace" if replaced else "update"
        extra: dict[str, Any] = {}
        if replaced:
            extra["deleteBeforeReplace"] = bool(_options(b).get("deleteBeforeReplace"))
            extra["blocked"] = bool(_options(a).get("protect"))
        out.append({**entry, "action": action, "changes": changes, **({"options": options} if options else {}),
                    **extra})
    return out


def _run_view(resource: Mapping[str, Any]) -> dict[str, Any]:
    props = resource.get("inputs") or {}
    spec = props.get("spec") or {}
    distribution = spec.get("distribution") or {}
    return {
        "cluster": (props.get("cluster") or {}).get("name"),
        "cluster_size": (props.get("cluster") or {}).get("size"),
        "cluster_tier": (props.get("cluster") or {}).get("tier"),
        "nodes": (spec.get("resources") or {}).get("instance_count"),
        "processes_per_node": distribution.get("process_count_per_instance"),
        "distribution": distribution.get("type"),
        "launcher": props.get("launcher"),
        "environment": (props.get("environment") or {}).get("id"),
        "timeout_s": (spec.get("limits") or {}).get("timeout"),
    }


_RUN_SPEC_SHOWN = {"compute", "environment", "resources", "distribution", "limits"}
"""Spec keys :func:`_run_view` already shows resolved."""


def diff_runs(base: Sequence[Mapping[str, Any]], head: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Runs added, removed and changed, with their resolved values (changed: field, old -> new)."""
    old = {r["name"]: r for r in base if r["type"] == RUN_TYPE}
    new = {r["name"]: r for r in head if r["type"] == RUN_TYPE}
    out: list[dict[str, Any]] = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None or b is None:
            present = b if b is not None else a
            assert present is not None
            out.append({"name": name, "action": "add" if a is None else "remove", **_run_view(present)})
            continue
        va, vb = _run_view(a), _run_view(b)
        changes = [{"field": k, "old": va[k], "new": vb[k]} for k in va if va[k] != vb[k]]
        spec_a, spec_b = (a.get("inputs") or {}).get("spec") or {}, (b.get("inputs") or {}).get("spec") or {}
        changes += [
            {"field": f"spec.{k}", "old": spec_a.get(k), "new": spec_b.get(k)}
            for k in sorted(spec_a.keys() | spec_b.keys())
            if k not in _RUN_SPEC_SHOWN and spec_a.get(k) != spec_b.get(k)
        ]
        if changes:
            out.append({"name": name, "action": "change", **vb, "changes": changes})
    return out


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value.startswith("/subscriptions/"):
        text = value.rsplit("/", 1)[-1]  # an ARM id: its last segment names it
    return text if len(text) <= 60 else text[:57] + "..."


def _change_text(label: str, old: Any, new: Any) -> str:
    a, b = _short(old), _short(new)
    if a.endswith("...") or b.endswith("..."):
        return f"{label} changed"  # long texts: their heads would read the same
    return f"{label}: {markdown_text(a)} -> {markdown_text(b)}"


def _describe_change(change: Mapping[str, Any], words: Mapping[str, str] | None = None) -> str:
    label = (words or {}).get(change["input"], change["input"])
    return f"{label} {_short(change['old'])} -> {_short(change['new'])}"


def verdict(resources: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]) -> str:
    """One line for reviewers: what is blocked, what is replaced (and what that kills), what else changes."""
    if not resources and not runs:
        return "No change: the plan creates, replaces and removes nothing, and every run resolves as before."
    parts: list[str] = []
    for r in resources:
        if r.get("blocked"):
            lost = f"; {DESTROYS[r['type']]}" if r["type"] in DESTROYS and r["action"] == "replace" else ""
            parts.append(f"BLOCKED: would {'delete' if r['action'] == 'remove' else 'replace'} protected "
                         f"{r['type'].rsplit(':', 1)[-1]} {r['name']} (pulumi up refuses{lost})")
    for r in resources:
        if r["action"] != "replace" or r.get("blocked"):
            continue
        why = ", ".join(_describe_change(c, CLUSTER_WORDS if r["type"] == COMPUTE else None)
                        for c in r["changes"] if "replaces" in c)
        if r["type"] == COMPUTE:
            parts.append(f"replaces cluster {r['parent'] or r['name']} ({why}): queued and running jobs on it are "
                         "cancelled and its nodes are released")
        else:
            lost = f": {DESTROYS[r['type']]}" if r["type"] in DESTROYS else ""
            parts.append(f"replaces {r['type'].rsplit(':', 1)[-1]} {r['name']} ({why}){lost}")
    counts = {a: sum(1 for r in resources if r["action"] == a) for a in ("add", "update", "remove")}
    words = {"add": "added", "update": "updated in place", "remove": "removed"}
    summary = [f"{n} {words[a]}" for a, n in counts.items() if n]
    if summary:
        parts.append("resources: " + ", ".join(summary))
    run_counts = {a: sum(1 for r in runs if r["action"] == a) for a in ("add", "change", "remove")}
    run_words = {"add": "added", "change": "changed", "remove": "removed"}
    if any(run_counts.values()):
        parts.append("runs: " + ", ".join(f"{n} {run_words[a]}" for a, n in run_counts.items() if n))
    return "; ".join(parts)


def diff(base: Sequence[Mapping[str, Any]], head: Sequence[Mapping[str, Any]], *, base_label: str) -> dict[str, Any]:
    """``diff.json``: the resource and run changes from ``base`` to ``head`` plans, and the verdict."""
    resources = diff_resources(base, head)
    runs = diff_runs(base, head)
    return {
        "base": base_label,
        "verdict": verdict(resources, runs),
        "blocked": sum(1 for r in resources if r.get("blocked")),
        "counts": {a: sum(1 for r in resources if r["action"] == a) for a in ("add", "update", "replace", "remove")},
        "resources": resources,
        "runs": runs,
    }


def cost_change(base: CostReport, head: CostReport) -> dict[str, Any]:
    """Stack and per-cluster ceiling and floor, base -> head (the change is unknown when either is)."""

    def delta(a: Any, b: Any) -> dict[str, Any]:
        change = round(b - a, 2) if isinstance(a, float) and isinstance(b, float) else UNKNOWN
        return {"base": a, "head": b, "change": change}

    names = sorted({c.name for c in base.clusters} | {c.name for c in head.clusters})
    clusters = []
    for name in names:
        a, b = base.cluster(name), head.cluster(name)
        clusters.append({
            "name": name,
            "ceiling_usd_per_hour": delta(a.ceiling_usd_per_hour if a else 0.0, b.ceiling_usd_per_hour if b else 0.0),
            "floor_usd_per_month": delta(a.floor_usd_per_month if a else 0.0, b.floor_usd_per_month if b else 0.0),
        })
    base_sweeps, head_sweeps = {w.name: w for w in base.sweeps}, {w.name: w for w in head.sweeps}
    sweeps = [{"name": name, "ceiling_usd": delta(base_sweeps[name].ceiling_usd if name in base_sweeps else 0.0,
                                                  head_sweeps[name].ceiling_usd if name in head_sweeps else 0.0)}
              for name in sorted(base_sweeps.keys() | head_sweeps.keys())]
    return {
        "ceiling_usd_per_hour": delta(base.ceiling_usd_per_hour, head.ceiling_usd_per_hour),
        "floor_usd_per_month": delta(base.floor_usd_per_month, head.floor_usd_per_month),
        "priced_ceiling_usd_per_hour": delta(base.priced_ceiling_usd_per_hour, head.priced_ceiling_usd_per_hour),
        "clusters": clusters,
        "sweeps": sweeps,
    }


# --- Markdown ---------------------------------------------------------------------------------------


_ICONS = {
    "add": "🆕 add", "update": "✏️ update", "replace": "🔁 replace", "remove": "🗑️ remove", "change": "✏️ change",
}


def diff_markdown(result: Mapping[str, Any]) -> str:
    """The diff section that tops ``policy.md``."""
    lines = [f"## Changes against {code(result['base'])}", "", f"**Verdict:** {markdown_text(result['verdict'])}"]
    if result["resources"]:
        lines += ["", "| | Resource | Type | Inputs (old -> new) |", "|---|---|---|---|"]
        for r in result["resources"]:
            mark = "⛔ blocked " + r["action"] if r.get("blocked") else _ICONS[r["action"]]
            details = [
                _change_text(code(c["input"]), c["old"], c["new"])
                + (f" (replaces: {c['replaces']})" if "replaces" in c else "")
                for c in r.get("changes", [])
            ]
            details += [f"option {code(k)}: {markdown_text(v['old'])} -> {markdown_text(v['new'])}"
                        for k, v in r.get("options", {}).items()]
            if r["action"] == "replace":
                details.append("deleted before the new one is created" if r.get("deleteBeforeReplace")
                               else "new one created before the old is deleted")
            if r.get("retainOnDelete"):
                details.append("kept in Azure (retainOnDelete)")
            kind = markdown_text(r["type"].rsplit(":", 1)[-1])
            lines.append(f"| {mark} | {code(r['name'])} | {kind} | {'<br>'.join(details)} |")
    if result["runs"]:
        lines += ["", "| | Run | Cluster | Nodes x processes | Environment | Changes |", "|---|---|---|---|---|---|"]
        for r in result["runs"]:
            changes = "<br>".join(_change_text(markdown_text(c["field"]), c["old"], c["new"])
                                  for c in r.get("changes", []))
            lines.append(f"| {_ICONS[r['action']]} | {code(r['name'])} | {markdown_text(r['cluster'])} | "
                         f"{markdown_text(r['nodes'])} x {markdown_text(r['processes_per_node'] or 1)} | "
                         f"{code(r['environment'])} | {changes} |")
    return "\n".join(lines) + "\n"


def _money(value: Any) -> str:
    if isinstance(value, float):
        return f"${value:,.2f}"
    return str(value)


def _signed(value: Any) -> str:
    if isinstance(value, float):
        return ("+" if value >= 0 else "-") + f"${abs(value):,.2f}"
    return str(value)


def cost_markdown(cost: CostReport, change: Mapping[str, Any] | None = None) -> str:
    """The cost section of ``policy.md``: clusters, runs and, against a base, the change."""
    lines = ["", "### Cost at list price (USD)", ""]
    ceiling = _money(cost.ceiling_usd_per_hour)
    if cost.ceiling_usd_per_hour == UNKNOWN:
        ceiling += f" (at least {_money(cost.priced_ceiling_usd_per_hour)})"
    stack_line = (f"All clusters at max nodes: **{ceiling} per hour**; "
                  f"idle floor (min nodes, 730 h): **{_money(cost.floor_usd_per_month)} per month**.")
    if change:
        hourly = _signed(change["ceiling_usd_per_hour"]["change"])
        if change["ceiling_usd_per_hour"]["change"] == UNKNOWN:
            hourly += f" ({_signed(change['priced_ceiling_usd_per_hour']['change'])} on the priced clusters)"
        stack_line += (f" Change against the base: {hourly} per hour, "
                       f"{_signed(change['floor_usd_per_month']['change'])} per month.")
    by_name = {c["name"]: c for c in (change or {}).get("clusters", [])}
    extra = " Change (ceiling / floor) |" if change else ""
    lines += [stack_line, "", "| Cluster | Size | Tier | Region | Per node-hour | Ceiling per hour | Floor per month |"
              + extra, "|---|---|---|---|---:|---:|---:|" + ("---:|" if change else "")]
    for c in cost.clusters:
        node = _money(c.node_usd_per_hour) if c.node_usd_per_hour is not None else UNKNOWN
        delta = by_name.get(c.name)
        cell = (f" {_signed(delta['ceiling_usd_per_hour']['change'])} / "
                f"{_signed(delta['floor_usd_per_month']['change'])} |" if delta else (" |" if change else ""))
        lines.append(f"| {code(c.name)} | {markdown_text(c.size)} | {markdown_text(c.tier)} | "
                     f"{markdown_text(c.region)} | {node} | {_money(c.ceiling_usd_per_hour)} (max {c.max_instances}) | "
                     f"{_money(c.floor_usd_per_month)} (min {c.min_instances}) |" + cell)
    if cost.runs:
        lines += ["", "| Run | Cluster | Nodes | Per hour | Ceiling (timeout) |", "|---|---|---:|---:|---:|"]
        for r in cost.runs:
            bound = f"{r.timeout_s / 3600:g} h" if r.timeout_s else "no timeout"
            ceiling = UNBOUNDED if r.ceiling_usd == UNBOUNDED else _money(r.ceiling_usd)
            lines.append(f"| {code(r.name)} | {markdown_text(r.cluster)} | {r.nodes} | {_money(r.usd_per_hour)} | "
                         f"{ceiling} ({bound}) |")
    if cost.sweeps:
        swept = {w["name"]: w["ceiling_usd"]["change"] for w in (change or {}).get("sweeps", [])}
        lines += ["", "| Sweep | Cluster | Trials (at once) x nodes | Per hour at once | Whole sweep |"
                  + (" Change |" if change else ""), "|---|---|---:|---:|---:|" + ("---:|" if change else "")]
        for w in cost.sweeps:
            bound = {"trials": f"{w.trials} trials x {(w.trial_timeout_s or 0) / 3600:g} h",
                     "timeout": f"sweep timeout {(w.timeout_s or 0) / 3600:g} h", None: "no timeout"}[w.bound_by]
            lines.append(f"| {code(w.name)} | {markdown_text(w.cluster)} | {w.trials} ({w.concurrent}) x {w.nodes} | "
                         f"{_money(w.usd_per_hour)} | {_money(w.ceiling_usd)} ({bound}) |"
                         + (f" {_signed(swept.get(w.name, UNKNOWN))} |" if change else ""))
    if cost.not_listed:
        regions = availability.load()
        lines += [""] + [
            f"- {code(c.name)}: {markdown_text(c.size)} ({regions.series_of(c.size)}) is not listed for "
            f"{markdown_text(c.region)} in Microsoft's products-by-region table ({regions.date}): it has no list price "
            "there and the cluster may not deploy (`amlgpu preflight` asks the subscription)." for c in cost.not_listed]
    dated = sorted({f"{c.size} in {c.region}: {c.price_date}" for c in cost.clusters if c.price_date})
    sources = sorted({c.price_source for c in cost.clusters if c.price_source})
    lines += ["", "Prices: Linux list prices from the pricing table (`azurefacts/prices.json`, Azure Retail Prices API"
              + (f"; {'; '.join(dated)}" if dated else "") + "). *unknown*: the table has no price for that size, "
              "region and tier (`amlgpu prices refresh --region R`, or `--prices FILE`)."]
    lines += [f"- Source: {markdown_text(source)}" for source in sources]
    return "\n".join(lines) + "\n"
