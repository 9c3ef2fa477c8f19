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

Loader = Callable[[str], ModuleType]
WORKLOADS = Path(__file__).resolve().parent.parent / "jobs" / "workloads"


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
        for package in ("amlgpu", "jobs", "infra", "policies"):
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
def test_allreduce_check_fails_below_the_bandwidth_threshold(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(WORKLOADS / "allreduce_perf.py"), "-b", "1K", "-e", "1K", "-w", "0",
                             "-n", "1", "--min-busbw", "1000"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "bus bandwidth 0.000 GB/s at 1024 B is below --min-busbw 1000.0 GB/s" in result.stdout


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
