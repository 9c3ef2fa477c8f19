"""Module docstrings stay short: a few lines saying what the module is. A design essay belongs in
docs/development.md ("Design notes"), where it is read as prose and kept beside the others."""

from __future__ import annotations

import ast

from planning.changes import PACKAGES
from tests.conftest import ROOT

MAX_LINES = 25


def docstring_lines(source: str) -> int:
    """Lines the module docstring spans, from its opening quotes to its closing ones (0 when none)."""
    body = ast.parse(source).body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return (first.end_lineno or first.lineno) - first.lineno + 1
    return 0


def test_no_module_docstring_runs_over_25_lines() -> None:
    long = [
        f"{path.relative_to(ROOT).as_posix()}: {lines} lines"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := docstring_lines(path.read_text(encoding="utf-8"))) > MAX_LINES
    ]
    assert not long, (f"module docstrings over {MAX_LINES} lines (move the design notes to docs/development.md):\n"
                      + "\n".join(long))


def test_the_check_counts_lines_and_can_fail() -> None:
    assert docstring_lines('"""One line."""\nX = 1\n') == 1
    assert docstring_lines("X = 1\n") == 0
    assert docstring_lines('"""\n' + "line\n" * MAX_LINES + '"""\n') == MAX_LINES + 2
