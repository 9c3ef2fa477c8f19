"""Print the launch contract this process sees, as JSON, and optionally check it.

Run it as a declared run's command (``python probe.py --expect pytorch``) on Azure ML or under
``amlgpu run-local`` and compare with the reference contract: every variable a launcher sets
(MASTER_ADDR ... LOCAL_RANK, OMPI_COMM_WORLD_*, AZ_BATCH_MASTER_NODE, TF_CONFIG) plus
CUDA_VISIBLE_DEVICES. Standard library only, so it starts in milliseconds in any environment.

Exit status: 0, or 1 when ``--expect`` finds the contract incomplete or inconsistent (each problem
printed on stderr). Known quirks of Azure ML's contract (TF_CONFIG's empty ``"ps"``) are warnings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VARIABLES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK",
    "AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE",
    "TF_CONFIG", "CUDA_VISIBLE_DEVICES",
)

REQUIRED = {
    "pytorch": ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK"),
    "mpi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE", "AZ_BATCH_MASTER_NODE"),
    "tensorflow": ("TF_CONFIG",),
}


def observe(environ: Mapping[str, str]) -> dict[str, Any]:
    """The launcher-owned variables that are set, TF_CONFIG decoded when it is JSON."""
    seen: dict[str, Any] = {name: environ[name] for name in VARIABLES if name in environ}
    if "TF_CONFIG" in seen:
        with contextlib.suppress(ValueError):  # not JSON: check() reports it when tensorflow is expected
            seen["TF_CONFIG"] = json.loads(seen["TF_CONFIG"])
    return seen


def _int(seen: Mapping[str, Any], name: str, problems: list[str]) -> int | None:
    try:
        return int(seen[name])
    except (KeyError, ValueError):
        problems.append(f"{name}={seen.get(name)!r} is not an integer")
        return None


def check(kind: str, seen: Mapping[str, Any]) -> list[str]:
    """Problems with the contract of a ``kind`` run (``pytorch``, ``mpi`` or ``tensorflow``)."""
    problems = [f"{name} is not set" for name in REQUIRED[kind] if name not in seen]
    if problems:
        return problems
    if kind == "pytorch":
        rank, world, local = (_int(seen, n, problems) for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        if None not in (rank, world, local) and not (0 <= local <= rank < world):  # type: ignore[operator]
            problems.append(f"RANK={rank} LOCAL_RANK={local} WORLD_SIZE={world} are inconsistent")
        _int(seen, "MASTER_PORT", problems)
        _int(seen, "NODE_RANK", problems)
    elif kind == "mpi":
        rank, size, local, local_size = (_int(seen, f"OMPI_COMM_WORLD_{n}", problems)
                                         for n in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE"))
        if None not in (rank, size, local, local_size) and not (
            0 <= rank < size and 0 <= local < local_size <= size  # type: ignore[operator]
        ):
            problems.append(f"OMPI_COMM_WORLD_RANK={rank} SIZE={size} LOCAL_RANK={local} "
                            f"LOCAL_SIZE={local_size} are inconsistent")
        if ":" not in str(seen["AZ_BATCH_MASTER_NODE"]):
            problems.append(f"AZ_BATCH_MASTER_NODE={seen['AZ_BATCH_MASTER_NODE']!r} is not addr:port")
    else:
        config = seen["TF_CONFIG"]
        if not isinstance(config, dict):
            return [f"TF_CONFIG is not JSON: {config!r}"]
        cluster, task = config.get("cluster"), config.get("task")
        if not isinstance(cluster, dict) or not cluster.get("worker"):
            problems.append("TF_CONFIG.cluster has no workers")
        elif not isinstance(task, dict) or task.get("type") not in cluster:
            problems.append(f"TF_CONFIG.task {task!r} names no task type of the cluster")
        elif not 0 <= int(task.get("index", -1)) < len(cluster[task["type"]]):
            problems.append(f"TF_CONFIG.task.index {task.get('index')!r} is out of range")
    return problems


def warnings(seen: Mapping[str, Any]) -> list[str]:
    """Parts of the contract that are as Azure ML sets them but break common scripts."""
    config = seen.get("TF_CONFIG")
    if isinstance(config, dict) and isinstance(config.get("cluster"), dict) and config["cluster"].get("ps") == []:
        return ['TF_CONFIG.cluster has "ps": [] (as Azure ML sets it): TensorFlow >= 2.13 rejects it, drop it first']
    return []


def identity(seen: Mapping[str, Any]) -> str:
    """A name for this process that is unique in the run (used for ``--out`` file names)."""
    config = seen.get("TF_CONFIG")
    if isinstance(config, dict) and isinstance(config.get("task"), dict):
        return f"{config['task'].get('type')}-{config['task'].get('index')}"
    for name in ("RANK", "OMPI_COMM_WORLD_RANK"):
        if name in seen:
            return f"rank-{seen[name]}"
    return f"pid-{os.getpid()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--expect", choices=sorted(REQUIRED), help="check the contract of this distribution type")
    parser.add_argument("--out", type=Path, help="also write <identity>.json into this folder")
    args = parser.parse_args(argv)

    seen = observe(os.environ)
    report = {"host": socket.gethostname(), "pid": os.getpid(), "variables": seen}
    text = json.dumps(report, sort_keys=True)
    print(text, flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{identity(seen)}.json").write_text(text + "\n", encoding="utf-8")
    problems = check(args.expect, seen) if args.expect else []
    for warning in warnings(seen):
        print(f"probe: warning: {warning}", file=sys.stderr)
    for problem in problems:
        print(f"probe: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
