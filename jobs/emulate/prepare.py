"""From a resolved run to a :class:`~jobs.emulate.launcher.LaunchPlan`: what Azure ML would do on
the cluster, done on this machine.

1. the topology: as resolved, scaled down by the user (:mod:`jobs.emulate.scale`);
2. the snapshot: a fresh copy of the code folder, the processes' working folder;
3. the command: ``${{inputs.*}}`` as local values or paths, ``${{outputs.*}}`` as folders under the
   work folder, a per-node launcher's process counts rewritten to the local topology;
4. one process spec per process Azure ML would start, each with its launch contract
   (:mod:`analysis.contract`) and its node's GPUs (:mod:`jobs.emulate.devices`).

A local Python environment stands in for the run's ``environment`` (``--python``, else amlgpu's own): its
interpreter's folder is put first on PATH, so ``python`` and ``torchrun`` in the command are that environment's.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis import contract
from jobs import launchers
from jobs.emulate import commandline, devices, mpi
from jobs.emulate.errors import EmulationError
from jobs.emulate.launcher import LaunchPlan, ProcessSpec
from jobs.emulate.scale import Topology, local_topology, per_node_launcher
from jobs.emulate.snapshot import copy_code
from stack.resolved import ResolvedRun

LOCAL_MASTER_ADDR = "127.0.0.1"


@dataclass(frozen=True)
class Request:
    """What the user asked for on the command line."""

    nodes: int | None = None
    procs_per_node: int | None = None
    timeout_s: float | None = None
    inputs: Mapping[str, str] = field(default_factory=dict)
    """``--input name=VALUE``: a local path for a data input, a value for a literal one."""
    tf_empty_ps: bool = False
    python: str = sys.executable
    """The interpreter whose environment stands in for the run's (``--python``; default: the one running amlgpu)."""


@dataclass(frozen=True)
class Prepared:
    plan: LaunchPlan
    topology: Topology
    workdir: Path
    snapshot_files: int
    command: str
    """The command every process runs, placeholders filled and launcher flags rescaled."""
    outputs: dict[str, Path]
    notes: tuple[str, ...]


def prepare(run: ResolvedRun, request: Request, *, root: Path, workdir: Path,
            environ: Mapping[str, str]) -> Prepared:
    """Build everything a local run of ``run`` needs under ``workdir`` (created if missing).

    ``run`` is the job as :func:`jobs.resolve.resolve_run` resolves it, so the emulated topology is
    the one ``amlgpu submit`` would send, defaults included.
    """
    spec = run.spec
    values = _input_values(spec, request.inputs)
    folders = {name: workdir / "outputs" / name for name in sorted(spec.get("outputs", {}))}
    # A uri_file output is a file path; its folder is what Azure ML would mount.
    outputs = {name: folder / name if spec["outputs"][name].get("type") == "uri_file" else folder
               for name, folder in folders.items()}
    values.update({("outputs", name): shlex.quote(str(path)) for name, path in outputs.items()})
    command = commandline.fill_placeholders(spec["command"], values)
    kind = per_node_launcher(run)
    launcher = commandline.locate(command, kind) if kind else None
    if kind and launcher is None:
        raise EmulationError(f"{kind} was recognised in the command but its flags cannot be found to rewrite",
                             key="command")
    topology = local_topology(run, command=command, launcher=launcher,
                              nodes=request.nodes, procs_per_node=request.procs_per_node)
    mpirun = _mpirun(environ) if topology.style == "mpi" else None

    notes: list[str] = []
    if launcher is not None:
        try:
            command, rewrites = commandline.rescale(command, launcher, nodes=topology.nodes,
                                                    procs_per_node=topology.launcher_procs_per_node or 1,
                                                    gpus_per_node=run.cluster.gpus)
        except ValueError as err:
            raise EmulationError(str(err), key="command") from None
        if rewrites:
            notes.append(f"{launcher.kind} flags rewritten for the local topology: {', '.join(rewrites)}")
    elif run.distribution["type"] == "mpi" and run.launcher in launchers.PER_NODE_LAUNCHERS:
        notes.append(f"{run.launcher} runs as each MPI rank's program, as written (flags not rewritten)")

    base = _base_environment(spec, environ, request.python)
    if "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = _omp_threads(topology)
        notes.append(f"OMP_NUM_THREADS={base['OMP_NUM_THREADS']}: the processes share this machine's "
                     f"{os.cpu_count()} cores (set it to override)")
    # One slice per emulated node; a TensorFlow worker is a node of its own.
    gpus = devices.assign_gpus(devices.visible_gpus(environ), nodes=topology.nodes,
                               gpus_per_node=topology.launcher_procs_per_node or topology.procs_per_node)
    notes.append(_device_note(gpus))
    shell = shutil.which("bash", path=base.get("PATH")) or "/bin/sh"

    workdir.mkdir(parents=True, exist_ok=True)
    snapshot = workdir / "code"
    if spec.get("code") is not None:
        files = copy_code(root / spec["code"], snapshot)
    else:  # a command that needs only its environment starts in an empty folder
        snapshot.mkdir()
        files = 0
    for folder in folders.values():
        folder.mkdir(parents=True)

    if topology.style == "tensorflow":
        specs, tf_notes = _tensorflow(topology, command, base, shell, gpus.per_node, empty_ps=request.tf_empty_ps)
        notes.extend(tf_notes)
    elif topology.style == "mpi":
        assert mpirun is not None
        specs = _mpi(topology, command, base, shell, mpirun, workdir, gpus.per_node)
        notes.append(f"AZ_BATCH_MASTER_NODE={specs[0].env['AZ_BATCH_MASTER_NODE']} "
                     f"(Azure ML: the first node's address, port {contract.AZURE_MASTER_PORT})")
    else:
        specs = _pytorch(topology, command, base, shell, gpus.per_node)
        notes.append(f"MASTER_ADDR={LOCAL_MASTER_ADDR} MASTER_PORT={specs[0].env['MASTER_PORT']} "
                     f"(Azure ML: the first node's address, port {contract.AZURE_MASTER_PORT})")

    timeout = request.timeout_s if request.timeout_s is not None else spec.get("limits", {}).get("timeout")
    plan = LaunchPlan(run_name=run.name, processes=tuple(specs), cwd=snapshot,
                      timeout_s=float(timeout) if timeout else None)
    return Prepared(plan, topology, workdir, files, command, outputs, tuple(notes))


def _omp_threads(topology: Topology) -> str:
    """Cores per local process. The emulated nodes share this machine: a thread pool as large as the
    machine in every process would oversubscribe it many times (torchrun sets 1 for the same reason)."""
    processes = topology.nodes * (topology.launcher_procs_per_node or topology.procs_per_node)
    return str(max(1, (os.cpu_count() or 1) // (processes + topology.parameter_servers)))


def _device_note(gpus: devices.GpuAssignment) -> str:
    if gpus.note:
        return gpus.note
    if gpus.uses_gpus:
        return "GPUs: " + "; ".join(f"node {n}: CUDA_VISIBLE_DEVICES={g}" for n, g in enumerate(gpus.per_node))
    return "no GPU visible: processes run on the CPU (torch: gloo)"


def _input_values(spec: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """Values for the inputs the command uses: literals as declared (or overridden), data inputs as
    the local paths given with ``--input`` (declared data lives in Azure, out of this machine's reach)."""
    declared = spec.get("inputs", {})
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        known = ", ".join(sorted(declared)) or "none"
        raise EmulationError(f"run {spec['name']!r} has no input {unknown[0]!r} (its inputs: {known})", key="--input")
    values: dict[tuple[str, str], str] = {}
    for name in sorted(commandline.referenced_inputs(spec["command"])):
        value = declared[name]
        if not isinstance(value, dict):
            values[("inputs", name)] = overrides.get(name, str(value))
            continue
        if name not in overrides:
            raise EmulationError(
                f"input {name!r} is {value['path']}, which this machine cannot mount: "
                f"pass a local copy with --input {name}=PATH",
                key=f"inputs.{name}.path",
            )
        path = Path(overrides[name]).expanduser().resolve()
        if not path.exists():
            raise EmulationError(f"input {name!r}: {path} does not exist", key="--input")
        if value.get("type") == "uri_file" and not path.is_file():
            raise EmulationError(f"input {name!r} is a uri_file and {path} is not a file", key="--input")
        values[("inputs", name)] = shlex.quote(str(path))
    return values


def _mpirun(environ: Mapping[str, str]) -> str:
    try:
        return mpi.find_mpirun(environ)
    except mpi.MpiUnavailable as err:
        raise EmulationError(str(err), key="distribution.type") from None


def _base_environment(spec: Mapping[str, Any], environ: Mapping[str, str], python: str) -> dict[str, str]:
    """The user's environment without launcher variables, the standing-in interpreter's folder first on PATH,
    unbuffered Python output (so lines arrive as they are printed), then the run's own variables."""
    base = contract.strip_launcher_variables(dict(environ))
    base["PATH"] = os.pathsep.join([os.path.dirname(python), base.get("PATH", os.defpath)])
    base.setdefault("PYTHONUNBUFFERED", "1")
    base.update(spec.get("environment_variables", {}))
    return base


_PORTS = range(20000, 32768)
"""Where local rendezvous ports are drawn from: below Linux's ephemeral range (32768-60999), which
outgoing connections take ports from, so a port found free here is not handed to a connect() before
the rank binds it (a port the OS picks with bind(0) is from that range and was, under load)."""


def free_port() -> int:
    """A TCP port nothing listens on right now, drawn at random below the ephemeral range."""
    draw = random.SystemRandom()
    for _ in range(64):
        port = draw.choice(_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOCAL_MASTER_ADDR, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded range: let the OS pick
        sock.bind((LOCAL_MASTER_ADDR, 0))
        return int(sock.getsockname()[1])


def _with_gpus(env: dict[str, str], gpus: str | None) -> dict[str, str]:
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def _pytorch(topology: Topology, command: str, base: dict[str, str], shell: str,
             gpus: tuple[str | None, ...]) -> list[ProcessSpec]:
    port = free_port()
    per_node = topology.style == "per-node"
    specs = []
    for node in range(topology.nodes):
        for local in range(topology.procs_per_node):
            env = {**base, **contract.pytorch_env(
                nodes=topology.nodes, procs_per_node=topology.procs_per_node, node_rank=node, local_rank=local,
                master_addr=LOCAL_MASTER_ADDR, master_port=port,
            )}
            label = f"node {node}" if per_node else f"rank {node * topology.procs_per_node + local}"
            specs.append(ProcessSpec(label, (shell, "-c", command), _with_gpus(env, gpus[node])))
    return specs


def _mpi(topology: Topology, command: str, base: dict[str, str], shell: str, mpirun: str, workdir: Path,
         gpus: tuple[str | None, ...]) -> list[ProcessSpec]:
    status_dir = workdir / ".mpi"
    status_dir.mkdir()
    ranks = topology.nodes * topology.procs_per_node
    job = contract.mpi_job_env(master_addr=LOCAL_MASTER_ADDR, master_port=free_port())
    env = {**mpi.OPEN_MPI_DEFAULTS, **base, **job,
           **mpi.rank_settings(nodes=topology.nodes, procs_per_node=topology.procs_per_node, status_dir=status_dir,
                               gpus=gpus)}
    argv = mpi.mpirun_argv(mpirun, ranks=ranks, command=command, shell=shell, forwarded=tuple(job),
                           as_root=mpi.running_as_root())
    return [ProcessSpec("mpirun", argv, env, fanout=mpi.fanout(status_dir, ranks))]


def _tensorflow(topology: Topology, command: str, base: dict[str, str], shell: str, gpus: tuple[str | None, ...],
                *, empty_ps: bool) -> tuple[list[ProcessSpec], list[str]]:
    workers = [f"localhost:{free_port()}" for _ in range(topology.nodes)]
    servers = [f"localhost:{free_port()}" for _ in range(topology.parameter_servers)]
    cluster = contract.tf_cluster(workers, servers, empty_ps=empty_ps)
    # Parameter servers hold variables on the CPU: when there are GPUs, they are the workers'.
    server_gpus = "" if gpus[0] is not None else None
    specs = [
        ProcessSpec(f"{task} {i}", (shell, "-c", command),
                    _with_gpus({**base, "TF_CONFIG": contract.tf_config(cluster, task_type=task, index=i)},
                               gpus[i] if task == "worker" else server_gpus),
                    service=task == "ps")
        for task in ("worker", "ps")
        for i in range(len(cluster.get(task, [])))
    ]
    notes = []
    if not servers and not empty_ps:
        notes.append('Azure ML adds "ps": [] to TF_CONFIG when there is no parameter server (TensorFlow >= 2.13 '
                     "rejects it): add --tf-empty-ps to test the script against that")
    return specs, notes
