"""``amlgpu run-local``: run a declared distributed run on this machine, with the launch contract
Azure ML would give each process.

    amlgpu run-local JOB --stack NAME [--nodes N] [--procs-per-node M] [--timeout S]
                         [--input NAME=PATH ...] [--tf-empty-ps] [--trials N] [--keep] [--python PATH]

* pytorch: nodes x processes per node, each with MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK,
  RANK, LOCAL_RANK; a per-node launcher (torchrun) runs once per node and starts its own workers;
* mpi: Open MPI's mpirun with nodes x processes ranks (OMPI_COMM_WORLD_*) and AZ_BATCH_MASTER_NODE;
* tensorflow: one process per worker and parameter server, each with its TF_CONFIG.

The declared topology is the default; --nodes and --procs-per-node scale it down. The run starts in a fresh
copy of its code folder; ${{outputs.x}} are folders under the work folder, removed when the run ends however
it ends (--keep keeps it and prints where). A Python environment stands in for the run's (--python, else
amlgpu's own): a package the run's code needs and it lacks exits 2 naming what to install, before anything
starts. Output lines are prefixed with the process they come from. When a process fails the others are
stopped within seconds and the exit status is the failing process's; --timeout stops the run with 124,
Ctrl-C with 130. Bad input exits 2 without starting anything. A launch the gate blocks (a launcher's node
count other than the run's, nodes that would never meet) exits 1 with the gate's finding and its fix,
without starting anything: run-local never rewrites such a launch into one that works.

A pipeline runs its steps one after another, in the order of their bindings, each step's outputs the
next one's input folders; a sweep runs one trial (--trials N: N trials) with parameters drawn from its
search space. --nodes and --procs-per-node cap every step.
"""

from __future__ import annotations

import argparse
from typing import Any

from amlgpu.local_jobs import Options, run_local
from kernel.interrupts import cleanup_on_interrupt
from stack.project import load_stack


def register(sub: Any) -> None:
    parser = sub.add_parser("run-local", description=__doc__)
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
    parser.add_argument("--keep", action="store_true",
                        help="keep the work folder (the snapshot and the outputs) and print where it is "
                             "(default: removed when the run ends)")
    parser.add_argument("--python", metavar="PATH",
                        help="the interpreter whose environment stands in for the run's (default: amlgpu's own); "
                             "for packages this project's environment cannot hold, such as TensorFlow")
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


def run(args: argparse.Namespace) -> int:
    options = Options(nodes=args.nodes, procs_per_node=args.procs_per_node, timeout=args.timeout,
                      inputs=tuple(args.input), tf_empty_ps=args.tf_empty_ps, trials=args.trials, keep=args.keep,
                      python=args.python)
    # A Ctrl-C while the snapshot is copied removes the work folder; while processes run, the launcher
    # stops them all (SIGTERM, then SIGKILL after the grace period), then the work folder goes.
    with cleanup_on_interrupt():
        return run_local(load_stack(args.stack), args.job, options)
