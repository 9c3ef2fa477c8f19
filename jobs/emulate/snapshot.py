"""The run's snapshot: a fresh copy of the code folder, as Azure ML uploads it.

Azure ML leaves out what the folder's ``.amlignore`` (or, failing that, ``.gitignore``) lists. The
patterns follow gitignore's rules that matter for a code folder: ``#`` comments, ``!`` negation
(the last matching pattern wins), a trailing ``/`` for folders only, a pattern with an inner ``/``
anchored at the folder's root, ``*``/``?``/``[...]`` and ``**`` wildcards. A file inside an ignored
folder cannot be re-included, as in git.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from kernel import regex as linear

IGNORE_FILES = (".amlignore", ".gitignore")


@dataclass(frozen=True)
class _Pattern:
    regex: linear.Pattern
    negated: bool
    folders_only: bool
    anchored: bool


_DOUBLE_STAR = linear.compile(r"(\*\*/|/\*\*$)")
_GLOB_TOKEN = linear.compile(r"(?s)\[[^]]+\]|.")


def _compile(line: str) -> _Pattern | None:
    line = line.rstrip("\n").rstrip()
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    line = line[1:] if negated else line
    folders_only = line.endswith("/")
    line = line.rstrip("/")
    anchored = "/" in line
    line = line.lstrip("/")
    parts = []
    for piece in _DOUBLE_STAR.split(line):
        if piece == "**/":
            parts.append("(?:.*/)?")
        elif piece == "/**":
            parts.append("/.*")
        elif piece:
            parts.append(_glob_to_regex(piece))
    try:
        compiled = linear.compile("(?s)" + "".join(parts) + r"\z")
    except ValueError:  # git skips a line it cannot read (e.g. a range [z-a]); so does Azure ML's upload
        return None
    return _Pattern(compiled, negated, folders_only, anchored)


def _glob_to_regex(glob: str) -> str:
    """One glob without ``**``: ``*`` and ``?`` never cross a ``/`` (unlike :mod:`fnmatch`)."""
    out = []
    for token in _GLOB_TOKEN.findall(glob):
        if token == "*":
            out.append("[^/]*")
        elif token == "?":
            out.append("[^/]")
        elif len(token) > 2 and token.startswith("["):
            body = token[1:-1]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
        else:
            out.append(linear.escape(token))
    return "".join(out)


def read_patterns(code: Path) -> list[_Pattern]:
    """The ignore patterns Azure ML applies to ``code`` (from .amlignore, else .gitignore)."""
    for name in IGNORE_FILES:
        path = code / name
        if path.is_file():
            compiled = (_compile(line) for line in path.read_text(encoding="utf-8").splitlines())
            return [p for p in compiled if p is not None]
    return []


def is_ignored(relative: str, *, is_dir: bool, patterns: list[_Pattern]) -> bool:
    """Whether the entry at ``relative`` (``/``-separated, from the code folder) is left out."""
    name = relative.rsplit("/", 1)[-1]
    ignored = False
    for pattern in patterns:
        if pattern.folders_only and not is_dir:
            continue
        if pattern.regex.match(relative if pattern.anchored else name):
            ignored = not pattern.negated
    return ignored


def copy_code(code: Path, destination: Path) -> int:
    """Copy ``code`` to ``destination`` (which must not exist) without the ignored entries; returns
    the number of files copied. Symlinks are copied as links, as the upload would record them, except
    those that lead outside ``code``: like ``amlgpu submit``, the snapshot leaves them out."""
    patterns = read_patterns(code)
    copied = 0
    top = code.resolve()

    def ignore(folder: str, names: list[str]) -> set[str]:
        nonlocal copied
        base = Path(folder).relative_to(code).as_posix()
        skipped = set()
        for name in names:
            relative = name if base == "." else f"{base}/{name}"
            is_dir = os.path.isdir(os.path.join(folder, name)) and not os.path.islink(os.path.join(folder, name))
            path = Path(folder, name)
            if is_ignored(relative, is_dir=is_dir, patterns=patterns) or (
                path.is_symlink() and not path.resolve().is_relative_to(top)
            ):
                skipped.add(name)
            elif not is_dir:
                copied += 1
        return skipped

    shutil.copytree(code, destination, symlinks=True, ignore=ignore)
    return copied
