"""Ctrl-C at any moment: exit 130 with one line, no traceback, nothing half-written.

A ``KeyboardInterrupt`` raised wherever the signal lands is not enough: it can land inside a library's
import (pulumi_azure_native imports its modules lazily) or in code that catches ``BaseException``, which
leaves a module half-initialised; the plan then died later with ``module ... has no attribute ...``,
a traceback and exit 1 ("a mandatory policy failed"). So the console script handles SIGINT itself:

* outside a cleanup section, nothing needs undoing (a plan writes nothing before its output folder is
  staged): the process says ``interrupted`` and leaves at once with 130, whatever it was doing;
* inside :func:`cleanup_on_interrupt` (an output folder being staged, run-local's work folder, the base
  plan's git worktree, ``import --write``'s temporary copy), the signal raises ``KeyboardInterrupt`` once, so
  the section's ``finally`` undoes what it started; a second Ctrl-C while that runs is ignored, so the cleanup
  completes. A cleanup that a first Ctrl-C could otherwise cut short runs :func:`shielded`: the signal then
  waits for the cleanup's end.

:func:`install` is called by the package's ``__init__`` when the process was started as ``amlgpu`` (the
console script or ``python -m amlgpu``), before anything else is imported; a program that imports the
package as a library (the test suite) keeps Python's own handling.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

EXIT_INTERRUPTED = 130

_sections = 0
_unwinding = False
_shields = 0
_pending = False


def install() -> None:
    """Handle SIGINT as described above (main thread only; elsewhere Python's handling stays).

    SIGINT is also unblocked: a Ctrl-C sent before this ran (while the interpreter started) and held
    blocked by a parent is delivered now, to this handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _on_interrupt)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    global _unwinding, _pending
    if _shields:
        _pending = True  # delivered when the shielded cleanup ends (see shielded())
        return
    if _sections:
        if _unwinding:
            return  # a second Ctrl-C while a cleanup runs: let it finish
        _unwinding = True
        raise KeyboardInterrupt
    leave()


def leave() -> NoReturn:
    """Flush what was printed, say ``interrupted`` on stderr and exit 130 now (no atexit, no thread joins:
    the Pulumi runtime's worker threads may wait forever on futures that will never resolve)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a print the signal interrupted: its buffer may be busy
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(2, b"interrupted\n")
    os._exit(EXIT_INTERRUPTED)


@contextlib.contextmanager
def cleanup_on_interrupt() -> Iterator[None]:
    """Within this block a Ctrl-C raises ``KeyboardInterrupt`` (once) instead of ending the process, so
    the block's own ``finally``/``except`` can undo what it started."""
    global _sections
    _sections += 1
    try:
        yield
    finally:
        _sections -= 1


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While active, SIGTERM raises KeyboardInterrupt as Ctrl-C does, so ``finally`` blocks clean up.

    Python's default for SIGTERM is to die on the spot, which would leave a staging folder behind.
    Signal handlers can only be set from the main thread; elsewhere the default stays.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Within this block a Ctrl-C waits until the block ends, then takes effect as it would have: a cleanup
    (removing a worktree, a temporary file) runs to its end even when the signal lands inside it. Meant for
    the ``finally`` of a :func:`cleanup_on_interrupt` section."""
    global _shields, _pending
    _shields += 1
    try:
        yield
    finally:
        _shields -= 1
        if not _shields and _pending:
            _pending = False
            _on_interrupt(signal.SIGINT, None)
