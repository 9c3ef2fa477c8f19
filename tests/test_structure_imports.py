"""The import direction stays top-down, floor by floor (``amlgpu`` the CLI, ``planning``, ``policies``, the
features, ``stack``, ``analysis``, ``azurefacts``, ``kernel``). import-linter checks the packages (contracts in
pyproject.toml); the Pulumi program ``__main__.py`` is a script, not a package, so its imports are checked here.

Imports inside functions are counted too: they hide a module's dependencies from the reader and from
import-linter's layers, and two modules importing each other late is a cycle all the same. At most
:data:`MAX_FUNCTION_LEVEL_IMPORTS` of our own modules are imported inside a function, and the import graph
with those counted has no cycle."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

from planning.changes import PACKAGES
from tests.conftest import ROOT

PROJECT_PACKAGES = set(PACKAGES)
PROGRAM_MAY_IMPORT = {"infra", "jobs", "stack", "analysis", "azurefacts", "kernel"}
"""The Pulumi program declares the stack: the features below the gate, never the CLI, the plan or the gate."""
MAX_FUNCTION_LEVEL_IMPORTS = 25


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
    used = _top_level_imports(ROOT / "__main__.py") & PROJECT_PACKAGES
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
    for package in PROJECT_PACKAGES:
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


def function_level_imports(root: Path, packages: set[str]) -> Iterator[tuple[str, int, str]]:
    """Each import of one of ``packages`` made inside a function: (file, line, module)."""
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            if "workloads" in path.relative_to(root).parts:  # training scripts run in the cluster's image
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for function in ast.walk(tree):
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in function.body:
                    for inner in ast.walk(node):
                        if isinstance(inner, ast.Import):
                            names = [alias.name for alias in inner.names]
                        elif isinstance(inner, ast.ImportFrom):
                            names = ["." * inner.level + (inner.module or "")]
                        else:
                            continue
                        for name in names:
                            if name.startswith(".") or name.split(".")[0] in packages:
                                yield str(path.relative_to(root)), inner.lineno, name


def _distinct(found: Iterator[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    # A nested function's imports are walked from each function holding it: count each statement once.
    return sorted(set(found))


def test_few_imports_hide_inside_functions() -> None:
    found = _distinct(function_level_imports(ROOT, PROJECT_PACKAGES))
    assert len(found) <= MAX_FUNCTION_LEVEL_IMPORTS, "\n".join(f"{f}:{line}: {name}" for f, line, name in found)


def test_the_count_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("import os\nfrom pkg import b\n\ndef f():\n    from pkg import c\n"
                                          "    import json\n    if True:\n        import pkg.d\n")
    assert _distinct(function_level_imports(tmp_path, {"pkg"})) == [("pkg/a.py", 5, "pkg"), ("pkg/a.py", 8, "pkg.d")]


def import_cycles(packages: set[str]) -> list[list[str]]:
    """The modules that import each other, directly or round a loop, imports inside functions included (those
    under ``if TYPE_CHECKING`` are not run, so not counted): Tarjan's strongly connected components."""
    graph = grimp.build_graph(*sorted(packages), exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]  # iterative: the graph is deep enough for Python's recursion limit
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            module, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    break
                if nxt in stack:
                    low[module] = min(low[module], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_no_module_imports_itself_round_a_loop() -> None:
    assert import_cycles(PROJECT_PACKAGES) == []


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "loopy").mkdir()
    (tmp_path / "loopy" / "__init__.py").write_text("")
    (tmp_path / "loopy" / "a.py").write_text("from loopy import b\n")
    (tmp_path / "loopy" / "b.py").write_text("def f():\n    from loopy import a\n")
    (tmp_path / "loopy" / "c.py").write_text("from loopy import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles({"loopy"}) == [["loopy.a", "loopy.b"]]


def test_version_and_help_import_no_command_and_a_command_imports_only_its_own() -> None:
    """The CLI's command table is the one late import: ``--version`` and ``--help`` load no command's module
    (nor the plan's libraries), ``policy list`` loads the policy command's alone."""
    probe = ("import contextlib, io, sys\nfrom amlgpu.cli import main\nfor argv in {argv!r}:\n"
             "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
             "        main(argv)\n"
             "print(sorted(m for m in sys.modules if m.startswith(('amlgpu.commands.', 'pulumi', 'planning'))))\n")
    for argv, loaded in (([["--version"], ["--help"]], []), ([["policy", "list"]], ["amlgpu.commands.policy"])):
        done = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, check=True)
        assert done.stdout.strip() == repr(loaded), done.stderr


def test_the_command_table_says_what_each_command_says_of_itself() -> None:
    from amlgpu.cli import build_parser

    assert build_parser(()).format_help() == build_parser().format_help()
