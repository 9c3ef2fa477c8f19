"""Shell commands read with a real parser (tree-sitter-bash) and evaluated as bash would, as far as that can be
known before a run: :func:`evaluate` returns a :class:`Script` (the commands that run, with their words,
environment and directory; every assignment; the files written; what could not be followed, as
:class:`Unknown` records). Hostile input never raises or hangs: past a bound, what cannot be seen is unknown.

The package's layers, bottom to top: :mod:`~analysis.shell.api` (these records and the bounds),
:mod:`~analysis.shell.state`, :mod:`~analysis.shell.words`, :mod:`~analysis.shell.expansions`,
:mod:`~analysis.shell.arithmetic`, :mod:`~analysis.shell.conditions`, :mod:`~analysis.shell.declarations`,
:mod:`~analysis.shell.builtin`, :mod:`~analysis.shell.commands`, :mod:`~analysis.shell.interpreter` (helpers:
:mod:`~analysis.shell.integers`, :mod:`~analysis.shell.patterns`, :mod:`~analysis.shell.scan`). What is
evaluated, how far, and why: docs/security.md, "The shell evaluator".
"""

from analysis.shell.api import (
    MAX_BYTES,
    MAX_CANDIDATES,
    MAX_DEPTH,
    MAX_ITERATIONS,
    MAX_NESTING,
    MAX_PATTERN_VALUE,
    MAX_SECONDS,
    MAX_STEPS,
    MAX_VALUE,
    Assignment,
    AssignmentHow,
    Binding,
    Budget,
    Command,
    Environ,
    FileWrite,
    Redirect,
    Script,
    Unknown,
    UnknownKind,
    Variable,
    Where,
    Word,
    join_path,
    resolve_proc,
)
from analysis.shell.interpreter import evaluate

__all__ = [
    "MAX_BYTES",
    "MAX_CANDIDATES",
    "MAX_DEPTH",
    "MAX_ITERATIONS",
    "MAX_NESTING",
    "MAX_PATTERN_VALUE",
    "MAX_SECONDS",
    "MAX_STEPS",
    "MAX_VALUE",
    "Assignment",
    "AssignmentHow",
    "Binding",
    "Budget",
    "Command",
    "Environ",
    "FileWrite",
    "Redirect",
    "Script",
    "Unknown",
    "UnknownKind",
    "Variable",
    "Where",
    "Word",
    "evaluate",
    "join_path",
    "resolve_proc",
]
