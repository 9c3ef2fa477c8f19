"""The import direction stays top-down, floor by floor (docs/development.md), and the features stay
independent: import-linter checks the packages (contracts in pyproject.toml); the Pulumi program
``__main__.py`` is a script, not a package, so its imports are checked here."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planning.changes import PACKAGES
from tests.conftest import ROOT

PROGRAM_MAY_IMPORT = {"infra", "jobs", "stack", "analysis", "azurefacts", "kernel"}
"""The Pulumi program wires components and declared runs from the stack: never the CLI, the plan or the gate."""


def _lint_imports() -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_packages_import_only_downwards() -> None:
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_pulumi_program_imports_neither_the_cli_nor_the_plan_nor_the_gate() -> None:
    used = _top_level_imports(ROOT / "__main__.py") & set(PACKAGES)
    assert used <= PROGRAM_MAY_IMPORT, f"__main__.py imports {sorted(used - PROGRAM_MAY_IMPORT)}"
    assert {"stack", "infra", "jobs"} <= used


@pytest.mark.parametrize(("target", "line", "expected"), [
    ("kernel/errors.py", "import amlgpu.cli", "kernel.errors -> amlgpu.cli"),  # an upward import
    ("preflight/deploy.py", "import jobs.render", "preflight.deploy -> jobs.render"),  # one feature into another
    # the gate into the emulator
    ("policies/engine.py", "import jobs.emulate.local", "policies.engine -> jobs.emulate.local"),
])
def test_the_contracts_catch_a_broken_import(tmp_path: Path, target: str, line: str, expected: str) -> None:
    # The checker must be able to fail: a copy of the packages with one forbidden import breaks it.
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / target
    path.write_text(path.read_text() + f"\n{line}  # noqa: E402\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run(
        [exe, "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0
    assert expected in result.stdout
