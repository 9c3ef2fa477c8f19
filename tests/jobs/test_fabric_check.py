"""Every InfiniBand cluster gets a generated all-reduce health-check run; other clusters don't."""

from __future__ import annotations

from pathlib import Path

from stack.config import build
from tests.conftest import NS, ROOT, dev_config


def _config(clusters: list[dict], jobs: list[dict] | None = None, root: Path = ROOT):
    values = {k.removeprefix(f"{NS}:"): v for k, v in dev_config().items() if k.startswith(f"{NS}:")}
    values["clusters"] = clusters
    values["jobs"] = jobs or []
    return build(values, location="westeurope", file="Pulumi.test.yaml", root=root)


def test_infiniband_cluster_gets_a_two_node_check_with_a_bandwidth_floor() -> None:
    config = _config([{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 4}])
    (check,) = [r for r in config.jobs if r.name == "fabric-check-gpu-a100"]
    assert check.resources.instance_count == 2
    assert check.distribution.type == "pytorch"
    assert check.code == "jobs/workloads"
    # 1600 Gb/s per VM = 200 GB/s; the floor is 40% of it.
    assert check.command.endswith("--min-busbw 80")
    assert check.environment == "acpt-pytorch"
    assert check.limits.timeout == 1800


def test_single_node_cluster_checks_without_a_floor() -> None:
    config = _config([{"name": "gpu-one", "size": "Standard_ND96isr_H100_v5", "max_instances": 1}])
    (check,) = config.jobs
    assert check.resources.instance_count == 1
    assert "--min-busbw" not in check.command


def test_no_check_without_infiniband_or_when_the_user_declares_one() -> None:
    no_ib = _config([{"name": "gpu-nc", "size": "Standard_NC96ads_A100_v4", "max_instances": 2}])
    assert no_ib.jobs == []
    own = {
        "name": "fabric-check-gpu-a100", "code": "jobs/workloads", "command": "python allreduce_perf.py",
        "environment": "acpt-pytorch", "compute": "gpu-a100", "distribution": {"type": "pytorch"},
    }
    declared = _config([{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 2}], [own])
    assert [r.command for r in declared.jobs] == ["python allreduce_perf.py"]


def test_amd_cluster_needs_an_rccl_environment() -> None:
    config = _config([{"name": "mi300x", "size": "Standard_ND96isr_MI300X_v5", "max_instances": 2}])
    assert config.jobs == []  # the dev environments are CUDA/NCCL only


def test_project_without_the_workload_gets_no_check(tmp_path: Path) -> None:
    (tmp_path / "environments" / "tensorflow").mkdir(parents=True)
    (tmp_path / "environments" / "tensorflow" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "environments" / "horovod").mkdir(parents=True)
    (tmp_path / "environments" / "horovod" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "environments" / "pytorch").mkdir(parents=True)
    (tmp_path / "environments" / "pytorch" / "Dockerfile").write_text("FROM scratch\n")
    config = _config([{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 2}], root=tmp_path)
    assert config.jobs == []
