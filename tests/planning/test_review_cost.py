"""What a stack and its runs cost (``cost.json``), and the budget rules that judge it with the pack's parameters.

The policy baseline (the real plan of the dev stack plus five runs, a pipeline and a sweep) is moved to eastus2
on H100 nodes, a size and region the shipped pricing table prices (98.32 USD per node-hour). Where a test needs
a cluster the table cannot price, it moves it to japaneast, a region the table does not cover.
"""

from __future__ import annotations

from typing import Any

import pytest

from azurefacts.prices import HOURS_PER_MONTH, load
from planning.review import cost_markdown
from policies.cost import UNKNOWN, estimate
from policies.stack import Stack
from tests.policies.test_baseline import Baseline, baseline

COMPUTE = "azure-native:machinelearningservices:Compute"
H100 = "Standard_ND96isr_H100_v5"
RATE = 98.32
UNPRICED_REGION = "japaneast"


def on_h100(min_nodes: int = 1, max_nodes: int = 4, priority: str = "Dedicated", region: str = "eastus2") -> Baseline:
    b = baseline()
    compute = b.inputs(COMPUTE, "gpu-a100")
    compute["location"] = region
    props = compute["properties"]["properties"]
    props.update(vmSize=H100, vmPriority=priority)
    props["scaleSettings"].update(minNodeCount=min_nodes, maxNodeCount=max_nodes)
    return b


def unpriced_builder(b: Baseline) -> Baseline:
    """The image-build cluster (Standard_DS3_v2, priced where the workspace is) moved where the table has no figure."""
    b.inputs(COMPUTE, "image-builder")["location"] = UNPRICED_REGION
    return b


def cost_of(b: Baseline) -> dict[str, Any]:
    return estimate(Stack(b.resources, b.runs), load()).to_json()


def test_cluster_ceiling_floor_and_run_figures() -> None:
    cost = cost_of(unpriced_builder(on_h100()))
    cluster = next(c for c in cost["clusters"] if c["name"] == "gpu-a100")
    assert cluster["node_usd_per_hour"] == RATE and cluster["price"]["date"] == "2024-08-18"
    assert cluster["ceiling_usd_per_hour"] == round(4 * RATE, 2)
    assert cluster["floor_usd_per_month"] == round(RATE * HOURS_PER_MONTH, 2)
    run = next(r for r in cost["runs"] if r["name"] == "ddp-per-process")
    assert (run["nodes"], run["timeout_s"]) == (2, 7200)
    assert run["usd_per_hour"] == round(2 * RATE, 2) and run["ceiling_usd"] == round(2 * RATE * 2, 2)
    # The image-build cluster's size has no figure in its region: the stack's sum is unknown, not partial.
    assert next(c for c in cost["clusters"] if c["name"] == "image-builder")["node_usd_per_hour"] == UNKNOWN
    assert cost["stack"]["ceiling_usd_per_hour"] == UNKNOWN


@pytest.mark.parametrize(
    ("label", "variant", "node", "ceiling", "floor"),
    [
        ("tier not in the table", on_h100(priority="LowPriority"), UNKNOWN, UNKNOWN, UNKNOWN),
        ("region not in the table", on_h100(region=UNPRICED_REGION), UNKNOWN, UNKNOWN, UNKNOWN),
        ("zero min nodes cost nothing at any price", on_h100(min_nodes=0, region=UNPRICED_REGION), UNKNOWN, UNKNOWN,
         0.0),
    ],
)
def test_unknown_is_never_zero(label: str, variant: Baseline, node: Any, ceiling: Any, floor: Any) -> None:
    cluster = next(c for c in cost_of(variant)["clusters"] if c["name"] == "gpu-a100")
    assert (cluster["node_usd_per_hour"], cluster["ceiling_usd_per_hour"], cluster["floor_usd_per_month"]) == (
        node, ceiling, floor)


def test_a_run_without_timeout_is_unbounded() -> None:
    b = on_h100()
    del b.run("ddp-per-process")["spec"]["limits"]
    run = next(r for r in cost_of(b)["runs"] if r["name"] == "ddp-per-process")
    assert run["ceiling_usd"] == "unbounded" and run["usd_per_hour"] == round(2 * RATE, 2)


def _budget_findings(b: Baseline, pack: dict[str, Any] | None = None) -> dict[str, list[str]]:
    report = b.evaluate(pack_config=pack)
    out: dict[str, list[str]] = {}
    for f in report.findings:
        if f.rule.id in ("stack-hourly-ceiling", "run-cost-ceiling", "cluster-idle-floor"):
            assert f.enforcement == "advisory"
            out.setdefault(f.rule.id, []).append(f.text)
    return out


def test_budget_defaults_only_flag_an_idle_floor() -> None:
    found = _budget_findings(on_h100())
    assert list(found) == ["cluster-idle-floor"]
    (text,) = found["cluster-idle-floor"]
    assert "$71,773.60 per month" in text and "budget of $0.00 per month" in text
    assert _budget_findings(on_h100(min_nodes=0)) == {}


def test_budget_rules_fire_with_the_pack_parameters_and_name_figure_and_budget() -> None:
    pack = {
        "stack-hourly-ceiling": {"max_usd_per_hour": 300},
        "run-cost-ceiling": {"max_usd_per_run": 300},
        "cluster-idle-floor": {"max_usd_per_month": 100000},
    }
    found = _budget_findings(unpriced_builder(on_h100()), pack)
    assert set(found) == {"stack-hourly-ceiling", "run-cost-ceiling"}
    (stack_text,) = found["stack-hourly-ceiling"]
    assert "at least $393.28 (price unknown for image-builder) per hour" in stack_text
    assert "budget of $300.00 per hour" in stack_text
    # The five runs, the pipeline's 2-node training step and the sweep as a whole (its 4 trials, not one).
    assert len(found["run-cost-ceiling"]) == 7
    assert sum("run 'train-eval/train'" in t or "sweep 'lr-sweep'" in t for t in found["run-cost-ceiling"]) == 2
    assert not any("lr-sweep/trial" in t for t in found["run-cost-ceiling"])
    assert any("sweep 'lr-sweep'" in t and "sweep: 4 trial(s) x 2 node(s) x $98.32 per hour x 2 h trial_timeout "
               "(limits.max_total_trials and trial_timeout bind; the sweep's limits.timeout of 8 h allows more) = "
               "$1,573.12, over the budget of $300.00 per run" in t for t in found["run-cost-ceiling"])
    assert any("2 node(s) x $98.32 per hour x 2 h timeout = $393.28, over the budget of $300.00 per run" in t
               for t in found["run-cost-ceiling"])


@pytest.mark.parametrize(("limits", "budget", "says"), [
    # 20 trials, 2 of 2 nodes at once on the 4-node cluster: the 3 h timeout binds before 20 x 2 h.
    ({"max_total_trials": 20, "max_concurrent_trials": 4, "timeout": 3 * 3600}, 1000,
     "sweep: 2 trial(s) at once x 2 node(s) x $98.32 per hour x 3 h (limits.timeout binds: it cancels the sweep "
     "before 20 trial(s) x 2 h trial_timeout) = $1,179.84, over the budget of $1,000.00 per run"),
    # No sweep timeout: every trial to its trial_timeout.
    ({"max_total_trials": 6, "timeout": None}, 2000,
     "sweep: 6 trial(s) x 2 node(s) x $98.32 per hour x 2 h trial_timeout (limits.max_total_trials and "
     "trial_timeout bind; limits.timeout is not set) = $2,359.68, over the budget of $2,000.00 per run"),
])
def test_the_budget_judges_a_sweep_whole_and_names_the_limit_that_binds(limits: dict[str, Any], budget: int,
                                                                         says: str) -> None:
    b = on_h100()
    sweep = _sweep(b, **limits)
    assert sweep["ceiling_usd"] > budget > 2 * 2 * RATE  # one trial (2 nodes x 2 h) is within the budget
    found = _budget_findings(b, {"run-cost-ceiling": {"max_usd_per_run": budget}})
    assert [t for t in found["run-cost-ceiling"] if "lr-sweep" in t] == [f"sweep 'lr-sweep': {says}"]


def test_budget_rules_judge_only_what_the_table_prices() -> None:
    pack = {"stack-hourly-ceiling": {"max_usd_per_hour": 0}, "run-cost-ceiling": {"max_usd_per_run": 0}}
    found = _budget_findings(unpriced_builder(on_h100(min_nodes=0, region=UNPRICED_REGION)), pack)
    assert found == {}


@pytest.mark.parametrize(
    ("size", "region", "node", "sold"),
    [
        (H100, "eastus2", RATE, "listed"),
        ("Standard_ND96isr_H200_v5", "eastus", UNKNOWN, "not listed"),  # Microsoft sells H200 in eastus2 only
        ("Standard_ND128isr_GB300_v6", "eastus2", UNKNOWN, UNKNOWN),  # the regions table has no GB300 rows
    ],
)
def test_each_cluster_says_whether_its_size_is_sold_in_its_region(size: str, region: str, node: Any,
                                                                   sold: str) -> None:
    b = on_h100(region=region)
    b.inputs(COMPUTE, "gpu-a100")["properties"]["properties"]["vmSize"] = size
    report = estimate(Stack(b.resources, b.runs), load())
    cluster = next(c for c in report.to_json()["clusters"] if c["name"] == "gpu-a100")
    assert (cluster["node_usd_per_hour"], cluster["availability"]) == (node, sold)
    note = f"- `gpu-a100`: {size} (NDsr H200 v5-Series) is not listed for {region}"
    assert (note in cost_markdown(report)) == (sold == "not listed")


def _sweep(b: Baseline, **limits: int | None) -> dict[str, Any]:
    from jobs.pipelines import SWEEP_TYPE

    spec = b.job(SWEEP_TYPE, "lr-sweep")["limits"]
    for key, value in limits.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    (sweep,) = cost_of(b)["sweeps"]
    assert sweep["name"] == "lr-sweep" and sweep["cluster"] == "gpu-a100" and sweep["nodes_per_trial"] == 2
    return sweep  # type: ignore[no-any-return]


def test_a_sweep_costs_all_its_trials_not_one() -> None:
    # 4 trials of 2 nodes, one at a time, 2 h each: 4 x 2 x 2 h at the node price; the 8 h timeout does not bind.
    sweep = _sweep(on_h100())
    assert (sweep["trials"], sweep["concurrent_trials"]) == (4, 1)
    assert sweep["ceiling_usd"] == round(4 * 2 * 2 * RATE, 2) and sweep["bound_by"] == "trials"
    assert sweep["usd_per_hour"] == round(2 * RATE, 2)
    trial = next(r for r in cost_of(on_h100())["runs"] if r["name"] == "lr-sweep/trial")
    assert sweep["ceiling_usd"] == round(4 * trial["ceiling_usd"], 2)  # a run's figure is one trial's


def test_a_sweep_timeout_caps_its_trials_and_concurrency_is_what_the_cluster_holds() -> None:
    # 20 trials, 4 asked at once, on a 4-node cluster: 2 trials of 2 nodes run at once; the 3 h timeout
    # (2 trials x 2 nodes x 3 h) binds before 20 x 2 nodes x 2 h.
    sweep = _sweep(on_h100(), max_total_trials=20, max_concurrent_trials=4, timeout=3 * 3600)
    assert sweep["concurrent_trials"] == 2
    assert sweep["usd_per_hour"] == round(2 * 2 * RATE, 2)
    assert (sweep["ceiling_usd"], sweep["bound_by"]) == (round(2 * 2 * 3 * RATE, 2), "timeout")
    # Left out, max_concurrent_trials is every trial (Azure ML starts them all): still what the cluster holds.
    assert _sweep(on_h100(), max_concurrent_trials=None)["concurrent_trials"] == 2


def test_a_sweep_without_timeouts_is_unbounded_and_an_unknown_price_is_unknown() -> None:
    sweep = _sweep(on_h100(), trial_timeout=None, timeout=None)
    assert (sweep["ceiling_usd"], sweep["bound_by"]) == ("unbounded", None)
    assert _sweep(on_h100(region=UNPRICED_REGION))["ceiling_usd"] == UNKNOWN


def test_the_pull_request_shows_the_whole_sweep_and_its_change() -> None:
    from planning.review import cost_change

    base = estimate(Stack(on_h100().resources, on_h100().runs), load())
    b = on_h100()
    _sweep(b, max_total_trials=8, timeout=20 * 3600)  # the timeout no longer binds
    head = estimate(Stack(b.resources, b.runs), load())
    text = cost_markdown(head, cost_change(base, head))
    row = next(line for line in text.splitlines() if line.startswith("| `lr-sweep` |"))
    whole = 8 * 2 * 2 * RATE
    assert row == (f"| `lr-sweep` | gpu-a100 | 8 (1) x 2 | ${2 * RATE:,.2f} | ${whole:,.2f} (8 trials x 2 h) | "
                   f"+${whole / 2:,.2f} |")
