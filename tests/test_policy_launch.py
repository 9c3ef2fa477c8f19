"""Launch topology: what a run's launcher starts on each node, judged against the run (policies/rules/launch.py),
and Microsoft's own commands that start processes without opening a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.resolve import resolve_run
from policies.catalogue import RULES
from tests.conftest import ROOT
from tests.test_jobs_resolve import declared, stack

HISTORY = ROOT / "tests" / "fixtures" / "azureml-examples-history"
BASICS = HISTORY / "085cd6ea" / "cli" / "jobs" / "pipelines-with-components" / "basics"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    return tmp_path


def _mandatory(run: Any) -> dict[str, list[str]]:
    found = {}
    for rule in RULES:
        if rule.kind == "run" and rule.enforcement == "mandatory":
            messages = list(rule.check(run, **rule.parameters))
            if messages:
                found[rule.id] = messages
    return found


@pytest.mark.parametrize("example", ["6a_tf_hello_world", "6b_pytorch_hello_world"])
def test_microsofts_hello_world_components_pass_on_a_one_gpu_size(root: Path, example: str) -> None:
    """The pipelines' hello-world components as runs on their `gpu-cluster` (a 1-GPU size): the command only
    echoes the launch variables, so 2 processes per node are no finding."""
    component = yaml.safe_load((BASICS / example / "component.yml").read_text())
    node = yaml.safe_load((BASICS / example / "pipeline.yml").read_text())["jobs"]
    (step,) = node.values()
    environment = component["environment"].replace("/labels/latest", "/versions/1")
    run = declared(name=component["name"].replace("_", "-"), command=component["command"], code=None,
                   environment=environment, compute="gpu-cluster", resources=step["resources"],
                   distribution=step["distribution"])
    clusters = [{"name": "gpu-cluster", "size": "Standard_NC24ads_A100_v4", "max_instances": 2}]
    config = stack(root, [run], clusters=clusters)
    resolved = resolve_run(config.jobs[0], config, root)
    assert _mandatory(resolved) == {}
