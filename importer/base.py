"""What an import produces: draft stack entries, where each came from, and what was left to the user."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel import regex as linear
from kernel.errors import UserError

PLACEHOLDER_MARK = "TODO(amlgpu import)"
"""Every value left for the user starts with this, so it is found with one search and never planned."""

_SLUG = linear.compile(r"[^A-Za-z0-9_-]+")


class ImportInputError(UserError):
    """Input the importer cannot read (exit 2): the message names the file, the line and what to do."""

    def __init__(self, message: str, *, file: str, line: int | None = None) -> None:
        super().__init__(message, file=file, key=f"line {line}" if line else None)


@dataclass(frozen=True)
class Placeholder:
    """A value that cannot be derived from the source: the entry holds a marked string in its place."""

    file: str
    line: int
    key: str
    why: str
    fix: str
    in_value: bool = True
    """The marked string stands in the entry in place of the value; False: a comment above the entry says it
    (what the source sets that the entry cannot hold, or that lies outside the entry, such as a file)."""

    @property
    def value(self) -> str:
        return f"{PLACEHOLDER_MARK}: {self.why}; {self.fix} ({self.file}:{self.line})"


@dataclass
class Draft:
    """One imported run: its ``jobs`` entry, the stack environments it needs, and notes for the user."""

    file: str
    """The source as given on the command line (shown in comments and messages)."""
    line: int
    kind: str
    """``CLI v2 job``, ``SDK v1 ScriptRunConfig`` or ``SDK v2 command()``."""
    run: dict[str, Any]
    environments: list[dict[str, Any]] = field(default_factory=list)
    placeholders: list[Placeholder] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    key_lines: dict[str, int] = field(default_factory=dict)
    """The line of each top-level key in the source, where known (job files): errors point at it."""
    named_in_source: bool = False
    """The run's name is the source's own (a job file's ``name:``), not derived from the file's name."""

    def line_of(self, key: object) -> int:
        return self.key_lines.get(str(key), self.line)

    @property
    def origin(self) -> str:
        return f"{self.file}:{self.line}"

    def leave(self, key: str, line: int, why: str, fix: str) -> str:
        """Record a placeholder for ``key`` and return the marked value to put there."""
        placeholder = Placeholder(self.file, line, key, why, fix)
        self.placeholders.append(placeholder)
        return placeholder.value

    def todo(self, key: str, line: int, why: str, fix: str) -> None:
        """Record what the source sets and the entry does not hold: a marked comment above the entry (and exit 1),
        so nothing the source said is dropped without a word."""
        self.placeholders.append(Placeholder(self.file, line, key, why, fix, in_value=False))

    @property
    def comments(self) -> list[str]:
        """The entry's comment lines: where it came from, the notes, and the TODOs not held in a value."""
        return [f"imported from {self.origin} ({self.kind})", *(f"note: {n}" for n in self.notes),
                *(p.value for p in self.placeholders if not p.in_value)]


@dataclass
class Source:
    """A file to import, with the folder its relative paths are read against."""

    path: Path
    display: str

    @property
    def folder(self) -> Path:
        return self.path.parent


def slug(text: str, fallback: str = "run") -> str:
    """A run or environment name Azure accepts, from free text (``train job.py`` -> ``train-job-py``)."""
    name = _SLUG.sub("-", text).strip("-_")
    if not name or not name[0].isalpha():
        name = f"{fallback}-{name}" if name else fallback
    return name[:255]


def contains_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith(PLACEHOLDER_MARK)
    if isinstance(value, dict):
        return any(contains_placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_placeholder(v) for v in value)
    return False
