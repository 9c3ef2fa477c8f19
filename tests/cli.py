"""``amlgpu`` in a fresh process, as a user or a workflow runs it: the one way the tests start it.

Two ways to start it, the same answers:

* by default through the fork server (``tests/forkserver.py``): a process forked from one that has imported the
  packages already, which becomes ``amlgpu ARGS`` with the caller's working folder, environment and streams and
  exits with the command's status. It skips the four CPU seconds of imports a fresh interpreter pays, which is most of
  what a command costs and was most of the suite's time;
* ``fresh=True``: the installed console script, exec'd. For what only a real start-up shows: the entry point, the
  interpreter's start (``--version`` importing nothing it does not use), import-time environment, a signal during
  the imports. ``tests/e2e/test_docs_commands.py`` checks that the two give the same status, stdout and stderr.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests import forkserver

AMLGPU = Path(sys.executable).with_name("amlgpu")
"""The console script of the interpreter running the tests (the project's .venv under ``make test``)."""

ONE_GIB = 1 << 30
"""An address-space cap for a command that reads hostile input: an interpreter with pydantic maps a few hundred
MB."""
TWO_GIB = 2 << 30
"""The cap for a whole plan of hostile input, which starts threads and the Pulumi engine (a Dockerfile attack
needed 4.3 GB)."""


def amlgpu(cwd: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 300,
           fresh: bool = False, address_space: int | None = None) -> subprocess.CompletedProcess[str]:
    """``amlgpu ARGS`` in ``cwd``, its output captured as text, no standard input; ``env`` is the whole
    environment (default: this process's), so a test that narrows it says exactly what the command sees;
    ``address_space`` caps the command's memory (``RLIMIT_AS``, bytes); ``fresh``: the console script itself."""
    program, cap = (AMLGPU, address_space) if fresh else (forkserver.client(address_space), None)
    return subprocess.run([str(program), *args], cwd=cwd, env=dict(os.environ if env is None else env),
                          capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
                          preexec_fn=None if cap is None else functools.partial(forkserver.cap_address_space, cap))
