"""Benchmark ``amlgpu plan`` as a whole process against the floor of the libraries it must load.

Cases, each a fresh child process timed from spawn to exit:

* ``floor``: a Python process that only imports pulumi, the ``pulumi_azure_native`` submodules the
  project uses (found by scanning its sources, one class of each touched), pydantic and azure-ai-ml;
* ``dev``: ``amlgpu plan --stack dev`` on the shipped dev stack;
* ``dev-base``: the same with ``--base`` naming the ``dev`` case's plan folder (the diff against a base);
* ``gen-N``: ``amlgpu plan`` on a generated stack of N runs over 20 clusters and 10 environments
  (:mod:`gen_stack`), written into a temporary project.

Every case runs once to warm the bytecode caches (not counted), then ``--repeat`` times, the cases
interleaved so that a burst of load from other processes spreads over all of them. Reported per
case: the median wall clock, the median CPU time (user + system of the child alone, from ``wait4``:
the robust figure on a shared machine), and the peak RSS of the child. A plan must exit 0 or 1
(policy findings are fine); anything else aborts the benchmark with the child's output.

Targets (issue 8): dev <= 1.3x floor; the 1000-run stack <= 2.5x dev; memory growing linearly.
Target (issue 14): dev-base <= 1.1x dev (``--base`` with a plan folder adds at most 10%).

Usage::

    .venv/bin/python bench/plan_bench.py            # 5 repeats; writes bench/results.json
    .venv/bin/python bench/plan_bench.py --quick    # 3 repeats
    .venv/bin/python bench/plan_bench.py --sizes 10,100 --repeat 2 --json /tmp/r.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_stack  # a sibling script, importable once its folder is on the path

ROOT = gen_stack.ROOT
BIN = Path(sys.executable).parent
PACKAGES = ("pulumi", "pulumi-azure-native", "pulumi-policy", "azure-ai-ml", "pydantic", "PyYAML", "marshmallow")
SCANNED = ("__main__.py", "infra", "amlgpu", "jobs", "policies")
"""Where the project imports ``pulumi_azure_native`` submodules from (the floor loads each of them)."""

TARGET_DEV_OVER_FLOOR = 1.3
TARGET_LARGE_OVER_DEV = 2.5
TARGET_BASE_OVER_DEV = 1.1
DEFAULT_SIZES = (10, 100, 1000)
PLAN_EXIT_CODES = (0, 1)
"""0: no mandatory policy failure; 1: some (every artifact still written). 2 would be bad input."""


def azure_native_classes(root: Path = ROOT) -> dict[str, list[str]]:
    """``{submodule: the classes the project uses from it}`` for every ``import pulumi_azure_native.X as Y``, in the
    order the code first names them (the package loads each class's module on first use)."""
    imports = re.compile(r"^\s*import pulumi_azure_native\.(\w+) as (\w+)", re.M)
    sources = [p for name in SCANNED for p in ([root / name] if name.endswith(".py") else (root / name).rglob("*.py"))]
    texts = [p.read_text() for p in sources if p.is_file()]
    found: dict[str, list[str]] = {}
    for text in texts:
        for module, alias in imports.findall(text):
            used = found.setdefault(module, [])
            used += [name for name in dict.fromkeys(re.findall(rf"\b{alias}\.([A-Z]\w*)", text)) if name not in used]
    return {module: used for module, used in sorted(found.items()) if used}


def azure_native_modules(root: Path = ROOT) -> dict[str, str]:
    """``{submodule: a class the project uses from it}`` for every ``import pulumi_azure_native.X as Y``."""
    return {module: used[0] for module, used in azure_native_classes(root).items()}


def floor_script(modules: dict[str, str]) -> str:
    """The floor: import what ``amlgpu plan`` cannot avoid loading, touch one class of each, exit."""
    lines = ["import pulumi", "import pydantic", "from azure.ai.ml import command"]
    lines += [f"import pulumi_azure_native.{module}" for module in modules]
    touched = ["pulumi.CustomResource", "pydantic.BaseModel", "command"]
    touched += [f"pulumi_azure_native.{module}.{cls}" for module, cls in modules.items()]
    lines.append(f"touched = ({', '.join(touched)},)")
    return "\n".join(lines) + "\n"


@dataclass
class Case:
    """One benchmarked command: what runs, where, and what it measured."""

    name: str
    argv: list[str]
    cwd: Path
    runs: int | None = None
    """Runs in the planned stack, as the plan reports them: the declared ones and the generated fabric
    checks (None for the floor)."""
    resources: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    """Variables set for the child on top of this process's environment."""
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "resources": self.resources,
            "samples": len(self.wall),
            "wall_s": spread(self.wall),
            "cpu_s": spread(self.cpu),
            "peak_rss_mib": {"median": _r(statistics.median(self.rss_mib), 1), "max": _r(max(self.rss_mib), 1)},
            "exit_codes": sorted(set(self.exit_codes)),
        }


def spread(samples: list[float]) -> dict[str, float]:
    """Median, least and most of ``samples``, to two decimals (each benchmark's results)."""
    return {"median": _r(statistics.median(samples)), "min": _r(min(samples)), "max": _r(max(samples))}


def _r(value: float, digits: int = 2) -> float:
    return round(value, digits)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # A user's machine writes bytecode caches; without them every run would recompile the project.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(case: Case, *, record: bool = True) -> None:
    """Run ``case`` once in a child process; wall clock, CPU time and peak RSS of that child alone."""
    with tempfile.TemporaryFile() as output:
        started = time.perf_counter()
        child = subprocess.Popen(case.argv, cwd=case.cwd, stdout=output, stderr=subprocess.STDOUT,
                                 env={**_child_env(), **case.env})
        # wait4 gives this child's own rusage (RUSAGE_CHILDREN would accumulate every child so far).
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        allowed = PLAN_EXIT_CODES if case.name != "floor" else (0,)
        if child.returncode not in allowed:
            output.seek(0)
            tail = output.read().decode(errors="replace")[-4000:]
            raise SystemExit(f"{case.name}: {' '.join(case.argv)} exited {child.returncode}\n{tail}")
        if case.resources is None and case.name != "floor":
            output.seek(0)
            case.resources, case.runs = _counts(output.read().decode(errors="replace"))
    if record:
        case.wall.append(wall)
        case.cpu.append(usage.ru_utime + usage.ru_stime)
        case.rss_mib.append(usage.ru_maxrss / 1024)  # Linux reports kilobytes
        case.exit_codes.append(child.returncode)


def _counts(output: str) -> tuple[int | None, int | None]:
    """Azure resources and runs, from the summary line of ``amlgpu plan``'s text output."""
    match = re.search(r"(\d+) Azure resources? to create.*?, (\d+) run\(s\)", output)
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


def machine() -> dict[str, Any]:
    """The machine and software the numbers were taken on."""
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        cpu = found.group(1).strip() if found else cpu
    ram_gib = None
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        found = re.search(r"^MemTotal:\s*(\d+) kB", meminfo.read_text(), re.M)
        ram_gib = round(int(found.group(1)) / 1024 / 1024, 1) if found else None
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": ram_gib,
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def save(path: Path, entries: dict[str, Any]) -> None:
    """Write ``entries`` into the results file, keeping the entries the other benchmark wrote there
    (``bench/stacks_bench.py`` keeps its results under ``stacks``)."""
    previous = json.loads(path.read_text()) if path.is_file() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**previous, **entries}, indent=2, sort_keys=True) + "\n")


def publish(path: Path, entries: dict[str, Any], table: str, markdown_path: Path | None) -> None:
    """Save ``entries`` (:func:`save`), write the markdown ``table`` where asked, and print it."""
    save(path, entries)
    if markdown_path:
        markdown_path.write_text(table)
    print(table)
    print(f"results: {path}", file=sys.stderr)


def build_cases(workdir: Path, sizes: tuple[int, ...]) -> list[Case]:
    """The floor, the dev stack and one generated project per size, under ``workdir``."""
    floor = workdir / "floor.py"
    floor.write_text(floor_script(azure_native_modules()))
    amlgpu = str(BIN / "amlgpu")
    cases = [
        Case("floor", [sys.executable, str(floor)], workdir),
        Case("dev", [amlgpu, "plan", "--stack", "dev", "--out", str(workdir / "out-dev")], ROOT),
        # After "dev" in every round, so its base (the dev case's output) exists.
        Case("dev-base", [amlgpu, "plan", "--stack", "dev", "--out", str(workdir / "out-dev-base"),
                          "--base", str(workdir / "out-dev")], ROOT),
    ]
    for size in sizes:
        project = gen_stack.write_project(workdir / f"stack-{size}", gen_stack.stack_config(size))
        out = workdir / f"out-{size}"
        cases.append(Case(f"gen-{size}", [amlgpu, "plan", "--stack", gen_stack.STACK, "--out", str(out)], project))
    return cases


def ratios(summary: dict[str, dict[str, Any]], largest: str | None) -> dict[str, Any]:
    """dev/floor and largest/dev, on wall clock and on CPU time, with the targets and whether they are met."""
    def ratio(a: str, b: str, metric: str) -> float:
        return _r(summary[a][metric]["median"] / summary[b][metric]["median"])

    out: dict[str, Any] = {
        "dev_over_floor": {
            "wall": ratio("dev", "floor", "wall_s"), "cpu": ratio("dev", "floor", "cpu_s"),
            "target": TARGET_DEV_OVER_FLOOR,
        },
    }
    if "dev-base" in summary:
        out["dev-base_over_dev"] = {
            "wall": ratio("dev-base", "dev", "wall_s"), "cpu": ratio("dev-base", "dev", "cpu_s"),
            "target": TARGET_BASE_OVER_DEV,
        }
    if largest is not None:
        out[f"{largest}_over_dev"] = {
            "wall": ratio(largest, "dev", "wall_s"), "cpu": ratio(largest, "dev", "cpu_s"),
            "target": TARGET_LARGE_OVER_DEV,
        }
    for entry in out.values():
        entry["met"] = {metric: entry[metric] <= entry["target"] for metric in ("wall", "cpu")}
    return out


def memory_growth(summary: dict[str, dict[str, Any]], sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Peak RSS added per run between consecutive generated sizes (constant when growth is linear)."""
    out = []
    for small, large in itertools.pairwise(sizes):
        a, b = summary[f"gen-{small}"], summary[f"gen-{large}"]
        added = b["peak_rss_mib"]["median"] - a["peak_rss_mib"]["median"]
        out.append({"from": small, "to": large, "added_mib": _r(added, 1),
                    "kib_per_run": _r(added * 1024 / (large - small), 1)})
    return out


def markdown(result: dict[str, Any]) -> str:
    """The results as the markdown table ``docs/performance.md`` shows."""
    rows = ["| case | runs | resources | wall median (s) | CPU median (s) | peak RSS (MiB) | vs floor (wall / CPU) |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    floor = result["cases"]["floor"]
    for name, case in result["cases"].items():
        vs = (f"{case['wall_s']['median'] / floor['wall_s']['median']:.2f}x / "
              f"{case['cpu_s']['median'] / floor['cpu_s']['median']:.2f}x")
        rows.append(f"| {name} | {case['runs'] if case['runs'] is not None else '-'} | "
                    f"{case['resources'] if case['resources'] is not None else '-'} | {case['wall_s']['median']:.2f} | "
                    f"{case['cpu_s']['median']:.2f} | {case['peak_rss_mib']['median']:.0f} | {vs} |")
    rows.append("")
    rows.append("| ratio | wall | CPU | target | met (wall / CPU) |")
    rows.append("|---|---:|---:|---:|---|")
    for name, entry in result["ratios"].items():
        met = " / ".join("yes" if entry["met"][m] else "no" for m in ("wall", "cpu"))
        rows.append(f"| {name.replace('_over_', ' / ')} | {entry['wall']:.2f} | {entry['cpu']:.2f} | "
                    f"<= {entry['target']} | {met} |")
    if result["memory_growth"]:
        rows.append("")
        rows.append("| peak RSS growth | added (MiB) | per run (KiB) |")
        rows.append("|---|---:|---:|")
        for step in result["memory_growth"]:
            rows.append(f"| {step['from']} -> {step['to']} runs | {step['added_mib']:.1f} | "
                        f"{step['kib_per_run']:.1f} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="measured runs per case (default 5)")
    parser.add_argument("--quick", action="store_true", help="3 measured runs per case")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="generated stack sizes in runs, comma-separated (default 10,100,1000)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results.json", help="where to write results")
    parser.add_argument("--markdown", type=Path, help="also write the markdown table here")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else args.repeat
    try:
        sizes = tuple(sorted({int(s) for s in args.sizes.split(",") if s.strip()}))
    except ValueError:
        parser.error(f"--sizes: not a list of integers: {args.sizes!r}")
    if repeat < 1 or any(s < 1 for s in sizes):
        parser.error("--repeat and every size must be >= 1")

    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="amlgpu-bench-") as tmp:
        cases = build_cases(Path(tmp), sizes)
        for case in cases:
            print(f"warm-up: {case.name}", file=sys.stderr, flush=True)
            measure(case, record=False)
        for i in range(repeat):
            for case in cases:
                measure(case)
                print(f"[{i + 1}/{repeat}] {case.name:9s} wall {case.wall[-1]:6.2f}s  cpu {case.cpu[-1]:6.2f}s  "
                      f"rss {case.rss_mib[-1]:6.0f} MiB  exit {case.exit_codes[-1]}", file=sys.stderr, flush=True)

    summary = {case.name: case.summary() for case in cases}
    largest = f"gen-{sizes[-1]}" if sizes else None
    result = {
        "machine": machine(),
        "load_average": {"before": load_before, "after": _load()},
        "repeat": repeat,
        "floor_modules": ["pulumi", "pydantic", "azure.ai.ml"]
        + [f"pulumi_azure_native.{m}" for m in azure_native_modules()],
        "cases": summary,
        "ratios": ratios(summary, largest),
        "memory_growth": memory_growth(summary, sizes),
    }
    publish(args.json, result, markdown(result), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
