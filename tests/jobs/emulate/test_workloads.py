"""The workloads in jobs/workloads (the code folder runs upload): how they join the process group
under each launcher, what the probe checks, the all-reduce check's arithmetic and thresholds, and
the trainer resuming from its checkpoint."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from planning.changes import PACKAGES

Loader = Callable[[str], ModuleType]
WORKLOADS = Path(__file__).resolve().parents[3] / "jobs" / "workloads"


@pytest.fixture
def workload(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Import a workload module the way it runs: from its own folder, not as part of the project."""
    monkeypatch.syspath_prepend(str(WORKLOADS))

    def load(name: str) -> ModuleType:
        return importlib.import_module(name)

    return load


def test_the_workloads_import_nothing_from_the_project() -> None:
    for script in WORKLOADS.glob("*.py"):
        text = script.read_text()
        for package in PACKAGES:
            assert f"import {package}" not in text and f"from {package}" not in text, script.name


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, {}),  # pytorch / torchrun
        (  # Azure ML mpi: rank 5 of 2 nodes x 4
            {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
             "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "1",
             "AZ_BATCH_MASTER_NODE": "10.0.0.4:6105"},
            {"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
             "LOCAL_WORLD_SIZE": "4", "NODE_RANK": "1"},
        ),
        (  # older images' name for the master node, without a port
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "AZ_BATCHAI_MPI_MASTER_NODE": "10.0.0.9"},
            {"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "6105", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
             "LOCAL_WORLD_SIZE": "1", "NODE_RANK": "0"},
        ),
    ],
)
def test_distenv_completes_the_torch_contract_from_what_the_launcher_set(workload: Loader, environ: dict[str, str],
                                                                         expected: dict[str, str]) -> None:
    assert workload("distenv").torch_env(environ) == expected


def test_distenv_without_a_launcher_is_a_world_of_one(workload: Loader) -> None:
    env = workload("distenv").torch_env({})
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
    assert int(env["MASTER_PORT"]) > 0


def test_distenv_under_mpirun_needs_the_master_node(workload: Loader) -> None:
    with pytest.raises(RuntimeError, match="AZ_BATCH_MASTER_NODE"):
        workload("distenv").torch_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})


@pytest.mark.parametrize(
    ("kind", "variables", "problems"),
    [
        ("pytorch", {"MASTER_ADDR": "a", "MASTER_PORT": "1", "WORLD_SIZE": "4", "NODE_RANK": "1", "RANK": "3",
                     "LOCAL_RANK": "1"}, []),
        ("pytorch", {"MASTER_ADDR": "a", "MASTER_PORT": "1", "WORLD_SIZE": "4", "RANK": "3"},
         ["NODE_RANK is not set", "LOCAL_RANK is not set"]),
        ("pytorch", {"MASTER_ADDR": "a", "MASTER_PORT": "1", "WORLD_SIZE": "2", "NODE_RANK": "0", "RANK": "2",
                     "LOCAL_RANK": "0"}, ["RANK=2 LOCAL_RANK=0 WORLD_SIZE=2 are inconsistent"]),
        ("mpi", {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                 "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "AZ_BATCH_MASTER_NODE": "a:1"}, []),
        ("mpi", {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                 "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, ["AZ_BATCH_MASTER_NODE is not set"]),
        ("tensorflow", {"TF_CONFIG": {"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}}, []),
        ("tensorflow", {"TF_CONFIG": {"cluster": {"worker": ["a:1"]}, "task": {"type": "master", "index": 0}}},
         ["TF_CONFIG.task {'type': 'master', 'index': 0} names no task type of the cluster"]),
        ("tensorflow", {"TF_CONFIG": "not json"}, ["TF_CONFIG is not JSON: 'not json'"]),
    ],
)
def test_probe_checks_the_contract(workload: Loader, kind: str, variables: dict[str, object],
                                   problems: list[str]) -> None:
    assert workload("probe").check(kind, variables) == problems


def test_probe_warns_about_azure_mls_empty_ps(workload: Loader) -> None:
    probe = workload("probe")
    seen = probe.observe({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"], "ps": []},
                                                   "task": {"type": "worker", "index": 0}})})
    assert probe.check("tensorflow", seen) == []
    assert probe.warnings(seen) == [
        'TF_CONFIG.cluster has "ps": [] (as Azure ML sets it): TensorFlow >= 2.13 rejects it, drop it first']


@pytest.mark.parametrize("ranks", [1, 2, 3, 8, 64])
def test_allreduce_check_values_sum_exactly(workload: Loader, ranks: int) -> None:
    import torch

    perf = workload("allreduce_perf")
    cpu = torch.device("cpu")
    for dtype in (torch.float32, torch.bfloat16):
        total = sum(perf.pattern(9, r, dtype, cpu).to(torch.float64) for r in range(ranks))
        assert torch.equal(total.to(dtype), perf.expected_sum(9, ranks, dtype, cpu))


def test_allreduce_sizes_and_bus_bandwidth_follow_nccl_tests(workload: Loader) -> None:
    perf = workload("allreduce_perf")
    assert [perf.parse_size(s) for s in ("8", "64K", "128M", "1g")] == [8, 65536, 128 * 2**20, 2**30]
    assert perf.sweep(perf.parse_size("1K"), perf.parse_size("8K"), 2, 4) == [1024, 2048, 4096, 8192]
    assert perf.sweep(6, 40, 3, 4) == [4, 16]  # whole elements only
    assert perf.bus_bandwidth(100.0, 8) == pytest.approx(175.0)  # 2(n-1)/n
    assert perf.bus_bandwidth(100.0, 1) == 0.0


@pytest.mark.slow
def test_one_rank_says_it_measures_no_link_and_passes(tmp_path: Path) -> None:
    """Before: `bus bandwidth 0.000 GB/s ... is below --min-busbw` and exit 3 for a run that measured no link."""
    result = subprocess.run([sys.executable, str(WORKLOADS / "allreduce_perf.py"), "-b", "1K", "-e", "1K", "-w", "0",
                             "-n", "1", "--min-busbw", "100"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("# note: one rank: an all-reduce crosses no link, so there is no bus bandwidth to measure; "
            "--min-busbw 100.0 is not checked") in result.stdout.splitlines()
    assert "# Out of bounds values : 0 OK" in result.stdout


SCALING = [
    # (ranks, backend, --max-bytes, --min-busbw) -> (max bytes swept, floor checked, notes)
    ((16, "nccl", 2**30, 100.0), (2**30, 100.0, 0)),
    ((16, "gloo", 2**30, 100.0), (64 * 2**20, 0.0, 2)),
    ((1, "nccl", 2**30, 100.0), (2**30, 0.0, 1)),
    ((1, "gloo", 8 * 2**20, 100.0), (8 * 2**20, 0.0, 1)),
    ((2, "gloo", 1024, 0.0), (1024, 0.0, 0)),
]


@pytest.mark.parametrize(("given", "expected"), SCALING, ids=[str(g) for g, _ in SCALING])
def test_the_check_is_scaled_to_what_the_run_can_measure(
    workload: Loader, given: tuple[int, str, int, float], expected: tuple[int, float, int]
) -> None:
    perf = workload("allreduce_perf")
    ranks, backend, max_bytes, floor = given
    args = perf.parse_args(["-b", "1K", "-e", str(max_bytes), "--min-busbw", str(floor)])
    scaled, notes = perf.scaled_to(args, ranks, backend)
    assert (scaled.max_bytes, scaled.min_busbw, len(notes)) == expected


VERDICTS = [
    ((0, 120.0, 100.0), (0, None)),
    ((0, 80.0, 0.0), (0, None)),
    ((0, 80.0, 100.0), (3, "bus bandwidth 80.000 GB/s at 1024 B is below --min-busbw 100.0 GB/s")),
    ((2, 80.0, 100.0), (1, "2 wrong values: the all-reduce does not compute the sum")),
]


@pytest.mark.parametrize(("given", "expected"), VERDICTS, ids=[str(g) for g, _ in VERDICTS])
def test_the_verdict_fails_wrong_sums_then_a_slow_fabric(
    workload: Loader, given: tuple[int, float, float], expected: tuple[int, str | None]
) -> None:
    perf = workload("allreduce_perf")
    wrong, busbw, floor = given
    args = perf.parse_args(["-b", "1K", "-e", "1K", "--min-busbw", str(floor)])
    assert perf.verdict(wrong, busbw, args) == expected


@pytest.mark.slow
def test_the_trainer_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    def train(epochs: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(WORKLOADS / "train_ddp.py"), "--epochs", str(epochs),
                               "--samples", "256", "--checkpoint-dir", "ck"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)

    first, second = train(1), train(2)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "resumed from ck/checkpoint.pt after epoch 0" in second.stdout
    epochs = [json.loads(line)["epoch"] for line in (tmp_path / "ck" / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [0, 1]
