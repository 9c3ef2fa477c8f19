"""Writing outputs: canonical JSON, all-or-nothing output folders, and no secret in either.

Every file the CLI writes goes through :func:`canonical_json` (data) and :func:`write_text` (text), and
everything it prints through :func:`amlgpu.terminal.cleaned_output`: each replaces what :mod:`kernel.secrets`
knows to be a secret (a value the stack's gate flags, a known credential shape) with ``[secret]``, as Pulumi shows a
secret output. ``amlgpu submit`` still sends the real value to Azure, where the job needs it.

An output folder is built in a temporary sibling and swapped in by rename once every file is written,
so a failed or interrupted command (an exception, Ctrl-C or SIGTERM) leaves the previous output exactly
as it was. Because the swap replaces the folder whole, :func:`check_replaceable` first makes sure the
folder holds nothing but an earlier output: never the project, never files a user put there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kernel import secrets
from kernel.errors import UserError
from kernel.interrupts import cleanup_on_interrupt, terminate_as_interrupt

OutputLayout = Mapping[str, str | None]
"""The top-level names an output folder may hold: ``None`` for a file, a suffix (``.yml``) for a folder
holding only files with that suffix."""


def canonical_json(value: Any) -> str:
    """JSON that is byte-identical for equal values: sorted keys, fixed indent, trailing newline; secrets
    masked (a value judged a secret under its key, a remembered one, a known shape)."""
    return json.dumps(secrets.mask_data(value), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_text(path: Path, text: str) -> None:
    """Write ``text`` with every remembered secret and known credential shape masked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # newline="\n": the same bytes on every platform.
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        handle.write(secrets.mask(text))


def shown_path(path: Path) -> str:
    """``path`` as shown to the user: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_replaceable(target: Path, layout: OutputLayout, *, keep: Iterable[Path], key: str) -> None:
    """Raise a :class:`UserError` (naming ``key``, the flag that chose ``target``) unless replacing
    ``target`` whole can only delete an earlier output of the same layout.

    ``keep`` are folders that must survive (the project root, the working folder): ``target`` may be
    neither of them nor hold one.
    """
    resolved = target.resolve()
    for folder in keep:
        folder = folder.resolve()
        if resolved == folder or resolved in folder.parents:
            raise UserError(
                f"{target} is or holds {folder}; an output folder is replaced whole, so writing there would "
                "delete it: choose a new or empty folder (the default is build/<stack>)",
                key=key,
            )
    if not resolved.exists():
        return
    if not resolved.is_dir():
        raise UserError(f"{target} is a file, not a folder", key=key)
    unexpected = sorted(_unexpected(resolved, layout))
    if unexpected:
        shown = ", ".join(unexpected[:3]) + (f" and {len(unexpected) - 3} more" if len(unexpected) > 3 else "")
        raise UserError(
            f"{target} holds {shown}, which this command does not write; the folder is replaced whole, "
            "so writing there would delete it: choose a new or empty folder",
            key=key,
        )


def _unexpected(folder: Path, layout: OutputLayout) -> Iterator[str]:
    for entry in folder.iterdir():
        if entry.name not in layout:
            yield entry.name
            continue
        suffix = layout[entry.name]
        if suffix is None:
            if not entry.is_file() or entry.is_symlink():
                yield entry.name
        elif not entry.is_dir() or entry.is_symlink():
            yield entry.name
        else:
            yield from (
                f"{entry.name}/{inner.name}"
                for inner in entry.iterdir()
                if inner.is_symlink() or not inner.is_file() or inner.suffix != suffix
            )


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces ``target`` whole, on failure it vanishes."""
    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with cleanup_on_interrupt(), terminate_as_interrupt():
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        # mkdtemp makes the folder private (0700); the output gets the permissions mkdir would give it.
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)
        try:
            yield staging
            previous = None
            if target.exists():
                previous = target.with_name(f".{target.name}.{os.getpid()}.old")
                os.replace(target, previous)
            try:
                os.replace(staging, target)
            except BaseException:
                if previous is not None:  # put the earlier output back: never leave no output at all
                    os.replace(previous, target)
                raise
            if previous is not None:
                shutil.rmtree(previous, ignore_errors=True)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
