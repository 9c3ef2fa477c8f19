"""The four figures of the performance targets (issue 37), measured in one interleaved run.

| figure | numerator | denominator | target |
|---|---|---|---:|
| ``dev_over_floor`` | ``amlgpu plan --stack dev`` | the import floor (:func:`plan_bench.floor_script`) | 1.15 |
| ``gen-1000_over_dev`` | a generated stack of 1,000 runs | the dev plan | 2.2 |
| ``teams-20_over_team`` | 20 team stacks, ``amlgpu plan --all`` | one team stack, ``--stack team-000`` | 2.5 |
| ``version_over_floor`` | ``amlgpu --version`` | ``python -c "import argparse, importlib.metadata"`` | 6 |

Each case is a fresh child process (:func:`plan_bench.measure`: wall clock, CPU time and peak RSS of that
child alone), run once to warm the bytecode caches, then ``--repeat`` times, every case in each round, so load
from other processes spreads over all of them. Medians; both wall clock and CPU time are reported, CPU time is
the steadier on a shared machine. A benchmark, not a test: it asserts nothing, it reports.

``--tree DIR`` (repeatable) also measures the same cases against other checkouts of the project, interleaved
with this one, for a before/after comparison: each is run with ``AMLGPU_TREE=DIR`` in its environment, which
the development virtualenv's editable install reads to import that checkout's packages.

Usage::

    .venv/bin/python bench/figures.py                       # 5 rounds, about 4 minutes on 2 idle cores
    .venv/bin/python bench/figures.py --repeat 3 --json /tmp/f.json --markdown /tmp/f.md
    .venv/bin/python bench/figures.py --tree /tmp/before    # before/after, interleaved
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_stack  # sibling scripts, importable once their folder is on the path
import plan_bench

ROOT = gen_stack.ROOT
TEAMS = 20
RUNS_PER_TEAM = 5
LARGE = 1000
FIGURES = {
    "dev_over_floor": ("dev", "floor", 1.15),
    f"gen-{LARGE}_over_dev": (f"gen-{LARGE}", "dev", 2.2),
    f"teams-{TEAMS}_over_team": (f"teams-{TEAMS}", "team", 2.5),
    "version_over_floor": ("version", "version-floor", 6.0),
}
"""Each figure: its numerator case, its denominator case, its target (issue 37)."""


def build_cases(workdir: Path, tree: Path | None = None, *, large: int = LARGE) -> list[plan_bench.Case]:
    """Every case of :data:`FIGURES`, for this checkout (``tree`` None) or with ``AMLGPU_TREE=tree``; the large
    generated stack has ``large`` runs (the case keeps its name, ``gen-1000``, which the figures refer to)."""
    suffix = "" if tree is None else f"@{tree}"
    env = {} if tree is None else {"AMLGPU_TREE": str(tree)}
    root = ROOT if tree is None else tree
    work = workdir / ("this" if tree is None else f"tree{abs(hash(str(tree)))}")
    work.mkdir(parents=True)
    amlgpu = str(plan_bench.BIN / "amlgpu")
    floor = work / "floor.py"
    floor.write_text(plan_bench.floor_script(plan_bench.azure_native_modules(root)))
    generated = gen_stack.write_project(work / f"stack-{large}", gen_stack.stack_config(large))
    teams = work / "teams"
    names = gen_stack.write_teams(teams, TEAMS, runs=RUNS_PER_TEAM)
    cases = [
        plan_bench.Case("floor", [sys.executable, str(floor)], work),
        plan_bench.Case("dev", [amlgpu, "plan", "--stack", "dev", "--out", str(work / "out-dev")], root),
        plan_bench.Case(f"gen-{LARGE}", [amlgpu, "plan", "--stack", gen_stack.STACK, "--out", str(work / "out-gen")],
                        generated),
        plan_bench.Case("team", [amlgpu, "plan", "--stack", names[0], "--out", str(work / "out-team")], teams),
        plan_bench.Case(f"teams-{TEAMS}", [amlgpu, "plan", "--all", "--out", str(work / "out-teams")], teams),
        plan_bench.Case("version-floor", [sys.executable, "-c", "import argparse, importlib.metadata"], work),
        plan_bench.Case("version", [amlgpu, "--version"], work),
    ]
    for case in cases:
        case.name += suffix
        case.env = env
    return cases


def figures(summary: dict[str, dict[str, Any]], suffix: str = "") -> dict[str, Any]:
    """The four ratios, on wall clock and CPU time, with their targets and whether each is met."""
    out: dict[str, Any] = {}
    for name, (numerator, denominator, target) in FIGURES.items():
        a, b = summary[numerator + suffix], summary[denominator + suffix]
        entry = {m: round(a[f"{m}_s"]["median"] / b[f"{m}_s"]["median"], 2) for m in ("wall", "cpu")}
        out[name] = {**entry, "target": target, "met": {m: entry[m] <= target for m in entry}}
    return out


def markdown(result: dict[str, Any]) -> str:
    """The cases and figures as the tables ``docs/performance.md`` shows."""
    rows = [f"Measured {result['date']} on {result['machine']['cpu']} ({result['machine']['cores']} cores), "
            f"load average {result['load_average']['before']} before, {result['load_average']['after']} after; "
            f"medians of {result['repeat']}.", "",
            "| case | wall median (s) | CPU median (s) | peak RSS (MiB) |", "|---|---:|---:|---:|"]
    for name, case in result["cases"].items():
        rows.append(f"| {name} | {case['wall_s']['median']:.2f} | {case['cpu_s']['median']:.2f} | "
                    f"{case['peak_rss_mib']['median']:.0f} |")
    for tree, entries in result["figures"].items():
        rows += ["", f"| figure{'' if tree == 'this' else f' ({tree})'} | wall | CPU | target | met (wall / CPU) |",
                 "|---|---:|---:|---:|---|"]
        for name, entry in entries.items():
            met = " / ".join("yes" if entry["met"][m] else "no" for m in ("wall", "cpu"))
            rows.append(f"| {name.replace('_over_', ' / ')} | {entry['wall']:.2f} | {entry['cpu']:.2f} | "
                        f"<= {entry['target']} | {met} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="another checkout to measure, interleaved (repeatable)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results.json",
                        help="results file: its 'figures' entry is written, the rest kept")
    parser.add_argument("--markdown", type=Path, help="also write the markdown tables here")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    trees = [tree.resolve() for tree in args.tree]
    for tree in trees:
        if not (tree / "amlgpu" / "cli.py").is_file():
            parser.error(f"--tree {tree}: not a checkout of this project (no amlgpu/cli.py)")

    load_before = plan_bench._load()
    with tempfile.TemporaryDirectory(prefix="amlgpu-figures-") as tmp:
        cases = [case for tree in (None, *trees) for case in build_cases(Path(tmp), tree)]
        for case in cases:
            print(f"warm-up: {case.name}", file=sys.stderr, flush=True)
            plan_bench.measure(case, record=False)
        for i in range(args.repeat):
            for case in cases:
                plan_bench.measure(case)
                print(f"[{i + 1}/{args.repeat}] {case.name:24s} wall {case.wall[-1]:6.2f}s  cpu {case.cpu[-1]:6.2f}s  "
                      f"rss {case.rss_mib[-1]:5.0f} MiB  load {plan_bench._load()[0]}", file=sys.stderr, flush=True)
    summary = {case.name: case.summary() for case in cases}
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": plan_bench.machine(),
        "load_average": {"before": load_before, "after": plan_bench._load()},
        "repeat": args.repeat,
        "cases": summary,
        "figures": {"this": figures(summary), **{str(tree): figures(summary, f"@{tree}") for tree in trees}},
    }
    plan_bench.publish(args.json, {"figures": result}, markdown(result), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
