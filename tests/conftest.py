"""Shared fixtures: the project root, and planning a stack (the shipped ones or a variant) offline.

Planning runs the real program under the mock engine (`planning.engine.run_program`); only Azure is mocked.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from planning.engine import ProgramRun, run_program
from stack.stackfile import read

ROOT = Path(__file__).resolve().parent.parent
NS = "aml-gpu-training"


SHIPPED_STACK_FILES = (
    "Pulumi.dev.yaml",
    "Pulumi.prod.yaml",
    "examples/multi-team/Pulumi.nlp.yaml",
    "examples/multi-team/Pulumi.research.yaml",
    "examples/multi-team/Pulumi.vision.yaml",
)
"""The stack files the project ships, relative to its root. Tests enumerate these, never the folder: a reader
who follows the quick start has a ``Pulumi.mine.yaml`` of their own beside them (tests/stack/test_files.py
keeps this list equal to the git-tracked stack files)."""


def shipped_stacks(folder: str = "") -> list[Path]:
    """The shipped stack files in ``folder`` (default: the project root), sorted."""
    return sorted(ROOT / name for name in SHIPPED_STACK_FILES if str(Path(name).parent) == (folder or "."))


def shipped_stack_names(folder: str = "") -> list[str]:
    """``dev``, ``prod``... of :func:`shipped_stacks`."""
    return [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in shipped_stacks(folder)]


def dev_config() -> dict[str, Any]:
    """The shipped dev stack's config mapping (a fresh copy to mutate)."""
    return copy.deepcopy(yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"])


def make_project(folder: Path, config: dict[str, Any], stack: str = "test") -> Path:
    """A project folder holding the real program and a stack file with ``config``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, folder / name)
    copy_project_folders(folder)
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return folder


PROJECT_FOLDERS = ("environments", "jobs/workloads")
"""The folders the shipped stacks name (build contexts, conda files, code): copied into a test project,
never linked, because every path a stack names must lead inside its project."""


def emulation_project(root: Path, jobs: list[dict[str, Any]]) -> Path:
    """A project for ``run-local``: the stack ``test`` with one two-node A100 cluster and ``jobs``, the sample
    workloads as ``src/`` and an empty ``work/`` folder (a minimal ``Pulumi.yaml``: no Pulumi program runs)."""
    (root / "Pulumi.yaml").write_text("name: aml-gpu-training\nruntime: python\n")
    config = {
        "azure-native:location": "westeurope",
        f"{NS}:workspace": {"name": "mlw-emulate"},
        f"{NS}:clusters": [{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 2}],
        f"{NS}:jobs": jobs,
    }
    (root / "Pulumi.test.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    shutil.copytree(ROOT / "jobs" / "workloads", root / "src", ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))
    (root / "work").mkdir()
    return root


def copy_project_folders(folder: Path) -> None:
    """Copy :data:`PROJECT_FOLDERS` into ``folder`` (those it lacks)."""
    for name in PROJECT_FOLDERS:
        if not (folder / name).exists():
            shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))


def required_tool(name: str, install: str) -> str:
    """The path of a program the suite runs: on PATH, or beside the test interpreter (a venv's console
    scripts). Missing, it skips the test on a developer's machine and fails it in CI (``CI`` set), whose
    install step must provide it: its absence there is a broken CI, not a reason to skip."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    message = f"{name} is not installed: {install}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, each keeping its place among them: under ``pytest -n 2 --dist worksteal`` (the
    Makefile's lanes) both workers start on long runs at once and the short tests fill in at the end, instead
    of a long test starting last while the other worker has nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def _temporary_folders_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every temporary folder the code under test makes (``run-local``'s ``amlgpu-run-local-*`` work
    folders, in-process or in a child process) lands in one folder of the session, removed at its end:
    the suite leaves nothing in the machine's /tmp."""
    folder = tmp_path_factory.mktemp("tmpdir")
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # recomputed from TMPDIR on next use
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous
        tempfile.tempdir = None
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def dev_plan() -> ProgramRun:
    return run_program("dev", read(ROOT / "Pulumi.dev.yaml"), ROOT)


_SHARED_PLANS: dict[tuple[Any, ...], ProgramRun] = {}
"""Program runs of this session (of this worker, under xdist), by everything the program reads: see
:func:`shared_plans`."""
_NOT_READ = frozenset({"build", "__pycache__", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"})


def _project_state(root: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file of a project a program could read (outputs and caches left out), with its size and mtime."""
    found = []
    for folder, names, files in os.walk(root):
        names[:] = sorted(n for n in names if n not in _NOT_READ)
        for name in sorted(files):
            stat = os.stat(os.path.join(folder, name))
            found.append((os.path.join(folder, name), stat.st_size, stat.st_mtime_ns))
    return tuple(found)


@pytest.fixture(scope="module")
def shared_plans() -> Iterator[None]:
    """For the tests of a module that asks for it: a program run the session has already made (the same stack
    name, config, secret keys and project files) is not made again, its plan is copied from the first.

    For the slow tests that drive whole commands (every command of the docs plans the same five stacks again and
    again): what they test is the command around the plan. The plan itself, and that planning twice gives the
    same plan, are tested without it (tests/planning/test_stacks.py, tests/reliability/test_determinism.py)."""
    from planning import engine

    original = engine.run_program

    def run_program_once(stack: str, stackfile: Any, root: Path) -> ProgramRun:
        key = (stack, json.dumps(stackfile.cli_config(), sort_keys=True), tuple(sorted(stackfile.secret_keys)),
               str(Path(root).resolve()), _project_state(Path(root)))
        if key not in _SHARED_PLANS:
            _SHARED_PLANS[key] = original(stack, stackfile, root)
        return copy.deepcopy(_SHARED_PLANS[key])

    engine.run_program = run_program_once
    try:
        yield
    finally:
        engine.run_program = original


@pytest.fixture
def plan_variant(tmp_path: Path) -> Callable[[Callable[[dict[str, Any]], None]], ProgramRun]:
    """Plan the dev stack after ``mutate(config)`` changed its config mapping in place."""

    def run(mutate: Callable[[dict[str, Any]], None]) -> ProgramRun:
        config = dev_config()
        mutate(config)
        project = make_project(tmp_path / "project", config)
        return run_program("test", read(project / "Pulumi.test.yaml"), project)

    return run


@pytest.fixture
def azure(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, Any]], Any]:
    """Serve recorded ``routes`` (``tests/replay_http.py``) to every HTTP client of the process, no socket opening,
    with ``AZURE_SUBSCRIPTION_ID`` set to the recorded workspace's; azure-ai-ml polls run history without waiting
    (its own ``AZUREML_RUN_POLLING_INTERVAL_MIN``/``MAX`` settings, read when it is imported)."""
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants

    from tests.aml_workspace import SUBSCRIPTION
    from tests.replay_http import Replay

    monkeypatch.setattr(RunHistoryConstants, "_WAIT_COMPLETION_POLLING_INTERVAL_MIN", 0)
    monkeypatch.setattr(RunHistoryConstants, "_WAIT_COMPLETION_POLLING_INTERVAL_MAX", 0)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    return lambda routes: Replay(routes).install(monkeypatch)


def only(plan: ProgramRun, token: str, name: str | None = None) -> dict[str, Any]:
    """The one resource of ``token`` (and logical ``name``), as resources.json shows it."""
    found = [r.to_json() for r in plan.by_type(token) if name is None or r.name == name]
    assert len(found) == 1, f"expected one {token} {name or ''}, found {[r['name'] for r in found]}"
    return found[0]


def waits(resource: Any) -> set[tuple[str, str]]:
    """What a planned resource (a ``PlannedResource`` or its JSON) depends on, as (type, name) pairs."""
    options = resource.options if hasattr(resource, "options") else resource.get("options") or {}
    return {(d["type"], d["name"]) for d in options.get("dependsOn", [])}


@pytest.fixture(autouse=True)
def _no_remembered_secrets() -> None:
    """Each test starts with no secret remembered (kernel.secrets keeps them for the life of a process)."""
    from kernel import secrets

    secrets.forget_all()
