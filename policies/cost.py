"""What a planned stack can cost: per cluster and per run, from the pricing table (:mod:`azurefacts.prices`).

* a cluster's **ceiling** is its price per node-hour times ``max_instances``: what it burns per hour
  when it scales out fully; its **floor** is ``min_instances`` nodes billed all month (730 hours),
  whether or not a job runs;
* a run costs ``instance_count`` x the node price per hour while it runs; its **ceiling** is that times
  ``limits.timeout`` (Azure ML cancels the job then), "unbounded" without a timeout;
* a sweep's **ceiling** is the whole sweep's: ``max_total_trials`` trials x the trial's ceiling (its nodes x
  the node price x ``limits.trial_timeout``), capped by what the trials running at once can spend before
  ``limits.timeout`` cancels the sweep; its **per hour** is those trials at once: ``max_concurrent_trials``
  (``max_total_trials`` when left out, as Azure ML does), at most as many as the cluster's ``max_instances``
  hold, x the trial's nodes x the node price. "unbounded" with neither timeout.

A price the table does not have is :data:`UNKNOWN`, and so is every figure computed from it; a floor of
zero nodes is zero whatever the price. Figures are rounded to cents (they are estimates at list price).
Each cluster also says whether its size's series is sold in its region (:mod:`azurefacts.availability`):
``listed``, ``not listed`` (no list price there, and the cluster may not deploy) or ``unknown``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from azurefacts import availability
from azurefacts.prices import HOURS_PER_MONTH, PriceTable
from azurefacts.prices import load as load_prices
from azurefacts.resource_types import COMPUTE
from policies.stack import Stack
from policies.wire import get, inputs, same
from stack.resolved import ResolvedRun

UNKNOWN = "unknown"
UNBOUNDED = "unbounded"
TIER_OF_PRIORITY = {"dedicated": "dedicated", "lowpriority": "low_priority"}
"""Azure ML's ``vmPriority`` on the wire -> the pricing table's tier."""

Money = float | str
"""USD rounded to cents, or :data:`UNKNOWN` / :data:`UNBOUNDED`."""


def _usd(value: float) -> float:
    return round(value + 0.0, 2)


def _times(rate: float | None, factor: float) -> Money:
    if factor == 0:
        return 0.0
    return UNKNOWN if rate is None else _usd(rate * factor)


@dataclass(frozen=True)
class ClusterCost:
    name: str
    kind: str
    size: str
    tier: str
    region: str
    min_instances: int
    max_instances: int
    node_usd_per_hour: float | None
    price_date: str | None
    price_source: str | None
    listed: bool | None = None
    """Whether the size's series is listed as sold in the region (None: unknown); see :mod:`azurefacts.availability`."""

    @property
    def availability(self) -> str:
        return UNKNOWN if self.listed is None else "listed" if self.listed else "not listed"

    @property
    def ceiling_usd_per_hour(self) -> Money:
        return _times(self.node_usd_per_hour, self.max_instances)

    @property
    def floor_usd_per_month(self) -> Money:
        return _times(self.node_usd_per_hour, self.min_instances * HOURS_PER_MONTH)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "size": self.size,
            "tier": self.tier,
            "region": self.region,
            "min_instances": self.min_instances,
            "max_instances": self.max_instances,
            "node_usd_per_hour": UNKNOWN if self.node_usd_per_hour is None else self.node_usd_per_hour,
            "ceiling_usd_per_hour": self.ceiling_usd_per_hour,
            "floor_usd_per_month": self.floor_usd_per_month,
            "availability": self.availability,
            **({"price": {"date": self.price_date, "source": self.price_source}} if self.price_date else {}),
        }


@dataclass(frozen=True)
class RunCost:
    name: str
    cluster: str
    nodes: int
    timeout_s: int | None
    node_usd_per_hour: float | None

    @property
    def usd_per_hour(self) -> Money:
        return _times(self.node_usd_per_hour, self.nodes)

    @property
    def ceiling_usd(self) -> Money:
        if self.timeout_s is None:
            return UNBOUNDED
        return _times(self.node_usd_per_hour, self.nodes * self.timeout_s / 3600)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "nodes": self.nodes,
            "timeout_s": self.timeout_s,
            "usd_per_hour": self.usd_per_hour,
            "ceiling_usd": self.ceiling_usd,
        }


@dataclass(frozen=True)
class SweepCost:
    name: str
    cluster: str
    trials: int
    """``limits.max_total_trials``."""
    concurrent: int
    """Trials running at once: ``max_concurrent_trials`` (else every trial), at most what the cluster holds."""
    nodes: int
    """Nodes of one trial."""
    trial_timeout_s: int | None
    timeout_s: int | None
    node_usd_per_hour: float | None

    @property
    def usd_per_hour(self) -> Money:
        return _times(self.node_usd_per_hour, self.concurrent * self.nodes)

    @property
    def trials_ceiling_usd(self) -> Money | None:
        """Every trial run to its trial timeout (None without one)."""
        if self.trial_timeout_s is None:
            return None
        return _times(self.node_usd_per_hour, self.trials * self.nodes * self.trial_timeout_s / 3600)

    @property
    def timeout_ceiling_usd(self) -> Money | None:
        """The trials at once, running until the sweep's timeout (None without one)."""
        if self.timeout_s is None:
            return None
        return _times(self.node_usd_per_hour, self.concurrent * self.nodes * self.timeout_s / 3600)

    @property
    def bound_by(self) -> str | None:
        """``trials`` or ``timeout``: which limit bounds the sweep's cost (None: neither, unbounded)."""
        by_trials, by_timeout = self.trials_ceiling_usd, self.timeout_ceiling_usd
        if by_trials is None or by_timeout is None:
            return "trials" if by_trials is not None else "timeout" if by_timeout is not None else None
        if isinstance(by_trials, float) and isinstance(by_timeout, float) and by_timeout < by_trials:
            return "timeout"
        return "trials"

    @property
    def ceiling_usd(self) -> Money:
        bound = self.bound_by
        if bound is None:
            return UNBOUNDED
        value = self.trials_ceiling_usd if bound == "trials" else self.timeout_ceiling_usd
        return value if value is not None else UNBOUNDED

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cluster": self.cluster,
            "trials": self.trials,
            "concurrent_trials": self.concurrent,
            "nodes_per_trial": self.nodes,
            "trial_timeout_s": self.trial_timeout_s,
            "timeout_s": self.timeout_s,
            "usd_per_hour": self.usd_per_hour,
            "ceiling_usd": self.ceiling_usd,
            "bound_by": self.bound_by,
        }


@dataclass(frozen=True)
class CostReport:
    clusters: tuple[ClusterCost, ...]
    runs: tuple[RunCost, ...]
    sweeps: tuple[SweepCost, ...] = ()

    @property
    def ceiling_usd_per_hour(self) -> Money:
        """Every cluster at ``max_instances`` at once (unknown when any cluster's price is)."""
        return _sum(c.ceiling_usd_per_hour for c in self.clusters)

    @property
    def floor_usd_per_month(self) -> Money:
        return _sum(c.floor_usd_per_month for c in self.clusters)

    @property
    def priced_ceiling_usd_per_hour(self) -> float:
        """The ceiling of the clusters the table prices: a lower bound when some price is unknown."""
        return _usd(sum(c.ceiling_usd_per_hour for c in self.clusters if isinstance(c.ceiling_usd_per_hour, float)))

    @property
    def not_listed(self) -> tuple[ClusterCost, ...]:
        """The clusters whose size's series Microsoft does not list in their region (no price, may not deploy)."""
        return tuple(c for c in self.clusters if c.listed is False)

    def cluster(self, name: str) -> ClusterCost | None:
        return next((c for c in self.clusters if c.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "currency": "USD",
            "hours_per_month": HOURS_PER_MONTH,
            "stack": {
                "ceiling_usd_per_hour": self.ceiling_usd_per_hour,
                "floor_usd_per_month": self.floor_usd_per_month,
                "priced_ceiling_usd_per_hour": self.priced_ceiling_usd_per_hour,
            },
            "clusters": [c.to_json() for c in self.clusters],
            "runs": [r.to_json() for r in self.runs],
            "sweeps": [s.to_json() for s in self.sweeps],
        }


def _sum(values: Any) -> Money:
    total = 0.0
    for value in values:
        if not isinstance(value, float):
            return UNKNOWN
        total += value
    return _usd(total)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def cluster_costs(stack: Stack, prices: PriceTable) -> tuple[ClusterCost, ...]:
    """One entry per AmlCompute cluster of the plan (GPU clusters and the image-build cluster), by name."""
    out = []
    regions = availability.load()
    for resource in stack.of_type(COMPUTE):
        props = get(inputs(resource), "properties.properties", {})
        if not same(get(inputs(resource), "properties.computeType", ""), "AmlCompute"):
            continue
        owner = stack.owner(resource)
        size = str(get(props, "vmSize", ""))
        tier = TIER_OF_PRIORITY.get(str(get(props, "vmPriority", "Dedicated")).lower(), "dedicated")
        region = str(get(inputs(resource), "location", ""))
        price = prices.price(size, region, tier)
        out.append(ClusterCost(
            name=owner.name,
            kind=owner.kind,
            size=size,
            tier=tier,
            region=region,
            min_instances=_int(get(props, "scaleSettings.minNodeCount", 0)),
            max_instances=_int(get(props, "scaleSettings.maxNodeCount", 0)),
            node_usd_per_hour=price.usd_per_hour if price else None,
            price_date=price.date if price else None,
            price_source=price.source if price else None,
            listed=regions.listed(size, region),
        ))
    return tuple(sorted(out, key=lambda c: c.name))


def run_cost(run: ResolvedRun, clusters: Mapping[str, ClusterCost]) -> RunCost:
    cluster = clusters.get(run.cluster.name)
    timeout = get(run.spec, "limits.timeout")
    return RunCost(
        name=run.name,
        cluster=run.cluster.name,
        nodes=run.instance_count,
        timeout_s=_int(timeout) or None,
        node_usd_per_hour=cluster.node_usd_per_hour if cluster else None,
    )


def sweep_cost(name: str, limits: Mapping[str, Any], trial: ResolvedRun,
               clusters: Mapping[str, ClusterCost]) -> SweepCost:
    """What sweep ``name`` (its ``limits``, its ``trial`` run) can cost on its cluster."""
    cluster = clusters.get(trial.cluster.name)
    trials = _int(limits.get("max_total_trials")) or 1
    concurrent = min(_int(limits.get("max_concurrent_trials")) or trials, trials)
    nodes = trial.instance_count
    fit = cluster.max_instances // nodes if cluster and nodes else 0
    return SweepCost(
        name=name, cluster=trial.cluster.name, trials=trials, concurrent=min(concurrent, fit) if fit else concurrent,
        nodes=nodes, trial_timeout_s=_int(limits.get("trial_timeout")) or None,
        timeout_s=_int(limits.get("timeout")) or None,
        node_usd_per_hour=cluster.node_usd_per_hour if cluster else None,
    )


def estimate(stack: Stack, prices: PriceTable | None = None) -> CostReport:
    """The cost report of a planned stack (``prices``: the shipped table unless given)."""
    table = prices if prices is not None else load_prices()
    clusters = cluster_costs(stack, table)
    by_name = {c.name: c for c in clusters}
    runs = tuple(sorted((run_cost(r, by_name) for r in stack.runs), key=lambda r: r.name))
    sweeps = tuple(sorted((sweep_cost(sweep.name, sweep.spec.get("limits") or {}, sweep.trial, by_name)
                           for sweep in stack.sweeps), key=lambda s: s.name))
    return CostReport(clusters, runs, sweeps)
