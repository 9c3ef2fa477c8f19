"""Budget rules: what the stack and its runs can cost at list price, against budgets from the pack config.

Figures come from :mod:`policies.cost` (the pricing table ``azurefacts/prices.json``, or the plan's
``--prices FILE``). A price the table does not have is unknown: a rule then judges only what it can
compute (a sum of the known part that already exceeds the budget still fires, saying "at least").
Advisory by default: a budget is a team's choice, not a promise that the run fails. Budgets are whole
US dollars, set per rule in the pack config (``{"run-cost-ceiling": {"max_usd_per_run": 2000}}``).
"""

from __future__ import annotations

from azurefacts.resource_types import COMPUTE
from policies.cost import UNKNOWN, CostReport, SweepCost, estimate
from policies.rule import Violation, stack_rule
from policies.stack import WORKSPACE_TYPE, Stack

COST_GUIDE = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-manage-optimize-cost"
PRICES_API = "https://learn.microsoft.com/en-us/rest/api/cost-management/retail-prices/azure-retail-prices"


def _cost(stack: Stack) -> CostReport:
    return estimate(stack, stack.prices)


def _money(value: float) -> str:
    return f"${value:,.2f}"


@stack_rule(
    id="stack-hourly-ceiling",
    title="The stack's clusters at full scale stay within the hourly budget",
    severity="medium",
    enforcement="advisory",
    rationale="Every cluster may scale to max_instances at once (a burst of queued jobs does exactly that): the sum "
    "of their node prices at max nodes is what the stack can burn per hour. Prices: the pricing table "
    "(Azure Retail Prices API, Linux, list price).",
    remediation="Lower clusters[].max_instances, use low_priority for interruptible work, or raise the budget "
    "(stack-hourly-ceiling.max_usd_per_hour in the pack config).",
    reference=COST_GUIDE,
)
def stack_hourly_ceiling(stack: Stack, *, max_usd_per_hour: int = 1000) -> list[Violation]:
    workspaces = stack.of_type(WORKSPACE_TYPE)
    if not workspaces:
        return []
    cost = _cost(stack)
    total = cost.priced_ceiling_usd_per_hour
    if total <= max_usd_per_hour:
        return []
    unknown = [c.name for c in cost.clusters if c.ceiling_usd_per_hour == UNKNOWN]
    qualifier = f"at least {_money(total)} (price unknown for {', '.join(unknown)})" if unknown else _money(total)
    return [Violation(workspaces[0], f"all clusters at max nodes cost {qualifier} per hour, over the budget of "
                                     f"{_money(max_usd_per_hour)} per hour")]


@stack_rule(
    id="run-cost-ceiling",
    title="A run's or sweep's worst case stays within the per-run budget",
    severity="medium",
    enforcement="advisory",
    rationale="Azure ML bills every node of a run for as long as it runs and cancels it at limits.timeout: "
    "instance_count x node price x timeout is the most one submission can cost. A sweep (a sweep job, a "
    "pipeline's sweep step) is judged as a whole, by the figure cost.json shows: every trial run to "
    "limits.trial_timeout (max_total_trials x nodes x price x trial_timeout), or the trials running at once until "
    "limits.timeout cancels the sweep, whichever is lower. A run or sweep without a timeout has no ceiling (rule "
    "run-timeout-set reports a run's).",
    remediation="Lower resources.instance_count or limits.timeout (a sweep's limits.max_total_trials, "
    "trial_timeout or timeout), or raise the budget (run-cost-ceiling.max_usd_per_run in the pack config).",
    reference=COST_GUIDE,
    config_key=("limits", "timeout"),
)
def run_cost_ceiling(stack: Stack, *, max_usd_per_run: int = 5000) -> list[Violation]:
    cost = _cost(stack)
    out = []
    budget = f"over the budget of {_money(max_usd_per_run)} per run"
    trials = {sweep.trial.name for sweep in stack.sweeps}
    for run in stack.runs:
        if run.name in trials:
            continue  # judged with its sweep, below
        entry = next(r for r in cost.runs if r.name == run.name)
        ceiling = entry.ceiling_usd
        if isinstance(ceiling, float) and ceiling > max_usd_per_run:
            hours = (entry.timeout_s or 0) / 3600
            out.append(Violation(run, f"{entry.nodes} node(s) x {_money(entry.node_usd_per_hour or 0)} per hour x "
                                      f"{hours:g} h timeout = {_money(ceiling)}, {budget}"))
    costs = {entry.name: entry for entry in cost.sweeps}
    for sweep in stack.sweeps:
        whole = costs[sweep.name]
        if isinstance(whole.ceiling_usd, float) and whole.ceiling_usd > max_usd_per_run:
            out.append(Violation(sweep.subject, f"{_sweep_bound(whole)} = {_money(whole.ceiling_usd)}, {budget}"))
    return out


def _sweep_bound(entry: SweepCost) -> str:
    """How a sweep's ceiling is reached, and which of its limits binds it."""
    price = _money(entry.node_usd_per_hour or 0)
    if entry.bound_by == "timeout":
        hours = (entry.timeout_s or 0) / 3600
        other = "" if entry.trial_timeout_s is None else \
            f" before {entry.trials} trial(s) x {(entry.trial_timeout_s or 0) / 3600:g} h trial_timeout"
        return (f"sweep: {entry.concurrent} trial(s) at once x {entry.nodes} node(s) x {price} per hour x {hours:g} h "
                f"(limits.timeout binds: it cancels the sweep{other})")
    hours = (entry.trial_timeout_s or 0) / 3600
    other = "; limits.timeout is not set" if entry.timeout_s is None else \
        f"; the sweep's limits.timeout of {entry.timeout_s / 3600:g} h allows more"
    return (f"sweep: {entry.trials} trial(s) x {entry.nodes} node(s) x {price} per hour x {hours:g} h trial_timeout "
            f"(limits.max_total_trials and trial_timeout bind{other})")


@stack_rule(
    id="cluster-idle-floor",
    title="Clusters that never scale to zero stay within the monthly idle budget",
    severity="low",
    enforcement="advisory",
    rationale="min_instances nodes stay allocated, and billed, all month (730 hours) whether or not a job runs; "
    "a GPU cluster that scales to zero costs nothing while idle.",
    remediation="Set clusters[].min_instances: 0 (the default), or raise the budget "
    "(cluster-idle-floor.max_usd_per_month in the pack config).",
    reference=COST_GUIDE,
    config_key=("min_instances",),
)
def cluster_idle_floor(stack: Stack, *, max_usd_per_month: int = 0) -> list[Violation]:
    by_name = {c.name: c for c in _cost(stack).clusters}
    out = []
    for resource in stack.of_type(COMPUTE):
        entry = by_name.get(stack.owner(resource).name)
        if entry is None or entry.min_instances == 0:
            continue
        floor = entry.floor_usd_per_month
        budget = _money(max_usd_per_month)
        if isinstance(floor, float) and floor > max_usd_per_month:
            out.append(Violation(resource, f"min_instances {entry.min_instances} keeps {entry.min_instances} "
                                           f"{entry.size} node(s) billed all month: {_money(floor)} per month, "
                                           f"over the budget of {budget} per month"))
        elif floor == UNKNOWN and max_usd_per_month == 0:
            out.append(Violation(resource, f"min_instances {entry.min_instances} keeps {entry.min_instances} "
                                           f"{entry.size} node(s) billed all month (price unknown in "
                                           f"{entry.region}), over the budget of {budget} per month"))
    return out
