"""``amlgpu run-local``: run a declared distributed run on this machine, with the launch contract
Azure ML would give each process.

    amlgpu run-local JOB --stack NAME [--nodes N] [--procs-per-node M] [--timeout S]
                         [--input NAME=PATH ...] [--tf-empty-ps] [--trials N]

* pytorch: nodes x processes per node, each with MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK,
  RANK, LOCAL_RANK; a per-node launcher (torchrun) runs once per node and starts its own workers;
* mpi: Open MPI's mpirun with nodes x processes ranks (OMPI_COMM_WORLD_*) and AZ_BATCH_MASTER_NODE;
* tensorflow: one process per worker and parameter server, each with its TF_CONFIG.

The declared topology is the default; --nodes and --procs-per-node scale it down. The run starts in
a fresh copy of its code folder; ${{outputs.x}} are folders under the printed work folder. Output
lines are prefixed with the process they come from. When a process fails the others are stopped
within seconds and the exit status is the failing process's; --timeout stops the run with 124,
Ctrl-C with 130. Bad input exits 2 without starting anything. A launch the gate blocks (a launcher's
node count other than the run's, nodes that would never meet) exits 1 with the gate's finding and
its fix, without starting anything: run-local never rewrites such a launch into one that works.

A pipeline runs its steps one after another, in the order of their bindings, each step's outputs the
next one's input folders; a sweep runs one trial (--trials N: N trials) with parameters drawn from its
search space. --nodes and --procs-per-node cap every step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel import secrets
from kernel.errors import UserError
from stack import NAMESPACE
from stack.project import LoadedStack, load_stack
from stack.runs import Run

if TYPE_CHECKING:
    from jobs.emulate.prepare import Prepared
    from stack.resolved import ResolvedRun


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "run-local",
        help="run a declared distributed run on this machine with Azure ML's launch contract",
        description=__doc__,
    )
    parser.add_argument("job", metavar="JOB", help="the run's name (a name under aml-gpu-training:jobs)")
    parser.add_argument("--stack", "-s", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    parser.add_argument("--nodes", type=_positive_int, help="nodes to emulate (default: as declared)")
    parser.add_argument("--procs-per-node", type=_positive_int,
                        help="processes per node, or workers per node for torchrun (default: as declared)")
    parser.add_argument("--timeout", type=_positive_float, metavar="SECONDS",
                        help="stop the run after this long, exit 124 (default: the run's limits.timeout)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE",
                        help="a local path for a data input (required for azureml:// and https inputs), "
                             "or a value for a literal one; repeatable")
    parser.add_argument("--tf-empty-ps", action="store_true",
                        help='tensorflow: put "ps": [] in TF_CONFIG as Azure ML does when there is no '
                             "parameter server")
    parser.add_argument("--trials", type=_positive_int, default=1, metavar="N",
                        help="a sweep: the trials to run, one after another (default 1)")
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not more than 0 seconds")
    return value


def _parse_inputs(entries: list[str]) -> dict[str, str]:
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


def _say(line: str = "") -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _preparing(workdir: Path, stack: LoadedStack, index: int) -> Iterator[None]:
    """While the run at ``jobs[index]`` (or a pipeline's or sweep's steps) is prepared in ``workdir``: an
    emulation error is bad input naming the flag or the stack key, and any failure removes ``workdir``."""
    from jobs.emulate.errors import EmulationError

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


def run(args: argparse.Namespace) -> int:
    from kernel.interrupts import cleanup_on_interrupt

    # A Ctrl-C while the snapshot is copied removes the work folder; while processes run, the launcher
    # stops them all (SIGTERM, then SIGKILL after the grace period).
    with cleanup_on_interrupt():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from jobs.emulate.local import LocalProcessLauncher
    from jobs.emulate.prepare import Request, prepare
    from jobs.resolve import resolve_run

    stack = load_stack(args.stack)
    if any(job.name == args.job for job in stack.config.composites):
        from amlgpu.local_jobs import run_composite

        return run_composite(args, stack)
    index, declared = find_run(stack, args.job)
    resolved = resolve_run(declared, stack.config, stack.root)
    request = Request(nodes=args.nodes, procs_per_node=args.procs_per_node, timeout_s=args.timeout,
                      inputs=_parse_inputs(args.input), tf_empty_ps=args.tf_empty_ps)

    workdir = Path(tempfile.mkdtemp(prefix=f"amlgpu-run-local-{declared.name}-"))
    with _preparing(workdir, stack, index):
        prepared = prepare(resolved, request, root=stack.root, workdir=workdir, environ=os.environ)
    refused = _topology_findings(stack, resolved)
    if refused:
        shutil.rmtree(workdir, ignore_errors=True)
        _say(f"run-local: refused: {resolved.name!r} would not run as one training on Azure ML "
             f"({resolved.instance_count} node(s) of {resolved.cluster.size}), and run-local never rewrites a "
             "launch into one that works:")
        for rule_id, message in refused:
            _say(f"  {rule_id}: {message}")
        _say(f"  {stack.file.display}: {NAMESPACE}:jobs[{index}].command")
        return 1

    _header(stack, resolved, prepared, timeout_declared=args.timeout is None)
    result = LocalProcessLauncher().launch(prepared.plan)

    _say()
    if result.outcome == "timeout":
        _say(f"run-local: timed out after {prepared.plan.timeout_s:g}s: every process was stopped")
    elif result.outcome == "interrupted":
        _say("run-local: interrupted: every process was stopped")
    _say(result.summary())
    _say(f"work folder (snapshot and outputs): {prepared.workdir}")
    return result.exit_code


def _topology_findings(stack: LoadedStack, run: ResolvedRun) -> list[tuple[str, str]]:
    """What the gate's mandatory launch-topology rules say of ``run``, as the stack's gate is configured (its
    pack config and the stack file's active waivers)."""
    import datetime as dt

    from policies.packconfig import for_stack, resolve
    from policies.rules.launch import TOPOLOGY_RULES

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


def _header(stack: LoadedStack, resolved: ResolvedRun, prepared: Prepared, *, timeout_declared: bool) -> None:
    """What is about to run, where, and how it differs from the run on Azure ML."""
    cluster, dist_type = resolved.cluster, resolved.distribution["type"]
    style = f" ({resolved.launcher})" if resolved.launcher != dist_type else ""
    _say(f"run-local: {resolved.name!r} of stack {stack.name!r}, as Azure ML would start it on {cluster.name} "
         f"({cluster.size}, {cluster.gpus} GPU(s) per node)")
    _say(f"  distribution  {dist_type}{style}: {prepared.topology.describe()}")
    _say(f"  declared      {prepared.topology.declared}")
    _say(f"  environment   {sys.executable} stands in for {resolved.spec['environment']}")
    code = resolved.spec.get("code")
    origin = f"{prepared.snapshot_files} file(s) from {code}" if code is not None else "empty: the run has no code"
    _say(f"  snapshot      {prepared.plan.cwd} ({origin})")
    _say(f"  command       {prepared.command}")
    for name, path in prepared.outputs.items():
        _say(f"  output {name:<6} {path}")
    if prepared.plan.timeout_s:
        source = " (the run's limits.timeout)" if timeout_declared else ""
        _say(f"  timeout       {prepared.plan.timeout_s:g}s{source}")
    for note in prepared.notes:
        _say(f"  note: {note}")
