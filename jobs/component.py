"""Declared runs as Pulumi resources: one ``DistributedRun`` component per run.

The component creates nothing in Azure (a run is submitted by ``amlgpu submit``, not deployed). It
exists so the resolved run travels through the engine as the props of a resource of type
:data:`stack.resolved.RUN_TYPE`: CrossGuard resource policies see each run at ``pulumi preview``,
next to the cluster and environment it targets, and read it back with ``ResolvedRun.from_props``.

A pipeline or sweep is a ``ComposedJob`` component (its spec and the names of its runs, read back with
``ResolvedComposite.from_props``) with one ``DistributedRun`` child per step (the trial), named
``<job>/<step>``: every run rule judges each step as it judges a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi

from jobs.pipelines import ResolvedComposite, resolve_composites
from jobs.resolve import Scans, resolve_all
from stack.config import StackConfig
from stack.resolved import RUN_TYPE, ResolvedRun


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


class ComposedJob(pulumi.ComponentResource):
    """A resolved pipeline or sweep; ``spec`` is its Azure ML job, exactly as exported and written to a job file.
    Its runs (steps, trial) are :class:`DistributedRun` children."""

    spec: dict[str, Any]
    job: ResolvedComposite
    runs: dict[str, DistributedRun]

    def __init__(self, job: ResolvedComposite, runs: list[ResolvedRun],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(job.type_token, job.name, job.to_props(), opts)
        self.spec = job.spec
        self.job = job
        self.runs = {run.name: DistributedRun(run.name, run, pulumi.ResourceOptions(parent=self)) for run in runs}
        self.register_outputs({"spec": job.spec})


def declare_runs(
    config: StackConfig, root: Path, parent: pulumi.Resource | None = None
) -> dict[str, DistributedRun | ComposedJob]:
    """A :class:`DistributedRun` per run and a :class:`ComposedJob` per pipeline and sweep the stack declares,
    by name (sorted)."""
    opts = pulumi.ResourceOptions(parent=parent) if parent is not None else None
    scans: Scans = {}  # each code folder scanned once
    declared: dict[str, DistributedRun | ComposedJob] = {
        run.name: DistributedRun(run.name, run, opts) for run in resolve_all(config, root, scans=scans)
    }
    for job, runs in resolve_composites(config, root, scans=scans):
        declared[job.name] = ComposedJob(job, runs, opts)
    return dict(sorted(declared.items()))
