"""bench/figures.py's own parts: the cases it runs (each against the checkout it names) and the ratios it reports.

No timing is asserted (the figures are a benchmark's, in docs/performance.md): these tests check that each figure
divides the case it names by the case it names, and that a second checkout's cases run with its own tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import figures  # bench/ is a folder of scripts, not a package
import plan_bench


def _case(wall: float, cpu: float) -> dict[str, object]:
    return {"wall_s": {"median": wall}, "cpu_s": {"median": cpu}, "peak_rss_mib": {"median": 100.0}}


def test_each_figure_is_its_numerator_over_its_denominator_against_its_target() -> None:
    seconds = {"floor": (4.0, 4.0), "dev": (4.4, 5.0), "gen-1000": (9.0, 9.0), "team": (4.0, 4.0),
               "teams-20": (10.4, 9.6), "version-floor": (0.1, 0.1), "version": (0.5, 0.7)}
    summary = {name: _case(*times) for name, times in seconds.items()}
    summary |= {f"{name}@/t": _case(w * 2, c * 2) for name, (w, c) in seconds.items()}
    found = figures.figures(summary)
    assert found["dev_over_floor"] == {"wall": 1.1, "cpu": 1.25, "target": 1.15, "met": {"wall": True, "cpu": False}}
    assert found["gen-1000_over_dev"]["wall"] == 2.05 and found["gen-1000_over_dev"]["cpu"] == 1.8
    assert found["teams-20_over_team"] == {"wall": 2.6, "cpu": 2.4, "target": 2.5, "met": {"wall": False, "cpu": True}}
    assert found["version_over_floor"]["wall"] == 5.0 and not found["version_over_floor"]["met"]["cpu"]
    assert figures.figures(summary, "@/t") == found  # the other tree's cases, each twice as long: same ratios
    table = figures.markdown({"date": "2026-11-28", "machine": {"cpu": "x", "cores": 2},
                              "load_average": {"before": [1.0], "after": [2.0]}, "repeat": 3, "cases": summary,
                              "figures": {"this": found}})
    assert "| dev / floor | 1.10 | 1.25 | <= 1.15 | yes / no |" in table
    assert "Measured 2026-11-28 on x (2 cores)" in table


def test_the_cases_of_another_checkout_run_with_its_tree(tmp_path: Path) -> None:
    mine = figures.build_cases(tmp_path, large=10)
    other = figures.build_cases(tmp_path, tmp_path / "before", large=10)
    assert [c.name for c in mine] == ["floor", "dev", "gen-1000", "team", "teams-20", "version-floor", "version"]
    assert [c.name for c in other] == [f"{c.name}@{tmp_path / 'before'}" for c in mine]
    assert all(c.env == {} for c in mine) and all(c.env == {"AMLGPU_TREE": str(tmp_path / "before")} for c in other)
    assert mine[1].cwd == ROOT and other[1].cwd == tmp_path / "before"
    assert mine[4].argv[-4:] == ["plan", "--all", "--out", str(mine[4].argv[-1])]
    assert len(list((mine[4].cwd).glob("Pulumi.team-*.yaml"))) == figures.TEAMS


def test_a_childs_environment_is_this_process_s_with_the_case_s_variables(tmp_path: Path) -> None:
    script = "import os, sys; sys.exit(0 if os.environ.get('AMLGPU_BENCH_PROBE') == 'set' else 2)"
    case = plan_bench.Case("floor", [sys.executable, "-c", script], tmp_path, env={"AMLGPU_BENCH_PROBE": "set"})
    plan_bench.measure(case)
    assert case.exit_codes == [0]
