"""``amlgpu plan --changed-since GIT_REF``: only the stacks whose inputs changed, on a git history built here.

The repository holds the project in a subfolder and four stacks, each naming its own kind of input:
``alpha`` (the dev stack: build contexts, runs and fabric checks on ``jobs/workloads``), ``beta`` (a build
context, a code folder), ``gamma`` (a ``file:`` environment with a conda file, a code folder) and ``delta``
(a code folder reached through a symbolic link). Each case changes one kind of input, committed or not, and
checks which stacks are selected against the first commit. ``pipe`` holds a pipeline whose step runs a
component file (its code folder and ``file:`` environment relative to the component) and a sweep.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.errors import UserError
from planning.changes import PACKAGES, affected, package_folders, select
from stack.project import load_stack, stack_names
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.planning.test_stacks import plan as _plan

pytestmark = pytest.mark.skipif(subprocess.run(["git", "--version"], capture_output=True).returncode != 0,
                                reason="needs git")

EVERY = ["alpha", "beta", "delta", "gamma", "pipe"]
IMAGE = "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18"


def _single_node(run_environment: Any, code: str, environments: list[dict[str, Any]]) -> dict[str, Any]:
    """A stack on one non-InfiniBand cluster (no generated fabric check) with one run."""
    config = dev_config()
    config[f"{NS}:clusters"] = [{"name": "gpu", "size": "Standard_NC24ads_A100_v4", "min_instances": 0,
                                 "max_instances": 1}]
    config[f"{NS}:environments"] = environments
    config[f"{NS}:jobs"] = [{"name": "train", "code": code, "command": "python train.py",
                             "environment": run_environment, "compute": "gpu",
                             "resources": {"instance_count": 1}, "distribution": {"type": "pytorch"},
                             "limits": {"timeout": 3600}}]
    return config


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)}
    done = subprocess.run(["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args], capture_output=True,
                          text=True, env=env, check=True)
    return done.stdout.strip()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The repository; the project is its ``project/`` folder. HEAD is the base commit."""
    repo = tmp_path / "repo"
    project = make_project(repo / "project", dev_config(), stack="alpha")
    (project / "Pulumi.alpha.yaml").write_text(yaml.safe_dump({"config": dev_config()}, sort_keys=False))
    image = [{"name": "img", "version": "1", "image": IMAGE}]
    stacks = {
        "beta": _single_node("ds", "src/beta", [{"name": "ds", "version": "1",
                                                  "build": {"path": "environments/deepspeed"}}]),
        "gamma": _single_node("file:envs/gamma.yml", "src/gamma", image),
        "delta": _single_node("img", "linked", image),
        "pipe": _single_node("img", "src/sweep", image),
    }
    stacks["pipe"][f"{NS}:jobs"] += [
        {"name": "pipe", "type": "pipeline", "settings": {"default_compute": "gpu"},
         "jobs": {"train": {"component": "file:components/step.yml"}}},
        {"name": "lr-sweep", "type": "sweep", "compute": "gpu",
         "trial": {"code": "src/sweep", "command": "python train.py --lr ${{search_space.lr}}",
                   "environment": "img", "distribution": {"type": "pytorch"}},
         "search_space": {"lr": {"type": "choice", "values": [0.1, 0.01]}}, "sampling_algorithm": "random",
         "objective": {"goal": "minimize", "primary_metric": "loss"},
         "limits": {"max_total_trials": 2, "trial_timeout": 600}},
    ]
    for name, config in stacks.items():
        (project / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    _write(project / "components" / "step.yml", yaml.safe_dump({
        "type": "command", "code": "../src/pipe", "command": "python train.py", "environment": "file:env.yml",
        "distribution": {"type": "pytorch"}}))
    _write(project / "components" / "env.yml", f"image: {IMAGE}\n")
    for folder in ("beta", "gamma", "real", "pipe", "sweep"):
        _write(project / "src" / folder / "train.py", "print('training')\n")
    (project / "linked").symlink_to("src/real")
    _write(project / "envs" / "gamma.yml", f"image: {IMAGE}\nconda_file: conda.yml\n")
    _write(project / "envs" / "conda.yml", "dependencies:\n  - python=3.11\n")
    _write(project / "docs" / "guide.md", "# guide\n")
    _write(repo / "README.md", "# the repository\n")
    for name in EVERY:
        load_stack(name, project)  # every stack is valid: none is selected for being unreadable
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    return repo


def _append(relative: str, text: str = "\n# changed\n") -> Callable[[Path], None]:
    def change(project: Path) -> None:
        path = project / relative
        _write(path, (path.read_text() if path.exists() else "") + text)
    return change


def _delete(relative: str) -> Callable[[Path], None]:
    def change(project: Path) -> None:
        (project / relative).unlink()
    return change


def _copy_stack(source: str, name: str) -> Callable[[Path], None]:
    def change(project: Path) -> None:
        (project / f"Pulumi.{name}.yaml").write_text((project / f"Pulumi.{source}.yaml").read_text())
    return change


# (id, change, commit it?, planned, deleted)
CASES: list[tuple[str, Callable[[Path], None], bool, list[str], list[str]]] = [
    ("its stack file", _append("Pulumi.beta.yaml"), True, ["beta"], []),
    ("its environment's build context", _append("environments/deepspeed/Dockerfile"), True, ["beta"], []),
    ("a build context of the dev stack", _append("environments/tensorflow/Dockerfile"), True, ["alpha"], []),
    ("a build context no stack names", _append("environments/unused/Dockerfile", "FROM scratch\n"), True, [], []),
    ("its file: environment", _append("envs/gamma.yml", "description: pinned\n"), True, ["gamma"], []),
    ("the conda file its file: environment names", _append("envs/conda.yml", "  - pip\n"), True, ["gamma"], []),
    ("its code folder", _append("src/gamma/train.py", "print(1)\n"), True, ["gamma"], []),
    ("a code folder reached through a symbolic link", _append("src/real/train.py", "print(1)\n"), True,
     ["delta"], []),
    ("a pipeline step's component file", _append("components/step.yml", "description: x\n"), True, ["pipe"], []),
    ("the file: environment a component names", _append("components/env.yml", "description: x\n"), True,
     ["pipe"], []),
    ("a component's code folder", _append("src/pipe/train.py", "print(1)\n"), True, ["pipe"], []),
    ("a sweep trial's code folder", _append("src/sweep/train.py", "print(1)\n"), True, ["pipe"], []),
    ("a workload under jobs/ (runs and fabric checks)", _append("jobs/workloads/train_ddp.py", "# x\n"), True,
     ["alpha"], []),
    ("a file named with backslashes in a workload folder", _append("jobs/workloads/..\\..\\id_rsa", "key\n"), True,
     ["alpha"], []),
    ("its pack config", _append("policies/config.beta.json", "{}\n"), True, ["beta"], []),
    ("a policy rule", _append("policies/rules/extra.py", "X = 1\n"), True, EVERY, []),
    ("the shared pack config", _append("policies/config.json", "{}\n"), True, EVERY, []),
    ("program code under jobs/", _append("jobs/render.py", "X = 1\n"), True, EVERY, []),
    ("the program's components", _append("infra/network.py", "X = 1\n"), True, EVERY, []),
    ("the model", _append("stack/config.py", "X = 1\n"), True, EVERY, []),
    ("the plan pipeline", _append("planning/render.py", "X = 1\n"), True, EVERY, []),
    ("the CLI", _append("amlgpu/cli.py", "X = 1\n"), True, EVERY, []),
    ("the kernel", _append("kernel/secrets.py", "X = 1\n"), True, EVERY, []),
    ("an analyser", _append("analysis/interconnect.py", "X = 1\n"), True, EVERY, []),
    ("the Azure facts", _append("azurefacts/prices.json", "{}\n"), True, EVERY, []),
    ("the program's entry", _append("__main__.py"), True, EVERY, []),
    ("the project file", _append("Pulumi.yaml"), True, EVERY, []),
    ("the dependencies", _append("pyproject.toml", "[x]\n"), True, EVERY, []),
    ("docs", _append("docs/guide.md"), True, [], []),
    ("a file outside the project", lambda project: _append("README.md")(project.parent), True, [], []),
    ("an uncommitted edit", _append("src/beta/train.py", "print(2)\n"), False, ["beta"], []),
    ("a new stack not yet added to git", _copy_stack("beta", "epsilon"), False, ["epsilon"], []),
    ("a deleted stack", _delete("Pulumi.gamma.yaml"), True, [], ["gamma"]),
    ("a stack file that no longer validates", _append("Pulumi.delta.yaml", "  broken: [\n"), True, ["delta"], []),
]


@pytest.mark.parametrize(("change", "commit", "planned", "deleted"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_only_the_stacks_whose_inputs_changed_are_planned(
    repo: Path, change: Callable[[Path], None], commit: bool, planned: list[str], deleted: list[str]
) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    project = repo / "project"
    change(project)
    if commit:
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "change")
    selection = select(project, base, stack_names(project), every_stack=True)
    assert list(selection.planned) == planned
    assert list(selection.deleted) == deleted
    assert bool(selection.impact.program) == (planned == EVERY)


def test_the_base_is_where_the_branch_left_main(repo: Path) -> None:
    """Changes made on main after the branch point are not the branch's: they plan nothing."""
    _git(repo, "checkout", "-q", "-b", "feature")
    _append("src/gamma/train.py", "print(1)\n")(repo / "project")
    _git(repo, "commit", "-qam", "feature")
    _git(repo, "checkout", "-q", "main")
    _append("Pulumi.beta.yaml")(repo / "project")
    _git(repo, "commit", "-qam", "main moves on")
    _git(repo, "checkout", "-q", "feature")
    assert list(select(repo / "project", "main", EVERY, every_stack=True).planned) == ["gamma"]


def test_a_changed_pack_config_given_on_the_command_line_plans_every_stack(repo: Path) -> None:
    project = repo / "project"
    _append("platform/pack.json", "{}\n")(project)
    selection = select(project, "HEAD", EVERY, every_stack=True, read_by_every_plan=[project / "platform/pack.json"])
    assert list(selection.planned) == EVERY and selection.impact.program == ("platform/pack.json",)


def test_a_code_folder_below_jobs_is_a_workload_but_jobs_itself_is_the_program() -> None:
    inputs = {"a": frozenset({"jobs/workloads"}), "b": frozenset({"jobs"}), "c": frozenset({"src"})}
    packages = frozenset({"jobs", "jobs/emulate"})
    impact = affected(["jobs/workloads/x.py"], inputs, packages=packages)
    assert impact.program == ()
    assert dict(impact.stacks) == {"a": ("jobs/workloads/x.py",), "b": ("jobs/workloads/x.py",)}
    impact = affected(["jobs/render.py", "jobs/workloads2/x.py"], inputs, packages=packages)
    assert impact.program == ("jobs/render.py", "jobs/workloads2/x.py")


def test_package_code_is_the_program_whatever_a_stack_declares() -> None:
    # A stack naming the gate's own code as its code folder does not make the emulator its input alone.
    inputs = {"a": frozenset({"jobs/emulate"}), "b": frozenset({"kernel"})}
    impact = affected(["jobs/emulate/prepare.py", "kernel/secrets.py"], inputs,
                      packages=frozenset({"jobs", "jobs/emulate", "kernel"}))
    assert impact.program == ("jobs/emulate/prepare.py", "kernel/secrets.py")


def test_a_file_name_with_backslashes_stays_in_its_folder() -> None:
    # git reports the path verbatim; a backslash is part of the file's name on POSIX, not a separator that
    # could walk the path up to the project root.
    name = "jobs/workloads/..\\..\\id_rsa"
    impact = affected([name], {"a": frozenset({"jobs/workloads"})}, packages=frozenset({"jobs"}))
    assert dict(impact.stacks) == {"a": (name,)} and impact.program == ()


def test_the_program_is_every_package_the_project_ships() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = {name.rstrip("*") for name in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert set(PACKAGES) == shipped == set(project["tool"]["importlinter"]["root_packages"])
    makefile = (ROOT / "Makefile").read_text()
    assert f"PACKAGES := {' '.join(PACKAGES)}\n" in makefile  # lint and type checks read the same packages
    assert "ruff check .\n" not in makefile and "ruff check $(CODE)\n" in makefile  # never a user's own scripts
    folders = package_folders(ROOT)
    assert {"jobs", "jobs/emulate", "kernel", "policies/rules"} <= folders and "jobs/workloads" not in folders


def test_the_command_plans_the_changed_stacks_and_reports_the_deleted_ones(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = repo / "project"
    base = _git(repo, "rev-parse", "HEAD")
    _append("src/beta/train.py", "print(2)\n")(project)
    _git(repo, "rm", "-q", "project/Pulumi.gamma.yaml")
    _git(repo, "commit", "-qam", "change beta, delete gamma")
    code, out, err = _plan(project, capsys, "--all", "--changed-since", base, "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert [s["stack"] for s in document["stacks"]] == ["beta"]
    assert document["changed_since"] == {"ref": base, "commit": base, "unchanged": ["alpha", "delta", "pipe"],
                                         "deleted": ["gamma"]}
    assert sorted(p.name for p in (project / "build").iterdir()) == ["beta"]
    assert f"Changed since {base[:12]}: 1 of 4 stack(s) to plan: beta (src/beta/train.py)." in err
    assert f"Deleted since {base[:12]}: stack 'gamma' (Pulumi.gamma.yaml): nothing to plan." in err

    code, out, _ = _plan(project, capsys, "--all", "--changed-since", "HEAD")
    assert code == 0
    head = _git(repo, "rev-parse", "HEAD")
    assert "0 stacks planned" in out and f"4 stacks unchanged since HEAD ({head[:12]}): not planned." in out


@pytest.mark.parametrize(("ref", "message"), [
    ("no-such-ref", "'no-such-ref' names no commit of the repository"),
    ("--output=/tmp/x", "'--output=/tmp/x' names no commit of the repository"),
    ("main..HEAD", "'main..HEAD' names no commit of the repository"),
])
def test_a_bad_ref_exits_2_naming_the_flag(repo: Path, capsys: pytest.CaptureFixture[str], ref: str,
                                           message: str) -> None:
    code, out, err = _plan(repo / "project", capsys, "--all", f"--changed-since={ref}")
    assert code == 2 and out == ""
    assert err.startswith(f"error: --changed-since: {message}") and "Traceback" not in err
    assert not (repo / "project" / "build").exists()


def test_outside_a_git_work_tree_it_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", dev_config(), stack="alpha")
    with pytest.raises(UserError, match="is not in a git work tree"):
        select(project, "HEAD", ["alpha"], every_stack=True)
    code, _, err = _plan(project, capsys, "--all", "--changed-since", "HEAD")
    assert code == 2 and "error: --changed-since: " in err
