"""``amlgpu doctor``: what this machine can do with the project, and what to install or run for the rest.

The checks are :data:`preflight.machine.MACHINE` (one registry with the preflight's): python and the project's
packages (MISSING when absent), the project folder, the Pulumi CLI and an Azure login, ``mpirun``, torch, GPUs and
NCCL (WARN), each with a one-line fix. Then each run the project's stacks declare (pipelines and sweeps with their
steps): whether ``amlgpu run-local`` can start it here, or what this machine lacks for it
(:mod:`jobs.emulate.requirements`: the packages its code imports, its launcher's, ``mpirun``) and how to get it.

Exit 0 when everything the offline ``amlgpu plan`` needs is there, 1 otherwise. Secret values are
never printed: credentials are reported by variable name only.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs.emulate import requirements
from jobs.pipelines import resolve_composite
from jobs.resolve import Scans, resolve_run
from kernel.errors import EXIT_OK, EXIT_POLICY, UserError
from preflight.checks import Check
from preflight.machine import MACHINE, Machine, ready
from stack.project import find_root, load_stack, stack_names
from stack.runs import Run


@dataclass(frozen=True)
class RunRow:
    """Whether ``amlgpu run-local <run> --stack <stack>`` can start here: "OK", "MISSING" (what it lacks, with
    how to get it) or "UNKNOWN" (the stack file could not be read: ``detail`` says why)."""

    stack: str
    run: str
    status: str
    missing: list[dict[str, str]] = field(default_factory=list)
    """``{"name", "why", "fix"}`` per package or program the run needs and this machine lacks."""
    detail: str = ""


def run_rows(env: Any, cwd: Path) -> list[RunRow]:
    """Every run of every stack of the project around ``cwd`` (none outside a project), emulable here or not."""
    try:
        root = find_root(cwd)
    except UserError:
        return []
    rows: list[RunRow] = []
    for name in stack_names(root):
        try:
            stack = load_stack(name, root)
            scans: Scans = {}
            entries: list[tuple[str, list[Any]]] = []
            for job in stack.config.jobs:
                if isinstance(job, Run):
                    entries.append((job.name, [resolve_run(job, stack.config, root)]))
                else:
                    entries.append((job.name, resolve_composite(job, stack.config, root, scans=scans)[1]))
        except UserError as err:
            rows.append(RunRow(name, "", "UNKNOWN", detail=f"the stack cannot be read: {err}"))
            continue
        for job_name, runs in entries:
            lacking: dict[str, dict[str, str]] = {}
            for run in runs:
                found = requirements.missing(requirements.needs(run, root), python=sys.executable,
                                             environ=requirements.environment(run, env))
                for m in found:
                    fix = m.detail
                    if m.need.name in requirements.SEPARATE_ENVIRONMENT:
                        fix += " in a separate environment, then run-local --python <its python>"
                    lacking.setdefault(m.need.name, {"name": m.need.name, "why": m.need.why, "fix": fix})
            rows.append(RunRow(name, job_name, "MISSING" if lacking else "OK", list(lacking.values())))
    return rows


def render_runs(rows: list[RunRow]) -> list[str]:
    """The runs section of the text report: one line per run, one more per thing it lacks."""
    if not rows:
        return []
    width = max(len(f"{r.stack}/{r.run}") for r in rows)
    lines = ["", "Runs amlgpu run-local can start here (amlgpu run-local RUN --stack STACK):"]
    for row in rows:
        label = f"{row.stack}/{row.run}" if row.run else row.stack
        summary = row.detail or ", ".join(m["name"] for m in row.missing)
        lines.append(f"{row.status:<8} {label:<{width}}  {summary}".rstrip())
        for m in row.missing:
            lines.append(f"{'':<8} {'':<{width}}  {m['name']}: {m['why']}; {m['fix']}")
    lines.append(f"{sum(r.status == 'OK' for r in rows)} of {sum(bool(r.run) for r in rows)} run(s) can be "
                 "emulated here (docs/local-emulation.md#what-a-run-needs-on-this-machine)")
    return lines


def run_checks(env: Any, cwd: Path) -> list[Check]:
    """Every machine check, in the order shown, with run-local's own ``mpirun`` finder."""
    from jobs.emulate.mpi import MpiUnavailable, find_mpirun

    machine = Machine(env, cwd, find_mpirun, MpiUnavailable)
    return MACHINE.run(machine, machine)


def render_text(checks: list[Check], runs: list[RunRow] | None = None) -> str:
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
    return "\n".join(lines + render_runs(runs or []))


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "doctor",
        help="check this machine (Python, packages, Pulumi CLI, Azure login, mpirun, torch, GPUs, what each declared "
             "run needs to run locally) and say what to do",
        description=__doc__,
    )
    parser.add_argument("--format", choices=("text", "json"), default="text", help="stdout format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks = run_checks(os.environ, Path.cwd())
    runs = run_rows(os.environ, Path.cwd())
    if args.format == "json":
        from planning.artifacts import canonical_json

        print(canonical_json({"checks": [asdict(c) for c in checks], "ready": ready(checks),
                              "runs": [asdict(r) for r in runs]}), end="")
    else:
        print(render_text(checks, runs))
    required_ok = all(c.status == "OK" for c in checks if c.required)
    return EXIT_OK if required_ok else EXIT_POLICY
