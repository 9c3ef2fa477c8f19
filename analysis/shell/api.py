"""The evaluator's public surface: its bounds, and the records :func:`analysis.shell.evaluate` returns.

What each record means for a rule, and why the bounds are what they are: docs/security.md, "The shell
evaluator". This module imports nothing of ours.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, overload

MAX_BYTES = 1 << 20
"""The largest text evaluated (1 MiB); a larger one is an ``Unknown("too large")`` and nothing else."""
MAX_STEPS = 50_000
"""Evaluation steps (syntax nodes visited, words built, variable copies made) for one :func:`evaluate`."""
MAX_DEPTH = 48
"""Nesting of syntax (a subshell in a loop in a function...) within one text."""
MAX_NESTING = 8
"""Nested shells, ``eval``, ``source`` and function calls, one inside another."""
MAX_VALUE = 65_536
"""The longest value kept; a longer one (``A=$A$A`` repeated) becomes unknown."""
MAX_SECONDS = 5.0
"""Wall time for one :func:`evaluate`, a safety net: the step bound stops realistic hostile input first."""
MAX_CANDIDATES = 8
"""Alternative values kept for one variable set on several paths; more make its value unknown."""
MAX_ITERATIONS = 16
"""A ``for`` loop over a known list runs its body once per item up to this many items."""
MAX_PATTERN_VALUE = 1024
"""Pattern removal and replacement with a glob run on values up to this long (else unknown)."""


UnknownKind = Literal[
    "parse error",
    "too large",
    "too deep",
    "timeout",
    "eval",
    "source",
    "read",
    "command substitution",
    "variable",
    "arithmetic",
    "expansion",
    "dynamic command",
    "dynamic name",
    "shell input",
    "nameref",
    "array",
    "alias",
    "trap",
    "file",
]
"""What could not be evaluated: the construct's family (see :class:`Unknown`)."""


@dataclass(frozen=True, order=True)
class Where:
    """Where a construct is: its line in the outermost text (1-based; a Dockerfile's line for a ``RUN``)
    and the nested bodies it is in, outermost first (``bash -c at line 3``, ``function f``)."""

    line: int
    within: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"line {self.line}" + "".join(f" (in {w})" for w in reversed(self.within))


@dataclass(frozen=True)
class Word:
    """One word of a command after expansion (a source word may give several, or none)."""

    raw: str
    """The source text of the word as written."""
    value: str | None
    """The word after quote removal and expansion; None when any part of it is only known at run time."""
    line: int
    variables: tuple[str, ...] = ()
    """The variable names it references (``$A``, ``${B:-x}``), in order, without repeats."""
    unknown: tuple[str, ...] = ()
    """When :attr:`value` is None: the constructs that made it so, as written (``$FLAG``, ``$(cat f)``)."""
    shown: str = ""
    """The value with each unknown part left as written (``$HOME/.nccl.conf``): for messages and suffixes."""

    @property
    def known(self) -> bool:
        return self.value is not None

    def __str__(self) -> str:
        return self.value if self.value is not None else self.shown or self.raw


@dataclass(frozen=True)
class Variable:
    """A variable's binding: its value (None when only known at run time) and where it came from."""

    name: str
    value: str | None
    origin: str
    """The seed's label (``environment_variables``, ``platform``) or the evaluated text's label."""
    where: Where | None = None
    """Where the text set it; None for a seed."""
    exported: bool = True
    maybe: bool = False
    """Set on some of the paths that reach this point only (a branch whose condition is not known)."""
    attributes: frozenset[str] = frozenset()
    """``declare`` attributes that change later assignments: ``r`` readonly, ``i`` integer, ``l``/``u``
    case, ``n`` nameref (the value is the name referred to), ``a`` array."""


Binding = tuple[Variable | None, ...]
"""What a name may hold: one :class:`Variable` when known, several when set on some paths only; a None
candidate is "unset". A name with no binding was never set by anything known (inherited, unknown)."""


class Environ(Mapping[str, Binding]):
    """The variables a process receives (or the shell holds): name -> :data:`Binding`."""

    def __init__(self, bindings: Mapping[str, Binding], *, cleared: bool = False) -> None:
        self._bindings = dict(bindings)
        self.cleared = cleared
        """The process starts from an empty environment (``env -i``, ``sudo``'s ``env_reset``,
        ``exec -c``): a name without a binding is absent, not inherited."""

    def __getitem__(self, name: str) -> Binding:
        return self._bindings[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._bindings))

    def __len__(self) -> int:
        return len(self._bindings)

    def value(self, name: str) -> str | None:
        """The name's value when it is known on every path; None otherwise (unset included)."""
        binding = self._bindings.get(name, ())
        values = {c.value if c is not None else None for c in binding}
        if len(values) == 1 and binding and binding[0] is not None:
            return binding[0].value
        return None

    def __repr__(self) -> str:
        return f"Environ({self._bindings!r}, cleared={self.cleared})"


AssignmentHow = Literal[
    "assign", "append", "export", "declare", "local", "readonly", "prefix", "env", "unset", "printf",
    "read", "default", "for", "arithmetic",
]


@dataclass(frozen=True)
class Assignment:
    """A change to a variable, in the order the shell makes it."""

    name: str
    value: str | None
    """The new value; None when only known at run time, or for ``unset``."""
    raw: str
    """The construct as written (``export NCCL_IB_DISABLE="1"``)."""
    where: Where
    how: AssignmentHow
    exported: bool
    """The variable is in the environment of the commands that follow."""
    maybe: bool = False
    """Made on some paths only."""
    unknown: tuple[str, ...] = ()
    """When :attr:`value` is None: the constructs that made it so (``$FLAG``, ``$(cat f)``, ``read``)."""


@dataclass(frozen=True)
class Unknown:
    """Something the evaluation could not follow. ``names``: the variables it may set (None: any, or
    the commands that run, e.g. ``eval``, ``source``, a parse error)."""

    kind: UnknownKind
    construct: str
    """The construct as written, shortened to one line."""
    where: Where
    names: tuple[str, ...] | None = None

    def __str__(self) -> str:
        return f"cannot tell: `{self.construct}` at {self.where}"


@dataclass(frozen=True)
class Redirect:
    """A redirection of a command: ``op`` as written (``>``, ``>>``, ``<``, ``<<``, ``<<-``, ``<<<``,
    ``&>``, ``>&``...), the file descriptor it names, and its target word or here-document body."""

    op: str
    fd: int | None
    target: Word | None = None
    body: Word | None = None
    """A here-document's or here-string's text (expanded unless the delimiter is quoted)."""


@dataclass(frozen=True)
class FileWrite:
    """A file a command writes: by redirection, ``tee`` or a copy (``cp``/``mv``/``install``/``ln``)."""

    path: Word
    content: str | None
    """What is written, when known (None for a copy, or output that is only known at run time)."""
    append: bool
    where: Where
    maybe: bool = False
    source: Word | None = None
    """For a copy: the file copied."""
    raw: str = ""
    commands_before: int = 0
    """How many of :attr:`Script.commands` started before the write (the writing command included): the
    write is seen by the commands from that index on."""
    cwd: str | None = "."
    """The writer's working directory (as :attr:`Command.cwd`): a relative :attr:`path` is from there
    (``(cd /tmp && echo X=1 > .nccl.conf)`` writes ``/tmp/.nccl.conf``); None when not known."""

    def location(self) -> str | None:
        """The file written, normalised: absolute, or relative to where the text starts; None when its
        name or (for a relative name) the writer's directory is not known. ``/proc/self/cwd/x`` is ``x``
        in the writer's directory (proc(5): ``/proc/self`` is the process reading it, ``cwd`` a link to
        its working directory)."""
        return resolve_proc(self.path.value, self.cwd)


@dataclass(frozen=True)
class Command:
    """One simple command, as the shell runs it."""

    words: tuple[Word, ...]
    """Every word after expansion, wrappers included (``sudo -E env A=1 python x.py``)."""
    argv: tuple[Word, ...]
    """The program and its arguments once wrappers are taken off (``python x.py``)."""
    wrappers: tuple[str, ...]
    """The wrappers taken off, in order (``sudo``, ``env``)."""
    prefix: tuple[Assignment, ...]
    """``VAR=v cmd`` and ``env``/``sudo`` ``VAR=v`` assignments: this command's environment only."""
    environ: Environ
    """The variables the process receives (exported ones, with its prefix assignments)."""
    cwd: str | None
    """The working directory relative to where the text starts (``.``, ``src``, ``../x``), absolute when
    ``cd`` named one, None when not known."""
    where: Where
    maybe: bool
    """Runs on some paths only."""
    kind: Literal["builtin", "function", "external"]
    redirects: tuple[Redirect, ...] = ()
    raw: str = ""

    @property
    def program(self) -> str | None:
        """The program's name as written after expansion (``python``, ``/usr/bin/env``); None if unknown."""
        return self.argv[0].value if self.argv else None


@dataclass(frozen=True)
class Script:
    """What evaluating a text found."""

    commands: tuple[Command, ...]
    assignments: tuple[Assignment, ...]
    unknowns: tuple[Unknown, ...]
    writes: tuple[FileWrite, ...]
    variables: Environ
    """Every variable at the end of the text (exported or not; :attr:`Variable.exported` says)."""
    cwd: str | None
    """The working directory at the end."""
    complete: bool
    """False when a bound stopped the evaluation (an Unknown says which)."""


class Budget:
    """Evaluation steps and wall time shared by several :func:`evaluate` calls (a Dockerfile's ``RUN``
    bodies): each call takes from it; once spent, every call stops at its start with ``too large``."""

    def __init__(self, steps: int = MAX_STEPS, seconds: float = MAX_SECONDS) -> None:
        self.steps = steps
        self.deadline = time.monotonic() + seconds


PROC_CWD = ("/proc/self/cwd", "/proc/thread-self/cwd")
"""proc(5): ``/proc/self`` (and ``/proc/thread-self``) name the process (thread) that opens the path, and
its ``cwd`` is a symbolic link to that process's working directory."""


def resolve_proc(path: str | None, cwd: str | None) -> str | None:
    """``path`` opened by a process in ``cwd``: :func:`join_path`, with ``/proc/self/cwd`` read as ``cwd``."""
    if path is None:
        return None
    for link in PROC_CWD:
        if path == link or path.startswith(link + "/"):
            rest = path[len(link):].lstrip("/")
            return join_path(cwd, rest or ".")
    return join_path(cwd, path)


@overload
def join_path(cwd: str, target: str) -> str: ...
@overload
def join_path(cwd: str | None, target: str | None) -> str | None: ...
def join_path(cwd: str | None, target: str | None) -> str | None:
    """``target`` seen from directory ``cwd`` as ``cd`` would reach it (normalised; absolute stays
    absolute); None when either is not known (a relative target from an unknown directory)."""
    if target is None:
        return None
    if target.startswith("/"):
        return posixpath.normpath(target)
    if cwd is None:
        return None
    return posixpath.normpath(posixpath.join(cwd, target))
