"""The planned stack as rules see it: resources in wire shape, resolved runs, and who owns what.

Every Azure resource the program creates hangs, through its parent chain, below one of the
project's components, each named after what the stack file declares (the workspace, ``network``,
a cluster, the image-build cluster, an environment, a run). That component is the resource's
*owner*: findings name it, waivers refer to it, and the stack file location comes from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from jobs.pipelines import PIPELINE_TYPE, SWEEP_TYPE, ResolvedComposite
from policies.graph import DependencyGraph
from stack.resolved import RUN_TYPE, ResolvedRun

if TYPE_CHECKING:
    from azurefacts.prices import PriceTable

OwnerKind = Literal[
    "workspace", "network", "cluster", "image-build-compute", "environment", "run", "pipeline", "sweep", "resource"
]

WORKSPACE_TYPE = "aml-gpu-training:infra:Workspace"
COMPONENT_KINDS: Mapping[str, OwnerKind] = {
    WORKSPACE_TYPE: "workspace",
    "aml-gpu-training:infra:Network": "network",
    "aml-gpu-training:infra:GpuCluster": "cluster",
    "aml-gpu-training:infra:ImageBuilder": "image-build-compute",
    "aml-gpu-training:infra:Environment": "environment",
    RUN_TYPE: "run",
    PIPELINE_TYPE: "pipeline",
    SWEEP_TYPE: "sweep",
}
"""Components named after a declared thing, and what kind of thing that is."""

WORKSPACE_PARTS = frozenset({"aml-gpu-training:infra:PrivateLinks"})
"""Components that are part of the workspace's setup without carrying its name (its private endpoints)."""


@dataclass(frozen=True, order=True)
class Owner:
    """The declared thing a resource belongs to: its kind and the name the stack file gives it."""

    kind: OwnerKind
    name: str


@dataclass(frozen=True)
class Sweep:
    """A sweep job or a pipeline's sweep step, as cost and rules judge it: its limits and its trial."""

    name: str
    """The sweep's name, or ``<pipeline>/<step>``."""
    spec: Mapping[str, Any]
    """The sweep job's spec, or the sweep step's node (``limits``, ``search_space``... either way)."""
    trial: ResolvedRun
    """The run each trial is."""
    subject: Mapping[str, Any] | ResolvedRun
    """What a finding about the whole sweep names: the sweep job's component, or the sweep step's trial run
    (named ``<pipeline>/<step>``)."""


class Stack:
    """A planned stack: resources (wire shape, as the provider receives them) and the resolved runs."""

    def __init__(
        self, resources: Iterable[Mapping[str, Any]], runs: Iterable[ResolvedRun], prices: PriceTable | None = None,
        name: str | None = None, settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.resources: tuple[Mapping[str, Any], ...] = tuple(resources)
        self.runs: tuple[ResolvedRun, ...] = tuple(runs)
        self.prices = prices
        """The pricing table budget rules use (None: the shipped ``azurefacts/prices.json``)."""
        self.name = name
        """The stack's name (``dev``), for pack-config settings that name stacks; None when unknown."""
        self.settings: Mapping[str, Any] | None = settings
        """The stack's config keys outside the project's namespace (``azure-native:subscriptionId``,
        ``pulumi:tags``...) with their values (encrypted ones as ``[secret]``); None when unknown."""

    @cached_property
    def _by_name(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        # Logical names are unique per type only (a run and an environment may share a name): key by both.
        return {(r["type"], r["name"]): r for r in self.resources if r["type"].startswith("aml-gpu-training:")}

    def of_type(self, *tokens: str) -> list[Mapping[str, Any]]:
        """Resources of any of the given type tokens, in plan order."""
        return [r for r in self.resources if r["type"] in tokens]

    @cached_property
    def graph(self) -> DependencyGraph:
        """What each resource waits for before ``pulumi up`` creates it (:mod:`policies.graph`)."""
        return DependencyGraph(self.resources)

    @cached_property
    def workspace_owner(self) -> Owner | None:
        workspaces = self.of_type(WORKSPACE_TYPE)
        return Owner("workspace", workspaces[0]["name"]) if len(workspaces) == 1 else None

    def owner(self, resource: Mapping[str, Any]) -> Owner:
        """The declared component ``resource`` belongs to (itself, for a component)."""
        current: Mapping[str, Any] | None = resource
        seen: set[int] = set()  # a child may share its parent's name (a cluster's Compute does)
        while current is not None and id(current) not in seen:
            kind = COMPONENT_KINDS.get(current["type"])
            if kind is not None:
                return Owner(kind, current["name"])
            if current["type"] in WORKSPACE_PARTS and self.workspace_owner is not None:
                return self.workspace_owner
            seen.add(id(current))
            parent = current.get("parent")
            current = self._by_name.get((current.get("parentType", ""), parent)) if parent else None
        return Owner("resource", resource["name"])

    @cached_property
    def composites(self) -> tuple[tuple[Mapping[str, Any], ResolvedComposite], ...]:
        """Each planned pipeline and sweep: its component (wire shape) and what it carries."""
        return tuple((r, ResolvedComposite.from_props(r["inputs"])) for r in self.of_type(PIPELINE_TYPE, SWEEP_TYPE))

    @cached_property
    def sweeps(self) -> tuple[Sweep, ...]:
        """Every sweep of the plan: each sweep job (its trial ``<sweep>/trial``) and each sweep step of a pipeline
        (named ``<pipeline>/<step>``, as its trial is), in plan order; a sweep whose trial the plan holds no run
        for (a registered component not pulled) is left out."""
        runs = {run.name: run for run in self.runs}
        found = []
        for resource, job in self.composites:
            if job.kind == "sweep":
                trials = self.runs_of(job.name)
                if trials:
                    found.append(Sweep(job.name, job.spec, trials[0], resource))
                continue
            for step, node in (job.spec.get("jobs") or {}).items():
                name = f"{job.name}/{step}"
                if node.get("type") == "sweep" and name in runs:
                    found.append(Sweep(name, node, runs[name], runs[name]))
        return tuple(found)

    def runs_of(self, job: str) -> list[ResolvedRun]:
        """The runs of pipeline or sweep ``job`` (its steps, its trial), in plan order."""
        return [run for run in self.runs if run.part_of == job]

    def run_resource(self, run: ResolvedRun) -> Mapping[str, Any] | None:
        """The ``DistributedRun`` component that carries ``run`` (None when the plan has none)."""
        return next((r for r in self.of_type(RUN_TYPE) if r["name"] == run.name), None)
