"""The first hour III, tried as a new user would in a scratch copy of the project: the shipped dev example
plans with a handful of deliberate advisories and a current curated image whose capabilities are known from
azureml-assets' Dockerfiles (issue 38, point 1)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from azurefacts import capabilities
from tests.conftest import ROOT, copy_project_folders

DEV_ADVISORIES = {"storage-public-network-disabled", "workspace-customer-managed-key",
                  "workspace-user-assigned-identity", "storage-replication-redundant"}
"""The dev stack's deliberate economies, each named in the comment at the top of Pulumi.dev.yaml."""


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh clone's files a new user plans with: the program, the dev stack, the shipped folders."""
    project = tmp_path / "clone"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, project / name)
    copy_project_folders(project)
    monkeypatch.chdir(project)
    return project


def test_the_dev_example_plans_with_its_deliberate_advisories_only(clone: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "0 mandatory failure(s), 4 advisory warning(s)" in out
    assert "cannot be seen" not in out
    sarif = json.loads((clone / "build" / "dev" / "policy.sarif").read_text())
    found = {r["ruleId"] for run in sarif["runs"] for r in run["results"] if r.get("kind", "fail") == "fail"
             and not r.get("suppressions")}
    assert found == DEV_ADVISORIES
    header = (clone / "Pulumi.dev.yaml").read_text().split("config:", 1)[0]
    assert "4 advisories, each a deliberate economy of a dev stack" in header


def test_the_dev_pytorch_environment_is_the_current_curated_acpt(clone: Path) -> None:
    config = yaml.safe_load((clone / "Pulumi.dev.yaml").read_text())["config"]
    (env,) = [e for e in config["aml-gpu-training:environments"] if e["name"] == "acpt-pytorch"]
    dockerfile = (clone / env["build"]["path"] / "Dockerfile").read_text()
    read = capabilities.read_dockerfile(dockerfile, clone / env["build"]["path"])
    # The newest ACPT release at the azureml-assets commit the evidence table records (tag
    # environment/acpt-pytorch-2.8-cuda12.6/15, 2026-07-23); acpt-pytorch-2.2-cuda12.1:18 was from 2024-10.
    assert read.bases == ("mcr.microsoft.com/azureml/curated/acpt-pytorch-2.8-cuda12.6:15",)
    assert {"cuda", "nccl", "pytorch", "deepspeed", "infiniband"} <= read.capabilities.present
    table = (ROOT / "azurefacts" / "environment-capabilities.yaml").read_text()
    assert "4b41f8ccbc01cf492767adc586ce1661c54c340a" in table  # the commit the rows were read at
    assert "858679deffba390bf700a28abcf69139631a276e" in table  # the release tag of the image above


def test_curated_acpt_alone_leaves_infiniband_unknown_not_absent() -> None:
    # Its public Dockerfile installs no InfiniBand user space and its base recipe is not public: unknown,
    # never claimed; ibverbs-providers (the mlx5 provider NCCL loads, with libibverbs1) makes it present.
    acpt = capabilities.of_reference("mcr.microsoft.com/azureml/curated/acpt-pytorch-2.8-cuda12.6:15")
    assert acpt.state("infiniband") == "unknown"
    assert acpt.state("pytorch") == "present"
    plain = capabilities.read_dockerfile("FROM ubuntu:22.04\nRUN apt-get install -y libibverbs1\n")
    assert plain.capabilities.state("infiniband") == "unknown"
    with_provider = capabilities.read_dockerfile("FROM ubuntu:22.04\nRUN apt-get install -y ibverbs-providers\n")
    assert with_provider.capabilities.state("infiniband") == "present"


def test_init_writes_the_current_curated_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--stack", "mine"]) == 0
    config = yaml.safe_load((tmp_path / "Pulumi.mine.yaml").read_text())["config"]
    (env,) = config["aml-gpu-training:environments"]
    assert env["image"] == "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.8-cuda12.6:15"
