"""How many processes an emulated run starts: the resolved topology, scaled down by the user.

The run as :func:`jobs.resolve.resolve_run` resolves it (the job ``amlgpu`` submits, with its
defaults written out) is the default and the ceiling: a local run may use fewer nodes or processes
per node than Azure ML would start, never more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jobs import launchers
from jobs.emulate.commandline import LauncherCall, default_workers, workers_flag_given
from jobs.emulate.errors import EmulationError
from stack.resolved import ResolvedRun

Style = Literal["per-process", "per-node", "mpi", "tensorflow"]


@dataclass(frozen=True)
class Topology:
    style: Style
    nodes: int
    """Emulated nodes; for TensorFlow, the workers."""
    procs_per_node: int
    """Processes the emulator starts on each node, as Azure ML would (1 for TensorFlow)."""
    launcher_procs_per_node: int | None = None
    """Workers a per-node launcher (torchrun) starts on each node."""
    parameter_servers: int = 0
    declared: str = ""
    """The resolved topology, in words, for the user."""

    def describe(self) -> str:
        if self.style == "tensorflow":
            return f"{self.nodes} worker(s), {self.parameter_servers} parameter server(s)"
        if self.style == "per-node":
            workers = self.launcher_procs_per_node or 1
            return f"{self.nodes} node(s) x 1 launcher starting {workers} worker(s) = {self.nodes * workers} workers"
        total = self.nodes * self.procs_per_node
        return f"{self.nodes} node(s) x {self.procs_per_node} process(es) = {total} processes"


def _scaled(flag: str, asked: int | None, declared: int, what: str, key: str) -> int:
    if asked is None:
        return declared
    if asked > declared:
        raise EmulationError(
            f"{asked} is more than the run declares: {declared} {what} ({key}); emulation can only scale down",
            key=flag,
        )
    return asked


def local_topology(run: ResolvedRun, *, command: str, launcher: LauncherCall | None,
                   nodes: int | None = None, procs_per_node: int | None = None) -> Topology:
    """The local topology of ``run`` with the user's ``--nodes`` / ``--procs-per-node``.

    ``launcher`` is the run's per-node launcher as found in ``command`` (placeholders filled), when
    the run uses one under ``distribution: pytorch``.
    """
    dist = run.distribution
    instances = run.instance_count
    if dist["type"] == "tensorflow":
        if procs_per_node is not None:
            raise EmulationError("tensorflow starts one process per task; scale the workers with --nodes",
                                 key="--procs-per-node")
        workers_declared = int(dist.get("worker_count") or instances)
        servers = int(dist.get("parameter_server_count") or 0)
        workers = _scaled("--nodes", nodes, workers_declared, "worker(s)", "distribution.worker_count")
        return Topology("tensorflow", workers, 1, parameter_servers=servers,
                        declared=f"{workers_declared} worker(s), {servers} parameter server(s)")

    declared_per_node = run.processes_per_node
    local_nodes = _scaled("--nodes", nodes, instances, "node(s)", "resources.instance_count")
    if launcher is not None:
        if declared_per_node > 1:
            raise EmulationError(
                f"the command starts {launcher.kind}, a per-node launcher, and process_count_per_instance is "
                f"{declared_per_node}: Azure ML would start {declared_per_node} launchers per node, each starting "
                "its own workers (\"Duplicate GPU detected\"); set it to 1 and let the launcher start the workers",
                key="distribution.process_count_per_instance",
            )
        if run.launcher_nproc_per_node is not None:
            workers_declared = run.launcher_nproc_per_node
        else:
            # Not on the command line (the launcher's default) or only known at run time (one per GPU).
            given = workers_flag_given(command, launcher)
            workers_declared = run.cluster.gpus if given else default_workers(launcher.kind, run.cluster.gpus)
        workers = _scaled("--procs-per-node", procs_per_node, workers_declared,
                          f"worker(s) per node started by {launcher.kind}", "command")
        return Topology("per-node", local_nodes, 1, launcher_procs_per_node=workers,
                        declared=f"{instances} node(s) x {workers_declared} worker(s) started by {launcher.kind}")

    key = "distribution.process_count_per_instance"
    per_node = _scaled("--procs-per-node", procs_per_node, declared_per_node, "process(es) per node", key)
    style: Style = "mpi" if dist["type"] == "mpi" else "per-process"
    return Topology(style, local_nodes, per_node, declared=f"{instances} node(s) x {declared_per_node} process(es)")


def per_node_launcher(run: ResolvedRun) -> str | None:
    """The run's per-node launcher when it runs under ``distribution: pytorch`` (None otherwise:
    under ``mpi`` Azure ML's mpirun starts it as a rank like any other program)."""
    if run.distribution["type"] == "pytorch" and run.launcher in launchers.PER_NODE_LAUNCHERS:
        return run.launcher
    return None
