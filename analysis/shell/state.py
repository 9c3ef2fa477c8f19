"""The shell's state and its bounds: frames, variables, parsing, and the records the evaluation passes around.

:class:`State` is the bottom layer of :class:`analysis.shell.interpreter.Shell`; it counts every step
against the :class:`~analysis.shell.api.Budget` and stops with :class:`Stop` past a bound.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import tree_sitter
import tree_sitter_bash

from analysis.shell.api import (
    MAX_BYTES,
    MAX_CANDIDATES,
    MAX_DEPTH,
    MAX_SECONDS,
    MAX_VALUE,
    Assignment,
    AssignmentHow,
    Binding,
    Budget,
    Command,
    Environ,
    FileWrite,
    Unknown,
    UnknownKind,
    Variable,
    Where,
    Word,
    resolve_proc,
)
from analysis.shell.integers import bash_integer
from analysis.shell.scan import names_set

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
# The two byte scanners below stay on Python's re: each runs over the whole text before it is parsed; both are
# linear by construction (a bounded run that cannot hold the next match's start; a fixed-width alternation),
# and RE2's binding costs 8 to 11 times as much per match (1 MiB of `${{x}}`: 0.27 s against 0.024 s; of `$[`:
# 0.40 s against 0.05 s).
_PLACEHOLDER = re.compile(rb"\$\{\{[^{}\n]{1,200}\}\}")
_EXPANSION_EDGE = re.compile(rb"\$[({\[]|[)}\]]")
"""Where a ``$(``, ``${`` or ``$[`` expansion opens, and any closing bracket: :func:`_expansion_depth`."""
_NAME_BYTE = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == ord("_")) else ord("_") for c in range(256))
"""Each byte of a placeholder's expression as a byte of a variable name: itself, or ``_``."""


def is_name(text: str) -> bool:
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


REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


def short(text: str, limit: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


class Stop(Exception):
    def __init__(self, kind: UnknownKind, message: str) -> None:
        super().__init__(message)
        self.kind: UnknownKind = kind
        self.message = message


class Flow(Exception):
    def __init__(self, kind: Literal["exit", "return", "break", "continue"]) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass
class Seg:
    """A piece of a word during expansion."""

    text: str | None
    raw: str
    quoted: bool
    split: bool = False
    """An unquoted expansion's result: subject to field splitting."""
    causes: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()
    brace: bool = False
    """Unquoted source text, where ``{``, ``,``, ``}`` and ``..`` are brace expansion's syntax."""


@dataclass(frozen=True)
class Prefix:
    """An assignment word before a command (``A=1 cmd``), or standing alone (``A=1``)."""

    name: str
    value: Word
    append: bool
    raw: str
    array: bool = False
    subscript: bool = False


@dataclass
class Function:
    body: tree_sitter.Node
    text: Text
    name: str


@dataclass
class Text:
    """One parsed text: its bytes (placeholders replaced by same-length names), the original bytes for
    raw slices, the line its first line is in the outermost text, and what it is nested in."""

    src: bytes
    original: bytes
    first_line: int
    within: tuple[str, ...]


@dataclass
class Frame:
    kind: Literal["top", "branch", "subshell", "function", "child"]
    parent: Frame | None
    vars: dict[str, Binding] = field(default_factory=dict)
    functions: dict[str, Function] = field(default_factory=dict)
    locals: set[str] = field(default_factory=set)
    cwd: str | None = "."
    allexport: bool = False
    positional: tuple[str | None, ...] | None = None
    """$1...; None when not known (the outermost text's arguments)."""
    zero: str | None = None


@dataclass
class Result:
    status: Literal["true", "false", "unknown", "likely"]
    output: str | None = ""


OK = Result("true", "")


class State:
    """The shell's state: bounds, positions, parsing, frames and variables; the layers above evaluate."""

    def __init__(self, *, label: str, platform: frozenset[str], read_file: Callable[[str], str | None] | None,
                 placeholders: Mapping[str, str] | None, budget: Budget) -> None:
        self.label = label
        self.platform = platform
        self.read_file = read_file
        self.guard_stops: set[tuple[str, str]] = set()
        """The texts :meth:`guarded` stopped inside, said once each."""
        self.scripts = False
        """A program named by a path whose file :meth:`file_text` knows is run as the shell script it is."""
        self.placeholders = placeholders
        self.budget = budget
        self.deadline = budget.deadline
        self.limit = budget.steps
        self.steps = 0
        self.ceiling = self.limit
        """The step count the construct being evaluated must stay within (:meth:`bounded`)."""
        self.partial = False
        """A bound stopped the evaluation inside a construct (the rest was evaluated)."""
        self.abandoned: dict[tuple[int, int, int], tuple[Unknown, bytes]] = {}
        """The constructs stopped at a bound (text, start, end) and the :class:`Unknown` naming each."""
        self.depth = 0
        self.nesting = 0
        self.maybe = False
        self.commands: list[Command] = []
        self.assignments: list[Assignment] = []
        self.unknowns: list[Unknown] = []
        self.writes: list[FileWrite] = []
        self.frame = Frame("top", None)
        self.text = Text(b"", b"", 1, ())
        self.placeholder_names: dict[str, str] = {}
        self.version = 0
        self._environ: tuple[int, Environ] | None = None
        self.marked: set[str] = set()
        """Names exported before they have a value (``export A``): a later assignment is exported."""
        self.parser = tree_sitter.Parser(_LANGUAGE)

    # ---- files ---------------------------------------------------------------------------------------

    def file_text(self, path: str | None) -> str | None:
        """The text of the file at ``path`` (from the current directory) that ``source``, ``bash FILE`` or
        ``BASH_ENV`` reads: what this text wrote there last when it wrote it whole (``>``, then ``>>``
        appends), else what the caller's :attr:`read_file` gives for it (relative to where the text starts,
        or absolute); None when not known."""
        where = resolve_proc(path, self.frame.cwd)
        if where is None:
            return None
        parts: list[str] = []
        for write in reversed(self.writes):
            if write.location() != where:
                continue
            if write.content is None or write.maybe or write.source is not None:
                return None  # written on some paths only, copied, or with text known at run time
            parts.append(write.content)
            if not write.append:
                return "".join(reversed(parts))
        if self.read_file is None:
            return None
        found = self.read_file(where)
        return None if found is None else found + "".join(reversed(parts))

    # ---- bounds -------------------------------------------------------------------------------------

    def tick(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.ceiling:
            raise Stop("too large", f"more than {self.limit:,} evaluation steps")
        if self.steps & 1023 == 0 and time.monotonic() > self.deadline:
            raise Stop("timeout", f"more than {MAX_SECONDS:g} s to evaluate")

    def bounded(self, node: tree_sitter.Node, run: Callable[[], Result], *, sets: bool) -> Result:
        """Run a construct (a loop, a command substitution) on at most 7/8 of the steps left to what holds it.
        Past that, or past a nesting bound inside it, exploring stops inside it, never after it: the variables
        it can be seen to set (``sets``: it runs in this shell) may now hold unknown values, an :class:`Unknown`
        names it, and the evaluation goes on with what follows. A timeout, or the steps of what holds it
        spent too, still stops everything above."""
        def stopped(why: str, kind: UnknownKind) -> None:
            self.stopped_inside(node, why, kind)
            if sets:
                self.forget(names_set(node, self.text.src), self.where(node))
        return self._contained(run, stopped)

    def _contained(self, run: Callable[[], Result], stopped: Callable[[str, UnknownKind], None]) -> Result:
        """``run`` on at most 7/8 of the steps left (an eighth kept for what follows it): a bound met inside it
        restores the frame, says why through ``stopped`` and gives an unknown result; a timeout, or the steps of
        what holds it spent too, goes on up."""
        start, outer = self.steps, self.ceiling
        own = self.ceiling = start + (outer - start) * 7 // 8
        saved = (self.frame, self.depth, self.nesting, self.text, self.maybe)
        try:
            return run()
        except Stop as stop:
            if stop.kind == "timeout" or self.steps > outer:
                raise
            self.frame, self.depth, self.nesting, self.text, self.maybe = saved
            self.ceiling = outer
            self.partial = True
            stopped("too many evaluation steps" if stop.kind == "too large" and self.steps > own else stop.message,
                    stop.kind)
            return Result("unknown", None)
        finally:
            self.ceiling = outer

    def guarded(self, run: Callable[[], Result], construct: str, where: Where, *, here: bool) -> Result:
        """Run a text another file or shell brings (``source``, ``BASH_ENV``, ``bash script.sh``, ``bash -c``)
        as :meth:`bounded` runs a loop: past 7/8 of the steps left, or past the nesting bound inside it (nine
        scripts each sourcing the next), exploring stops inside it and the evaluation goes on after it, and an
        :class:`Unknown` names it. ``here``: the text runs in this shell (``source``, ``BASH_ENV``): what it
        did not get to may set any variable, so every variable set so far may now hold an unknown value."""
        def stopped(why: str, kind: UnknownKind) -> None:
            said = short(f"{short(construct, 64)} (stopped inside it: {why})")
            if (kind, said) not in self.guard_stops:  # once per construct: recursion meets it at each level
                self.guard_stops.add((kind, said))
                self.unknowns.append(Unknown(kind, said, where))
            if here:
                names: dict[str, bool] = {}
                frame: Frame | None = self.frame
                while frame is not None:
                    names.update(dict.fromkeys(frame.vars, False))
                    frame = frame.parent
                self.forget({n: False for n in names if n not in self.platform}, where)
        return self._contained(run, stopped)

    def stopped_inside(self, node: tree_sitter.Node, why: str, kind: UnknownKind) -> None:
        """Say that a bound stopped the evaluation inside ``node``, once per construct: the outermost one
        stopped stands for those inside it (the messages name no step counts, which vary with the seeds)."""
        text = self.text.original
        key = (id(text), node.start_byte, node.end_byte)
        if key in self.abandoned:
            return
        inside = [k for k in self.abandoned if k[0] == key[0] and key[1] <= k[1] and k[2] <= key[2]]
        for k in inside:
            unknown, _ = self.abandoned.pop(k)
            self.unknowns.remove(unknown)
        unknown = Unknown(kind, short(f"{short(self.raw(node), 64)} (stopped inside it: {why})"), self.where(node))
        self.unknowns.append(unknown)
        self.abandoned[key] = (unknown, text)  # the text held: its id stays its own

    def forget(self, names: Mapping[str, bool], where: Where) -> None:
        """``names`` (name -> may be exported) may hold any value now: each keeps its binding as one
        alternative, an unknown value the other. The steps are counted without stopping here: the next
        step of what holds the construct stops if they were too many."""
        for name, exported in names.items():
            name = self.resolve(name)
            old = self.binding(name)
            if old and any(v is not None and "r" in v.attributes for v in old):
                continue  # readonly: nothing can change it
            export = exported or self.frame.allexport or name in self.marked or any(
                v is not None and v.exported for v in old or ())
            unknown = Variable(name, None, self.label, where, exported=export, maybe=True)
            self.set_binding(name, merge_binding((unknown,), old) if old else (unknown,))
        self.steps += 1 + len(names)

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
        self.unknowns.append(Unknown(kind, short(construct), where, names))

    # ---- parsing ------------------------------------------------------------------------------------

    def parse(self, text: str, *, first_line: int, within: tuple[str, ...]) -> tuple[Text, tree_sitter.Node]:
        original = text.encode("utf-8", "surrogatepass")
        if len(original) > MAX_BYTES:
            raise Stop("too large", f"{len(original):,} bytes (at most {MAX_BYTES:,} are read)")
        src = original
        if self.placeholders is not None:
            src = _PLACEHOLDER.sub(self._placeholder, original)
        if _expansion_depth(src) > MAX_DEPTH:
            raise Stop("too deep", f"expansions nested more than {MAX_DEPTH} levels deep")
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
            raise Stop("timeout", f"more than {MAX_SECONDS:g} s to parse")
        self.tick(max(1, len(src) // 256))
        return Text(src, original, first_line, within), tree.root_node

    def _placeholder(self, match: re.Match[bytes]) -> bytes:
        body = match.group(0)[3:-2]
        name = "__" + body.translate(_NAME_BYTE).decode("ascii")
        self.placeholder_names[name] = body.decode("utf-8", "replace").strip()
        return b"${" + name.encode() + b"}"

    # ---- frames and variables -----------------------------------------------------------------------

    def binding(self, name: str) -> Binding | None:
        frame: Frame | None = self.frame
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
            if target is None or not is_name(target):
                return name
            name = target
        return name

    def set_binding(self, name: str, binding: Binding) -> None:
        """Bind in the current frame; a branch's frame is merged as "maybe" when it ends, a function's
        into its caller (its locals dropped), a subshell's or child shell's discarded."""
        self.version += 1
        self.frame.vars[name] = binding

    def function_frame(self) -> Frame | None:
        frame: Frame | None = self.frame
        while frame is not None and frame.kind not in ("child", "top"):
            if frame.kind == "function":
                return frame
            frame = frame.parent
        return None

    def push(self, kind: Literal["branch", "subshell", "function", "child"]) -> Frame:
        parent = self.frame
        frame = Frame(kind, parent, cwd=parent.cwd, allexport=parent.allexport and kind != "child",
                       positional=parent.positional, zero=parent.zero)
        self.frame = frame
        self.version += 1
        return frame

    def pop(self, frame: Frame, *, merge: Literal["discard", "maybe", "keep"]) -> None:
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
                self.set_binding(name, merge_binding(new, self.binding(name)))
        parent.functions.update(frame.functions)
        if merge == "keep":
            parent.cwd = frame.cwd
            parent.allexport = frame.allexport
        elif frame.cwd != parent.cwd:
            parent.cwd = None

    def visible(self) -> dict[str, Binding]:
        """Every variable the current frame sees, innermost binding first."""
        out: dict[str, Binding] = {}
        frame: Frame | None = self.frame
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

    def function(self, name: str) -> Function | None:
        frame: Frame | None = self.frame
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
            previous = single_value(old)
            if "i" in attrs:
                value = None if previous is None else bash_integer(f"{previous}+({value})")
            else:
                value = None if previous is None else previous + value
        elif value is not None and append and old is None and not self.knows(name):
            value, unknown = None, (*unknown, f"${name}")
        elif "i" in attrs and value is not None:
            value = bash_integer(value)
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
        self.assignments.append(Assignment(name, value, short(raw), where, how, export, self.maybe, unknown))
        if value is None and how != "read":
            self.unknown(cause_kind(unknown), raw, where, (name,))

    def knows(self, name: str) -> bool:
        """Whether a binding for the name exists (set, seeded or unset), as opposed to inherited."""
        return self.binding(name) is not None

    def unset(self, name: str, *, raw: str, where: Where) -> None:
        name = self.resolve(name)
        old = self.binding(name)
        if old and any(v is not None and "r" in v.attributes for v in old):
            return
        self.set_binding(name, (None,))
        self.assignments.append(Assignment(name, None, short(raw), where, "unset", False, self.maybe))

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
            self.assignments.append(Assignment(name, new[0].value, short(raw), where, how, exported, self.maybe))

    # ---- control flow -------------------------------------------------------------------------------

    def scoped(self, run: Callable[[], Result], *catches: str) -> Result:
        try:
            return run()
        except Flow as flow:
            if flow.kind in catches:
                return Result("unknown", None)
            raise

    def flow(self, kind: Literal["exit", "return", "break", "continue"]) -> None:
        """exit/return/break/continue: followed when certain; on a maybe path the run goes on without it."""
        if not self.maybe:
            raise Flow(kind)


def merge_binding(new: Binding, old: Binding | None) -> Binding:
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


def single_value(binding: Binding) -> str | None:
    values = {v.value if v is not None else "" for v in binding}
    if len(values) == 1:
        return values.pop()
    return None


def cause_kind(causes: tuple[str, ...]) -> UnknownKind:
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
