"""``amlgpu run-local`` of a pipeline or a sweep: its runs one after another, each as ``run-local`` runs a run.

The emulation itself (the order of the steps, bindings as local folders, sampled parameters) is
:mod:`jobs.emulate.composite`; this prints what runs and stops at the first step that fails (a sweep runs
every trial, as Azure ML does, and exits with the first failing trial's status).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from kernel.errors import EXIT_OK, UserError
from stack.project import LoadedStack


def run_composite(args: argparse.Namespace, stack: LoadedStack) -> int:
    from amlgpu.commands.run_local import _header, _parse_inputs, _preparing, _say
    from jobs.emulate.composite import prepare_pipeline, prepare_sweep, shown
    from jobs.emulate.local import LocalProcessLauncher
    from jobs.emulate.prepare import Request
    from jobs.pipelines import resolve_composite

    index, entry = next((i, j) for i, j in enumerate(stack.config.jobs) if j.name == args.job)
    job, runs = resolve_composite(entry, stack.config, stack.root)  # type: ignore[arg-type]
    request = Request(nodes=args.nodes, procs_per_node=args.procs_per_node, timeout_s=args.timeout,
                      inputs=_parse_inputs(args.input), tf_empty_ps=args.tf_empty_ps)
    if job.kind != "sweep" and args.trials != 1:
        raise UserError(f"--trials is for sweeps; {job.name!r} is a {job.kind}", key="--trials")
    workdir = Path(tempfile.mkdtemp(prefix=f"amlgpu-run-local-{job.name}-"))
    with _preparing(workdir, stack, index):
        if job.kind == "pipeline":
            steps = prepare_pipeline(job, {r.name: r for r in runs}, request, root=stack.root, workdir=workdir,
                                     environ=os.environ)
        else:
            steps = prepare_sweep(job, runs[0], request, trials=args.trials, root=stack.root, workdir=workdir,
                                  environ=os.environ)

    what = f"{len(steps)} step(s): {', '.join(s.name for s in steps)}" if job.kind == "pipeline" else \
        f"{len(steps)} trial(s) of {job.spec['limits']['max_total_trials']}"
    _say(f"run-local: {job.kind} {job.name!r} of stack {stack.name!r}, {what}, one after another")
    status = EXIT_OK
    for step in steps:
        _say()
        if step.parameters:
            _say(f"{step.name}: " + ", ".join(f"{k}={shown(v)}" for k, v in step.parameters.items()))
        _header(stack, step.run, step.prepared, timeout_declared=args.timeout is None)
        result = LocalProcessLauncher().launch(step.prepared.plan)
        _say(result.summary())
        if result.exit_code != EXIT_OK:
            status = status or result.exit_code
            if job.kind == "pipeline" or result.outcome in ("interrupted", "timeout"):
                later = "steps" if job.kind == "pipeline" else "trials"
                _say(f"run-local: {step.name} ended with exit {result.exit_code}: the {later} after it do not run")
                break
    _say()
    _say(f"work folder (each {'step' if job.kind == 'pipeline' else 'trial'}'s snapshot and outputs): {workdir}")
    return status
