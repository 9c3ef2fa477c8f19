"""The plan benchmark's own parts: the stack generator, the floor it compares against, the measuring harness.

No timing is asserted here (timings belong to ``bench/plan_bench.py`` and docs/performance.md): these tests
check that what the benchmark measures is what it claims to measure.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from azurefacts.skus import lookup
from jobs import render
from jobs.launchers import LAUNCHERS
from jobs.resolve import resolve_all
from kernel import bounded
from stack import stackfile
from stack.config import from_stackfile

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gen_stack  # noqa: E402  (bench/ is a folder of scripts, not a package)
import plan_bench  # noqa: E402

NS = gen_stack.NAMESPACE
STYLES = ("ddp", "torchrun", "lightning", "hf-trainer", "accelerate", "deepspeed", "deepspeed-cli", "horovod",
          "allreduce", "tf-multiworker")


@pytest.fixture(scope="module")
def project10(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gen_stack.write_project(tmp_path_factory.mktemp("gen") / "project", gen_stack.stack_config(10))


@pytest.fixture(scope="module")
def planned(project10: Path) -> tuple[int, dict]:
    """``amlgpu plan --format json`` on the generated 10-run stack, in this process: exit code and summary."""
    output = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(output):
        patch.chdir(project10)
        code = main(["plan", "--stack", "bench", "--out", str(project10 / "build"), "--format", "json"])
    return code, json.loads(output.getvalue())["stacks"][0]


def _declared(project: Path) -> list[dict]:
    return yaml.safe_load((project / "Pulumi.bench.yaml").read_text())["config"][f"{NS}:jobs"]


def test_generated_stack_has_the_documented_shape(project10: Path) -> None:
    config = yaml.safe_load((project10 / "Pulumi.bench.yaml").read_text())["config"]
    clusters, environments = config[f"{NS}:clusters"], config[f"{NS}:environments"]
    assert len(clusters) == 20 and len(environments) == 10
    assert sum(lookup(c["size"]).infiniband for c in clusters) == 14
    assert [r["name"].rsplit("-", 1)[0] for r in config[f"{NS}:jobs"]] == list(STYLES)
    # Every environment pinned: a version or tag, never :latest.
    loaded = from_stackfile(stackfile.read(project10 / "Pulumi.bench.yaml"), project10)
    assert all(env.is_pinned for env in loaded.environments)


@pytest.mark.parametrize("runs", [1, 10, 57, 300])
def test_runs_fit_their_clusters(runs: int) -> None:
    config = gen_stack.stack_config(runs)
    clusters = {c["name"]: c for c in config[f"{NS}:clusters"]}
    jobs = config[f"{NS}:jobs"]
    assert len(jobs) == runs and len({j["name"] for j in jobs}) == runs
    for job in jobs:
        cluster = clusters[job["compute"]]
        sku, nodes = lookup(cluster["size"]), job["resources"]["instance_count"]
        assert nodes <= cluster["max_instances"]
        assert nodes == 1 or sku.infiniband, f"{job['name']}: multi-node on {cluster['size']}"
        per_node = job["distribution"].get("process_count_per_instance")
        assert per_node in (None, 1, sku.gpus)


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first = gen_stack.write_project(tmp_path / "a", gen_stack.stack_config(40))
    second = gen_stack.write_project(tmp_path / "b", gen_stack.stack_config(40))
    assert (first / "Pulumi.bench.yaml").read_bytes() == (second / "Pulumi.bench.yaml").read_bytes()


def test_command_line_writes_a_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gen_stack.main(["--runs", "3", "--out", str(tmp_path / "p")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "p" / "Pulumi.bench.yaml")
    # The folders runs point into are copies (a link could lead out of the project).
    workloads = tmp_path / "p" / "jobs" / "workloads"
    assert workloads.is_dir() and not workloads.is_symlink() and not (tmp_path / "p" / "jobs").is_symlink()
    shipped = sorted(p.name for p in (ROOT / "jobs" / "workloads").glob("*.py"))
    assert sorted(p.name for p in workloads.glob("*.py")) == shipped
    with pytest.raises(SystemExit):
        gen_stack.main(["--runs", "3", "--environments", "11", "--out", str(tmp_path / "q")])


def test_generated_stack_plans_cleanly_with_every_launch_style(project10: Path, planned: tuple[int, dict]) -> None:
    """The stack a large organisation would have: it plans, passes the gate, and mixes every launch style."""
    code, summary = planned
    assert code == 0 and summary["policy"]["mandatory_failures"] == 0
    declared = {j["name"] for j in _declared(project10)}
    assert declared <= set(summary["runs"])  # plus the generated fabric checks
    assert sorted(p.stem for p in (project10 / "build" / "jobs").glob("*.yml")) == summary["runs"]
    config = from_stackfile(stackfile.read(project10 / "Pulumi.bench.yaml"), project10)
    launchers = {r.launcher for r in resolve_all(config, project10) if r.name in declared}
    assert launchers == set(LAUNCHERS) - {"torch.distributed.launch", "tf-parameter-server"}


def _project_sources() -> str:
    paths: list[Path] = []
    for name in plan_bench.SCANNED:
        paths += [ROOT / name] if name.endswith(".py") else sorted((ROOT / name).rglob("*.py"))
    return "\n".join(p.read_text() for p in paths if p.is_file())


def test_floor_loads_the_azure_native_modules_a_plan_loads(planned: tuple[int, dict]) -> None:
    """The floor is honest: it imports every azure-native module the plan above executed, and only those."""
    floor = plan_bench.azure_native_modules()
    executed = {  # the package registers every other subpackage lazily, without running it
        name.split(".")[1] for name, module in sys.modules.items()
        if name.startswith("pulumi_azure_native.") and name.count(".") == 1 and type(module).__name__ == "module"
    }
    # Every module the floor loads, the plan executed; beyond those, only modules the project imports for a
    # function some other stack calls (managedidentity's identity lookup), which other tests in this process
    # may have executed: the package loads a subpackage on first attribute access.
    imported = set(re.findall(r"^\s*import pulumi_azure_native\.(\w+) as ", _project_sources(), re.M))
    assert set(floor) <= executed
    assert executed - {"_utilities", "provider"} - set(floor) <= imported - set(floor)
    namespace: dict = {}
    exec(compile(plan_bench.floor_script(floor), "floor.py", "exec"), namespace)  # every touched class exists
    assert len(namespace["touched"]) == len(floor) + 3


@pytest.mark.parametrize(("exit_code", "accepted"), [(0, True), (1, True), (2, False)])
def test_measure_records_the_child_alone_and_refuses_exit_2(tmp_path: Path, exit_code: int, accepted: bool) -> None:
    # A 64 MiB buffer makes the child's own peak RSS recognisable; policy findings (1) are a plan's result,
    # bad input (2) means the benchmark measured nothing.
    child = f"b = bytearray(64 << 20); raise SystemExit({exit_code})"
    case = plan_bench.Case("plan-like", [sys.executable, "-c", child], tmp_path)
    if not accepted:
        with pytest.raises(SystemExit, match="exited 2"):
            plan_bench.measure(case)
        return
    plan_bench.measure(case)
    assert case.rss_mib[0] >= 64 and case.cpu[0] > 0 and case.wall[0] > 0
    assert case.exit_codes == [exit_code]


def test_ratios_and_memory_growth() -> None:
    cases = {
        name: {"runs": runs, "resources": None, "wall_s": {"median": wall}, "cpu_s": {"median": cpu},
               "peak_rss_mib": {"median": rss}}
        for name, runs, wall, cpu, rss in (
            ("floor", None, 4.0, 4.0, 200.0), ("dev", 4, 5.0, 5.6, 210.0),
            ("gen-100", 100, 6.0, 6.0, 220.0), ("gen-1000", 1000, 13.0, 14.5, 300.0),
        )
    }
    ratios = plan_bench.ratios(cases, "gen-1000")
    assert ratios["dev_over_floor"] == {"wall": 1.25, "cpu": 1.4, "target": 1.3, "met": {"wall": True, "cpu": False}}
    assert ratios["gen-1000_over_dev"]["wall"] == 2.6 and not ratios["gen-1000_over_dev"]["met"]["wall"]
    growth = plan_bench.memory_growth(cases, (100, 1000))
    assert growth == [{"from": 100, "to": 1000, "added_mib": 80.0, "kib_per_run": 91.0}]
    table = plan_bench.markdown({"cases": cases, "ratios": ratios, "memory_growth": growth})
    assert "| dev / floor | 1.25 | 1.40 | <= 1.3 | yes / no |" in table


def test_fast_yaml_paths_read_and_write_the_generated_stack_as_pyyaml_does(tmp_path: Path) -> None:
    """The plan parses stack files with libyaml and writes job files with libyaml's emitter: on a large
    generated stack both give what PyYAML's pure-Python parser and emitter give."""
    project = gen_stack.write_project(tmp_path / "p", gen_stack.stack_config(60))
    text = (project / "Pulumi.bench.yaml").read_text()
    lines: list[dict] = []
    documents = []
    for loader in (bounded.FastUniqueKeyLoader, bounded.UniqueKeyLoader):
        node, document = bounded._parse(text, loader)
        lines.append({})
        stackfile._index_lines(node, (), lines[-1], {})
        documents.append(document)
    assert documents[0] == documents[1] and lines[0] == lines[1]

    class PurePython(yaml.SafeDumper):
        pass

    PurePython.add_representer(str, render._represent_str)
    config = from_stackfile(stackfile.read(project / "Pulumi.bench.yaml"), project)
    for run in resolve_all(config, project):
        document = render.job_document(run.spec, code_relative_to=tmp_path / "jobs", root=project)
        expected = render.SCHEMA_COMMENT + yaml.dump(document, Dumper=PurePython, sort_keys=True,
                                                     default_flow_style=False, width=1 << 16, allow_unicode=True)
        assert render.job_yaml(run.spec, code_relative_to=tmp_path / "jobs", root=project) == expected


def test_team_stacks_are_distinct_and_all_plan_cleanly_in_one_process(tmp_path: Path) -> None:
    """The stacks bench/stacks_bench.py plans: each its own workspace, region and network, the same size."""
    project = tmp_path / "teams"
    assert gen_stack.main(["--teams", "3", "--runs", "5", "--out", str(project)]) == 0
    configs = [yaml.safe_load((project / f"Pulumi.team-{i:03d}.yaml").read_text())["config"] for i in range(3)]
    assert len({c[f"{NS}:workspace"]["name"] for c in configs}) == 3
    assert len({c[f"{NS}:network"]["address_space"] for c in configs}) == 3
    assert {len(c[f"{NS}:jobs"]) for c in configs} == {5} and {len(c[f"{NS}:clusters"]) for c in configs} == {3}
    output = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(output):
        patch.chdir(project)
        code = main(["plan", "--all", "--format", "json"])
    document = json.loads(output.getvalue())
    assert code == 0 and [s["stack"] for s in document["stacks"]] == ["team-000", "team-001", "team-002"]
    assert {len(s["runs"]) for s in document["stacks"]} == {8}  # 5 runs and a fabric check per cluster
    with pytest.raises(SystemExit):
        gen_stack.main(["--teams", "251", "--out", str(tmp_path / "too-many")])


def test_the_stacks_bench_compares_one_process_with_as_many_processes(tmp_path: Path) -> None:
    """The cases it builds and the ratios it reports, on made-up figures (no timing here)."""
    import stacks_bench

    cases = stacks_bench.build(tmp_path, (1, 20), (1,))
    assert [(c.name, c.stacks, len(c.commands)) for c in cases] == [
        ("processes-1", 1, 1), ("one-process-1", 1, 1), ("one-process-20", 20, 1)]
    assert cases[2].commands[0][1:3] == ["plan", "--all"] and cases[0].commands[0][1:4] == ["plan", "--stack",
                                                                                              "team-000"]

    def case(stacks: int, processes: int, wall: float, cpu: float, rss: float) -> dict:
        return {"stacks": stacks, "processes": processes, "wall_s": {"median": wall}, "cpu_s": {"median": cpu},
                "peak_rss_mib": rss}

    ratios = stacks_bench.ratios({"processes-1": case(1, 1, 5.0, 4.0, 240), "one-process-1": case(1, 1, 5.0, 4.0, 240),
                                  "one-process-20": case(20, 1, 9.0, 8.0, 250)})
    assert ratios["one-process-20_over_one_stack"] == {"wall": 1.8, "cpu": 2.0, "target": 3.0,
                                                       "met": {"wall": True, "cpu": True}}
    assert ratios["processes-1_over_one-process-1"] == {"wall": 1.0, "cpu": 1.0}
    assert ratios["per_stack_in_one_process"] == {"wall": 0.211, "cpu": 0.211, "rss_mib": 0.53}
