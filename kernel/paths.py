"""Paths a stack names, kept inside the folder they belong to.

A stack file and its folders are untrusted input (the pull-request gate plans fork pull requests), and
a symbolic link can point anywhere: ``code: leak`` with ``leak -> /etc`` would have the code scan read,
and an upload send, files from outside the project. Every path is therefore judged by where it leads
with symbolic links followed, never by how it is spelled.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def resolve_inside(base: Path, relative: str | Path) -> Path | None:
    """``base / relative`` with every symbolic link followed, or None when that lands outside ``base``
    (``base`` itself counts as inside). A path that does not exist is judged by what exists of it."""
    top = base.resolve()
    target = (top / relative).resolve()
    return target if target.is_relative_to(top) else None


def files_inside(folder: Path, *, skip_dirs: frozenset[str] = frozenset()) -> Iterator[Path]:
    """Every regular file under ``folder``, walked in sorted order, a linked file only when its target is
    inside ``folder`` too; linked folders are not followed (one inside is walked where it really is).

    What a scan or an upload of ``folder`` may read: a link that leads outside it is neither listed nor
    followed; :func:`links_outside` names them."""
    top = folder.resolve()
    for current, dirs, files in os.walk(folder, followlinks=False):
        # os.walk never descends into a linked folder: one inside is walked where it really is.
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs)
        for name in sorted(files):
            path = Path(current, name)
            if path.is_symlink() and not path.resolve().is_relative_to(top):
                continue
            if path.is_file():
                yield path


def links_outside(folder: Path, *, skip_dirs: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Paths (relative to ``folder``, POSIX, sorted) of the symbolic links under it that lead outside it
    (or nowhere): what :func:`files_inside` leaves out."""
    top = folder.resolve()
    found = []
    for current, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs)
        here = Path(current)
        for name in [*dirs, *files]:
            path = here / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(top) or not target.exists():
                    found.append(path.relative_to(folder).as_posix())
    return tuple(sorted(found))
