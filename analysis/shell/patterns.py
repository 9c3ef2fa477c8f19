"""Shell patterns on RE2 (``case``, ``[[ == ]]``, ``${A#p}``, ``${A/p/r}``) and quoting: escapes, ``$'..'``.

Pure functions on strings; a pattern RE2 cannot hold, or a value over :data:`~analysis.shell.api.MAX_PATTERN_VALUE`,
gives None (unknown).
"""

from __future__ import annotations

import functools
from typing import Literal

from analysis.shell.api import MAX_PATTERN_VALUE
from kernel import regex as linear


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


_Use = Literal["first", "shortest", "longest", "suffix", "shortest suffix"]


@functools.lru_cache(maxsize=256)
def _glob(pattern: str, use: _Use = "first") -> linear.Pattern | None:
    """A shell pattern (read as :func:`fnmatch.fnmatchcase` reads it) on RE2, one call per question: ``first``
    (``fullmatch``: whether a text matches; ``match``/``finditer``: where a match from a place ends, the longest
    at the last star), ``shortest``/``longest`` (``match``: the end of the shortest/longest matching prefix),
    ``suffix`` (``search``: the start of the longest matching suffix), ``shortest suffix`` (``match`` on the
    reversed text: the length of the shortest matching suffix). None for a pattern RE2 cannot hold (hundreds
    of kilobytes)."""
    try:
        if use == "longest":
            return linear.compile(linear.glob(pattern), longest=True)
        if use == "suffix":
            return linear.compile(linear.glob(pattern) + r"\z")
        return linear.compile(linear.glob(pattern, shortest=use in ("shortest", "shortest suffix"),
                                          reverse=use == "shortest suffix"))
    except ValueError:
        return None


_REMOVE_USE: dict[str, _Use] = {"#": "shortest", "##": "longest", "%": "shortest suffix", "%%": "suffix"}
_SUBSTITUTE_USE: dict[str, _Use] = {"/": "first", "//": "first", "/#": "longest", "/%": "suffix"}


def glob_match(value: str, pattern: str) -> bool | None:
    """Whether ``value`` matches the shell pattern; None when that cannot be known (see :func:`_glob`)."""
    matcher = _glob(pattern)
    return None if matcher is None else matcher.fullmatch(value) is not None


def any_match(value: str, patterns: list[str]) -> bool | None:
    """Whether ``value`` matches one of ``patterns`` (``case``'s ``a|b)``), tried in order."""
    for pattern in patterns:
        matched = glob_match(value, pattern)
        if matched is None or matched:
            return matched
    return False


def bracket_escapes(text: str) -> str:
    """A pattern's backslash escapes as one-character brackets (``\\*`` -> ``[*]``); a backslash before a
    newline, or last, stays."""
    out: list[str] = []
    i = 0
    while (j := text.find("\\", i)) >= 0 and j + 1 < len(text):
        if text[j + 1] == "\n":
            out.append(text[i:j + 1])
            i = j + 1
            continue
        out.append(f"{text[i:j]}[{text[j + 1]}]")
        i = j + 2
    out.append(text[i:])
    return "".join(out)


def remove_pattern(value: str, pattern: str, op: str) -> str | None:
    """``${A#p}``, ``${A##p}``, ``${A%p}``, ``${A%%p}``: shortest/longest prefix or suffix matching a glob."""
    if not _is_glob(pattern):
        if op in ("#", "##"):
            return value[len(pattern):] if value.startswith(pattern) else value
        return value[: len(value) - len(pattern)] if pattern and value.endswith(pattern) else value
    matcher = _glob(pattern, _REMOVE_USE[op])
    if len(value) > MAX_PATTERN_VALUE or matcher is None:
        return None
    if op in ("#", "##"):
        found = matcher.match(value)
        return value[found.end():] if found else value
    if op == "%":
        found = matcher.match(value[::-1])
        return value[: len(value) - found.end()] if found else value
    found = matcher.search(value)
    return value[: found.start()] if found else value


def substitute_pattern(value: str, pattern: str, replacement: str, op: str) -> str | None:
    """``${A/p/r}``, ``${A//p/r}``, ``${A/#p/r}``, ``${A/%p/r}`` (the longest match, as bash)."""
    if not pattern:
        return value
    if not _is_glob(pattern):
        if op == "/":
            return value.replace(pattern, replacement, 1)
        if op == "//":
            return value.replace(pattern, replacement)
        if op == "/#":
            return replacement + value[len(pattern):] if value.startswith(pattern) else value
        return value[: len(value) - len(pattern)] + replacement if value.endswith(pattern) else value
    matcher = _glob(pattern, _SUBSTITUTE_USE[op])
    if len(value) > MAX_PATTERN_VALUE or matcher is None:
        return None
    if op == "/#":
        found = matcher.match(value)
        return replacement + value[found.end():] if found else value
    if op == "/%":
        found = matcher.search(value)
        return value[: found.start()] + replacement if found else value
    out: list[str] = []
    last = 0
    for found in matcher.finditer(value):  # from each place in turn; an empty match replaces nothing
        if found.end() > found.start():
            out += [value[last:found.start()], replacement]
            last = found.end()
            if op == "/":
                break
    return "".join([*out, value[last:]])


def _unescape(text: str, escaped: str | None) -> str:
    """``text`` with each backslash before one of ``escaped`` (None: any character) removed, and each
    backslash-newline pair; other backslashes stay."""
    out: list[str] = []
    i = 0
    while (j := text.find("\\", i)) >= 0 and j + 1 < len(text):
        c = text[j + 1]
        if escaped is not None and c not in escaped:
            out.append(text[i:j + 1])
            i = j + 1
            continue
        out.append(text[i:j] if c == "\n" else text[i:j] + c)
        i = j + 2
    out.append(text[i:])
    return "".join(out)


def unescape_word(text: str) -> str:
    """Backslashes outside quotes: ``\\x`` is ``x``, a backslash-newline disappears."""
    return text if "\\" not in text else _unescape(text, None)


def unescape_dq(text: str) -> str:
    """Inside double quotes a backslash escapes only ``$ ` " \\`` and newline."""
    return text if "\\" not in text else _unescape(text, '$`"\\\n')


def unescape_heredoc(text: str) -> str:
    return text if "\\" not in text else _unescape(text, "$`\\\n")


_C_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", "'": "'",
              '"': '"', "?": "?", "e": "\x1b", "E": "\x1b"}
_ANSI = linear.compile(r"(?s)\\(?:([ntrabfv\\'\"?eE])|([0-7]{1,3})|x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|"
                       r"U([0-9a-fA-F]{1,8})|c(.))")


def ansi_c(text: str) -> str:
    """``$'...'`` quoting: C escapes, octal, hex, Unicode and control characters."""
    def sub(m: linear.Match) -> str:
        simple, octal, hexa, u4, u8, ctrl = m.groups()
        if simple:
            return _C_ESCAPES[simple]
        if octal:
            return chr(int(octal, 8) & 0xFF)
        if hexa:
            return chr(int(hexa, 16))
        code = u4 or u8
        if code:
            number = int(code, 16)
            return chr(number) if number < 0x110000 else ""
        return chr(ord(ctrl) & 0x1F)
    return _ANSI.sub(sub, text)
