"""The import direction stays top-down: ``amlgpu`` (the CLI) -> ``policies`` -> ``jobs`` -> ``model``
(the stack model) -> ``infra``. import-linter checks the packages (contract in pyproject.toml); the
Pulumi program ``__main__.py`` is a script, not a package, so its imports are checked here."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PROGRAM_MAY_IMPORT = {"model", "infra", "jobs"}
PROJECT_PACKAGES = {"amlgpu", "policies", "jobs", "model", "infra"}


def _lint_imports() -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    return subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_packages_import_only_downwards() -> None:
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_pulumi_program_imports_the_model_infra_and_jobs_only() -> None:
    used = _top_level_imports(ROOT / "__main__.py") & PROJECT_PACKAGES
    assert used <= PROGRAM_MAY_IMPORT, f"__main__.py imports {sorted(used - PROGRAM_MAY_IMPORT)}"
    assert "model" in used


def test_the_contract_catches_an_upward_import(tmp_path: Path) -> None:
    # The checker must be able to fail: a copy of the packages with one upward import breaks it.
    for package in PROJECT_PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "model" / "errors.py"
    target.write_text(target.read_text() + "\nimport amlgpu.cli  # noqa: E402\n")
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run(
        [exe, "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0
    assert "kernel.errors -> amlgpu.cli" in result.stdout
