"""Benchmark planning N stacks in one process (``amlgpu plan --all``) against N processes (one
``amlgpu plan --stack S`` each, one after the other, as a CI matrix or a shell loop runs them).

The stacks are :func:`gen_stack.team_config` team stacks (three InfiniBand clusters, four environments,
five runs and the three fabric checks each), written into one project per N. Cases, each timed from spawn to
exit of every child, wall clock and CPU time (user + system of the children alone, from ``wait4``):

* ``one-process-N``: ``amlgpu plan --all`` over N stacks;
* ``processes-N``: N ``amlgpu plan --stack team-...`` processes in a row (``processes-1`` is one stack
  planned the usual way: the unit the targets are measured in).

Every case runs once to warm the bytecode caches (not counted), then ``--repeat`` times interleaved
(``--process-repeat`` for the N-process cases of 100 and more, which cost minutes each). A plan must exit 0.

Target (issue 31): 20 stacks in one process in at most 3x the time of one stack.

Usage::

    .venv/bin/python bench/stacks_bench.py                    # sizes 1,10,20,100; processes 1,10,100
    .venv/bin/python bench/stacks_bench.py --sizes 1,20 --process-sizes 1 --repeat 2 --json /tmp/r.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_stack  # sibling scripts, importable once their folder is on the path
import plan_bench

ROOT = gen_stack.ROOT
TARGET_20_OVER_ONE = 3.0
RUNS_PER_STACK = 5
SLOW_PROCESS_CASE = 100
"""From this many processes on, a case runs ``--process-repeat`` times."""


@dataclass
class Series:
    """One benchmarked case: the processes it runs one after the other, and what they took in total."""

    name: str
    stacks: int
    commands: list[list[str]]
    cwd: Path
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)

    def run(self, *, record: bool = True) -> None:
        wall = cpu = rss = 0.0
        for i, argv in enumerate(self.commands):
            child = plan_bench.Case(f"{self.name}[{i}]", argv, self.cwd)
            plan_bench.measure(child)
            if child.exit_codes != [0]:
                raise SystemExit(f"{self.name}: {' '.join(argv)} exited {child.exit_codes}")
            wall, cpu, rss = wall + child.wall[0], cpu + child.cpu[0], max(rss, child.rss_mib[0])
        if record:
            self.wall.append(wall)
            self.cpu.append(cpu)
            self.rss_mib.append(rss)

    def summary(self) -> dict[str, Any]:
        return {
            "stacks": self.stacks,
            "processes": len(self.commands),
            "samples": len(self.wall),
            "wall_s": plan_bench.spread(self.wall),
            "cpu_s": plan_bench.spread(self.cpu),
            "peak_rss_mib": round(statistics.median(self.rss_mib), 1),
        }


def build(workdir: Path, sizes: tuple[int, ...], process_sizes: tuple[int, ...]) -> list[Series]:
    amlgpu = str(plan_bench.BIN / "amlgpu")
    out: list[Series] = []
    for n in sorted(set(sizes) | set(process_sizes)):
        project = workdir / f"teams-{n}"
        names = gen_stack.write_teams(project, n, runs=RUNS_PER_STACK)
        if n in process_sizes:
            out.append(Series(f"processes-{n}", n, [[amlgpu, "plan", "--stack", name, "--out",
                                                     str(workdir / f"out-p{n}" / name)] for name in names], project))
        if n in sizes:
            out.append(Series(f"one-process-{n}", n, [[amlgpu, "plan", "--all", "--out", str(workdir / f"out-{n}")]],
                              project))
    return out


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """20 stacks in one process against one stack (the target), and N processes against one process."""
    def ratio(a: str, b: str, metric: str) -> float:
        return round(float(summary[a][metric]["median"]) / float(summary[b][metric]["median"]), 2)

    out: dict[str, Any] = {}
    if "one-process-20" in summary and "processes-1" in summary:
        entry = {m: ratio("one-process-20", "processes-1", f"{m}_s") for m in ("wall", "cpu")}
        out["one-process-20_over_one_stack"] = {**entry, "target": TARGET_20_OVER_ONE,
                                                "met": {m: entry[m] <= TARGET_20_OVER_ONE for m in entry}}
    for name in summary:
        if name.startswith("processes-") and f"one-process-{name.split('-')[1]}" in summary:
            n = name.split("-")[1]
            out[f"processes-{n}_over_one-process-{n}"] = {
                m: ratio(name, f"one-process-{n}", f"{m}_s") for m in ("wall", "cpu")}
    ones = sorted((c["stacks"], c) for k, c in summary.items() if k.startswith("one-process-"))
    if len(ones) >= 2:
        (n0, a), (n1, b) = ones[0], ones[-1]
        out["per_stack_in_one_process"] = {
            m: round((b[f"{m}_s"]["median"] - a[f"{m}_s"]["median"]) / (n1 - n0), 3) for m in ("wall", "cpu")}
        out["per_stack_in_one_process"]["rss_mib"] = round((b["peak_rss_mib"] - a["peak_rss_mib"]) / (n1 - n0), 2)
    return out


def markdown(result: dict[str, Any]) -> str:
    rows = ["| case | stacks | processes | wall median (s) | CPU median (s) | peak RSS (MiB) |",
            "|---|---:|---:|---:|---:|---:|"]
    for name, case in result["cases"].items():
        rows.append(f"| {name} | {case['stacks']} | {case['processes']} | {case['wall_s']['median']:.2f} | "
                    f"{case['cpu_s']['median']:.2f} | {case['peak_rss_mib']:.0f} |")
    rows += ["", "| ratio | wall | CPU |", "|---|---:|---:|"]
    for name, entry in result["ratios"].items():
        if name == "per_stack_in_one_process":
            continue
        target = f" (target <= {entry['target']})" if "target" in entry else ""
        rows.append(f"| {name.replace('_over_', ' / ')}{target} | {entry['wall']:.2f} | {entry['cpu']:.2f} |")
    per = result["ratios"].get("per_stack_in_one_process")
    if per:
        rows += ["", f"Each further stack in one process: {per['wall']:.3f} s wall, {per['cpu']:.3f} s CPU, "
                     f"{per['rss_mib']:.2f} MiB peak RSS."]
    return "\n".join(rows) + "\n"


def _sizes(text: str, parser: argparse.ArgumentParser, flag: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(s) for s in text.split(",") if s.strip()}))
    except ValueError:
        parser.error(f"{flag}: not a list of integers: {text!r}")
    if any(not 1 <= s <= 250 for s in sizes):
        parser.error(f"{flag}: every size must be between 1 and 250")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,20,100", help="stacks planned in one process (default 1,10,20,100)")
    parser.add_argument("--process-sizes", default="1,10,100",
                        help="stacks planned one process each (default 1,10,100)")
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per case (default 3)")
    parser.add_argument("--process-repeat", type=int, default=1,
                        help=f"measured runs of the cases of {SLOW_PROCESS_CASE}+ processes (default 1)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results.json",
                        help="results file: its 'stacks' entry is written, the rest kept")
    parser.add_argument("--markdown", type=Path, help="also write the markdown tables here")
    args = parser.parse_args(argv)
    sizes, process_sizes = _sizes(args.sizes, parser, "--sizes"), _sizes(args.process_sizes, parser, "--process-sizes")
    if args.repeat < 1 or args.process_repeat < 1:
        parser.error("--repeat and --process-repeat must be >= 1")

    load_before = plan_bench._load()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amlgpu-stacks-bench-") as tmp:
        cases = build(Path(tmp), sizes, process_sizes)
        for case in cases:
            print(f"warm-up: {case.name}", file=sys.stderr, flush=True)
            if len(case.commands) < SLOW_PROCESS_CASE:
                case.run(record=False)
        for i in range(args.repeat):
            for case in cases:
                if len(case.commands) >= SLOW_PROCESS_CASE and i >= args.process_repeat:
                    continue
                case.run()
                print(f"[{i + 1}/{args.repeat}] {case.name:16s} wall {case.wall[-1]:7.2f}s  cpu {case.cpu[-1]:7.2f}s  "
                      f"rss {case.rss_mib[-1]:5.0f} MiB  load {plan_bench._load()[0]}", file=sys.stderr, flush=True)
    summary = {case.name: case.summary() for case in cases}
    result = {
        "machine": plan_bench.machine(),
        "load_average": {"before": load_before, "after": plan_bench._load()},
        "minutes": round((time.monotonic() - started) / 60, 1),
        "stack": {"generator": "bench/gen_stack.py team_config", "runs": RUNS_PER_STACK, "clusters": 3,
                  "environments": 4},
        "cases": summary,
        "ratios": ratios(summary),
    }
    plan_bench.publish(args.json, {"stacks": result}, markdown(result), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
