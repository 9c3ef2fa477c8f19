"""Regular expressions that run in linear time, for everything a stack file or a folder can feed us.

Python's ``re`` backtracks: ``\\$\\[\\[.*?\\]\\]`` over a command made of ``$[[`` repeated, or a JWT
pattern over ``eyJ`` repeated, takes time quadratic in the input (a 292 KiB stack file planned for
225 s). The pull-request gate plans fork pull requests, so every pattern applied to input a user
controls is compiled here, by RE2 (``google-re2``), which guarantees time linear in the input. RE2 has
no look-around and no back-references: a pattern that needs them does not compile, and the module
that declares it fails on import (the suite imports every module), so none can slip back in.
``tests/hostile/test_linear.py`` keeps it so: it fails on any use of ``re`` outside its short list of
exceptions, each with its reason (patterns over our own text; two byte scanners that are linear by
construction and that RE2's binding would make several times slower).

Differences from ``re`` to keep in mind:

* ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII-only. Where a pattern means Python's (Unicode) classes,
  write :data:`WORD`, :data:`DIGIT` and :data:`SPACE` inside brackets: ``f"[{WORD}.-]+"``.
* ``$`` is the end of the text only (Python's also matches before a final newline); ``\\Z`` is ``\\z``.
* Flags are written inline (``(?i)``, ``(?s)``, ``(?m)``).

Text holding lone surrogates (``"\\ud800"``, which a YAML or JSON escape can produce) cannot be encoded
as UTF-8, the encoding RE2 reads: each one is matched as U+FFFD (one character for one, so every offset
stays), and what a match returns is cut from the text as given.

Patterns over our own text (docstrings, our data files) may keep using ``re``.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, cast

import re2


def _decimal_digits() -> str:
    """Python's decimal digits (``str.isdecimal``: Unicode's Nd as this Python knows it) as bracket ranges. Not
    RE2's ``\\p{Nd}``: RE2's tables are newer, and ``int()`` refuses a digit this Python does not know (Kawi's
    U+11F50, which RE2 calls one). Every digit Unicode assigns lies below U+20000."""
    ranges: list[str] = []
    start = None
    for code in range(0x20001):
        if code < 0x20000 and chr(code).isdecimal():
            start = code if start is None else start
        elif start is not None:
            ranges.append(rf"\x{{{start:X}}}-\x{{{code - 1:X}}}")
            start = None
    return "".join(ranges)


WORD = r"\pL\pN_"
"""Python's ``\\w`` on text (letters, digits and numerals of every script, ``_``), to write inside brackets.
RE2 may know letters newer than this Python's Unicode tables: nothing converts a word character further."""
DIGIT = _decimal_digits()
"""Python's ``\\d`` on text (decimal digits of every script, which ``int()`` reads), inside brackets."""
SPACE = r"\s\x0b\x1c-\x1f\x85\p{Z}"
"""Python's ``\\s`` on text (what ``str.isspace`` calls white space), inside brackets."""
NOTHING = r"[^\x00-\x{10FFFF}]"
"""A pattern that matches no text (Python's ``(?!)``)."""


class Match(Protocol):
    """One match (``re.Match``'s interface; ``group`` is ``str`` for ``str`` input, ``bytes`` for ``bytes``)."""

    @property
    def lastgroup(self) -> str | None: ...
    def group(self, *index: int | str) -> Any: ...
    def __getitem__(self, index: int | str) -> Any: ...
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


def _replacement(err: UnicodeError) -> tuple[bytes, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "\ufffd".encode() * (err.end - err.start), err.end  # bytes: the UTF-8 encoder takes no other


_AS_REPLACEMENT = "kernel.regex.replacement"
codecs.register_error(_AS_REPLACEMENT, _replacement)


class _Surrogates(str):
    """Text with lone surrogates: RE2's binding encodes it (``encode``) with each surrogate as U+FFFD, and cuts
    what a match returns from it (slicing), which gives back the text as it was."""

    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return str.encode(self, encoding, _AS_REPLACEMENT)


def _readable(text: Any) -> Any:
    """``text`` as RE2's binding can encode it (see the module docstring)."""
    if isinstance(text, str) and not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return _Surrogates(text)
    return text


class _Linear:
    """A compiled RE2 pattern behind :class:`Pattern`, reading text with lone surrogates too."""

    __slots__ = ("_compiled",)

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled

    @property
    def pattern(self) -> str:
        return cast(str, self._compiled.pattern)

    @property
    def groups(self) -> int:
        return cast(int, self._compiled.groups)

    def search(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Match | None:
        return cast(Match | None, self._compiled.search(_readable(text), pos, endpos))

    def match(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Match | None:
        return cast(Match | None, self._compiled.match(_readable(text), pos, endpos))

    def fullmatch(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Match | None:
        return cast(Match | None, self._compiled.fullmatch(_readable(text), pos, endpos))

    def finditer(self, text: Any, pos: int | None = None, endpos: int | None = None) -> Iterator[Match]:
        return cast(Iterator[Match], self._compiled.finditer(_readable(text), pos, endpos))

    def findall(self, text: Any, pos: int | None = None, endpos: int | None = None) -> list[Any]:
        return cast(list[Any], self._compiled.findall(_readable(text), pos, endpos))

    def split(self, text: Any, maxsplit: int = 0) -> list[Any]:
        return cast(list[Any], self._compiled.split(_readable(text), maxsplit))

    def sub(self, repl: str | Callable[[Match], str], text: str, count: int = 0) -> str:
        return str(self._compiled.sub(repl, _readable(text), count))


def _valid(pattern: str) -> str:
    """``pattern`` with lone surrogates as U+FFFD, as in the text it is applied to (see the module docstring)."""
    return pattern if pattern.isascii() else pattern.encode("utf-8", _AS_REPLACEMENT).decode("utf-8")


def compile(pattern: str, *, longest: bool = False) -> Pattern:
    """``pattern`` compiled by RE2; raises ``ValueError`` naming the pattern when RE2 cannot run it.

    ``longest``: of the matches starting at the leftmost place, the longest (POSIX's rule; ``re``'s, and RE2's
    default, is the first in the pattern's order of preference)."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own parse errors on stderr; ours say it all
    options.longest_match = longest
    try:
        return _Linear(re2.compile(_valid(pattern), options))
    except re2.error as err:
        raise ValueError(f"not a linear-time pattern ({err}): {pattern!r}") from None


class PatternSet:
    """Several patterns searched for in one pass (RE2's ``RE2::Set``): :meth:`matching` says which of them occur
    in a text, by their index in the order given, so only those need a second, locating pass."""

    __slots__ = ("_set",)

    def __init__(self, patterns: Iterable[str]) -> None:
        options = re2.Options()
        options.log_errors = False
        self._set = re2.Set.SearchSet(options)
        try:
            for pattern in patterns:
                self._set.Add(_valid(pattern))
            self._set.Compile()
        except re2.error as err:
            raise ValueError(f"not a linear-time pattern set ({err})") from None

    def matching(self, text: str | bytes) -> list[int]:
        """The indices of the patterns that match somewhere in ``text``, ascending (empty: none does)."""
        if isinstance(text, str):
            text = text.encode("utf-8", _AS_REPLACEMENT)  # lone surrogates as U+FFFD (module docstring)
        return sorted(self._set.Match(text) or ())


def escape(text: str) -> str:
    """``text`` as a pattern matching it literally."""
    return str(re2.escape(_valid(text)))


# ------------------------------------------------------------------------------------- shell patterns


def _char(c: str) -> str:
    """One character, matched as itself (a lone surrogate as U+FFFD), inside brackets or out."""
    if c.isascii() and (c.isalnum() or c == "_"):
        return c
    code = ord(c)
    return rf"\x{{{0xFFFD if 0xD800 <= code <= 0xDFFF else code:X}}}"


def _bracket(pattern: str, start: int, end: int) -> str:
    """The bracket expression ``pattern[start:end]`` (between ``[`` and ``]``) as :func:`fnmatch.translate`
    reads it: ``!`` negates, ``a-z`` ranges, a range whose ends are reversed drops out with them, and every
    other character is itself (backslash too)."""
    body = pattern[start:end]
    if "-" not in body:
        chunks = [body]
    else:  # fnmatch's split into the parts between range hyphens (a hyphen first or last is itself)
        chunks = []
        i = start
        k = start + 2 if pattern[start] == "!" else start + 1
        while (k := pattern.find("-", k, end)) >= 0:
            chunks.append(pattern[i:k])
            i = k + 1
            k += 3
        if pattern[i:end]:
            chunks.append(pattern[i:end])
        else:
            chunks[-1] += "-"
        for k in range(len(chunks) - 1, 0, -1):  # empty ranges (z-a) drop out with their ends
            if chunks[k - 1][-1] > chunks[k][0]:
                chunks[k - 1] = chunks[k - 1][:-1] + chunks[k][1:]
                del chunks[k]
    negate = chunks[0].startswith("!")
    if negate:
        chunks[0] = chunks[0][1:]
    if not "".join(chunks):
        return "." if negate else NOTHING
    return ("[^" if negate else "[") + "-".join("".join(map(_char, chunk)) for chunk in chunks) + "]"


def glob(pattern: str, *, shortest: bool = False, reverse: bool = False) -> str:
    """A shell pattern (``*``, ``?``, ``[...]``, as :func:`fnmatch.fnmatchcase` reads it) as an RE2 pattern:
    :meth:`Pattern.fullmatch` says what ``fnmatchcase`` says, and :meth:`Pattern.match` ends where a match of
    ``fnmatch.translate(pattern)`` without its final ``\\Z`` ends (the longest at the last ``*``).

    ``shortest``: every ``*`` as short as it can be, so that :meth:`Pattern.match` ends at the shortest
    prefix that matches (each piece between stars is one character wide, so taking the first place each
    fits leaves every later piece the most room). ``reverse``: the pattern of the reversed texts, to
    match suffixes from the end."""
    pieces: list[str | None] = []  # None: a star
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not pieces or pieces[-1] is not None:
                pieces.append(None)
        elif c == "?":
            pieces.append(".")
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                pieces.append(_char("["))
            else:
                pieces.append(_bracket(pattern, i, j))
                i = j + 1
        else:
            pieces.append(_char(c))
    if reverse:
        pieces.reverse()
    out: list[str] = []
    for index, piece in enumerate(pieces):
        if piece is not None:
            out.append(piece)
        elif shortest or None in pieces[index + 1:]:
            out.append(".*?")  # fnmatch's (?>.*?fixed): the first place the fixed part fits
        else:
            out.append(".*")
    return "(?s:" + "".join(out) + ")"
