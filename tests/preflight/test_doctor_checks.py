"""``amlgpu doctor`` on controlled machines: fake ``pulumi``, ``az`` and ``mpirun`` executables on a PATH of
our own, credentials in the environment, and what the user reads (and never reads: secret values)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from amlgpu.cli import main
from jobs.emulate.mpi import MpiUnavailable, find_mpirun
from preflight import machine as doctor
from tests import cli
from tests.conftest import ROOT

SECRET = "s3cr3t-value-that-must-not-leak"


def _tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder


def _with_tools(folder: Path, *, az_logged_in: bool | None = True, mpi: str | None = "Open MPI") -> Path:
    _tool(folder, "pulumi", 'test "$1" = version && echo v3.150.0')
    if az_logged_in is not None:
        _tool(folder, "az", f'test "$1 $2" = "account show" && exit {0 if az_logged_in else 1}')
    if mpi is not None:
        _tool(folder, "mpirun", f'echo "mpirun ({mpi}) 4.1.4"')
    return folder


AZURE_CASES: list[tuple[str, dict[str, str], bool | None, str, str]] = [
    ("OIDC through ARM_*", {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_SUBSCRIPTION_ID": "s",
                            "ARM_USE_OIDC": "true"}, None, "OK", "OIDC (ARM_USE_OIDC=true)"),
    ("service principal secret", {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_SUBSCRIPTION_ID": "s",
                                  "ARM_CLIENT_SECRET": SECRET}, None, "OK", "a client secret (ARM_CLIENT_SECRET)"),
    ("no subscription for Pulumi", {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_CLIENT_SECRET": SECRET},
     None, "WARN", "no ARM_SUBSCRIPTION_ID"),
    ("workload identity for azure-identity", {"AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t",
                                              "AZURE_FEDERATED_TOKEN_FILE": "/var/run/token"},
     None, "OK", "workload identity"),
    ("ids without any credential fall back to az", {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t"}, True, "OK",
     "az CLI is logged in"),
    ("az logged in", {}, True, "OK", "az CLI is logged in"),
    ("az not logged in", {}, False, "WARN", "not logged in"),
    ("neither az nor variables", {}, None, "WARN", "no az CLI"),
]


@pytest.mark.parametrize(("case", "variables", "az", "status", "says"), AZURE_CASES, ids=[c[0] for c in AZURE_CASES])
def test_azure_login(bin_dir: Path, case: str, variables: dict[str, str], az: bool | None, status: str,
                     says: str) -> None:
    env = {"PATH": str(_with_tools(bin_dir, az_logged_in=az)), **variables}
    check = doctor.check_azure_login(env)
    assert (check.status, says in check.detail) == (status, True), check
    assert SECRET not in repr(check)
    if status != "OK":
        assert check.fix


def test_pulumi_found_or_how_to_install(bin_dir: Path) -> None:
    found = doctor.check_pulumi({"PATH": str(_with_tools(bin_dir))})
    assert found.status == "OK" and found.detail.startswith("v3.150.0")
    missing = doctor.check_pulumi({"PATH": str(bin_dir.parent / "empty")})
    assert missing.status == "WARN" and "get.pulumi.com" in missing.fix and not missing.required


@pytest.mark.parametrize(("mpi", "status", "says"), [
    ("Open MPI", "OK", "mpirun (Open MPI) 4.1.4"),
    ("HYDRA build details", "WARN", "is not Open MPI"),
    (None, "WARN", "not on PATH"),
])
def test_mpirun(bin_dir: Path, mpi: str | None, status: str, says: str) -> None:
    check = doctor.check_mpirun({"PATH": str(_with_tools(bin_dir, mpi=mpi))}, find_mpirun, MpiUnavailable)
    assert check.status == status and says in check.detail, check
    if status != "OK":
        assert "openmpi-bin" in check.fix


def test_project_found_from_a_subfolder_and_not_elsewhere(tmp_path: Path) -> None:
    inside = doctor.check_project(ROOT / "docs")
    assert inside.status == "OK" and "dev" in inside.detail and "prod" in inside.detail
    outside = doctor.check_project(tmp_path)
    assert outside.status == "WARN" and not outside.required


def _doctor(path: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(path), "HOME": os.environ.get("HOME", "/tmp"), **variables}
    return cli.amlgpu(ROOT, "doctor", *args, env=env, timeout=120)


@pytest.mark.slow
def test_a_machine_ready_to_deploy(bin_dir: Path) -> None:
    result = _doctor(_with_tools(bin_dir, az_logged_in=None), "--format", "json", ARM_CLIENT_ID="c",
                     ARM_TENANT_ID="t", ARM_SUBSCRIPTION_ID="s", ARM_CLIENT_SECRET=SECRET)
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    report = json.loads(result.stdout)
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert {k: status[k] for k in ("python", "packages", "project", "pulumi", "azure login", "mpirun", "torch")} == \
        dict.fromkeys(("python", "packages", "project", "pulumi", "azure login", "mpirun", "torch"), "OK")
    assert report["ready"]["plan"] and report["ready"]["deploy"] and report["ready"]["run_local_mpi"]


@pytest.mark.slow
def test_a_bare_machine_can_still_plan_and_is_told_what_to_install(bin_dir: Path) -> None:
    result = _doctor(bin_dir)  # nothing on PATH, no credentials
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("WARN") and "pulumi" in line for line in lines)
    assert any("fix: install the Pulumi CLI" in line for line in lines)
    assert any("fix: install Open MPI" in line for line in lines)
    assert "Ready for: offline plan (amlgpu plan)" in result.stdout
    assert "Not ready for: deploy" in result.stdout


def test_a_missing_dependency_fails_the_doctor(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    real_version: Callable[[str], str] = importlib.metadata.version

    def version(name: str) -> str:
        if name.lower() == "pydantic":
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.chdir(ROOT)
    assert main(["doctor", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    packages = next(c for c in report["checks"] if c["name"] == "packages")
    assert packages["status"] == "MISSING" and "pydantic not installed" in packages["detail"]
    assert "make install" in packages["fix"] and report["ready"]["plan"] is False
