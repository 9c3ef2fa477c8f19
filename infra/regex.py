"""Regular expressions that run in linear time, for everything a stack file or a folder can feed us.

Python's ``re`` backtracks: ``\\$\\[\\[.*?\\]\\]`` over a command made of ``$[[`` repeated, or a JWT
pattern over ``eyJ`` repeated, takes time quadratic in the input (a 292 KiB stack file planned for
225 s). The pull-request gate plans fork pull requests, so every pattern applied to input a user
controls is compiled here, by RE2 (``google-re2``), which guarantees time linear in the input. RE2 has
no look-around and no back-references: a pattern that needs them does not compile, and the module
that declares it fails on import (the suite imports every module), so none can slip back in.

Differences from ``re`` to keep in mind: ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII-only (write
``\\pL`` for any letter); flags are written inline (``(?i)``, ``(?s)``, ``(?m)``); ``\\Z`` is ``\\z``.
Patterns over our own text (docstrings, our data files) may keep using ``re``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import re2


class Match(Protocol):
    """One match (``re.Match``'s interface; ``group`` is ``str`` for ``str`` input, ``bytes`` for ``bytes``)."""

    @property
    def lastgroup(self) -> str | None: ...
    def group(self, *index: int | str) -> Any: ...
    def groups(self) -> tuple[Any, ...]: ...
    def start(self, group: int | str = 0) -> int: ...
    def end(self, group: int | str = 0) -> int: ...
    def span(self, group: int | str = 0) -> tuple[int, int]: ...


class Pattern(Protocol):
    """A compiled pattern (``re.Pattern``'s interface), matching ``str`` or ``bytes`` in linear time."""

    @property
    def pattern(self) -> str: ...
    @property
    def groups(self) -> int: ...
    def search(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Match | None: ...
    def match(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Match | None: ...
    def fullmatch(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Match | None: ...
    def finditer(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Iterator[Match]: ...
    def findall(self, text: Any, pos: int | None = None, endpos: int | None = None) -> list[Any]: ...
    def split(self, text: Any, maxsplit: int = 0) -> list[Any]: ...
    def sub(self, repl: str | Callable[[Match], str], text: str, count: int = 0) -> str: ...


def compile(pattern: str) -> Pattern:
    """``pattern`` compiled by RE2; raises ``ValueError`` naming the pattern when RE2 cannot run it."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own parse errors on stderr; ours say it all
    try:
        return cast(Pattern, re2.compile(pattern, options))
    except re2.error as err:
        raise ValueError(f"not a linear-time pattern ({err}): {pattern!r}") from None


def escape(text: str) -> str:
    """``text`` as a pattern matching it literally."""
    return str(re2.escape(text))
