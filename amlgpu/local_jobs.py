"""``amlgpu run-local``'s runner: a declared run, or a pipeline's steps and a sweep's trials one after another,
started here with the launch contract Azure ML would give each process (:mod:`amlgpu.commands.run_local` parses
the flags).

The emulation itself (the launch contract, the snapshot, the order of the steps, bindings as local folders,
sampled parameters) is :mod:`jobs.emulate`; this refuses a run whose packages or programs this machine lacks
(:mod:`jobs.emulate.requirements`) and a launch the gate blocks, prints what runs, stops at the first step that
fails (a sweep runs every trial, as Azure ML does, and exits with the first failing trial's status), and removes
the work folder when it ends, however it ends (``--keep`` keeps it).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jobs.emulate import requirements
from jobs.emulate.composite import prepare_pipeline, prepare_sweep, shown
from jobs.emulate.errors import EmulationError
from jobs.emulate.local import LocalProcessLauncher
from jobs.emulate.prepare import Prepared, Request, prepare
from jobs.pipelines import ResolvedComposite, resolve_composite
from jobs.resolve import resolve_run
from kernel import secrets
from kernel.errors import EXIT_OK, UserError
from kernel.interrupts import shielded, terminate_as_interrupt
from policies.packconfig import for_stack, resolve
from policies.rules.launch import TOPOLOGY_RULES
from stack import NAMESPACE
from stack.project import LoadedStack
from stack.resolved import ResolvedRun
from stack.runs import Run


@dataclass(frozen=True)
class Options:
    """What ``amlgpu run-local``'s flags ask for."""

    nodes: int | None = None
    procs_per_node: int | None = None
    timeout: float | None = None
    inputs: tuple[str, ...] = ()
    """``--input NAME=VALUE``, as given."""
    tf_empty_ps: bool = False
    trials: int = 1
    keep: bool = False
    """``--keep``: keep the work folder (snapshot and outputs) and print where it is."""
    python: str | None = None
    """``--python``: the interpreter whose environment stands in for the run's (default: amlgpu's own)."""

    def interpreter(self) -> str:
        """``--python`` as an absolute path (its folder goes first on PATH, so a virtualenv's link is kept, not
        resolved), or amlgpu's own interpreter."""
        if self.python is None:
            return sys.executable
        path = os.path.abspath(os.path.expanduser(self.python))
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise UserError(f"{self.python} is not an executable file (a Python interpreter, e.g. "
                            "~/.venvs/run-local/bin/python)", key="--python")
        return path

    def request(self) -> Request:
        return Request(nodes=self.nodes, procs_per_node=self.procs_per_node, timeout_s=self.timeout,
                       inputs=parse_inputs(list(self.inputs)), tf_empty_ps=self.tf_empty_ps,
                       python=self.interpreter())


def run_local(stack: LoadedStack, name: str, options: Options) -> int:
    """Run the run, pipeline or sweep ``name`` of ``stack`` here; its exit status (see
    :mod:`amlgpu.commands.run_local`). SIGTERM unwinds like Ctrl-C, so the work folder goes either way."""
    with terminate_as_interrupt():
        if any(job.name == name for job in stack.config.composites):
            return _run_composite(stack, name, options)
        return _run_one(stack, name, options)


def require(stack: LoadedStack, runs: list[ResolvedRun], python: str) -> None:
    """Bad input (exit 2, before anything is made or started) when this machine lacks a package or program one of
    ``runs`` needs: each named, with what to install and where."""
    lacking: list[str] = []
    for run in runs:
        wanted = requirements.needs(run, stack.root)
        absent = requirements.missing(wanted, python=python, environ=requirements.environment(run, os.environ))
        if absent:
            lacking.append(f"run-local cannot start {run.name!r} of stack {stack.name!r} here: it needs what "
                           f"this machine lacks:\n{requirements.advice(absent, wanted, python=python)}")
    if lacking:
        raise UserError("\n".join(lacking))


@contextlib.contextmanager
def work_folder(name: str, *, keep: bool) -> Iterator[Path]:
    """A fresh work folder for ``name`` under the temporary folder (TMPDIR), removed when the block ends however it
    ends (an error, Ctrl-C, SIGTERM; a second Ctrl-C waits for the removal), unless ``keep``: then kept and printed."""
    workdir = Path(tempfile.mkdtemp(prefix=f"amlgpu-run-local-{name}-"))
    started = False
    try:
        yield workdir
        started = True
    except UserError:
        raise  # bad input: nothing ran, nothing to keep
    except BaseException:
        started = True
        raise
    finally:
        with shielded():
            if keep and started and workdir.exists():  # a refused launch removed it already
                say(f"work folder (snapshot and outputs, kept: --keep): {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)


def _run_one(stack: LoadedStack, name: str, options: Options) -> int:
    index, declared = find_run(stack, name)
    resolved = resolve_run(declared, stack.config, stack.root)
    request = options.request()
    with work_folder(declared.name, keep=options.keep) as workdir:
        return _start(stack, index, resolved, request, workdir, options)


def _start(stack: LoadedStack, index: int, resolved: ResolvedRun, request: Request, workdir: Path,
           options: Options) -> int:
    with preparing(workdir, stack, index):
        prepared = prepare(resolved, request, root=stack.root, workdir=workdir, environ=os.environ)
    refused = topology_findings(stack, resolved)
    if refused:
        shutil.rmtree(workdir, ignore_errors=True)
        say(f"run-local: refused: {resolved.name!r} would not run as one training on Azure ML "
            f"({resolved.instance_count} node(s) of {resolved.cluster.size}), and run-local never rewrites a "
            "launch into one that works:")
        for rule_id, message in refused:
            say(f"  {rule_id}: {message}")
        say(f"  {stack.file.display}: {NAMESPACE}:jobs[{index}].command")
        return 1
    # After bad input and the gate's refusal (each says more about the run than what this machine lacks).
    require(stack, [resolved], request.python)

    header(stack, resolved, prepared, request.python, timeout_declared=options.timeout is None)
    result = LocalProcessLauncher().launch(prepared.plan)

    say()
    if result.outcome == "timeout":
        say(f"run-local: timed out after {prepared.plan.timeout_s:g}s: every process was stopped")
    elif result.outcome == "interrupted":
        say("run-local: interrupted: every process was stopped")
    say(result.summary())
    if not options.keep:
        say("work folder removed (--keep keeps the snapshot and outputs)")
    return result.exit_code


def topology_findings(stack: LoadedStack, run: ResolvedRun) -> list[tuple[str, str]]:
    """What the gate's mandatory launch-topology rules say of ``run``, as the stack's gate is configured (its
    pack config and the stack file's active waivers)."""
    settings = resolve(for_stack(stack.root, stack.name))
    today = dt.date.today()
    found: list[tuple[str, str]] = []
    for rule in TOPOLOGY_RULES:
        if settings[rule.id].enforcement != "mandatory":
            continue
        if any(w.covers(rule.id, run.name) and w.active(today) for w in stack.config.waivers):
            continue
        found.extend((rule.id, message) for message in rule.check(run, **settings[rule.id].params))
    return found


def _run_composite(stack: LoadedStack, name: str, options: Options) -> int:
    """A pipeline's steps or a sweep's trials, one after another, each as a run is run."""
    index, entry = next((i, j) for i, j in enumerate(stack.config.jobs) if j.name == name)
    job, runs = resolve_composite(entry, stack.config, stack.root)  # type: ignore[arg-type]
    request = options.request()
    swept = job.kind == "sweep" or any(node.get("type") == "sweep" for node in (job.spec.get("jobs") or {}).values())
    if not swept and options.trials != 1:
        raise UserError(f"--trials is for sweeps and pipelines with a sweep step; {job.name!r} is a {job.kind} "
                        "of command steps", key="--trials")
    require(stack, runs, request.python)
    with work_folder(job.name, keep=options.keep) as workdir:
        return _run_steps(stack, index, job, runs, request, workdir, options)


def _run_steps(stack: LoadedStack, index: int, job: ResolvedComposite, runs: list[ResolvedRun], request: Request,
               workdir: Path, options: Options) -> int:
    with preparing(workdir, stack, index):
        if job.kind == "pipeline":
            steps = prepare_pipeline(job, {r.name: r for r in runs}, request, root=stack.root, workdir=workdir,
                                     environ=os.environ, trials=options.trials)
        else:
            steps = prepare_sweep(job, runs[0], request, trials=options.trials, root=stack.root, workdir=workdir,
                                  environ=os.environ)

    what = f"{len(steps)} step(s): {', '.join(s.name for s in steps)}" if job.kind == "pipeline" else \
        f"{len(steps)} trial(s) of {job.spec['limits']['max_total_trials']}"
    say(f"run-local: {job.kind} {job.name!r} of stack {stack.name!r}, {what}, one after another")
    status = EXIT_OK
    for step in steps:
        say()
        if step.parameters:
            say(f"{step.name}: " + ", ".join(f"{k}={shown(v)}" for k, v in step.parameters.items()))
        header(stack, step.run, step.prepared, request.python, timeout_declared=options.timeout is None)
        result = LocalProcessLauncher().launch(step.prepared.plan)
        say(result.summary())
        if result.exit_code != EXIT_OK:
            status = status or result.exit_code
            if job.kind == "pipeline" or result.outcome in ("interrupted", "timeout"):
                later = "steps" if job.kind == "pipeline" else "trials"
                say(f"run-local: {step.name} ended with exit {result.exit_code}: the {later} after it do not run")
                break
    say()
    if not options.keep:
        say(f"work folder removed (--keep keeps each {'step' if job.kind == 'pipeline' else 'trial'}'s snapshot "
            "and outputs)")
    return status


def parse_inputs(entries: list[str]) -> dict[str, str]:
    inputs: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if not sep or not name:
            raise UserError(f"{entry!r} is not NAME=VALUE", key="--input")
        inputs[name] = value
    try:
        secrets.remember_in(inputs)  # a token given here is masked in the header's command like the stack's own
    except secrets.TooManySecrets as err:
        raise UserError(str(err), key="--input") from None
    return inputs


def find_run(stack: LoadedStack, name: str) -> tuple[int, Run]:
    """The declared run called ``name`` and its index under ``jobs``; unknown names list the known."""
    for index, declared in enumerate(stack.config.jobs):
        if declared.name == name and isinstance(declared, Run):
            return index, declared
    known = ", ".join(sorted(r.name for r in stack.config.jobs)) or "none declared"
    raise UserError(f"no run named {name!r}; runs in this stack: {known}", file=stack.file.display,
                    key=f"{NAMESPACE}:jobs")


def say(line: str = "") -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def preparing(workdir: Path, stack: LoadedStack, index: int) -> Iterator[None]:
    """While the run at ``jobs[index]`` (or a pipeline's or sweep's steps) is prepared in ``workdir``: an
    emulation error is bad input naming the flag or the stack key, and any failure removes ``workdir``."""
    try:
        yield
    except EmulationError as err:
        shutil.rmtree(workdir, ignore_errors=True)
        if err.is_flag:
            raise UserError(err.message, key=err.key) from None
        raise UserError(err.message, file=stack.file.display, key=f"{NAMESPACE}:jobs[{index}].{err.key}") from None
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def header(stack: LoadedStack, resolved: ResolvedRun, prepared: Prepared, python: str, *,
           timeout_declared: bool) -> None:
    """What is about to run, where, and how it differs from the run on Azure ML."""
    cluster, dist_type = resolved.cluster, resolved.distribution["type"]
    style = f" ({resolved.launcher})" if resolved.launcher != dist_type else ""
    say(f"run-local: {resolved.name!r} of stack {stack.name!r}, as Azure ML would start it on {cluster.name} "
        f"({cluster.size}, {cluster.gpus} GPU(s) per node)")
    say(f"  distribution  {dist_type}{style}: {prepared.topology.describe()}")
    say(f"  declared      {prepared.topology.declared}")
    say(f"  environment   {python} stands in for {resolved.spec['environment']}")
    code = resolved.spec.get("code")
    origin = f"{prepared.snapshot_files} file(s) from {code}" if code is not None else "empty: the run has no code"
    say(f"  snapshot      {prepared.plan.cwd} ({origin})")
    say(f"  command       {prepared.command}")
    for name, path in prepared.outputs.items():
        say(f"  output {name:<6} {path}")
    if prepared.plan.timeout_s:
        source = " (the run's limits.timeout)" if timeout_declared else ""
        say(f"  timeout       {prepared.plan.timeout_s:g}s{source}")
    for note in prepared.notes:
        say(f"  note: {note}")
