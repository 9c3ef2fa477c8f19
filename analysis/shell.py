"""Shell commands read with a real parser and evaluated as bash would, as far as that can be known before a run.

A run's ``command``, a script's text, a ``bash -c`` body or a Dockerfile ``RUN`` is parsed with
tree-sitter and its bash grammar (both MIT licensed; ``bashlex`` is not used because it is GPLv3 and
this project is Apache-2.0), then walked the way bash runs it: a variable store seeded with what the
process starts with, each simple command in order with its words expanded (quotes removed,
``$VAR``/``${VAR:-x}``/``$'..'``/``$((..))`` evaluated), the environment it receives, the directory it
runs in, and what it writes to files.

:func:`evaluate` is the one entry point; it returns a :class:`Script`:

* :attr:`Script.commands`: every simple command in the order it runs (:class:`Command`): its words as
  written and after wrappers (``env``, ``exec``, ``nohup``, ``time``, ``sudo``, ``timeout``...), its
  prefix assignments, its environment (:class:`Environ`), its working directory, where it is.
* :attr:`Script.assignments`: every change to a variable (:class:`Assignment`), including ``export``,
  ``declare -x``, ``A+=x``, ``printf -v``, ``read``, ``unset``, ``${A:=x}``.
* :attr:`Script.unknowns`: everything that could not be evaluated (:class:`Unknown`): ``eval`` of an
  unknown string, ``source``, ``read``, a command substitution or a variable whose value matters, a
  here-document or pipe feeding a shell, a parse error, and the bounds below. Nothing is dropped
  silently: a rule can always say "cannot tell: `eval` at line 3".
* :attr:`Script.writes`: files the commands write (``echo A=1 >> /etc/nccl.conf``, ``cat <<EOF > f``,
  ``tee``, ``cp``) with their content where it is known.

What is evaluated, and how far:

* assignments: ``A=1``, ``A+=x``, ``export``/``declare``/``typeset``/``local``/``readonly`` with their
  flags (``-x``, ``+x``, ``-n`` for export and namerefs, ``-i``, ``-l``, ``-u``, ``-r``), ``export A``,
  ``unset``, ``printf -v``, ``read`` (unknown value), ``set -a``; prefix assignments (``A=1 cmd``) reach
  that command only; array elements other than ``[0]`` make the value unknown.
* expansions: single and double quotes, ``$'..'``, ``$".."``, backslashes, line continuations,
  comments, ``$VAR``, ``${VAR}``, every ``${VAR<op>word}`` form of bash except pattern-based case
  changes, ``$((..))``, field splitting of unquoted results, leading ``~``; a command substitution whose
  output is static (``$(echo 1)``, ``$(printf %s 1)``, ``$(echo MQ== | base64 -d)``) is evaluated, any
  other is unknown. Globs are left as written (the files are not known).
* control flow: ``&&``, ``||``, ``;``, ``&``, pipelines (each side in a subshell), subshells, ``{ }``,
  functions (with ``local``), ``if``/``elif``/``else``, ``case``, ``for``, ``while``/``until``,
  ``exit``/``return``/``exec``. A condition that can be decided statically (``true``, ``false``, ``[ -n
  literal ]``...) is; otherwise its branches are "maybe": a variable set there keeps its previous
  value as an alternative (:attr:`Variable.maybe`). A command whose success is not known is assumed to
  succeed in ``a && b`` (the path on which the run goes on), while ``a || b`` makes ``b`` maybe.
* nested shells: ``bash -c``/``sh -c`` bodies (with ``$0``, ``$1``...), ``eval`` of a known string,
  a here-document or here-string fed to a shell, ``source``/``.`` when the caller supplies a reader.
  A child shell receives only exported variables.
* environments: ``env -i``/``-u``/``-C``/``NAME=value``, ``sudo`` (its default ``env_reset`` clears the
  environment unless ``-E``/``--preserve-env``), ``exec -c``.
* working directory: ``cd``/``pushd`` relative to the directory the text starts in (``cwd``), so an
  entry script can be checked against the code folder.

Bounded (hostile input never raises or hangs): at most :data:`MAX_BYTES` of text, :data:`MAX_STEPS`
evaluation steps (syntax nodes visited, words built, copies made), :data:`MAX_DEPTH` levels of syntax
nesting, :data:`MAX_NESTING` levels of nested shells/functions/``eval``, :data:`MAX_VALUE` characters
in a value, and :data:`MAX_SECONDS` of wall time as a last resort. Past a bound the evaluation stops
and says so with an :class:`Unknown` of kind ``too large``/``too deep``/``timeout``; what was found
before it stays.

This module imports nothing of ours but :mod:`kernel.regex` (its patterns run in linear time).
"""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import posixpath
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, overload

import tree_sitter
import tree_sitter_bash

from kernel import regex as linear

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


_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_ASSIGNMENT_WORD = linear.compile(r"(?s)([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?=)(.*)")
# The two byte scanners below stay on Python's re: each runs over the whole text before it is parsed; both are
# linear by construction (a bounded run that cannot hold the next match's start; a fixed-width alternation),
# and RE2's binding costs 8 to 11 times as much per match (1 MiB of `${{x}}`: 0.27 s against 0.024 s; of `$[`:
# 0.40 s against 0.05 s).
_PLACEHOLDER = re.compile(rb"\$\{\{[^{}\n]{1,200}\}\}")
_EXPANSION_EDGE = re.compile(rb"\$[({\[]|[)}\]]")
"""Where a ``$(``, ``${`` or ``$[`` expansion opens, and any closing bracket: :func:`_expansion_depth`."""
_NAME_BYTE = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else ord("_") for c in range(256))
"""Each byte of a placeholder's expression as a byte of a variable name: itself, or ``_``."""


def _is_name(text: str) -> bool:
    """A shell variable name: ``[A-Za-z_][A-Za-z0-9_]*``."""
    return text.isascii() and text.isidentifier()


def _expansion_depth(src: bytes) -> int:
    """How deep ``$(``, ``${`` and ``$[`` expansions nest in ``src`` at most, counted without quoting rules
    (an upper bound on what bash would nest). Read before parsing, in one linear pass: tree-sitter's error
    recovery takes seconds on thousands of unclosed expansions (``$[[$[[...``), and no command nests deep."""
    depth = deepest = 0
    for edge in _EXPANSION_EDGE.finditer(src):
        if edge.group(0)[:1] == b"$":
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest
_ARITH_ASSIGNMENT = linear.compile(rf"(?s)[{linear.SPACE}]*([A-Za-z_][A-Za-z0-9_]*)[{linear.SPACE}]*(=|\+=|-=)"
                                   rf"[{linear.SPACE}]*(.*)")
_INT = linear.compile(rf"[{linear.SPACE}]*([+-]?)(0[xX][0-9a-fA-F]+|[0-9]+#[0-9A-Za-z@_]+|0[0-7]*|[1-9][0-9]*)"
                      rf"[{linear.SPACE}]*")
_INTMAX = 1 << 63

_EXPANSIONS = frozenset({"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
                         "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "ash", "busybox"})
_TESTS = frozenset({"test", "[", "[[", "grep", "egrep", "fgrep", "which", "type", "hash", "cmp", "diff", "pgrep"})
_DECLARATIONS = frozenset({"export", "declare", "typeset", "local", "readonly"})


def _short(text: str, limit: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


class Budget:
    """Evaluation steps and wall time shared by several :func:`evaluate` calls (a Dockerfile's ``RUN``
    bodies): each call takes from it; once spent, every call stops at its start with ``too large``."""

    def __init__(self, steps: int = MAX_STEPS, seconds: float = MAX_SECONDS) -> None:
        self.steps = steps
        self.deadline = time.monotonic() + seconds


class _Stop(Exception):
    def __init__(self, kind: UnknownKind, message: str) -> None:
        super().__init__(message)
        self.kind: UnknownKind = kind
        self.message = message


class _Flow(Exception):
    def __init__(self, kind: Literal["exit", "return", "break", "continue"]) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass
class _Seg:
    """A piece of a word during expansion."""

    text: str | None
    raw: str
    quoted: bool
    split: bool = False
    """An unquoted expansion's result: subject to field splitting."""
    causes: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Prefix:
    """An assignment word before a command (``A=1 cmd``), or standing alone (``A=1``)."""

    name: str
    value: Word
    append: bool
    raw: str
    array: bool = False
    subscript: bool = False


@dataclass
class _Function:
    body: tree_sitter.Node
    text: _Text
    name: str


@dataclass
class _Text:
    """One parsed text: its bytes (placeholders replaced by same-length names), the original bytes for
    raw slices, the line its first line is in the outermost text, and what it is nested in."""

    src: bytes
    original: bytes
    first_line: int
    within: tuple[str, ...]


@dataclass
class _Frame:
    kind: Literal["top", "branch", "subshell", "function", "child"]
    parent: _Frame | None
    vars: dict[str, Binding] = field(default_factory=dict)
    functions: dict[str, _Function] = field(default_factory=dict)
    locals: set[str] = field(default_factory=set)
    cwd: str | None = "."
    allexport: bool = False
    positional: tuple[str | None, ...] | None = None
    """$1...; None when not known (the outermost text's arguments)."""
    zero: str | None = None


@dataclass
class _Result:
    status: Literal["true", "false", "unknown", "likely"]
    output: str | None = ""


_OK = _Result("true", "")


class _Shell:
    def __init__(self, *, label: str, platform: frozenset[str], read_file: Callable[[str], str | None] | None,
                 placeholders: Mapping[str, str] | None, budget: Budget) -> None:
        self.label = label
        self.platform = platform
        self.read_file = read_file
        self.placeholders = placeholders
        self.budget = budget
        self.deadline = budget.deadline
        self.limit = budget.steps
        self.steps = 0
        self.depth = 0
        self.nesting = 0
        self.maybe = False
        self.commands: list[Command] = []
        self.assignments: list[Assignment] = []
        self.unknowns: list[Unknown] = []
        self.writes: list[FileWrite] = []
        self.frame = _Frame("top", None)
        self.text = _Text(b"", b"", 1, ())
        self.placeholder_names: dict[str, str] = {}
        self.version = 0
        self._environ: tuple[int, Environ] | None = None
        self.marked: set[str] = set()
        """Names exported before they have a value (``export A``): a later assignment is exported."""
        self.parser = tree_sitter.Parser(_LANGUAGE)

    # ---- bounds -------------------------------------------------------------------------------------

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.limit:
            raise _Stop("too large", f"more than {self.limit:,} evaluation steps")
        if self.steps & 1023 == 0 and time.monotonic() > self.deadline:
            raise _Stop("timeout", f"more than {MAX_SECONDS:g} s to evaluate")

    # ---- positions ----------------------------------------------------------------------------------

    def raw(self, node: tree_sitter.Node) -> str:
        return self.text.original[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def src(self, start: int, end: int) -> str:
        return self.text.src[start:end].decode("utf-8", "replace")

    def line(self, node: tree_sitter.Node) -> int:
        return self.text.first_line + node.start_point[0]

    def where(self, node: tree_sitter.Node) -> Where:
        return Where(self.line(node), self.text.within)

    def unknown(self, kind: UnknownKind, construct: str, where: Where, names: tuple[str, ...] | None = None) -> None:
        self.unknowns.append(Unknown(kind, _short(construct), where, names))

    # ---- parsing ------------------------------------------------------------------------------------

    def parse(self, text: str, *, first_line: int, within: tuple[str, ...]) -> tuple[_Text, tree_sitter.Node]:
        original = text.encode("utf-8", "surrogatepass")
        if len(original) > MAX_BYTES:
            raise _Stop("too large", f"{len(original):,} bytes (at most {MAX_BYTES:,} are read)")
        src = original
        if self.placeholders is not None:
            src = _PLACEHOLDER.sub(self._placeholder, original)
        if _expansion_depth(src) > MAX_DEPTH:
            raise _Stop("too deep", f"expansions nested more than {MAX_DEPTH} levels deep")
        deadline = self.deadline
        view = memoryview(src)

        def read(offset: int, _point: tuple[int, int]) -> memoryview:
            # A view, not a copy: tree-sitter keeps every chunk it was given until the parse ends (a copy per
            # call took a gigabyte on one 64 KiB command).
            return view[offset:offset + 65536]

        try:
            tree = self.parser.parse(read, progress_callback=lambda *_: time.monotonic() > deadline)
        except ValueError:  # tree-sitter 0.25+ raises "Parsing failed" when the callback cancels the parse
            tree = None
        if tree is None:
            raise _Stop("timeout", f"more than {MAX_SECONDS:g} s to parse")
        self.tick(max(1, len(src) // 256))
        return _Text(src, original, first_line, within), tree.root_node

    def _placeholder(self, match: re.Match[bytes]) -> bytes:
        body = match.group(0)[3:-2]
        name = "__" + body.translate(_NAME_BYTE).decode("ascii")
        self.placeholder_names[name] = body.decode("utf-8", "replace").strip()
        return b"${" + name.encode() + b"}"

    # ---- frames and variables -----------------------------------------------------------------------

    def binding(self, name: str) -> Binding | None:
        frame: _Frame | None = self.frame
        while frame is not None:
            found = frame.vars.get(name)
            if found is not None:
                return found
            if frame.kind == "child":
                return None
            frame = frame.parent
        return None

    def resolve(self, name: str) -> str:
        """The name a nameref chain leads to (at most 8 links)."""
        for _ in range(8):
            binding = self.binding(name)
            if not binding or len(binding) != 1 or binding[0] is None or "n" not in binding[0].attributes:
                return name
            target = binding[0].value
            if target is None or not _is_name(target):
                return name
            name = target
        return name

    def set_binding(self, name: str, binding: Binding) -> None:
        """Bind in the current frame; a branch's frame is merged as "maybe" when it ends, a function's
        into its caller (its locals dropped), a subshell's or child shell's discarded."""
        self.version += 1
        self.frame.vars[name] = binding

    def function_frame(self) -> _Frame | None:
        frame: _Frame | None = self.frame
        while frame is not None and frame.kind not in ("child", "top"):
            if frame.kind == "function":
                return frame
            frame = frame.parent
        return None

    def push(self, kind: Literal["branch", "subshell", "function", "child"]) -> _Frame:
        parent = self.frame
        frame = _Frame(kind, parent, cwd=parent.cwd, allexport=parent.allexport and kind != "child",
                       positional=parent.positional, zero=parent.zero)
        self.frame = frame
        self.version += 1
        return frame

    def pop(self, frame: _Frame, *, merge: Literal["discard", "maybe", "keep"]) -> None:
        parent = frame.parent
        assert parent is not None
        self.frame = parent
        self.version += 1
        if merge == "discard":
            return
        self.tick(len(frame.vars) + len(frame.functions))
        for name, new in frame.vars.items():
            if name in frame.locals:
                continue
            if merge == "keep":
                self.set_binding(name, new)
            else:
                self.set_binding(name, _merge(new, self.binding(name)))
        parent.functions.update(frame.functions)
        if merge == "keep":
            parent.cwd = frame.cwd
            parent.allexport = frame.allexport
        elif frame.cwd != parent.cwd:
            parent.cwd = None

    def visible(self) -> dict[str, Binding]:
        """Every variable the current frame sees, innermost binding first."""
        out: dict[str, Binding] = {}
        frame: _Frame | None = self.frame
        while frame is not None:
            for name, b in frame.vars.items():
                out.setdefault(name, b)
            if frame.kind == "child":
                break
            frame = frame.parent
        self.tick(1 + len(out) // 16)
        return out

    def environ(self) -> Environ:
        if self._environ is not None and self._environ[0] == self.version:
            return self._environ[1]
        exported = {}
        for name, b in self.visible().items():
            kept = tuple(v if v is None or (v.exported and "a" not in v.attributes) else None for v in b)
            if any(v is not None for v in kept):
                exported[name] = kept
        env = Environ(exported)
        self._environ = (self.version, env)
        return env

    def function(self, name: str) -> _Function | None:
        frame: _Frame | None = self.frame
        while frame is not None:
            if name in frame.functions:
                return frame.functions[name]
            if frame.kind == "child":
                return None
            frame = frame.parent
        return None

    # ---- assigning ----------------------------------------------------------------------------------

    def assign(self, name: str, value: str | None, *, raw: str, where: Where, how: AssignmentHow,
               export: bool | None = None, attributes: str = "", remove: str = "", append: bool = False,
               unknown: tuple[str, ...] = (), local: bool = False) -> None:
        """Assign as bash does: through namerefs, honouring readonly, integer and case attributes."""
        if "n" not in attributes:
            name = self.resolve(name)
        if local:
            owner = self.function_frame()
            if owner is None:
                return  # bash: "local: can only be used in a function"
            owner.locals.add(name)
        old = self.binding(name)
        current = old[0] if old and len(old) == 1 else None
        if old and any(v is not None and "r" in v.attributes for v in old) and how != "unset":
            return  # bash refuses: "readonly variable"
        attrs = set(current.attributes if current else ())
        if len(old or ()) > 1:
            for v in old or ():
                attrs |= set(v.attributes) if v else set()
        attrs |= set(attributes)
        attrs -= set(remove)
        if value is not None and append and old is not None:
            previous = _single_value(old)
            if "i" in attrs:
                value = None if previous is None else _arith_text(f"{previous}+({value})")
            else:
                value = None if previous is None else previous + value
        elif value is not None and append and old is None and not self.knows(name):
            value, unknown = None, (*unknown, f"${name}")
        elif "i" in attrs and value is not None:
            value = _arith_text(value)
            if value is None:
                unknown = (*unknown, raw)
        if value is not None:
            if "l" in attrs:
                value = value.lower()
            elif "u" in attrs:
                value = value.upper()
            if len(value) > MAX_VALUE:
                value, unknown = None, (*unknown, f"a value longer than {MAX_VALUE:,} characters")
            else:
                self.tick(1 + len(value) // 1024)
        if export is None:
            export = self.frame.allexport or name in self.marked or any(
                v is not None and v.exported for v in old or ())
        variable = Variable(name, value, self.label, where, exported=export, maybe=self.maybe,
                            attributes=frozenset(attrs))
        self.set_binding(name, (variable,))
        self.assignments.append(Assignment(name, value, _short(raw), where, how, export, self.maybe, unknown))
        if value is None and how != "read":
            self.unknown(_kind(unknown), raw, where, (name,))

    def knows(self, name: str) -> bool:
        """Whether a binding for the name exists (set, seeded or unset), as opposed to inherited."""
        return self.binding(name) is not None

    def unset(self, name: str, *, raw: str, where: Where) -> None:
        name = self.resolve(name)
        old = self.binding(name)
        if old and any(v is not None and "r" in v.attributes for v in old):
            return
        self.set_binding(name, (None,))
        self.assignments.append(Assignment(name, None, _short(raw), where, "unset", False, self.maybe))

    def set_export(self, name: str, exported: bool, *, raw: str, where: Where, how: AssignmentHow) -> None:
        """``export A`` / ``export -n A`` / ``declare -x A`` without a value."""
        name = self.resolve(name)
        old = self.binding(name)
        if old is None or all(v is None for v in old):
            if exported:  # exporting a name without a value marks it: a later assignment is exported
                self.marked.add(name)
            else:
                self.marked.discard(name)
            return
        new = tuple(replace(v, exported=exported) if v is not None else None for v in old)
        self.set_binding(name, new)
        if len(new) == 1 and new[0] is not None:
            self.assignments.append(Assignment(name, new[0].value, _short(raw), where, how, exported, self.maybe))

    # ---- running ------------------------------------------------------------------------------------

    def run_text(self, text: str, *, first_line: int, within: tuple[str, ...]) -> _Result:
        if self.nesting >= MAX_NESTING:
            raise _Stop("too deep", f"shells nested more than {MAX_NESTING} deep")
        saved_text = self.text
        parsed, root = self.parse(text, first_line=first_line, within=within)
        self.text = parsed
        self.nesting += 1
        try:
            return self.block(root)
        finally:
            self.nesting -= 1
            self.text = saved_text

    def block(self, node: tree_sitter.Node, stdin: str | None = "") -> _Result:
        result = _OK
        outputs: list[str | None] = []
        for child in node.named_children:
            if child.type == "comment":
                continue
            result = self.statement(child, stdin)
            outputs.append(result.output)
        return _Result(result.status, _join(outputs))

    def statement(self, node: tree_sitter.Node, stdin: str | None = "") -> _Result:
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            return self._statement(node, stdin)
        finally:
            self.depth -= 1

    def _statement(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        kind = node.type
        if kind == "command":
            return self.simple(node, (), stdin)
        if kind in ("declaration_command", "unset_command"):
            return self.declaration_node(node)
        if kind in ("variable_assignment", "variable_assignments"):
            nodes = [node] if kind == "variable_assignment" else [c for c in node.named_children
                                                                  if c.type == "variable_assignment"]
            for child in nodes:
                self.assignment_node(child, how="assign")
            return _OK
        if kind == "list":
            return self.and_or(node, stdin)
        if kind == "pipeline":
            return self.pipeline(node, stdin)
        if kind == "redirected_statement":
            return self.redirected(node, stdin)
        if kind == "subshell":
            frame = self.push("subshell")
            try:
                return self.scoped(lambda: self.block(node, stdin), "exit")
            finally:
                self.pop(frame, merge="discard")
        if kind == "compound_statement":
            first = node.children[0].type if node.children else ""
            if first == "((":
                return self.arith_command(node)
            return self.block(node, stdin)
        if kind in ("program", "do_group"):
            return self.block(node, stdin)
        if kind == "if_statement":
            return self.if_statement(node, stdin)
        if kind == "for_statement":
            return self.for_statement(node, stdin)
        if kind in ("while_statement", "c_style_for_statement"):
            return self.loop(node, stdin)
        if kind == "case_statement":
            return self.case_statement(node, stdin)
        if kind == "function_definition":
            name_node = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name_node is not None and body is not None:
                name = self.raw(name_node)
                self.frame.functions[name] = _Function(body, self.text, name)
            return _OK
        if kind == "negated_command":
            inner = node.named_children[-1] if node.named_children else None
            result = self.statement(inner, stdin) if inner is not None else _OK
            status = {"true": "false", "false": "true"}.get(result.status, "unknown")
            return _Result(status, result.output)  # type: ignore[arg-type]
        if kind == "test_command":
            return _Result(self.test_expression(node), "")
        if kind == "ERROR" or node.is_missing:
            self.unknown("parse error", self.raw(node), self.where(node))
            return _Result("unknown", None)
        if kind in _REDIRECTS or kind in ("heredoc_body", "heredoc_end"):
            return _OK
        self.unknown("parse error", self.raw(node), self.where(node))
        return _Result("unknown", None)

    def scoped(self, run: Callable[[], _Result], *catches: str) -> _Result:
        try:
            return run()
        except _Flow as flow:
            if flow.kind in catches:
                return _Result("unknown", None)
            raise

    def region(self, run: Callable[[], _Result]) -> _Result:
        """Run a part that may or may not run: its changes become "maybe"."""
        frame = self.push("branch")
        saved = self.maybe
        self.maybe = True
        try:
            result = run()
        except _Flow:
            result = _Result("unknown", None)
        finally:
            self.maybe = saved
            self.pop(frame, merge="maybe")
        return _Result("unknown" if result.status != "likely" else "likely", None)

    def flow(self, kind: Literal["exit", "return", "break", "continue"]) -> None:
        """exit/return/break/continue: followed when certain; on a maybe path the run goes on without it."""
        if not self.maybe:
            raise _Flow(kind)

    # ---- compound commands --------------------------------------------------------------------------

    def and_or(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        items: list[tuple[str, tree_sitter.Node]] = []
        current = node
        while current.type == "list" and current.child_count >= 3:  # left-recursive: walk down iteratively
            op = current.children[1].type
            items.append((op, current.children[2]))
            current = current.children[0]
            self.tick()
        items.append(("", current))
        items.reverse()
        result = _OK
        outputs: list[str | None] = []
        for op, child in items:
            runs = _runs_after(op, result.status)
            if runs == "no":
                continue
            if runs == "yes":
                result = self.statement(child, stdin)
            else:
                result = self.region(lambda child=child: self.statement(child, stdin))  # type: ignore[misc]
            outputs.append(result.output)
        return _Result(result.status, _join(outputs))

    def pipeline(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        parts = [c for c in node.named_children if c.type != "comment"]
        data: str | None = stdin
        result = _OK
        for part in parts:
            frame = self.push("subshell")
            try:
                result = self.scoped(lambda part=part, data=data: self.statement(part, data), "exit")  # type: ignore[misc]
            finally:
                self.pop(frame, merge="discard")
            data = result.output
        return result

    def redirected(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        body = node.child_by_field_name("body")
        redirect_nodes = [c for c in node.named_children if c.type in _REDIRECTS]
        redirect_nodes = [r for n in redirect_nodes for r in _flatten_redirects(n)]
        if body is not None and body.type == "command":
            return self.simple(body, tuple(redirect_nodes), stdin)
        redirects = tuple(self.redirect(r) for r in redirect_nodes)
        data = _stdin(redirects, stdin)
        result = self.statement(body, data) if body is not None else _OK
        return _Result(result.status, self.route_output(result.output, redirects, self.raw(node), self.where(node)))

    def if_statement(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        # children: if <condition...> then <body...> (elif_clause | else_clause)* fi
        clauses: list[tuple[list[tree_sitter.Node], list[tree_sitter.Node]]] = []
        conditions: list[tree_sitter.Node] = []
        body: list[tree_sitter.Node] = []
        state = "cond"
        otherwise: list[tree_sitter.Node] | None = None
        for child in node.children:
            t = child.type
            if t == "then":
                state = "body"
            elif t in ("if", "fi", ";", "&", "\n") or t == "comment":
                continue
            elif t == "elif_clause":
                clauses.append((conditions, body))
                conditions, body, state = [], [], "cond"
                inner_state = "cond"
                for sub in child.children:
                    if sub.type == "then":
                        inner_state = "body"
                    elif sub.is_named and sub.type != "comment":
                        (conditions if inner_state == "cond" else body).append(sub)
            elif t == "else_clause":
                otherwise = [c for c in child.named_children if c.type != "comment"]
            elif child.is_named:
                (conditions if state == "cond" else body).append(child)
        clauses.append((conditions, body))
        decided = False
        for conds, stmts in clauses:
            cond = self.sequence(conds, stdin)
            if cond.status == "true":
                self.sequence(stmts, stdin)
                decided = True
                break
            if cond.status == "false":
                continue
            self.region(lambda stmts=stmts: self.sequence(stmts, stdin))  # type: ignore[misc]
            if otherwise is not None:
                self.region(lambda rest=otherwise: self.sequence(rest, stdin))  # type: ignore[misc]
            return _Result("unknown", None)
        if not decided and otherwise is not None:
            self.sequence(otherwise, stdin)
        return _Result("unknown", None)

    def sequence(self, nodes: list[tree_sitter.Node], stdin: str | None) -> _Result:
        result = _OK
        for n in nodes:
            result = self.statement(n, stdin)
        return result

    def for_statement(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        keyword = node.children[0].type if node.children else "for"
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values = node.children_by_field_name("value")
        if variable is None or body is None:
            return _OK
        name = self.raw(variable)
        where = self.where(node)
        items: list[Word] | None = []
        if not values:
            items = None  # "$@": the positional parameters
        for v in values:
            words = self.words(v)
            if items is not None and all(w.known for w in words):
                items.extend(words)
            else:
                items = None
        if keyword == "for" and items is not None and len(items) <= MAX_ITERATIONS:
            for item in items:
                self.assign(name, item.value, raw=f"for {name} in ...", where=where, how="for")
                try:
                    self.block(body, stdin)
                except _Flow as flow:
                    if flow.kind == "break":
                        break
                    if flow.kind != "continue":
                        raise
            return _Result("likely", None)

        def once() -> _Result:
            self.assign(name, None, raw=f"{keyword} {name} in ...", where=where, how="for",
                        unknown=(f"{keyword} {name}",))
            return self.block(body, stdin)
        return self.region(once)

    def loop(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        body = node.child_by_field_name("body")
        until = bool(node.children) and node.children[0].type == "until"
        conditions = [c for c in node.children_by_field_name("condition") if c.is_named]
        if node.type == "c_style_for_statement":
            for c in node.named_children:
                if c is not body:
                    self.arith_node(c)
            if body is not None:
                self.region(lambda: self.block(body, stdin))
            return _Result("unknown", None)
        cond = self.sequence(conditions, stdin)
        status = cond.status
        if until:
            status = {"true": "false", "false": "true"}.get(status, status)  # type: ignore[assignment]
        if status == "false" or body is None:
            return _OK
        if status == "true":
            try:
                self.block(body, stdin)
            except _Flow as flow:
                if flow.kind not in ("break", "continue"):
                    raise
            return _Result("likely", None)
        self.region(lambda: self.block(body, stdin))
        return _Result("unknown", None)

    def case_statement(self, node: tree_sitter.Node, stdin: str | None) -> _Result:
        value_node = node.child_by_field_name("value")
        word = self.word(value_node) if value_node is not None else None
        certain = word is not None and word.value is not None
        for item in (c for c in node.named_children if c.type == "case_item"):
            patterns = item.children_by_field_name("value")
            body = [c for c in item.named_children if c not in patterns and c.type != "comment"]
            pats = [self.pattern(p) for p in patterns]
            matched = None
            if certain and word is not None and word.value is not None and all(p is not None for p in pats):
                matched = _any_match(word.value, [p for p in pats if p is not None])
            if matched is not None:
                if not matched:
                    continue
                self.sequence(body, stdin)
                if not self.raw(item).rstrip().endswith((";&", ";;&")):
                    return _Result("likely", None)
                continue
            certain = False  # from here on, which item runs is not known
            self.region(lambda body=body: self.sequence(body, stdin))  # type: ignore[misc]
        return _Result("unknown", None)

    def pattern(self, node: tree_sitter.Node) -> str | None:
        """A case pattern as an fnmatch pattern (quoted parts escaped); None when not known."""
        if node.type in ("word", "extglob_pattern", "number"):
            text = self.raw(node)
            return None if any(c in text for c in "$`@+!(") else _bracket_escapes(text)
        w = self.word(node)
        return None if w.value is None else "".join(f"[{c}]" if c in "*?[" else c for c in w.value)

    # ---- simple commands ----------------------------------------------------------------------------

    def simple(self, node: tree_sitter.Node, outer_redirects: tuple[tree_sitter.Node, ...],
               stdin: str | None) -> _Result:
        where = self.where(node)
        raw = self.raw(node)
        redirect_nodes = list(outer_redirects)
        parts: list[tree_sitter.Node] = []
        children = node.children
        for i, child in enumerate(children):
            field_name = node.field_name_for_child(i)
            if child.type in _REDIRECTS:
                redirect_nodes.extend(_flatten_redirects(child))
            elif field_name in ("name", "argument"):
                if child.type == "$" and i + 1 < len(children) and children[i + 1].start_byte == child.end_byte:
                    continue  # $"..." (a translated string): the string alone
                parts.append(child)
            elif child.type == "variable_assignment":
                parts.append(child)
        words: list[Word] = []
        prefix: list[_Prefix] = []
        for group in self.group(parts):
            if len(group) == 1 and group[0].type == "variable_assignment":
                if not words:
                    parsed = self.assignment_parts(group[0])
                    if parsed is not None:
                        prefix.append(parsed)
                    continue
            elif len(group) == 1:
                inner = group[0].named_children[0] if group[0].type == "command_name" and group[0].named_children \
                    else group[0]
                words.extend(self.words(inner))
                continue
            segs = self.joined(group)
            group_raw = self.src(group[0].start_byte, group[-1].end_byte)
            assignment = _as_assignment(segs) if not words else None
            if assignment is not None:
                name, append, value_segs = assignment
                prefix.append(_Prefix(name, _one_word(value_segs, group_raw, self.line(group[0])), append,
                                      group_raw, False))
            else:
                words.extend(_fields(segs, group_raw, self.line(group[0]), self.ifs_default()))
        redirects = tuple(self.redirect(r) for r in redirect_nodes)
        data = _stdin(redirects, stdin)
        if not words:  # assignments only: they stay in the shell
            for p in prefix:
                self.assign(p.name, p.value.value, raw=p.raw, where=where, how="append" if p.append else "assign",
                            attributes="a" if p.array else "", append=p.append, unknown=p.value.unknown)
            return _Result("true", self.route_output("", redirects, raw, where))
        # bash refuses `A[0]=1 cmd` ("not a valid identifier") and runs cmd
        result = self.run_words(words, [p for p in prefix if not p.subscript], redirects, data, where, raw)
        return _Result(result.status, self.route_output(result.output, redirects, raw, where))

    def group(self, nodes: list[tree_sitter.Node]) -> list[list[tree_sitter.Node]]:
        """Nodes that make one shell word: the parser splits a word at a line continuation
        (``NCCL_IB_\\<newline>DISABLE=1``) and sometimes after a name (``export A''B=1``); bash does not."""
        groups: list[list[tree_sitter.Node]] = []
        for n in nodes:
            if groups and not self.text.src[groups[-1][-1].end_byte:n.start_byte].replace(b"\\\n", b""):
                groups[-1].append(n)
            else:
                groups.append([n])
        return groups

    def joined(self, group: list[tree_sitter.Node]) -> list[_Seg]:
        """The segments of a word the parser split into several nodes."""
        segs: list[_Seg] = []
        for i, n in enumerate(group):
            if n.type == "command_name" and n.named_children:
                n = n.named_children[0]
            if n.type == "variable_assignment":
                name_node = n.child_by_field_name("name")
                value_node = n.child_by_field_name("value")
                head = self.src(n.start_byte, value_node.start_byte if value_node is not None else n.end_byte)
                segs.append(_literal(_unescape_word(head) if name_node is not None else head, quoted=False))
                if value_node is not None:
                    segs.extend(self.segments(value_node, quoted=False))
            elif n.type == "variable_name":
                segs.append(_literal(self.src(n.start_byte, n.end_byte), quoted=False))
            else:
                segs.extend(self.segments(n, quoted=False, first=i == 0))
        return segs

    def run_words(self, words: list[Word], prefix: list[_Prefix], redirects: tuple[Redirect, ...],
                  stdin: str | None, where: Where, raw: str) -> _Result:
        env_over: dict[str, Binding] = {}
        prefix_records: list[Assignment] = []
        for p in prefix:
            var, value = p.name, p.value
            full = value.value
            if p.append and full is not None:
                previous = _single_value(self.binding(var) or ())
                full = None if previous is None else previous + full
            env_over[var] = (Variable(var, full, self.label, where, exported=True, maybe=self.maybe),)
            prefix_records.append(Assignment(var, full, _short(p.raw), where, "prefix", True, self.maybe,
                                             value.unknown))
            if full is None:
                self.unknown(_kind(value.unknown), p.raw, where, (var,))
        argv, wrappers, cleared, unset_names, cwd, env_assign, program_unknown = self.unwrap(words, where)
        wrapper_over: dict[str, Binding] = {}
        for var, word in env_assign:
            wrapper_over[var] = (Variable(var, word.value, self.label, where, exported=True, maybe=self.maybe),)
            prefix_records.append(Assignment(var, word.value, _short(f"{var}={word.shown or word.raw}"), where,
                                             "env", True, self.maybe, word.unknown))
        base_env = self.environ()
        if cleared:  # the shell's prefix assignments went to the wrapper, which cleared them
            env_over = {}
        bindings: dict[str, Binding] = {} if cleared else dict(base_env.items())
        bindings.update(env_over)
        for var in unset_names:
            bindings.pop(var, None)
            if not cleared:
                bindings[var] = (None,)
        bindings.update(wrapper_over)
        self.tick(1 + len(env_over) + len(wrapper_over))
        environ = base_env if (not cleared and not env_over and not unset_names and not wrapper_over) \
            else Environ(bindings, cleared=cleared)
        program = argv[0].value if argv else None
        name = posixpath.basename(program) if program else None
        in_shell = all(w in ("command", "builtin", "time", "exec") for w in wrappers)
        func = self.function(program) if program and in_shell and "command" not in wrappers \
            and "builtin" not in wrappers else None
        kind: Literal["builtin", "function", "external"] = (
            "function" if func is not None else "builtin" if in_shell and name in _BUILTINS and name == program
            else "external")
        self.commands.append(Command(tuple(words), tuple(argv), tuple(wrappers), tuple(prefix_records), environ,
                                     self.frame.cwd if cwd is None else cwd, where, self.maybe, kind,
                                     redirects, _short(raw, 400)))
        self.tick()
        if program_unknown or not argv:
            if program_unknown:
                self.unknown("dynamic command", raw, where)
            return _Result("likely", None)
        assert program is not None and name is not None
        if func is not None:
            result = self.call(func, argv, env_over, where, stdin)
        elif kind == "builtin":
            result = self.builtin(name, argv, env_over, where, raw, stdin)
        elif name in _SHELLS:
            result = self.child_shell(argv, environ, where, raw, stdin)
        else:
            result = self.external(name, argv, where, raw, stdin)
        if "exec" in wrappers:
            self.flow("exit")  # exec replaces the shell: nothing after it runs
        return result

    def unwrap(self, words: list[Word], where: Where) -> tuple[
            list[Word], list[str], bool, list[str], str | None, list[tuple[str, Word]], bool]:
        """Take wrappers off: (argv, wrappers, cleared, unset names, cwd, env assignments, program unknown)."""
        argv = list(words)
        wrappers: list[str] = []
        cleared = False
        unset_names: list[str] = []
        cwd: str | None = None
        assigns: list[tuple[str, Word]] = []
        for _ in range(16):
            if not argv:
                break
            head = argv[0].value
            if head is None:
                return argv, wrappers, cleared, unset_names, cwd, assigns, True
            name = posixpath.basename(head)
            if name == "env":
                rest, env_cleared, unsets, chdir, env_assigns, split = _env_options(argv[1:])
                if split:
                    self.unknown("dynamic command", " ".join(str(w) for w in argv), where)
                if env_cleared:  # what the shell and earlier wrappers passed is gone
                    cleared = True
                    assigns.clear()
                    unset_names.clear()
                unset_names += unsets
                if chdir is not None:
                    cwd = join_path(self.frame.cwd if cwd is None else cwd, chdir.value)
                assigns += env_assigns
                if not rest:
                    argv = argv[:1]
                    wrappers.append(name)
                    break
                argv = rest
            elif name == "sudo":
                rest, keep, sudo_assigns = _sudo_options(argv[1:])
                if not keep:  # sudo's default env_reset
                    cleared = True
                    assigns.clear()
                    unset_names.clear()
                assigns += sudo_assigns
                if not rest:
                    break
                argv = rest
            elif name == "exec" and not wrappers and head == "exec":
                rest, clear = _exec_options(argv[1:])
                if clear:
                    cleared = True
                    assigns.clear()
                if not rest:
                    break
                argv = rest
            elif name in _WRAPPERS and (name == head or name not in _BUILTINS):
                rest = _skip_options(argv[1:], *_WRAPPERS[name])
                if name in ("command", "builtin") and any(w.value in ("-v", "-V") for w in argv[1:2]):
                    break  # command -v: looks the name up, runs nothing
                if not rest:
                    break
                argv = rest
            else:
                break
            wrappers.append(name)
        return argv, wrappers, cleared, unset_names, cwd, assigns, False

    def call(self, func: _Function, argv: list[Word], env_over: dict[str, Binding], where: Where,
             stdin: str | None) -> _Result:
        if self.nesting >= MAX_NESTING:
            raise _Stop("too deep", f"functions and shells nested more than {MAX_NESTING} deep")
        frame = self.push("function")
        frame.vars.update(env_over)
        frame.locals.update(env_over)
        frame.positional = tuple(w.value for w in argv[1:])
        saved_text = self.text
        self.text = _Text(func.text.src, func.text.original, func.text.first_line,
                          (*func.text.within, f"function {func.name}"))
        self.nesting += 1
        try:
            result = self.scoped(lambda: self.statement(func.body, stdin), "return")
        finally:
            self.nesting -= 1
            self.text = saved_text
            self.pop(frame, merge="keep")
        return result

    def child_shell(self, argv: list[Word], environ: Environ, where: Where, raw: str,
                    stdin: str | None) -> _Result:
        """``bash -c BODY [name args...]``, ``bash <<EOF``, ``bash script.sh``: a new shell process, which
        receives only the environment (exported variables)."""
        shell = posixpath.basename(argv[0].value or "sh")
        i = 1
        command_mode = False
        while i < len(argv):
            value = argv[i].value
            if value is None:
                self.unknown("dynamic command", raw, where)
                return _Result("likely", None)
            if value == "--" or value == "-":
                i += 1
                break
            if len(value) < 2 or value[0] not in "-+":
                break
            if value in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                i += 1
            elif not value.startswith("--") and "c" in value[1:]:
                command_mode = True
            i += 1
        operands = argv[i:]
        body: str | None
        if command_mode:
            if not operands:
                return _Result("false", "")
            body_word, args = operands[0], operands[1:]
            body = body_word.value
            label = f"{shell} -c at {where}"
            first_line = body_word.line
            if body is None:
                self.unknown(_kind(body_word.unknown), raw, where)
                return _Result("likely", None)
        elif operands:
            script, args = operands[0], operands[1:]
            label = f"{shell} {script}"
            first_line = 1
            path = join_path(self.frame.cwd, script.value)
            body = self.read_file(path) if self.read_file is not None and path is not None else None
            if body is None:
                return _Result("likely", None)  # a script file nobody gave us: a program like any other
            args = [script, *args]
        else:
            body, args = stdin, [argv[0]]
            label = f"{shell} reading its input at {where}"
            first_line = where.line
            if body is None:
                self.unknown("shell input", f"| {raw}", where)
                return _Result("likely", None)
        frame = self.push("child")
        frame.vars = dict(environ.items())
        frame.cwd = self.commands[-1].cwd if self.commands else frame.cwd
        frame.zero = args[0].value if args else argv[0].value
        frame.positional = tuple(w.value for w in args[1:])
        self.tick(len(frame.vars))
        text = body
        try:
            self.scoped(lambda: self.run_text(text, first_line=first_line, within=(*self.text.within, label)),
                        "exit", "return", "break", "continue")
        finally:
            self.pop(frame, merge="discard")
        return _Result("likely", None)

    def external(self, name: str, argv: list[Word], where: Where, raw: str, stdin: str | None) -> _Result:
        values = [w.value for w in argv[1:]]
        if name == "base64" and any(v in ("-d", "--decode", "-D") for v in values):
            return _Result("likely", _b64decode(stdin))
        if name == "cat" and all(v == "-" for v in values):
            return _Result("likely", stdin)
        if name == "tee":
            append = any(v in ("-a", "--append") for v in values)
            for w in argv[1:]:
                if w.value is None or not w.value.startswith("-"):
                    self.write(w, stdin, append=append, where=where, raw=raw)
            return _Result("likely", stdin)
        if name in ("cp", "mv", "install", "ln") and len(argv) >= 3:
            operands = [w for w in argv[1:] if w.value is None or not w.value.startswith("-")]
            if len(operands) >= 2:
                target = operands[-1]
                for source in operands[:-1]:
                    self.writes.append(FileWrite(target, None, False, where, self.maybe, source, _short(raw),
                                                 len(self.commands)))
        if name in _TESTS:
            return _Result("unknown", None)
        return _Result("likely", None)

    def write(self, path: Word, content: str | None, *, append: bool, where: Where, raw: str) -> None:
        self.writes.append(FileWrite(path, content, append, where, self.maybe, None, _short(raw), len(self.commands)))

    def route_output(self, output: str | None, redirects: tuple[Redirect, ...], raw: str, where: Where) -> str | None:
        """Apply stdout redirections: a file gets the output, the statement's own output is then empty."""
        for r in redirects:
            if r.target is None:
                continue
            fd = r.fd if r.fd is not None else (0 if r.op.startswith("<") else 1)
            if r.op in (">&", "&>", ">>&", "&>>") and r.target.value is not None and r.target.value.isdigit():
                if fd == 1:
                    output = ""  # to another descriptor (>&2): not the statement's output
                continue
            if r.op in (">", ">>", ">|", "&>", "&>>") and (fd == 1 or r.op.startswith("&")):
                if r.target.value not in ("/dev/null",):
                    self.write(r.target, output, append=">>" in r.op, where=where, raw=raw)
                output = ""
        return output

    def redirect(self, node: tree_sitter.Node) -> Redirect:
        self.tick()
        fd_node = node.child_by_field_name("descriptor")
        fd = int(self.raw(fd_node)) if fd_node is not None and self.raw(fd_node).isdigit() else None
        op = next((c.type for c in node.children if not c.is_named), "")
        if node.type == "heredoc_redirect":
            return Redirect(op, fd, None, self.heredoc(node))
        if node.type == "herestring_redirect":
            target = next((c for c in node.named_children), None)
            body = self.word(target) if target is not None else None
            if body is not None and body.value is not None:
                body = replace(body, value=body.value + "\n")
            return Redirect(op, fd, None, body)
        dest = node.child_by_field_name("destination")
        if dest is None:
            named = [c for c in node.named_children if c is not fd_node]
            dest = named[-1] if named else None
        return Redirect(op, fd, self.word(dest) if dest is not None else None)

    def heredoc(self, node: tree_sitter.Node) -> Word | None:
        start = next((c for c in node.named_children if c.type == "heredoc_start"), None)
        body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
        end = next((c for c in node.named_children if c.type == "heredoc_end"), None)
        if start is None:
            return None
        delimiter = self.raw(start)
        quoted = any(q in delimiter for q in "'\"\\")
        strip_tabs = any(c.type == "<<-" for c in node.children)
        if body is None:
            return Word("", "", self.line(node), shown="")
        begin = body.start_byte
        # the body starts on the line after the operator: take the source from there to the end marker
        line_start = self.text.src.rfind(b"\n", 0, begin) + 1
        finish = end.start_byte if end is not None else body.end_byte
        raw_text = self.text.src[line_start:finish].decode("utf-8", "replace")
        if strip_tabs:
            raw_text = "\n".join(line.lstrip("\t") for line in raw_text.split("\n"))
        if quoted:
            return Word(raw_text, raw_text, self.line(body), shown=raw_text)
        segs: list[_Seg] = []
        cursor = line_start
        for child in body.named_children:
            if child.type in _EXPANSIONS:
                if child.start_byte > cursor:
                    segs.append(_literal(_unescape_heredoc(self.src(cursor, child.start_byte)), quoted=True))
                segs.extend(self.segments(child, quoted=True))
                cursor = child.end_byte
        if finish > cursor:
            segs.append(_literal(_unescape_heredoc(self.src(cursor, finish)), quoted=True))
        if strip_tabs:
            segs = [replace(s, text="\n".join(x.lstrip("\t") for x in s.text.split("\n")))
                    if s.text is not None and not s.split else s for s in segs]
        return _one_word(segs, raw_text, self.line(body))

    # ---- builtins -----------------------------------------------------------------------------------

    def builtin(self, name: str, argv: list[Word], env_over: dict[str, Binding], where: Where, raw: str,
                stdin: str | None) -> _Result:
        args = argv[1:]
        values = [w.value for w in args]
        if name in (":", "true"):
            return _Result("true", "")
        if name == "false":
            return _Result("false", "")
        if name in ("test", "["):
            operands = values[:-1] if name == "[" and values and values[-1] == "]" else values
            return _Result(_test(operands), "")
        if name == "echo":
            return _Result("true", _echo(values))
        if name == "printf":
            return self.printf(args, where, raw)
        if name in _DECLARATIONS:
            self.declaration(name, [(w, None) for w in args], where, raw)
            return _Result("true", "")
        if name == "unset":
            self.unset_words(args, where, raw)
            return _Result("true", "")
        if name in ("cd", "pushd"):
            dirs = [w for w in args if w.value is None or not w.value.startswith("-") or w.value == "-"]
            target = dirs[0].value if dirs else None
            if not dirs or target == "-" or target is None:
                self.frame.cwd = None
            else:
                self.frame.cwd = join_path(self.frame.cwd, target)
            return _Result("likely", "")
        if name == "popd":
            self.frame.cwd = None
            return _Result("likely", "")
        if name in ("read", "mapfile", "readarray", "getopts"):
            names = _read_names(name, values)
            for n in names:
                self.assign(n, None, raw=raw, where=where, how="read", unknown=(name,))
            self.unknown("read", raw, where, tuple(names) if names else None)
            return _Result("unknown", "")
        if name == "eval":
            if any(v is None for v in values):
                self.unknown("eval", raw, where)
                return _Result("likely", None)
            text = " ".join(v for v in values if v is not None)
            return self.nested_here(text, env_over, where, f"eval at {where}")
        if name in ("source", "."):
            path = args[0].value if args else None
            sourced = None
            if path is not None and self.read_file is not None:
                sourced = self.read_file(join_path(self.frame.cwd, path) or path)
            if sourced is None:
                self.unknown("source", raw, where)
                return _Result("likely", None)
            return self.nested_here(sourced, env_over, where, f"{name} {path}", first_line=1)
        if name == "set":
            self.set_options(values)
            return _Result("true", "")
        if name == "shopt":
            if "-s" in values and "expand_aliases" in values:
                self.unknown("alias", raw, where)
            return _Result("true", "")
        if name == "alias" and any(v and "=" in v for v in values):
            return _Result("true", "")
        if name == "trap":
            if values and values[0] not in ("-", "", "-p", "-l") and len(values) > 1:
                self.unknown("trap", raw, where)
            return _Result("true", "")
        if name == "let":
            for w in args:
                self.arith_text(w, where, raw)
            return _Result("likely", "")
        if name in ("exit", "return", "break", "continue"):
            self.flow(name)  # type: ignore[arg-type]
            return _Result("unknown", "")
        if name == "exec" and len(argv) == 1:
            return _OK  # redirections only
        if name == "shift":
            positional = self.frame.positional
            if positional is not None:
                count = int(values[0]) if values and values[0] and values[0].isdigit() else 1
                self.frame.positional = positional[count:]
            return _Result("true", "")
        return _Result("likely", None)

    def nested_here(self, text: str, env_over: dict[str, Binding], where: Where, label: str,
                    first_line: int | None = None) -> _Result:
        """eval and source: run a text in the current shell (prefix assignments last for its duration)."""
        saved: dict[str, Binding | None] = {}
        for name, binding in env_over.items():
            saved[name] = self.frame.vars.get(name)
            self.frame.vars[name] = binding
        try:
            return self.scoped(lambda: self.run_text(text, first_line=first_line or where.line,
                                                     within=(*self.text.within, label)), "return")
        finally:
            for name, old in saved.items():
                if old is None:
                    self.frame.vars.pop(name, None)
                else:
                    self.frame.vars[name] = old
            self.version += 1

    def set_options(self, values: list[str | None]) -> None:
        i = 0
        while i < len(values):
            v = values[i]
            if v is None:
                i += 1
                continue
            if v == "--":
                self.frame.positional = tuple(values[i + 1:])
                return
            if v in ("-o", "+o") and i + 1 < len(values):
                if values[i + 1] == "allexport":
                    self.frame.allexport = v == "-o"
                i += 2
                continue
            if v[:1] in "-+" and "a" in v[1:]:
                self.frame.allexport = v[0] == "-"
            i += 1

    def printf(self, args: list[Word], where: Where, raw: str) -> _Result:
        target: str | None = None
        rest = list(args)
        while rest and rest[0].value is not None and rest[0].value.startswith("-") and rest[0].value != "-":
            flag = rest.pop(0).value
            if flag == "--":
                break
            if flag == "-v" and rest:
                name_word = rest.pop(0)
                if name_word.value is None or not _is_name(name_word.value.split("[")[0]):
                    self.unknown("dynamic name", raw, where)
                    return _Result("likely", None)
                target = name_word.value
            elif flag is not None and flag.startswith("-v") and len(flag) > 2:
                target = flag[2:]
        if not rest:
            return _Result("false", "")
        fmt = rest[0].value
        values = [w.value for w in rest[1:]]
        out = None if fmt is None or any(v is None for v in values) else _printf(fmt, [v or "" for v in values])
        if target is not None:
            unknown = tuple(u for w in rest for u in w.unknown) or ((raw,) if out is None else ())
            self.assign(target.split("[")[0], out, raw=raw, where=where, how="printf", unknown=unknown)
            return _Result("true", "")
        return _Result("true", out)

    def unset_words(self, args: list[Word], where: Where, raw: str) -> None:
        functions = False
        for w in args:
            if w.value is None:
                self.unknown("dynamic name", raw, where)
                continue
            if w.value.startswith("-"):
                functions = "f" in w.value
                continue
            if functions:
                self.frame.functions.pop(w.value, None)
                continue
            if _is_name(w.value):
                self.unset(w.value, raw=raw, where=where)

    def declaration_node(self, node: tree_sitter.Node) -> _Result:
        """``export``/``declare``/``local``/``readonly``/``typeset``/``unset`` as the parser gives them."""
        keyword = node.children[0].type if node.children else ""
        where = self.where(node)
        raw = self.raw(node)
        items: list[tuple[Word, tree_sitter.Node | None]] = []
        args = [c for c in node.children[1:] if c.is_named and c.type != "comment" and c.type not in _REDIRECTS]
        for group in self.group(args):
            child = group[0]
            if len(group) > 1:
                raw_group = self.src(group[0].start_byte, group[-1].end_byte)
                items.extend((w, None) for w in _fields(self.joined(group), raw_group, self.line(child),
                                                        self.ifs_default()))
            elif child.type == "variable_assignment":
                parts = self.assignment_parts(child)
                if parts is not None:
                    value = parts.value
                    op = "+=" if parts.append else "="
                    shown = f"{parts.name}{op}{value.shown}"
                    known = None if value.value is None else f"{parts.name}{op}{value.value}"
                    items.append((Word(self.raw(child), known, self.line(child), value.variables, value.unknown,
                                       shown), child))
            else:
                items.extend((w, None) for w in self.words(child))
        head = Word(keyword, keyword, where.line, shown=keyword)
        words = (head, *(w for w, _ in items))
        self.commands.append(Command(words, words, (), (), self.environ(), self.frame.cwd, where, self.maybe,
                                     "builtin", (), _short(raw, 400)))
        if keyword == "unset":
            self.unset_words([w for w, _ in items], where, raw)
        else:
            self.declaration(keyword, items, where, raw)
        return _Result("true", "")

    def declaration(self, keyword: str, items: list[tuple[Word, tree_sitter.Node | None]], where: Where,
                    raw: str) -> None:
        add = set("x" if keyword == "export" else "r" if keyword == "readonly" else "")
        remove: set[str] = set()
        options = True
        functions = False
        how: AssignmentHow = ("export" if keyword == "export" else "readonly" if keyword == "readonly"
                              else "local" if keyword == "local" else "declare")
        for word, node in items:
            value = word.value
            if node is None and options and value is not None and value[:1] in "-+" and len(value) > 1:
                if value == "--":
                    options = False
                    continue
                letters = set(value[1:])
                if keyword == "export":
                    letters = {"unexport" if c == "n" else c for c in letters}
                    if "unexport" in letters:
                        remove.add("x")
                        add.discard("x")
                    if "f" in letters:
                        functions = True
                elif value[0] == "-":
                    add |= letters
                    if "f" in letters or "F" in letters:
                        functions = True
                else:
                    remove |= letters
                continue
            options = False
            if functions:
                continue
            exported: bool | None = True if "x" in add else False if "x" in remove else None
            attrs = "".join(sorted(add & set("rilnua")))
            local = keyword == "local" or (keyword in ("declare", "typeset") and self.frame.kind == "function"
                                           and "g" not in add)
            if node is not None:
                self.assignment_node(node, how=how, export=exported, attributes=attrs, remove="".join(remove),
                                     local=local)
                continue
            if value is None:
                self.unknown("dynamic name", raw, where)
                continue
            m = _ASSIGNMENT_WORD.fullmatch(value)
            if m is None:
                if _is_name(value):
                    if local:
                        self.frame.locals.add(value)
                    if exported is not None:
                        self.set_export(value, exported, raw=raw, where=where, how=how)
                    elif attrs or remove:
                        self.set_attributes(value, attrs, "".join(remove))
                continue
            name, subscript, op, rhs = m.groups()
            if subscript and subscript not in ("[0]",):
                self.assign(name, None, raw=raw, where=where, how=how, unknown=(f"{name}{subscript}",))
                continue
            self.assign(name, rhs, raw=raw, where=where, how="append" if op == "+=" else how, export=exported,
                        attributes=attrs, remove="".join(remove), append=op == "+=", local=local)

    def set_attributes(self, name: str, attrs: str, remove: str) -> None:
        old = self.binding(name)
        if not old:
            return
        self.set_binding(name, tuple(
            replace(v, attributes=frozenset((set(v.attributes) | set(attrs)) - set(remove))) if v else None
            for v in old))

    def assignment_parts(self, node: tree_sitter.Node) -> _Prefix | None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return None
        append = any(c.type == "+=" for c in node.children)
        name = self.raw(name_node)
        raw = self.raw(node)
        array = value_node is not None and value_node.type == "array"
        subscript = name_node.type == "subscript"
        if subscript:
            inner = name_node.child_by_field_name("name")
            index = name_node.child_by_field_name("index")
            name = self.raw(inner) if inner is not None else name
            if index is None or self.raw(index) != "0":
                unknown = Word(raw, None, self.line(node), unknown=(self.raw(name_node),))
                return _Prefix(name, unknown, append, raw, True, True)
        if value_node is None:
            value = Word("", "", self.line(node), shown="")
        elif array:
            elements = [w for c in value_node.named_children for w in self.words(c)]
            first = elements[0] if elements else Word("", "", self.line(node))
            value = replace(first, raw=self.raw(value_node))
        else:
            value = self.word(value_node, assignment=True)
        return _Prefix(name, value, append, raw, array or subscript, subscript)

    def assignment_node(self, node: tree_sitter.Node, *, how: AssignmentHow, export: bool | None = None,
                        attributes: str = "", remove: str = "", local: bool = False) -> None:
        parts = self.assignment_parts(node)
        if parts is None:
            return
        if parts.array:
            attributes += "a"  # an array (A=(..), A[i]=..): bash never exports arrays
        self.assign(parts.name, parts.value.value, raw=self.raw(node), where=self.where(node),
                    how="append" if parts.append and how == "assign" else how, export=export, attributes=attributes,
                    remove=remove, append=parts.append, unknown=parts.value.unknown, local=local)

    # ---- arithmetic ---------------------------------------------------------------------------------

    def arith_command(self, node: tree_sitter.Node) -> _Result:
        result: int | None = None
        for child in node.named_children:
            result = self.arith_node(child)
        if result is None:
            return _Result("unknown", "")
        return _Result("true" if result != 0 else "false", "")

    def arith_text(self, word: Word, where: Where, raw: str) -> int | None:
        if word.value is None:
            return None
        m = _ARITH_ASSIGNMENT.fullmatch(word.value)
        if m:
            name, op, expr = m.groups()
            value = _arith_text(expr)
            if op != "=" and value is not None:
                value = _arith_text(f"{_single_value(self.binding(name) or ()) or 0}{op[0]}({value})")
            self.assign(name, value, raw=raw, where=where, how="arithmetic", unknown=() if value else (raw,))
            return int(value) if value is not None else None
        value = _arith_text(word.value)
        return int(value) if value is not None else None

    def arith_node(self, node: tree_sitter.Node) -> int | None:
        """Evaluate an arithmetic expression node (64-bit, as bash); None when any part is not known."""
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            return self._arith_node(node)
        finally:
            self.depth -= 1

    def _arith_node(self, node: tree_sitter.Node) -> int | None:
        t = node.type
        if t == "number":
            parsed = _arith_text(self.raw(node))
            return int(parsed) if parsed is not None else None
        if t in ("variable_name", "word"):
            text = self.raw(node)
            if not _is_name(text):
                parsed = _arith_text(text)
                return int(parsed) if parsed is not None else None
            value = self.lookup(text)[0]
            if value is None:
                return None
            parsed = _arith_text(value or "0")
            return int(parsed) if parsed is not None else None
        if t in ("simple_expansion", "expansion", "string", "concatenation", "command_substitution"):
            w = self.word(node)
            parsed = _arith_text(w.value or "0") if w.value is not None else None
            return int(parsed) if parsed is not None else None
        if t == "parenthesized_expression":
            inner = node.named_children
            return self.arith_node(inner[0]) if inner else None
        if t == "unary_expression":
            op = node.children[0].type if node.children else ""
            operand = node.named_children[-1] if node.named_children else None
            number = self.arith_node(operand) if operand is not None else None
            if number is None:
                return None
            return _wrap({"-": -number, "+": number, "!": int(number == 0), "~": ~number}.get(op, number))
        if t in ("postfix_expression", "prefix_expression"):
            operand = node.named_children[0] if node.named_children else None
            op = next((c.type for c in node.children if not c.is_named), "")
            if operand is None:
                return None
            before = self.arith_node(operand)
            name = self.raw(operand)
            after = None if before is None else before + (1 if op == "++" else -1)
            if _is_name(name):
                self.assign(name, None if after is None else str(after), raw=self.raw(node), where=self.where(node),
                            how="arithmetic", unknown=() if after is not None else (self.raw(node),))
            return before if t == "postfix_expression" else after
        if t == "ternary_expression":
            parts = node.named_children
            if len(parts) != 3:
                return None
            cond = self.arith_node(parts[0])
            if cond is None:
                return None
            return self.arith_node(parts[1] if cond else parts[2])
        if t == "binary_expression":
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            op_node = node.child_by_field_name("operator")
            op = op_node.type if op_node is not None else ""
            if left is None or right is None:
                return None
            if op in ("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="):
                name = self.raw(left)
                rhs = self.arith_node(right)
                if op != "=" and rhs is not None:
                    current = self.arith_node(left)
                    rhs = None if current is None else _binary(op[:-1], current, rhs)
                if _is_name(name):
                    self.assign(name, None if rhs is None else str(rhs), raw=self.raw(node), where=self.where(node),
                                how="arithmetic", unknown=() if rhs is not None else (self.raw(node),))
                return rhs
            a = self.arith_node(left)
            if op == "&&" and a == 0:
                return 0
            if op == "||" and a not in (0, None):
                return 1
            b = self.arith_node(right)
            if a is None or b is None:
                return None
            return _binary(op, a, b)
        return None

    # ---- tests --------------------------------------------------------------------------------------

    def test_expression(self, node: tree_sitter.Node) -> Literal["true", "false", "unknown"]:
        inner = [c for c in node.named_children]
        if not inner:
            return "false"
        return self.test_node(inner[0])

    def test_node(self, node: tree_sitter.Node) -> Literal["true", "false", "unknown"]:
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            return self._test_node(node)
        finally:
            self.depth -= 1

    def _test_node(self, node: tree_sitter.Node) -> Literal["true", "false", "unknown"]:
        t = node.type
        if t == "binary_expression":
            left = node.child_by_field_name("left")
            right = node.child_by_field_name("right")
            op_node = node.child_by_field_name("operator")
            op = self.raw(op_node) if op_node is not None else ""
            if left is None or right is None:
                return "unknown"
            if op in ("&&", "||", "-a", "-o"):
                a = self.test_node(left)
                if op in ("&&", "-a") and a == "false":
                    return "false"
                if op in ("||", "-o") and a == "true":
                    return "true"
                b = self.test_node(right)
                if a == "unknown" or b == "unknown":
                    return "unknown"
                return "true" if (a == "true" and b == "true") or (op in ("||", "-o") and "true" in (a, b)) \
                    else "false"
            lv = self.word(left).value
            rv = self.word(right).value
            if op in ("==", "=") and right.type in ("word", "extglob_pattern", "regex") and lv is not None:
                pattern = self.raw(right)
                if not any(c in pattern for c in "$`\\\"'"):
                    matched = _glob_match(lv, pattern)
                    return "unknown" if matched is None else "true" if matched else "false"
            return _test([lv, op, rv])
        if t == "unary_expression":
            op_node = node.child_by_field_name("operator")
            operand = node.named_children[-1] if node.named_children else None
            op = self.raw(op_node) if op_node is not None else next((c.type for c in node.children), "")
            if operand is None:
                return "unknown"
            if op == "!":
                negated = self.test_node(operand)
                return "false" if negated == "true" else "true" if negated == "false" else "unknown"
            return _test([op, self.word(operand).value])
        if t == "parenthesized_expression":
            inside = node.named_children
            return self.test_node(inside[0]) if inside else "unknown"
        return _test([self.word(node).value])

    # ---- words --------------------------------------------------------------------------------------

    def words(self, node: tree_sitter.Node) -> list[Word]:
        """A source word as the words it expands to (field splitting applied)."""
        self.tick()
        segs = self.segments(node, quoted=False, first=True)
        return _fields(segs, self.raw(node), self.line(node), self.ifs_default())

    def word(self, node: tree_sitter.Node, *, assignment: bool = False) -> Word:
        """A source word expanded without field splitting (assignment values, here-strings, case words)."""
        self.tick()
        segs = self.segments(node, quoted=False, first=True)
        return _one_word(segs, self.raw(node), self.line(node))

    def ifs_default(self) -> bool:
        b = self.binding("IFS")
        return b is None or (len(b) == 1 and b[0] is not None and b[0].value == " \t\n")

    def segments(self, node: tree_sitter.Node, *, quoted: bool, first: bool = False) -> list[_Seg]:
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            return self._segments(node, quoted=quoted, first=first)
        finally:
            self.depth -= 1

    def _segments(self, node: tree_sitter.Node, *, quoted: bool, first: bool) -> list[_Seg]:
        t = node.type
        raw = self.raw(node)
        if t in ("word", "number", "variable_name", "extglob_pattern", "regex", "test_operator",
                 "special_variable_name", "file_descriptor"):
            text = self.src(node.start_byte, node.end_byte)
            if not quoted and "{" in text and _BRACE.search(text):
                return [_Seg(None, raw, quoted, causes=(raw,))]
            if first and not quoted and text.startswith("~"):
                return self.tilde(text, raw)
            return [_literal(_unescape_word(text) if not quoted else text, quoted=quoted, raw=raw)]
        if t == "raw_string":
            return [_literal(raw[1:-1], quoted=True, raw=raw)]
        if t == "ansi_c_string":
            return [_literal(_ansi_c(raw[2:-1]), quoted=True, raw=raw)]
        if t in ("string", "translated_string"):
            return self.string(node)
        if t == "concatenation":
            out: list[_Seg] = []
            children = node.children
            for i, child in enumerate(children):
                if child.type == "$" and i + 1 < len(children) and children[i + 1].type == "string":
                    continue
                if child.type == "$":
                    out.append(_literal("$", quoted=quoted))
                    continue
                out.extend(self.segments(child, quoted=quoted, first=first and i == 0))
            if not quoted and any(s.text is not None and not s.quoted and "{" in s.text for s in out):
                joined = "".join(s.text or "" for s in out if not s.quoted)
                if _BRACE.search(joined) or ("{" in joined and "}" in joined and "," in joined):
                    return [_Seg(None, raw, quoted, causes=(raw,))]
            return out
        if t == "simple_expansion":
            return [self.simple_expansion(node, quoted)]
        if t == "expansion":
            return [self.expansion(node, quoted)]
        if t == "command_substitution":
            return [self.command_substitution(node, quoted)]
        if t == "arithmetic_expansion":
            inner = node.named_children
            value = self.arith_node(inner[0]) if len(inner) == 1 else None
            if value is None:
                return [_Seg(None, raw, quoted, split=not quoted, causes=(raw,))]
            return [_Seg(str(value), raw, quoted, split=not quoted)]
        if t == "process_substitution":
            frame = self.push("subshell")
            try:
                self.scoped(lambda: self.block(node, None), "exit")
            finally:
                self.pop(frame, merge="discard")
            return [_Seg(None, raw, quoted, causes=(raw,))]
        if t == "$":
            return [_literal("$", quoted=quoted)]
        if t == "brace_expression":
            return [_Seg(None, raw, quoted, causes=(raw,))]
        return [_Seg(None, raw, quoted, causes=(raw,))]

    def tilde(self, text: str, raw: str) -> list[_Seg]:
        head, sep, tail = text.partition("/")
        if head != "~":
            return [_Seg(None, raw, False, causes=(head,))]
        home, _ = self.lookup("HOME")
        rest = _literal(sep + _unescape_word(tail), quoted=False)
        if home is None:
            return [_Seg(None, "~", False, causes=("~",), variables=("HOME",)), rest]
        return [_Seg(home, "~", True, variables=("HOME",)), rest]

    def string(self, node: tree_sitter.Node) -> list[_Seg]:
        segs: list[_Seg] = []
        start = node.start_byte + 1
        end = node.end_byte - 1
        if self.text.src[node.start_byte:node.start_byte + 1] == b"$":
            start += 1
        cursor = start
        for child in node.named_children:
            if child.type in _EXPANSIONS:
                if child.start_byte > cursor:
                    segs.append(_literal(_unescape_dq(self.src(cursor, child.start_byte)), quoted=True))
                segs.extend(self.segments(child, quoted=True))
                cursor = child.end_byte
        if end > cursor:
            segs.append(_literal(_unescape_dq(self.src(cursor, end)), quoted=True))
        if not segs:
            segs.append(_literal("", quoted=True))
        return segs

    def lookup(self, name: str) -> tuple[str | None, tuple[str, ...]]:
        """A variable's value for expansion: (value, causes when unknown)."""
        if name in self.placeholder_names:
            expression = self.placeholder_names[name]
            if self.placeholders is not None and expression in self.placeholders:
                return self.placeholders[expression], ()
            return None, ("${{" + expression + "}}",)
        if name.isdigit() or name in ("@", "*", "#", "0"):
            return self.positional(name)
        if name in ("?", "$", "!", "-", "_", "RANDOM", "SECONDS", "LINENO", "BASHPID", "PPID", "EPOCHSECONDS"):
            return None, (f"${name}",)
        if name == "PWD":
            cwd = self.frame.cwd
            if cwd is not None and cwd.startswith("/"):
                return cwd, ()
        name = self.resolve(name)
        binding = self.binding(name)
        if binding is None:
            return None, (f"${name}",)
        values = {v.value if v is not None else "" for v in binding}
        if len(values) == 1:
            (value,) = values
            if value is None:
                return None, (f"${name}",)
            return value, ()
        return None, (f"${name}",)

    def is_set(self, name: str) -> bool | None:
        """Whether a parameter is set: None when not known (inherited, or set on some paths only)."""
        positional = self.frame.positional
        if name in ("@", "*"):
            return None if positional is None else bool(positional)
        if name == "#" or name in self.placeholder_names:
            return True
        if name.isdigit():
            index = int(name)
            if index == 0:
                return True if self.frame.zero is not None else None
            return None if positional is None else index <= len(positional)
        binding = self.binding(self.resolve(name))
        if binding is None:
            return None
        states = {v is not None for v in binding}
        return states.pop() if len(states) == 1 else None

    def positional(self, name: str) -> tuple[str | None, tuple[str, ...]]:
        if name == "0":
            return (self.frame.zero, ()) if self.frame.zero is not None else (None, ("$0",))
        positional = self.frame.positional
        if positional is None:
            return None, (f"${name}",)
        if name == "#":
            return str(len(positional)), ()
        if name in ("@", "*"):
            if any(p is None for p in positional):
                return None, (f"${name}",)
            return " ".join(p or "" for p in positional), ()
        index = int(name)
        if index == 0:
            return self.positional("0")
        if index > len(positional):
            return "", ()
        value = positional[index - 1]
        return (value, ()) if value is not None else (None, (f"${name}",))

    def simple_expansion(self, node: tree_sitter.Node, quoted: bool) -> _Seg:
        raw = self.raw(node)
        name_node = node.named_children[0] if node.named_children else None
        if name_node is None:
            return _literal(raw, quoted=quoted)
        name = self.src(name_node.start_byte, name_node.end_byte)
        value, causes = self.lookup(name)
        variables = () if name in self.placeholder_names else (name,)
        raw_shown = raw if name not in self.placeholder_names else "${{" + self.placeholder_names[name] + "}}"
        return _Seg(value, raw_shown, quoted, split=not quoted, causes=causes, variables=variables)

    def expansion(self, node: tree_sitter.Node, quoted: bool) -> _Seg:
        raw = self.raw(node)
        children = [c for c in node.children if c.type not in ("${", "}")]
        unknown = _Seg(None, raw, quoted, split=not quoted, causes=(raw,))
        if not children:
            return unknown
        prefix = ""
        if not children[0].is_named and children[0].type in ("#", "!"):
            prefix = children[0].type
            children = children[1:]
        if not children:
            return unknown
        name_node = children[0]
        rest = children[1:]
        if name_node.type == "subscript":
            inner = name_node.child_by_field_name("name")
            index = name_node.child_by_field_name("index")
            if inner is None or index is None or self.raw(index) not in ("0", "@", "*"):
                return replace(unknown, variables=(self.raw(inner),) if inner is not None else ())
            if self.raw(index) != "0" and not prefix:
                return replace(unknown, variables=(self.raw(inner),))
            name = self.raw(inner)
        elif name_node.type in ("variable_name", "special_variable_name"):
            name = self.src(name_node.start_byte, name_node.end_byte)
        else:
            return unknown
        if name in self.placeholder_names:
            value, causes = self.lookup(name)
            shown = "${{" + self.placeholder_names[name] + "}}"
            return _Seg(value, shown, quoted, split=not quoted, causes=(shown,) if value is None else ())
        variables = (name,)
        if prefix == "!":
            if rest:  # ${!prefix*}, ${!prefix@}: names, not values
                return replace(unknown, variables=variables)
            target, _ = self.lookup(name)
            if target is None or not _is_name(target):
                return replace(unknown, variables=variables)
            value, causes = self.lookup(target)
            return _Seg(value, raw, quoted, split=not quoted, causes=(raw,) if value is None else (),
                        variables=(name, target))
        value, causes = self.lookup(name)
        if prefix == "#":
            if rest:
                return replace(unknown, variables=variables)
            return _Seg(None if value is None else str(len(value)), raw, quoted, split=not quoted,
                        causes=causes and (raw,), variables=variables)
        if not rest:
            return _Seg(value, raw, quoted, split=not quoted, causes=causes and (raw,), variables=variables)
        op = rest[0].type if not rest[0].is_named else ""
        operands = rest[1:]
        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            is_set = self.is_set(name)
            null_counts = op.startswith(":")
            if value is not None:
                use_word = (value == "" and null_counts) or (is_set is False)
                if op in (":+", "+"):
                    use_word = not use_word
            elif is_set is False:
                use_word = op not in (":+", "+")
            else:
                return replace(unknown, variables=variables)
            if not use_word:
                return _Seg("" if op in (":+", "+") else value, raw, quoted, split=not quoted, variables=variables)
            word = self.operand(operands, quoted)
            if op in (":=", "="):
                self.assign(name, word.text, raw=raw, where=self.where(node), how="default", unknown=word.causes)
            if op in (":?", "?"):
                return replace(unknown, variables=variables)
            return replace(word, raw=raw, split=not quoted and word.split, variables=(*variables, *word.variables),
                           causes=word.causes and (raw,))
        if value is None:
            return replace(unknown, variables=variables)
        if op in ("#", "##", "%", "%%"):
            pattern = self.operand(operands, True)
            if pattern.text is None:
                return replace(unknown, variables=variables)
            removed = _remove(value, pattern.text, op)
            if removed is None:
                return replace(unknown, variables=variables)
            self.tick(1 + len(value) // 64)
            return _Seg(removed, raw, quoted, split=not quoted, variables=variables)
        if op in ("/", "//", "/#", "/%"):
            parts = _split_operands(operands, "/")
            pat = self.operand(parts[0], True) if parts else _literal("", quoted=True)
            rep = self.operand(parts[1], True) if len(parts) > 1 else _literal("", quoted=True)
            if pat.text is None or rep.text is None:
                return replace(unknown, variables=variables)
            self.tick(1 + len(value) // 64)
            replaced = _substitute(value, pat.text, rep.text, op)
            if replaced is None or len(replaced) > MAX_VALUE:
                return replace(unknown, variables=variables)
            return _Seg(replaced, raw, quoted, split=not quoted, variables=variables)
        if op == ":":
            parts = _split_operands(operands, ":")
            offset = self.arith_node(parts[0][0]) if parts and parts[0] else 0
            length = self.arith_node(parts[1][0]) if len(parts) > 1 and parts[1] else None
            if offset is None or (len(parts) > 1 and length is None):
                return replace(unknown, variables=variables)
            start = offset if offset >= 0 else max(0, len(value) + offset)
            if length is None:
                result = value[start:]
            elif length >= 0:
                result = value[start:start + length]
            else:
                result = value[start:len(value) + length]
            return _Seg(result, raw, quoted, split=not quoted, variables=variables)
        if op in ("^^", ",,", "^", ",") and not operands:
            result = {"^^": value.upper(), ",,": value.lower(), "^": value[:1].upper() + value[1:],
                      ",": value[:1].lower() + value[1:]}[op]
            return _Seg(result, raw, quoted, split=not quoted, variables=variables)
        if op == "@" and len(rest) == 2 and self.raw(rest[1]) in ("Q", "E", "U", "L", "u"):
            letter = self.raw(rest[1])
            result = {"Q": "'" + value.replace("'", "'\\''") + "'", "E": _ansi_c(value), "U": value.upper(),
                      "L": value.lower(), "u": value[:1].upper() + value[1:]}[letter]
            return _Seg(result, raw, quoted, split=not quoted, variables=variables)
        return replace(unknown, variables=variables)

    def operand(self, nodes: list[tree_sitter.Node], quoted: bool) -> _Seg:
        """The word of ``${A:-word}``: its pieces joined (empty when there are none)."""
        segs: list[_Seg] = []
        for n in nodes:
            segs.extend(self.segments(n, quoted=quoted))
        text: str | None = ""
        for s in segs:
            text = None if text is None or s.text is None else text + s.text
        causes = tuple(c for s in segs for c in s.causes)
        variables = tuple(v for s in segs for v in s.variables)
        raw = "".join(s.raw for s in segs)
        return _Seg(text, raw, quoted, split=any(s.split for s in segs), causes=causes, variables=variables)

    def command_substitution(self, node: tree_sitter.Node, quoted: bool) -> _Seg:
        raw = self.raw(node)
        body = [c for c in node.named_children if c.type != "comment"]
        frame = self.push("subshell")
        saved = len(self.unknowns)
        try:
            result = self.scoped(lambda: self.sequence(body, None), "exit", "return")
        finally:
            self.pop(frame, merge="discard")
        del saved
        output = result.output
        if output is None:
            return _Seg(None, raw, quoted, split=not quoted, causes=(raw,))
        return _Seg(output.rstrip("\n"), raw, quoted, split=not quoted)


_BUILTINS = frozenset({
    ":", "true", "false", "test", "[", "echo", "printf", "export", "declare", "typeset", "local", "readonly", "unset",
    "cd", "pushd", "popd", "read", "mapfile", "readarray", "getopts", "eval", "source", ".", "set", "shopt",
    "alias", "unalias", "trap", "let", "exit", "return", "break", "continue", "exec", "shift", "wait", "umask",
    "ulimit", "hash", "type", "command", "builtin", "dirs", "enable", "help", "history", "jobs", "kill", "pwd",
    "times", "caller", "complete", "disown", "fc", "fg", "bg", "logout", "suspend",
})

# Wrappers that run the rest of their arguments as a command: (options taking a value, positional operands
# before the command). Their options are read up to the first word that is not one.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "setsid": (frozenset(), 0),
    "taskset": (frozenset(), 1),
    "numactl": (frozenset({"-N", "-m", "-C", "-p", "-i", "--cpunodebind", "--membind", "--physcpubind",
                           "--preferred", "--interleave"}), 0),
    "chrt": (frozenset(), 1),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "xvfb-run": (frozenset({"-n", "-s", "-e", "-f", "-p", "--server-num", "--server-args"}), 0),
}

def _as_assignment(segs: list[_Seg]) -> tuple[str, bool, list[_Seg]] | None:
    """A word that is an assignment (``NAME=value``, ``NAME+=value``, the name unquoted and literal):
    the name, whether it appends, and the value's segments."""
    head = ""
    for index, seg in enumerate(segs):
        if seg.text is None or seg.quoted or seg.split:
            return None
        position = seg.text.find("=")
        if position < 0:
            head += seg.text
            continue
        head += seg.text[:position]
        append = head.endswith("+")
        name = head[:-1] if append else head
        if not _is_name(name):
            return None
        rest = [replace(seg, text=seg.text[position + 1:], raw=seg.raw), *segs[index + 1:]]
        return name, append, rest
    return None


_BRACE = linear.compile(rf"\{{[^{{}}{linear.SPACE}]*(?:,|\.\.)[^{{}}{linear.SPACE}]*\}}")
"""A brace expansion (``{a,b}``, ``{1..3}``). On Python's re this search took time quadratic in a word of commas
after a ``{`` (``echo a{,,,...``: 40,000 commas took 2.7 s, a 1 MiB command half an hour)."""


def _flatten_redirects(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    """A here-document's redirect node holds the redirections written after it on its line
    (``cat <<EOF > /etc/nccl.conf``): the parser nests them; they are the command's own."""
    out = [node]
    if node.type == "heredoc_redirect":
        out += [c for c in node.named_children if c.type in _REDIRECTS]
    return out


def _skip_options(words: list[Word], with_value: frozenset[str], positional: int) -> list[Word]:
    i = 0
    while i < len(words):
        v = words[i].value
        if v is None:
            return words[i:]
        if v == "--":
            i += 1
            break
        if not v.startswith("-") or v == "-":
            break
        if v in with_value:
            i += 2
        else:
            i += 1
    return words[i + positional:] if i + positional <= len(words) else []


def _env_options(words: list[Word]) -> tuple[list[Word], bool, list[str], Word | None, list[tuple[str, Word]], bool]:
    """GNU env: ``-i``/``-``, ``-u NAME``/``--unset=NAME``, ``-C DIR``/``--chdir=DIR``, ``-S``, ``NAME=VALUE``."""
    cleared = False
    unsets: list[str] = []
    chdir: Word | None = None
    assigns: list[tuple[str, Word]] = []
    split = False
    i = 0
    options = True
    while i < len(words):
        w = words[i]
        v = w.value
        if v is None:
            return words[i:], cleared, unsets, chdir, assigns, True
        if options and v in ("-i", "-", "--ignore-environment"):
            cleared = True
        elif options and v in ("-u", "--unset") and i + 1 < len(words):
            i += 1
            if words[i].value:
                unsets.append(words[i].value or "")
        elif options and v.startswith("--unset="):
            unsets.append(v.split("=", 1)[1])
        elif options and v.startswith("-u") and len(v) > 2 and not v.startswith("--"):
            unsets.append(v[2:])
        elif options and v in ("-C", "--chdir") and i + 1 < len(words):
            i += 1
            chdir = words[i]
        elif options and v.startswith("--chdir="):
            chdir = replace(w, value=v.split("=", 1)[1])
        elif options and (v in ("-S", "--split-string") or v.startswith(("--split-string=", "-S"))):
            split = True
            return words[i + 1:], cleared, unsets, chdir, assigns, split
        elif options and v == "--":
            options = False
        elif options and v.startswith("-") and len(v) > 1 and "=" not in v:
            pass  # -0, -v, --debug...
        elif "=" in v and not v.startswith("="):
            name, _, value = v.partition("=")
            assigns.append((name, replace(w, value=value)))
            options = False
        else:
            return words[i:], cleared, unsets, chdir, assigns, split
        i += 1
    return [], cleared, unsets, chdir, assigns, split


def _sudo_options(words: list[Word]) -> tuple[list[Word], bool, list[tuple[str, Word]]]:
    """sudo's options; whether the caller's environment is kept (``-E``, ``--preserve-env``)."""
    keep = False
    assigns: list[tuple[str, Word]] = []
    with_value = {"-u", "--user", "-g", "--group", "-h", "--host", "-p", "--prompt", "-C", "--close-from", "-D",
                  "--chdir", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U", "--other-user"}
    i = 0
    while i < len(words):
        v = words[i].value
        if v is None:
            return words[i:], keep, assigns
        if v == "--":
            i += 1
            break
        if v in ("-E", "--preserve-env") or v.startswith("--preserve-env="):
            keep = True
        elif v in with_value:
            i += 1
        elif v.startswith("-") and len(v) > 1:
            if "E" in v[1:] and not v.startswith("--"):
                keep = True
        elif "=" in v and _is_name(v.split("=", 1)[0]):
            name, _, value = v.partition("=")
            assigns.append((name, replace(words[i], value=value)))
        else:
            break
        i += 1
    return words[i:], keep, assigns


def _exec_options(words: list[Word]) -> tuple[list[Word], bool]:
    clear = False
    i = 0
    while i < len(words):
        v = words[i].value
        if v is None or not v.startswith("-") or v == "-":
            break
        if v == "--":
            i += 1
            break
        if v == "-a":
            i += 1
        elif "c" in v[1:]:
            clear = True
        i += 1
    return words[i:], clear


def _read_names(builtin: str, values: list[str | None]) -> list[str]:
    names: list[str] = []
    with_value = {"read": {"-a", "-d", "-i", "-n", "-N", "-p", "-t", "-u"},
                  "mapfile": {"-d", "-n", "-O", "-s", "-u", "-C", "-c"},
                  "readarray": {"-d", "-n", "-O", "-s", "-u", "-C", "-c"},
                  "getopts": set()}[builtin]
    i = 0
    positional: list[str] = []
    while i < len(values):
        v = values[i]
        if v is None:
            i += 1
            continue
        if builtin == "read" and v == "-a" and i + 1 < len(values):
            if values[i + 1]:
                names.append(values[i + 1] or "")
            i += 2
            continue
        if v.startswith("-") and v in with_value:
            i += 2
            continue
        if v.startswith("-") and len(v) > 1:
            i += 1
            continue
        positional.append(v)
        i += 1
    if builtin == "getopts":
        positional = positional[1:2]
    elif builtin in ("mapfile", "readarray"):
        positional = positional[:1] or ["MAPFILE"]
    elif not positional and not names:
        positional = ["REPLY"]
    return [n for n in names + positional if _is_name(n)]


def _runs_after(op: str, status: str) -> Literal["yes", "no", "maybe"]:
    if op == "":
        return "yes"
    if op == "&&":
        return "yes" if status in ("true", "likely") else "no" if status == "false" else "maybe"
    if op == "||":
        return "no" if status == "true" else "yes" if status == "false" else "maybe"
    return "yes"


def _merge(new: Binding, old: Binding | None) -> Binding:
    """What a name holds after a part that may not have run: its new binding or its old one."""
    if old is None:
        old = ()
    if new == old:
        return new
    candidates: list[Variable | None] = []
    for v in (*new, *(old or (None,))):
        mark = replace(v, maybe=True) if v is not None else None
        if mark not in candidates:
            candidates.append(mark)
    if len(candidates) > MAX_CANDIDATES:
        first = next((c for c in candidates if c is not None), None)
        if first is None:
            return (None,)
        return (replace(first, value=None, maybe=True),)
    return tuple(candidates)


def _single_value(binding: Binding) -> str | None:
    values = {v.value if v is not None else "" for v in binding}
    if len(values) == 1:
        return values.pop()
    return None


def _kind(causes: tuple[str, ...]) -> UnknownKind:
    text = " ".join(causes)
    if "$(" in text or "`" in text:
        return "command substitution"
    if "$((" in text or "$[" in text:
        return "arithmetic"
    if causes and all(c in ("read", "mapfile", "readarray", "getopts") for c in causes):
        return "read"
    if "[" in text and "$" not in text:
        return "array"
    if "$" in text or "~" in text:
        return "variable"
    return "expansion"


def _literal(text: str, *, quoted: bool, raw: str | None = None) -> _Seg:
    return _Seg(text, text if raw is None else raw, quoted)


def _join(outputs: list[str | None]) -> str | None:
    if any(o is None for o in outputs):
        return None
    return "".join(o or "" for o in outputs)


def _stdin(redirects: tuple[Redirect, ...], stdin: str | None) -> str | None:
    for r in redirects:
        if r.body is not None and (r.fd in (None, 0)):
            stdin = r.body.value
        elif r.target is not None and r.op == "<" and r.fd in (None, 0):
            stdin = None
    return stdin


def _one_word(segs: list[_Seg], raw: str, line: int) -> Word:
    text: str | None = ""
    shown = ""
    causes: list[str] = []
    variables: list[str] = []
    for s in segs:
        text = None if text is None or s.text is None else text + s.text
        shown += s.text if s.text is not None else s.raw
        causes.extend(s.causes)
        variables.extend(s.variables)
    if text is not None and len(text) > MAX_VALUE:
        text, causes = None, [f"a value longer than {MAX_VALUE:,} characters"]
    return Word(raw, text, line, tuple(dict.fromkeys(variables)), tuple(dict.fromkeys(causes)) if text is None
                else (), shown[:4096])


def _fields(segs: list[_Seg], raw: str, line: int, ifs_default: bool) -> list[Word]:
    """Field splitting (IFS space, tab, newline) of the unquoted expansion results in a word; an unquoted
    expansion that expands to nothing leaves no word."""
    if any(s.split and s.text is None for s in segs) or (not ifs_default and any(s.split for s in segs)):
        return [_one_word(segs, raw, line)]
    fields: list[list[_Seg]] = []
    current: list[_Seg] = []
    has = False
    for s in segs:
        if s.split and s.text is not None:
            text = s.text
            if not text:
                continue
            pieces = text.split()
            if text[0].isspace() and has:
                fields.append(current)
                current, has = [], False
            for i, piece in enumerate(pieces):
                if i > 0:
                    fields.append(current)
                    current = []
                current.append(replace(s, text=piece))
                has = True
            if text[-1].isspace() and pieces:
                fields.append(current)
                current, has = [], False
        else:
            current.append(s)
            has = has or s.quoted or s.text is None or bool(s.text)
    if has:
        fields.append(current)
    return [_one_word(f, raw, line) for f in fields]


def _split_operands(nodes: list[tree_sitter.Node], separator: str) -> list[list[tree_sitter.Node]]:
    parts: list[list[tree_sitter.Node]] = [[]]
    for n in nodes:
        if not n.is_named and n.type == separator:
            parts.append([])
        else:
            parts[-1].append(n)
    return parts


MAX_PATTERN_VALUE = 1024
"""Pattern removal and replacement with a glob run on values up to this long (else unknown)."""


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


_Use = Literal["first", "shortest", "longest", "suffix", "shortest suffix"]


@functools.lru_cache(maxsize=256)
def _glob(pattern: str, use: _Use = "first") -> linear.Pattern | None:
    """A shell pattern (read as :func:`fnmatch.fnmatchcase` reads it) on RE2, one call per question: ``first``
    (``fullmatch``: whether a text matches; ``match``/``finditer``: where a match from a place ends, the longest
    at the last star), ``shortest``/``longest`` (``match``: the end of the shortest/longest matching prefix),
    ``suffix`` (``search``: the start of the longest matching suffix), ``shortest suffix`` (``match`` on the
    reversed text: the length of the shortest matching suffix). None for a pattern RE2 cannot hold (hundreds
    of kilobytes)."""
    try:
        if use == "longest":
            return linear.compile(linear.glob(pattern), longest=True)
        if use == "suffix":
            return linear.compile(linear.glob(pattern) + r"\z")
        return linear.compile(linear.glob(pattern, shortest=use in ("shortest", "shortest suffix"),
                                          reverse=use == "shortest suffix"))
    except ValueError:
        return None


_REMOVE_USE: dict[str, _Use] = {"#": "shortest", "##": "longest", "%": "shortest suffix", "%%": "suffix"}
_SUBSTITUTE_USE: dict[str, _Use] = {"/": "first", "//": "first", "/#": "longest", "/%": "suffix"}


def _glob_match(value: str, pattern: str) -> bool | None:
    """Whether ``value`` matches the shell pattern; None when that cannot be known (see :func:`_glob`)."""
    matcher = _glob(pattern)
    return None if matcher is None else matcher.fullmatch(value) is not None


def _any_match(value: str, patterns: list[str]) -> bool | None:
    """Whether ``value`` matches one of ``patterns`` (``case``'s ``a|b)``), tried in order."""
    for pattern in patterns:
        matched = _glob_match(value, pattern)
        if matched is None or matched:
            return matched
    return False


def _bracket_escapes(text: str) -> str:
    """A pattern's backslash escapes as one-character brackets (``\\*`` -> ``[*]``); a backslash before a
    newline, or last, stays."""
    out: list[str] = []
    i = 0
    while (j := text.find("\\", i)) >= 0 and j + 1 < len(text):
        if text[j + 1] == "\n":
            out.append(text[i:j + 1])
            i = j + 1
            continue
        out.append(f"{text[i:j]}[{text[j + 1]}]")
        i = j + 2
    out.append(text[i:])
    return "".join(out)


def _remove(value: str, pattern: str, op: str) -> str | None:
    """``${A#p}``, ``${A##p}``, ``${A%p}``, ``${A%%p}``: shortest/longest prefix or suffix matching a glob."""
    if not _is_glob(pattern):
        if op in ("#", "##"):
            return value[len(pattern):] if value.startswith(pattern) else value
        return value[: len(value) - len(pattern)] if pattern and value.endswith(pattern) else value
    matcher = _glob(pattern, _REMOVE_USE[op])
    if len(value) > MAX_PATTERN_VALUE or matcher is None:
        return None
    if op in ("#", "##"):
        found = matcher.match(value)
        return value[found.end():] if found else value
    if op == "%":
        found = matcher.match(value[::-1])
        return value[: len(value) - found.end()] if found else value
    found = matcher.search(value)
    return value[: found.start()] if found else value


def _substitute(value: str, pattern: str, replacement: str, op: str) -> str | None:
    """``${A/p/r}``, ``${A//p/r}``, ``${A/#p/r}``, ``${A/%p/r}`` (the longest match, as bash)."""
    if not pattern:
        return value
    if not _is_glob(pattern):
        if op == "/":
            return value.replace(pattern, replacement, 1)
        if op == "//":
            return value.replace(pattern, replacement)
        if op == "/#":
            return replacement + value[len(pattern):] if value.startswith(pattern) else value
        return value[: len(value) - len(pattern)] + replacement if value.endswith(pattern) else value
    matcher = _glob(pattern, _SUBSTITUTE_USE[op])
    if len(value) > MAX_PATTERN_VALUE or matcher is None:
        return None
    if op == "/#":
        found = matcher.match(value)
        return replacement + value[found.end():] if found else value
    if op == "/%":
        found = matcher.search(value)
        return value[: found.start()] + replacement if found else value
    out: list[str] = []
    last = 0
    for found in matcher.finditer(value):  # from each place in turn; an empty match replaces nothing
        if found.end() > found.start():
            out += [value[last:found.start()], replacement]
            last = found.end()
            if op == "/":
                break
    return "".join([*out, value[last:]])


def _unescape(text: str, escaped: str | None) -> str:
    """``text`` with each backslash before one of ``escaped`` (None: any character) removed, and each
    backslash-newline pair; other backslashes stay."""
    out: list[str] = []
    i = 0
    while (j := text.find("\\", i)) >= 0 and j + 1 < len(text):
        c = text[j + 1]
        if escaped is not None and c not in escaped:
            out.append(text[i:j + 1])
            i = j + 1
            continue
        out.append(text[i:j] if c == "\n" else text[i:j] + c)
        i = j + 2
    out.append(text[i:])
    return "".join(out)


def _unescape_word(text: str) -> str:
    """Backslashes outside quotes: ``\\x`` is ``x``, a backslash-newline disappears."""
    return text if "\\" not in text else _unescape(text, None)


def _unescape_dq(text: str) -> str:
    """Inside double quotes a backslash escapes only ``$ ` " \\`` and newline."""
    return text if "\\" not in text else _unescape(text, '$`"\\\n')


def _unescape_heredoc(text: str) -> str:
    return text if "\\" not in text else _unescape(text, "$`\\\n")


_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", "'": "'",
              '"': '"', "?": "?", "e": "\x1b", "E": "\x1b"}
_ANSI = linear.compile(r"(?s)\\(?:([ntrabfv\\'\"?eE])|([0-7]{1,3})|x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|"
                       r"U([0-9a-fA-F]{1,8})|c(.))")


def _ansi_c(text: str) -> str:
    """``$'...'`` quoting: C escapes, octal, hex, Unicode and control characters."""
    def sub(m: linear.Match) -> str:
        simple, octal, hexa, u4, u8, ctrl = m.groups()
        if simple:
            return _C_ESCAPES[simple]
        if octal:
            return chr(int(octal, 8) & 0xFF)
        if hexa:
            return chr(int(hexa, 16))
        code = u4 or u8
        if code:
            number = int(code, 16)
            return chr(number) if number < 0x110000 else ""
        return chr(ord(ctrl) & 0x1F)
    return _ANSI.sub(sub, text)


def _echo(values: list[str | None]) -> str | None:
    if any(v is None for v in values):
        return None
    args = [v or "" for v in values]
    newline = True
    escapes = False
    while args and len(args[0]) > 1 and args[0][0] == "-" and all(c in "neE" for c in args[0][1:]):
        flags = args.pop(0)[1:]
        newline = newline and "n" not in flags
        for c in flags:
            escapes = True if c == "e" else False if c == "E" else escapes
    text = " ".join(args)
    if escapes:
        cut = text.find("\\c")
        if cut >= 0:
            text, newline = text[:cut], False
        text = _ansi_c(text.replace("\\0", "\\"))
    return text + ("\n" if newline else "")


_PRINTF = linear.compile(rf"(?s)%([-+ #0]*)([{linear.DIGIT}]{{0,4}})(?:\.([{linear.DIGIT}]{{0,4}}))?([sbdiuxXoc%q])|%"
                         r"|\\(?:[0-7]{1,3}|x[0-9a-fA-F]{1,2}|.)")
_PRINTF_NUMBER = linear.compile(rf"[{linear.SPACE}]*[+-]?[{linear.WORD}]+[{linear.SPACE}]*")


def _printf(fmt: str, args: list[str]) -> str | None:
    """printf with ``%s %b %d %i %u %x %o %c %q %%``, flags and widths; the format repeats for extra args."""
    out: list[str] = []
    index = 0
    for _ in range(64):
        used = False
        failed = False

        def sub(m: linear.Match) -> str:
            nonlocal index, used, failed
            token = m.group(0)
            if token.startswith("\\"):
                return _ansi_c(token) if token != "\\c" else ""
            if m.group(4) is None:
                failed = True
                return ""
            flags, width, precision, conv = m.group(1), m.group(2), m.group(3), m.group(4)
            if conv == "%":
                return "%"
            arg = args[index] if index < len(args) else ""
            if index < len(args):
                used = True
            index += 1
            if conv in "sbq":
                text = _ansi_c(arg) if conv == "b" else arg
                if precision:
                    text = text[: int(precision)]
            elif conv == "c":
                text = arg[:1]
            else:
                number = _arith_text(arg or "0") if _PRINTF_NUMBER.fullmatch(arg or "0") else None
                if number is None:
                    failed = True
                    return ""
                n = int(number)
                text = {"d": str(n), "i": str(n), "u": str(n % (1 << 64)), "x": format(n % (1 << 64), "x"),
                        "X": format(n % (1 << 64), "X"), "o": format(n % (1 << 64), "o")}[conv]
            pad = int(width) if width else 0
            if len(text) < pad:
                text = text.ljust(pad) if "-" in flags else text.rjust(pad, "0" if "0" in flags and conv not in "sbq"
                                                                             else " ")
            return text

        out.append(_PRINTF.sub(sub, fmt))
        if failed:
            return None
        if not used or index >= len(args):
            break
    text = "".join(out)
    return text if len(text) <= MAX_VALUE else None


def _b64decode(data: str | None) -> str | None:
    if data is None:
        return None
    try:
        return base64.b64decode("".join(data.split()), validate=True).decode("utf-8")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


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


def _wrap(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= _INTMAX else value


def _binary(op: str, a: int, b: int) -> int | None:
    if op in ("/", "%") and b == 0:
        return None
    if op == "**" and (b < 0 or b > 64):
        return None
    if op in ("<<", ">>") and not 0 <= b < 64:
        return None
    results: dict[str, Callable[[], int]] = {
        "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
        "/": lambda: abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1),
        "%": lambda: abs(a) % abs(b) * (1 if a >= 0 else -1), "**": lambda: a ** b,
        "<<": lambda: a << b, ">>": lambda: a >> b, "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b,
        "==": lambda: int(a == b), "!=": lambda: int(a != b), "<": lambda: int(a < b), ">": lambda: int(a > b),
        "<=": lambda: int(a <= b), ">=": lambda: int(a >= b), "&&": lambda: int(bool(a) and bool(b)),
        "||": lambda: int(bool(a) or bool(b)), ",": lambda: b,
    }
    fn = results.get(op)
    return _wrap(fn()) if fn is not None else None


def _terms(text: str) -> list[str]:
    """``text`` cut before each ``+`` and ``-`` (the first piece empty when it starts with one)."""
    cuts = [0, *(i for i, c in enumerate(text) if c in "+-"), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts)] if text else []


def _arith_text(text: str) -> str | None:
    """A bash integer (``10``, ``0x1f``, ``010`` octal, ``2#101``) or a sum of such, as a decimal string;
    None for anything else (a real expression parser is only used on parsed ``$((..))`` nodes)."""
    total = 0
    for term in _terms(text.strip()):
        if not term:
            continue
        inner = term.strip()
        m = _INT.fullmatch(inner.strip("()")) if inner else None
        if not m:
            return None
        sign, digits = m.groups()
        try:
            if "#" in digits:
                base_text, number = digits.split("#", 1)
                value = _base(number, int(base_text))
            elif digits[:2].lower() == "0x":
                value = int(digits, 16)
            elif digits.startswith("0") and len(digits) > 1:
                value = int(digits, 8)
            else:
                value = int(digits)
        except ValueError:
            return None
        if value is None:
            return None
        total += -value if sign == "-" else value
    return str(_wrap(total)) if text.strip() else "0"


def _base(number: str, base: int) -> int | None:
    if not 2 <= base <= 64:
        return None
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"
    if base <= 36:
        number = number.lower()
    value = 0
    for c in number:
        digit = alphabet.find(c)
        if digit < 0 or digit >= base:
            return None
        value = value * base + digit
    return value


def _test(args: list[str | None]) -> Literal["true", "false", "unknown"]:
    """``test``/``[`` with known operands: string and integer comparisons, ``-n``/``-z``, ``!``."""
    if any(a is None for a in args):
        return "unknown"
    a = [x or "" for x in args]
    if a and a[0] == "!":
        inner = _test(list(a[1:]))
        return {"true": "false", "false": "true"}.get(inner, "unknown")  # type: ignore[return-value]
    if len(a) == 0:
        return "false"
    if len(a) == 1:
        return "true" if a[0] else "false"
    if len(a) == 2:
        if a[0] == "-n":
            return "true" if a[1] else "false"
        if a[0] == "-z":
            return "false" if a[1] else "true"
        return "unknown"
    if len(a) == 3:
        left, op, right = a
        if op in ("=", "=="):
            return "true" if left == right else "false"
        if op == "!=":
            return "true" if left != right else "false"
        if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            x, y = _arith_text(left), _arith_text(right)
            if x is None or y is None or not left.strip() or not right.strip():
                return "unknown"
            i, j = int(x), int(y)
            truth = {"-eq": i == j, "-ne": i != j, "-lt": i < j, "-le": i <= j, "-gt": i > j, "-ge": i >= j}[op]
            return "true" if truth else "false"
    return "unknown"


def evaluate(
    text: str,
    *,
    environment: Mapping[str, str] | Iterable[Variable] = (),
    platform: Iterable[str] = (),
    origin: str = "environment",
    label: str = "the command",
    cwd: str | None = ".",
    first_line: int = 1,
    read_file: Callable[[str], str | None] | None = None,
    placeholders: Mapping[str, str] | None = None,
    budget: Budget | None = None,
) -> Script:
    """Evaluate ``text`` as bash would, as far as that is known before it runs.

    ``environment``: what the process starts with (name -> value, labelled ``origin``; or
    :class:`Variable` objects with their own origins). ``platform``: names the platform sets at run time
    (Azure ML's ``NODE_RANK``, ``MASTER_ADDR``...): known to exist, value unknown. ``label`` names the
    text in each :class:`Variable` it sets. ``cwd``: the directory the text starts in (relative paths are
    kept relative to it). ``first_line``: the line of ``text``'s first line in the file it came from.
    ``read_file(path)``: the text of a file ``source``/``bash script.sh`` reads (path relative to the
    starting directory, or absolute), or None when it cannot be read; without it they are unknown.
    ``placeholders``: when given, ``${{...}}`` spans are Azure ML placeholders replaced before the shell
    runs: the value the mapping has for the expression inside (``inputs.lr``), unknown otherwise.
    ``budget``: steps and time shared with other calls (a fresh :class:`Budget` by default).
    """
    budget = budget if budget is not None else Budget()
    shell = _Shell(label=label, platform=frozenset(platform), read_file=read_file, placeholders=placeholders,
                   budget=budget)
    seed: dict[str, Binding] = {}
    for name in shell.platform:
        seed[name] = (Variable(name, None, "platform"),)
    if isinstance(environment, Mapping):
        for name, value in environment.items():
            seed[str(name)] = (Variable(str(name), str(value), origin),)
    else:
        for variable in environment:
            seed[variable.name] = (variable,)
    shell.frame.vars = seed
    shell.frame.cwd = cwd
    complete = True
    try:
        shell.scoped(lambda: shell.run_text(text, first_line=first_line, within=()), "exit", "return", "break",
                     "continue")
    except _Stop as stop:
        complete = False
        while shell.frame.parent is not None:
            shell.frame = shell.frame.parent
        line = shell.commands[-1].where.line if shell.commands else first_line
        shell.unknowns.append(Unknown(stop.kind, stop.message, Where(line)))
    except RecursionError:
        complete = False
        while shell.frame.parent is not None:
            shell.frame = shell.frame.parent
        shell.unknowns.append(Unknown("too deep", "nested too deep to follow", Where(first_line)))
    budget.steps = max(0, budget.steps - shell.steps)
    return Script(tuple(shell.commands), tuple(shell.assignments), tuple(shell.unknowns), tuple(shell.writes),
                  Environ(shell.frame.vars), shell.frame.cwd, complete)
