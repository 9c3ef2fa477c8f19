"""Writing outputs: canonical JSON and all-or-nothing output folders.

An output folder is built in a temporary sibling and swapped in by rename once every file is written,
so a failed or interrupted command leaves the previous output exactly as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON that is byte-identical for equal values: sorted keys, fixed indent, trailing newline."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # newline="\n": the same bytes on every platform.
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


@contextlib.contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces ``target`` whole, on failure it vanishes."""
    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield staging
        previous = None
        if target.exists():
            previous = target.with_name(f".{target.name}.{os.getpid()}.old")
            os.replace(target, previous)
        os.replace(staging, target)
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
