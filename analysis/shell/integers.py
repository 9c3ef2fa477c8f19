"""Bash integers: literals in every base, 64-bit wrap-around, and the binary operator table.

Pure functions, used by ``$((..))`` (:mod:`analysis.shell.arithmetic`), ``declare -i``, ``test -eq`` and ``printf %d``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable

from kernel import regex as linear

_INT = linear.compile(rf"[{linear.SPACE}]*([+-]?)(0[xX][0-9a-fA-F]+|[0-9]+#[0-9A-Za-z@_]+|0[0-7]*|[1-9][0-9]*)"
                      rf"[{linear.SPACE}]*")
_INTMAX = 1 << 63


def wrap64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= _INTMAX else value


_BINARY: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul,
    "/": lambda a, b: abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1),
    "%": lambda a, b: abs(a) % abs(b) * (1 if a >= 0 else -1), "**": operator.pow,
    "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_, "|": operator.or_, "^": operator.xor,
    "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b), "<": lambda a, b: int(a < b),
    ">": lambda a, b: int(a > b), "<=": lambda a, b: int(a <= b), ">=": lambda a, b: int(a >= b),
    "&&": lambda a, b: int(bool(a) and bool(b)), "||": lambda a, b: int(bool(a) or bool(b)), ",": lambda a, b: b,
}
"""Bash's binary arithmetic operators on 64-bit integers (division truncates toward zero, as C)."""


def binary(op: str, a: int, b: int) -> int | None:
    """``a op b`` as bash computes it; None for an unknown operator or what bash refuses (division by zero,
    a negative or huge power, a shift out of range)."""
    if op in ("/", "%") and b == 0:
        return None
    if op == "**" and (b < 0 or b > 64):
        return None
    if op in ("<<", ">>") and not 0 <= b < 64:
        return None
    fn = _BINARY.get(op)
    return wrap64(fn(a, b)) if fn is not None else None


def _terms(text: str) -> list[str]:
    """``text`` cut before each ``+`` and ``-`` (the first piece empty when it starts with one)."""
    cuts = [0, *(i for i, c in enumerate(text) if c in "+-"), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts)] if text else []


def bash_integer(text: str) -> str | None:
    """A bash integer (``10``, ``0x1f``, ``010`` octal, ``2#101``) or a sum of such, as a decimal string;
    None for anything else (a real expression parser is only used on parsed ``$((..))`` nodes)."""
    total = 0
    for term in _terms(text.strip()):
        if not term:
            continue
        inner = term.strip()
        m = _INT.fullmatch(inner.strip("()")) if inner else None
        if not m:
            return None
        sign, digits = m.groups()
        try:
            if "#" in digits:
                base_text, number = digits.split("#", 1)
                value = _base(number, int(base_text))
            elif digits[:2].lower() == "0x":
                value = int(digits, 16)
            elif digits.startswith("0") and len(digits) > 1:
                value = int(digits, 8)
            else:
                value = int(digits)
        except ValueError:
            return None
        if value is None:
            return None
        total += -value if sign == "-" else value
    return str(wrap64(total)) if text.strip() else "0"


def _base(number: str, base: int) -> int | None:
    if not 2 <= base <= 64:
        return None
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@_"
    if base <= 36:
        number = number.lower()
    value = 0
    for c in number:
        digit = alphabet.find(c)
        if digit < 0 or digit >= base:
            return None
        value = value * base + digit
    return value
