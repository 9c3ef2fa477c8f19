"""Declared runs as Pulumi resources: one ``DistributedRun`` component per run.

The component creates nothing in Azure (a run is submitted by ``amlgpu submit``, not deployed). It
exists so the resolved run travels through the engine as the props of a resource of type
:data:`jobs.resolved.RUN_TYPE`: CrossGuard resource policies see each run at ``pulumi preview``,
next to the cluster and environment it targets, and read it back with ``ResolvedRun.from_props``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi

from jobs.resolve import resolve_all
from jobs.resolved import RUN_TYPE, ResolvedRun
from model.config import StackConfig


class DistributedRun(pulumi.ComponentResource):
    """A resolved run; ``spec`` is its Azure ML job, exactly as exported and written to a job file."""

    spec: dict[str, Any]
    run: ResolvedRun

    def __init__(self, name: str, run: ResolvedRun, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(RUN_TYPE, name, run.to_props(), opts)
        # The SDK turns every prop into an Output attribute; the plain spec is what exports need.
        self.spec = run.spec
        self.run = run
        self.register_outputs({"spec": run.spec})


def declare_runs(config: StackConfig, root: Path, parent: pulumi.Resource | None = None) -> dict[str, DistributedRun]:
    """A :class:`DistributedRun` per run the stack declares, by name (sorted)."""
    opts = pulumi.ResourceOptions(parent=parent) if parent is not None else None
    return {run.name: DistributedRun(run.name, run, opts) for run in resolve_all(config, root)}
