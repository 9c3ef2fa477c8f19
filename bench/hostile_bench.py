"""Benchmark ``amlgpu plan`` on hostile stack files: 8 MiB, the most a stack file may hold, made of long runs
of the characters that cost each pattern the most.

A backtracking regular expression takes time quadratic in such runs (``\\$\\[\\[.*?\\]\\]`` over ``$[[``
repeated: a 292 KiB stack planned for 225 s), and so does :mod:`shlex` over one long word. Every pattern
applied to user input now runs on RE2 and shell text past 64 KiB is split on white space: each case
below must plan in seconds. The pull-request gate plans fork pull requests, so this is the time a
hostile one can take.

Each case writes a project whose stack is the dev stack with one run, filled to just under 8 MiB
(``stack.stackfile.MAX_BYTES``) with one payload: for a command pattern, about 120 runs whose commands are
as long as a command may be (``stack.runs.MAX_COMMAND``, 64 KiB) and made of the pattern's worst case; for
the other fields, one value of 8 MiB. ``mixed`` puts a share of every payload in one file (the suite plans
that one: ``tests/hostile/test_hostile.py``, outcome only, never time).

Usage::

    .venv/bin/python bench/hostile_bench.py                     # every case once; a Markdown table
    .venv/bin/python bench/hostile_bench.py --cases jwt,mixed --repeat 3
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import gen_stack  # noqa: E402  (bench/ is a folder of scripts, run from the root)

from stack.runs import MAX_COMMAND  # noqa: E402
from stack.stackfile import MAX_BYTES  # noqa: E402

STACK = "hostile"
NS = "aml-gpu-training"
RUN: dict[str, Any] = {
    "name": "ddp", "code": "jobs/workloads", "command": "python train_ddp.py --epochs 1",
    "environment": "acpt-pytorch", "compute": "gpu-a100", "resources": {"instance_count": 2},
    "distribution": {"type": "pytorch"}, "limits": {"timeout": 3600},
}

Mutation = Callable[[list[dict[str, Any]], int], None]
"""Fills a stack's ``jobs`` with about ``size`` bytes of one payload."""


def _commands(tail: str) -> Mutation:
    """As many runs as fit, each command as long as a command may be (``MAX_COMMAND``) and made of ``tail``."""
    def mutate(jobs: list[dict[str, Any]], size: int) -> None:
        room = MAX_COMMAND - len(RUN["command"]) - 1
        for _ in range(max(1, size // MAX_COMMAND)):
            run = copy.deepcopy(RUN)
            run["name"] = f"hostile-{len(jobs)}"
            run["command"] = RUN["command"] + " " + tail * (room // len(tail))
            jobs.append(run)
    return mutate


def _field(key: str, unit: str, name: str | None = None) -> Mutation:
    """One run whose ``key`` (or ``key.name``) is one value of about ``size`` bytes of ``unit``."""
    def mutate(jobs: list[dict[str, Any]], size: int) -> None:
        run = jobs[0]
        value = unit * (size // len(unit))
        if name is None:
            run[key] = value
        else:
            run.setdefault(key, {})[name] = value
    return mutate


PAYLOADS: dict[str, Mutation] = {
    # stack/runs.py: optional segments and placeholders in commands
    "optional-segment": _commands("$[["),
    "placeholder": _commands("${{ "),
    # kernel/secrets.py: JWT, URL credentials, Authorization headers, shell words after credential flags
    "jwt": _commands("eyJ"),
    "url-credentials": _commands("://a:"),
    "authorization": _commands("Authorization: "),
    "credential-flags": _commands("--token "),
    # policies/rules/runs/tensorflow.py: a master task name followed by separators
    "master-task": _commands("task_type" + " " * 64),
    # jobs/launchers.py: one long shell word
    "one-word": _commands("a"),
    # a command longer than a command may be: refused at once (exit 2)
    "too-long-command": _field("command", "$[["),
    # kernel/secrets.py: storage keys, connection strings and private keys in other fields
    "account-key": _field("environment_variables", "AccountKey=", "STORAGE_TOKEN"),
    "base64": _field("environment_variables", "A", "X_TOKEN"),
    "private-key": _field("description", "-----BEGIN "),
    "tag": _field("tags", "sk-", "owner"),
}


def mixed(jobs: list[dict[str, Any]], size: int) -> None:
    """Every payload that plans (all but the too-long command) in one stack, an equal share each."""
    kinds = [kind for kind in PAYLOADS if kind != "too-long-command"]
    for kind in kinds:
        PAYLOADS[kind](jobs, size // len(kinds))


CASES: dict[str, Mutation] = {**PAYLOADS, "mixed": mixed}


def dev_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    config[f"{NS}:jobs"] = [copy.deepcopy(RUN)]
    return config


def write_project(folder: Path, case: str) -> Path:
    """A project in ``folder`` whose ``Pulumi.hostile.yaml`` is 8 MiB of ``case`` (just under the limit)."""
    gen_stack.copy_program(folder)
    config = dev_config()
    base = len(yaml.safe_dump({"config": config}, sort_keys=False, width=1 << 30))
    CASES[case](config[f"{NS}:jobs"], MAX_BYTES - base - 2 * MAX_COMMAND)
    text = yaml.safe_dump({"config": config}, sort_keys=False, width=1 << 30)
    assert len(text.encode()) <= MAX_BYTES, (case, len(text))
    (folder / f"Pulumi.{STACK}.yaml").write_text(text, encoding="utf-8")
    return folder


def plan(project: Path, stack: str = STACK) -> tuple[float, float, int]:
    """Wall-clock seconds, CPU seconds (user + system of the child alone, from ``wait4``: the steady figure
    on a shared machine) and exit code of ``amlgpu plan`` in ``project``."""
    amlgpu = Path(sys.executable).with_name("amlgpu")
    started = time.monotonic()
    child = subprocess.Popen([str(amlgpu), "plan", "--stack", stack, "--out", str(project / "build" / stack)],
                             cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print("| case | stack file | exit | CPU time (median) | wall clock (median) |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="hostile-bench-") as scratch:
        dev = Path(scratch) / "dev"
        write_project(dev, "mixed")
        shutil.copy(ROOT / "Pulumi.dev.yaml", dev / "Pulumi.dev.yaml")
        cases = [("dev (the shipped stack, for reference)", dev, "dev")]
        cases += [(case, write_project(Path(scratch) / case, case), STACK) for case in args.cases.split(",")]
        for case, project, stack in cases:
            size = (project / f"Pulumi.{stack}.yaml").stat().st_size
            runs = [plan(project, stack) for _ in range(args.repeat)]
            codes = {code for _, _, code in runs}
            if codes - {0, 1, 2}:
                raise SystemExit(f"{case}: exit {codes}")
            wall = statistics.median(seconds for seconds, _, _ in runs)
            cpu = statistics.median(seconds for _, seconds, _ in runs)
            print(f"| {case} | {size / (1 << 20):.1f} MiB | {'/'.join(map(str, sorted(codes)))} | {cpu:.1f} s "
                  f"| {wall:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
