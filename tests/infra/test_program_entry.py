"""`pulumi up` finds and runs this same program: Pulumi.yaml's runtime, its virtualenv, and the Python
language host's calling convention, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT

# What the language host does: config arrives through the environment (PULUMI_CONFIG, secret keys in
# PULUMI_CONFIG_SECRET_KEYS), the program directory named by Pulumi.yaml (`main`, default: the
# project directory) is run with runpy.run_path(..., run_name="__main__") inside run_in_stack.
HOST = r"""
import asyncio, json, os, runpy, sys
import pulumi
from pulumi.runtime import mocks, settings
from planning.mocks import AzureMocks

program = sys.argv[1]
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
settings.ROOT.set(None)
monitor = mocks.MockMonitor(AzureMocks())
mocks.set_mocks(AzureMocks(), project="aml-gpu-training", stack="dev", preview=True, monitor=monitor)
settings.ROOT.set(None)
loop.run_until_complete(pulumi.runtime.stack.run_in_stack(lambda: runpy.run_path(program, run_name="__main__")))
types = sorted({urn.split("::")[2].split("$")[-1] for urn in monitor.resources})
print(json.dumps(types))
"""


def test_pulumi_yaml_names_a_python_program_with_the_project_virtualenv() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "aml-gpu-training"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["virtualenv"] == ".venv"
    program = ROOT / project.get("main", ".")
    assert (program / "__main__.py").is_file() if program.is_dir() else program.suffix == ".py"


@pytest.mark.slow
def test_program_runs_in_a_fresh_interpreter_as_the_language_host_runs_it() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    stack = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    env = {
        "PULUMI_CONFIG": json.dumps(
            {k: v if isinstance(v, str) else json.dumps(v) for k, v in stack.items()}
        ),
        "PULUMI_CONFIG_SECRET_KEYS": "[]",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", HOST, str(ROOT / project.get("main", "."))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    types = json.loads(done.stdout.strip().splitlines()[-1])
    for token in (
        "azure-native:machinelearningservices:Workspace",
        "azure-native:machinelearningservices:Compute",
        "azure-native:machinelearningservices:EnvironmentVersion",
        "azure-native:network:Subnet",
        "aml-gpu-training:infra:GpuCluster",
    ):
        assert token in types


def test_program_reports_bad_config_without_a_traceback() -> None:
    env = {
        "PULUMI_CONFIG": json.dumps(
            {"aml-gpu-training:workspace": json.dumps({"name": "x"}), "azure-native:location": "westeurope"}
        ),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", HOST, str(ROOT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )
    assert done.returncode != 0
    # pulumi.RunError is what the language host prints as a plain error message.
    assert "RunError" in done.stderr
    assert "aml-gpu-training:workspace.name" in done.stderr
    assert "workspace name 'x' is invalid" in done.stderr
