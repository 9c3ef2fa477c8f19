"""The first hour III, as a new user meets it: a launcher flag that reads a variable nothing sets is a
mandatory finding with the launch contract's closest name, not an advisory "only known at run time"
(issue 38, point 3)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from jobs.resolve import resolve_run
from policies.catalogue import BY_ID
from tests.conftest import ROOT, copy_project_folders
from tests.jobs.test_resolve import declared, stack

RULE = "run-launch-variable-empty"
TORCHRUN = "torchrun --nnodes 2 --nproc_per_node 8 --node_rank $NODE_RANK --master_addr $MASTER_ADDR " \
           "--master_port $MASTER_PORT train.py"


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "clone"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, project / name)
    copy_project_folders(project)
    text = (ROOT / "Pulumi.dev.yaml").read_text()
    assert "--node_rank $NODE_RANK" in text
    (project / "Pulumi.dev.yaml").write_text(text.replace("--node_rank $NODE_RANK", "--node_rank $NODERANK"))
    monkeypatch.chdir(project)
    return project


def test_a_typo_in_the_node_rank_fails_the_plan_with_did_you_mean(clone: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 1
    out = capsys.readouterr().out
    assert ("run-launch-variable-empty  [high]  run 'ddp-torchrun': `torchrun --nnodes 2 --nproc_per_node 8 "
            "--node_rank $NODERANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT` (the command): "
            "--node_rank $NODERANK reads $NODERANK, which is certainly empty: Azure ML never sets it and neither "
            "the command nor environment_variables assign it. Did you mean $NODE_RANK? Fix: --node_rank "
            "$NODE_RANK") in out
    assert "$NODERANK` is only known at run time" not in out  # not also reported as unknown
    assert "1 mandatory failure(s)" in out


@pytest.fixture
def root(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "environments", tmp_path / "environments")  # the stack's build contexts
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    return tmp_path


def _empty(root: Path, command: str, nodes: int = 2, env: dict[str, str] | None = None) -> list[str]:
    run: dict[str, Any] = declared(command=command, resources={"instance_count": nodes},
                                   distribution={"type": "pytorch", "process_count_per_instance": 1})
    if env:
        run["environment_variables"] = env
    config = stack(root, [run])
    return list(BY_ID[RULE].check(resolve_run(config.jobs[0], config, root)))


@pytest.mark.parametrize(("command", "says"), [
    (TORCHRUN.replace("$NODE_RANK", "$NODERANK"), "Did you mean $NODE_RANK? Fix: --node_rank $NODE_RANK"),
    (TORCHRUN.replace("$MASTER_ADDR", "${MASTERADDR}"), "Did you mean $MASTER_ADDR? Fix: --master_addr $MASTER_ADDR"),
    (TORCHRUN.replace("$NODE_RANK", "$MY_NODE"), "Fix: read Azure ML's variable (NODE_RANK, MASTER_ADDR"),
])
def test_a_flag_reading_a_variable_nothing_sets_is_mandatory(root: Path, command: str, says: str) -> None:
    (message,) = _empty(root, command)
    assert says in message and "certainly empty" in message
    assert BY_ID[RULE].enforcement == "mandatory"


@pytest.mark.parametrize(("command", "env"), [
    (TORCHRUN, None),  # Azure ML's own names
    (TORCHRUN.replace("$NODE_RANK", "$NODERANK"), {"NODERANK": "0"}),  # environment_variables sets it
    ("NODERANK=$NODE_RANK; " + TORCHRUN.replace("$NODE_RANK", "$NODERANK"), None),  # the command sets it
    ("export NODERANK=$(cat /etc/rank); " + TORCHRUN.replace("$NODE_RANK", "$NODERANK"), None),
    ("source env.sh; " + TORCHRUN.replace("$NODE_RANK", "$NODERANK"), None),  # a file that may set anything
    (TORCHRUN.replace("$NODE_RANK", "${NODERANK:-0}"), None),  # a default: not empty (another rule judges it)
    (TORCHRUN.replace("$NODE_RANK", "$AZUREML_NODE_RANK"), None),  # a platform prefix: never judged empty
])
def test_what_may_be_set_is_not_judged_empty(root: Path, command: str, env: dict[str, str] | None) -> None:
    assert _empty(root, command, env=env) == []


def test_one_node_needs_no_rank(root: Path) -> None:
    assert _empty(root, TORCHRUN.replace("$NODE_RANK", "$NODERANK"), nodes=1) == []
