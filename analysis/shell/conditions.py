"""Conditions: ``test``/``[`` with known operands, and ``[[ .. ]]`` expressions, decided when they can be.

A condition is "true", "false" or "unknown" (:data:`Truth`); an unknown one makes the branches it guards
"maybe" (:mod:`analysis.shell.interpreter`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Literal

import tree_sitter

from analysis.shell.api import MAX_DEPTH
from analysis.shell.arithmetic import Arithmetic
from analysis.shell.integers import bash_integer
from analysis.shell.patterns import glob_match
from analysis.shell.state import Stop

Truth = Literal["true", "false", "unknown"]
NEGATED: dict[str, Truth] = {"true": "false", "false": "true"}
"""A known truth negated (``!``); an unknown one stays unknown."""

_UNARY: dict[str, Callable[[str], bool]] = {"-n": bool, "-z": lambda s: not s}
_STRINGS: dict[str, Callable[[str, str], bool]] = {"=": operator.eq, "==": operator.eq, "!=": operator.ne}
_INTEGERS: dict[str, Callable[[int, int], bool]] = {
    "-eq": operator.eq, "-ne": operator.ne, "-lt": operator.lt, "-le": operator.le, "-gt": operator.gt,
    "-ge": operator.ge,
}
_LOGICAL = frozenset({"&&", "||", "-a", "-o"})


def _truth(value: bool) -> Truth:
    return "true" if value else "false"


def test_operands(args: list[str | None]) -> Truth:
    """``test``/``[`` with known operands: string and integer comparisons, ``-n``/``-z``, ``!``."""
    if any(a is None for a in args):
        return "unknown"
    a = [x or "" for x in args]
    if a and a[0] == "!":
        return NEGATED.get(test_operands(list(a[1:])), "unknown")
    if len(a) == 0:
        return "false"
    if len(a) == 1:
        return _truth(bool(a[0]))
    if len(a) == 2:
        unary = _UNARY.get(a[0])
        return "unknown" if unary is None else _truth(unary(a[1]))
    if len(a) == 3:
        return _compare(*a)
    return "unknown"


def _compare(left: str, op: str, right: str) -> Truth:
    strings = _STRINGS.get(op)
    if strings is not None:
        return _truth(strings(left, right))
    integers = _INTEGERS.get(op)
    if integers is None:
        return "unknown"
    x, y = bash_integer(left), bash_integer(right)
    if x is None or y is None or not left.strip() or not right.strip():
        return "unknown"
    return _truth(integers(int(x), int(y)))


class Conditions(Arithmetic):
    """``[[ .. ]]``: the layer above :class:`~analysis.shell.arithmetic.Arithmetic`."""

    def test_expression(self, node: tree_sitter.Node) -> Truth:
        inner = [c for c in node.named_children]
        if not inner:
            return "false"
        return self.test_node(inner[0])

    def test_node(self, node: tree_sitter.Node) -> Truth:
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            decide = _NODES.get(node.type)
            return decide(self, node) if decide is not None else test_operands([self.word(node).value])
        finally:
            self.depth -= 1

    def _test_binary(self, node: tree_sitter.Node) -> Truth:
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        op_node = node.child_by_field_name("operator")
        op = self.raw(op_node) if op_node is not None else ""
        if left is None or right is None:
            return "unknown"
        if op in _LOGICAL:
            return self._test_logical(left, op, right)
        lv = self.word(left).value
        rv = self.word(right).value
        if op in ("==", "=") and right.type in ("word", "extglob_pattern", "regex") and lv is not None:
            pattern = self.raw(right)
            if not any(c in pattern for c in "$`\\\"'"):
                matched = glob_match(lv, pattern)
                return "unknown" if matched is None else _truth(matched)
        return test_operands([lv, op, rv])

    def _test_logical(self, left: tree_sitter.Node, op: str, right: tree_sitter.Node) -> Truth:
        """``&&``/``||`` (``-a``/``-o``), the right side read only when it decides."""
        a = self.test_node(left)
        if op in ("&&", "-a") and a == "false":
            return "false"
        if op in ("||", "-o") and a == "true":
            return "true"
        b = self.test_node(right)
        if a == "unknown" or b == "unknown":
            return "unknown"
        return _truth((a == "true" and b == "true") or (op in ("||", "-o") and "true" in (a, b)))

    def _test_unary(self, node: tree_sitter.Node) -> Truth:
        op_node = node.child_by_field_name("operator")
        operand = node.named_children[-1] if node.named_children else None
        op = self.raw(op_node) if op_node is not None else next((c.type for c in node.children), "")
        if operand is None:
            return "unknown"
        if op == "!":
            return NEGATED.get(self.test_node(operand), "unknown")
        return test_operands([op, self.word(operand).value])


_NODES: dict[str, Callable[[Conditions, tree_sitter.Node], Truth]] = {
    "binary_expression": Conditions._test_binary,
    "unary_expression": Conditions._test_unary,
    "parenthesized_expression": lambda shell, node: shell.test_node(node.named_children[0])
    if node.named_children else "unknown",
}
"""How each kind of ``[[`` node is decided; any other is one operand (true when not empty)."""
