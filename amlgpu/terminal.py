"""Everything amlgpu prints holds no secret and is inert in a terminal and in a GitHub Actions log.

A stack key, a run name, a file name in a code folder or a value quoted in an error message comes from
files a pull request writes, and the pull-request workflow prints what ``amlgpu plan`` says. GitHub's runner
reads every line a step prints: a line that starts (after blanks) with ``::`` is a workflow command
(``::error file=...::`` turns into an annotation, ``::add-mask::``, ``::set-output``, ``::stop-commands::``
stops reading commands), and ``##[`` anywhere in a line is the older form (actions/runner,
``ActionCommand.TryParseV2`` trims leading whitespace, ``TryParse`` looks for ``##[``). The runner splits
lines at ``\\n`` and at ``\\r``, so a carriage return inside a value starts a new line.

:func:`clean` makes a text inert: control characters other than newline and tab are dropped (``\\r``, escape
sequences that repaint a terminal, C1 controls) together with the Unicode controls that reorder what a
reader sees (bidirectional overrides and isolates), each line's leading ``::`` is removed, and ``##[``
loses its bracket. :func:`cleaned_output` puts a :class:`CleanStream` in front of ``sys.stdout`` and
``sys.stderr`` for the duration of a command, so every ``print`` goes through it: one place, not one per
message. The same place masks what :mod:`kernel.secrets` knows to be a secret (a value the stack's gate
flags, a known credential shape) as ``[secret]``, the way :mod:`planning.artifacts` masks every file it writes.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from kernel import regex as linear
from kernel import secrets

# Python's re: one character class, one step per character, and every write goes through it (RE2's binding takes
# 1.8 us a line against re's 0.4 us).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls, and the bidirectional marks, embeddings, overrides and
isolates (Unicode TR9), which make a line read differently from what it holds."""
_OLD_COMMAND = "##["


def _without_command(line: str) -> str:
    """``line`` without the colons that start it after blanks (``  ::error`` -> ``  error``)."""
    body = line.lstrip()
    return line[: len(line) - len(body)] + body.lstrip(":") if body.startswith(":") else line


def _undecided(line: str) -> bool:
    """A line start that may still become a command once more text arrives: blanks and colons only."""
    return not line.replace(":", "").strip()


def clean_line(line: str) -> str:
    """One line (no newline in it) made inert: see the module docstring."""
    line = _CONTROL.sub("", line)
    line = _without_command(line)
    while _OLD_COMMAND in line:
        line = line.replace(_OLD_COMMAND, "##")
    return line


def clean(text: str) -> str:
    """``text`` made inert line by line (newlines kept; ``\\r`` dropped, not treated as a line end)."""
    return "\n".join(clean_line(line) for line in _CONTROL.sub("", text).split("\n"))


RED, YELLOW, RESET = "\x1b[31m", "\x1b[33m", "\x1b[0m"
_FINDING = r"\S+:\d+(?::\d+)?  [a-z0-9-]+  \[(?:critical|high|medium|low)\]  "
_RED = linear.compile(rf"^(?:{_FINDING}|error:|Mandatory policy failures:|\d+ mandatory failures? \(exit)")
"""A mandatory failure as the plan lists it (unindented ``file:line  rule  [severity]  ...``), its heading and
count, and an error."""
_YELLOW = linear.compile(rf"^(?:  {_FINDING}|Advisory findings|\s*warning:)")
"""An advisory finding as the plan lists it (indented two spaces), its heading, and a warning."""


GREEN, BRIGHT_MAGENTA = "\x1b[32m", "\x1b[95m"
STEP_COLOURS = {"+ ": GREEN, "~ ": YELLOW, "+-": BRIGHT_MAGENTA, "- ": RED}
"""``pulumi preview``'s colour for each step's glyph (pulumi/pulumi, pkg/resource/deploy/step.go ``Color``:
create green, update yellow, replace bright magenta, delete red; an unchanged resource is not coloured)."""
_TREE_LINE = linear.compile(r"^(\+-|[+~-] ) (?:  )*\S")
"""A resource of the plan's tree (planning.render.plan_tree): its step's glyph, a space, the tree's indentation."""
_STEP = r"(\+ |~ |- |\+-)\d+ to (?:create|update|delete|replace)"
_STEPS_LINE = linear.compile(rf"^Resources: (?:{_STEP}, )*\d+ unchanged$")
_STEP_PIECE = linear.compile(_STEP)
"""The summary line of a plan against a base (planning.render.change_summary) and each count in it."""


def paint_line(line: str) -> str:
    """``line`` (with or without its newline) red or yellow as :data:`_RED` / :data:`_YELLOW` say, a resource of the
    plan's tree and each count of its summary in its step's colour (:data:`STEP_COLOURS`), else as it is."""
    body = line.rstrip("\n")
    if _STEPS_LINE.match(body):
        painted = _STEP_PIECE.sub(lambda m: f"{STEP_COLOURS[m.group(1)]}{m.group(0)}{RESET}", body)
        return painted + line[len(body):]
    tree = _TREE_LINE.match(body)
    colour = RED if _RED.match(body) else YELLOW if _YELLOW.match(body) else \
        STEP_COLOURS[tree.group(1)] if tree else None
    return line if colour is None or not body else f"{colour}{body}{RESET}{line[len(body):]}"


def colour_wanted(stream: TextIO, *, force: bool = False) -> bool:
    """Whether ``stream`` gets colour: forced, or a terminal with neither NO_COLOR (any value) nor TERM=dumb."""
    if force:
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def use_colour(*, force: bool = False) -> None:
    """Turn colour on for ``sys.stdout`` and ``sys.stderr`` where :func:`colour_wanted` says (inside
    :func:`cleaned_output`; a stream that is not a :class:`CleanStream` is left alone)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, CleanStream):
            stream.colour = colour_wanted(stream.stream, force=force)


class CleanStream:
    """A text stream that writes what it is given through :func:`clean_line`, line by line, secrets masked.

    A line is written once complete; :meth:`flush` writes the incomplete one too, except a start that could
    still become a command (blanks and colons only) or a trailing ``#`` that could still become ``##[``,
    which wait for the next write. Everything else (``fileno``, ``encoding``, ``isatty``...) is the wrapped
    stream's."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._line = ""
        """The current line's text not yet written."""
        self._started = False
        """Whether part of the current line has been written (its start was judged already)."""
        self.colour = False
        """Whether whole lines are painted (:func:`paint_line`); see :func:`use_colour`."""

    def write(self, text: str) -> int:
        self._line += _CONTROL.sub("", text)
        *complete, self._line = self._line.split("\n")
        for line in complete:
            self._emit(line + "\n")
        return len(text)

    def _emit(self, piece: str) -> None:
        piece = secrets.mask(piece)  # a whole line, or what a flush could not hold back
        if self._started:
            while _OLD_COMMAND in piece:
                piece = piece.replace(_OLD_COMMAND, "##")
        else:
            piece = clean_line(piece)
            if self.colour and piece.endswith("\n"):
                piece = paint_line(piece)
        self.stream.write(piece)
        self._started = not piece.endswith("\n")

    def flush(self) -> None:
        line = self._line
        if line and not (not self._started and _undecided(line)):
            keep = len(line) - len(line.rstrip("#"))
            self._line = line[len(line) - keep:] if keep else ""
            ready = line[: len(line) - keep]
            if ready:
                self._emit(ready)
        self.stream.flush()

    def write_control(self, sequence: str) -> None:
        """Write the tool's own terminal control (``\r``, an erase-line sequence: run-local's status line on a
        terminal) as it is, never user data: the line held back is written first, and what follows starts a
        new line."""
        if self._line:
            self._emit(self._line)
            self._line = ""
        self.stream.write(sequence)
        self._started = False

    def finish(self) -> None:
        """Write what is held back (the command is ending: nothing can follow it on the line)."""
        if self._line:
            self._emit(self._line)
            self._line = ""
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def cleaned_output() -> Iterator[None]:
    """While active, ``sys.stdout`` and ``sys.stderr`` write through :class:`CleanStream`. Each command starts
    with no secret remembered (a caller of ``main()`` may run many)."""
    secrets.forget_all()
    original = sys.stdout, sys.stderr
    streams = CleanStream(sys.stdout), CleanStream(sys.stderr)
    sys.stdout, sys.stderr = streams
    try:
        yield
    finally:
        for stream in streams:
            with contextlib.suppress(Exception):  # a closed pipe: nothing more can be written anyway
                stream.finish()
        sys.stdout, sys.stderr = original
