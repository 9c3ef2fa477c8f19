"""``amlgpu doctor``: what this machine can do with the project, and what to install or run for the rest.

The checks are :data:`preflight.machine.MACHINE` (one registry with the preflight's): python and the project's
packages (MISSING when absent), the project folder, the Pulumi CLI and an Azure login, ``mpirun``, torch, GPUs and
NCCL (WARN), each with a one-line fix.

Exit 0 when everything the offline ``amlgpu plan`` needs is there, 1 otherwise. Secret values are
never printed: credentials are reported by variable name only.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernel.errors import EXIT_OK, EXIT_POLICY
from preflight.checks import Check
from preflight.machine import MACHINE, Machine, ready


def run_checks(env: Any, cwd: Path) -> list[Check]:
    """Every machine check, in the order shown, with run-local's own ``mpirun`` finder."""
    from jobs.emulate.mpi import MpiUnavailable, find_mpirun

    machine = Machine(env, cwd, find_mpirun, MpiUnavailable)
    return MACHINE.run(machine, machine)


def render_text(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for check in checks:
        lines.append(f"{check.status:<8} {check.name:<{width}}  {check.detail}")
        if check.fix and check.status != "OK":
            lines.append(f"{'':<8} {'':<{width}}  fix: {check.fix}")
    can = ready(checks)
    verdict = [
        ("offline plan (amlgpu plan)", can["plan"]),
        ("deploy (pulumi preview/up, amlgpu submit)", can["deploy"]),
        ("local emulation (amlgpu run-local)", can["run_local"]),
        ("MPI runs locally", can["run_local_mpi"]),
        ("GPU runs locally (NCCL)", can["gpus"]),
    ]
    lines += ["", "Ready for: " + (", ".join(what for what, yes in verdict if yes) or "nothing yet")]
    missing = [what for what, yes in verdict if not yes]
    if missing:
        lines.append("Not ready for: " + ", ".join(missing))
    return "\n".join(lines)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check this machine (Python, packages, Pulumi CLI, Azure login, mpirun, torch, GPUs) and say what to do",
        description=__doc__,
    )
    parser.add_argument("--format", choices=("text", "json"), default="text", help="stdout format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks = run_checks(os.environ, Path.cwd())
    if args.format == "json":
        from planning.artifacts import canonical_json

        print(canonical_json({"checks": [asdict(c) for c in checks], "ready": ready(checks)}), end="")
    else:
        print(render_text(checks))
    required_ok = all(c.status == "OK" for c in checks if c.required)
    return EXIT_OK if required_ok else EXIT_POLICY
