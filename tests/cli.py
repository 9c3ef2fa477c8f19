"""The console script as a user runs it: the one way the tests start ``amlgpu`` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

AMLGPU = Path(sys.executable).with_name("amlgpu")
"""The console script of the interpreter running the tests (the project's .venv under ``make test``)."""


def amlgpu(cwd: Path, *args: str, env: Mapping[str, str] | None = None,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``amlgpu ARGS`` in ``cwd``, its output captured as text, no standard input; ``env`` is the whole
    environment (default: this process's), so a test that narrows it says exactly what the command sees."""
    return subprocess.run([str(AMLGPU), *args], cwd=cwd, env=dict(os.environ if env is None else env),
                          capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)
