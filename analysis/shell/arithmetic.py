"""Arithmetic as bash evaluates it: ``$((..))``, ``((..))``, ``let``, C-style ``for``, ``${A:offset}``.

One handler per kind of expression node (:data:`_NODES`), the operators themselves in
:mod:`analysis.shell.integers`; any unknown operand makes the result unknown (None).
"""

from __future__ import annotations

from collections.abc import Callable

import tree_sitter

from analysis.shell.api import MAX_DEPTH, Where, Word
from analysis.shell.expansions import Expansions
from analysis.shell.integers import bash_integer, binary, wrap64
from analysis.shell.state import Result, Stop, is_name, single_value
from kernel import regex as linear

_ARITH_ASSIGNMENT = linear.compile(rf"(?s)[{linear.SPACE}]*([A-Za-z_][A-Za-z0-9_]*)[{linear.SPACE}]*(=|\+=|-=)"
                                   rf"[{linear.SPACE}]*(.*)")
_ASSIGNMENTS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^="})


def _integer(text: str) -> int | None:
    parsed = bash_integer(text)
    return int(parsed) if parsed is not None else None


class Arithmetic(Expansions):
    """Arithmetic: the layer above :class:`~analysis.shell.expansions.Expansions`."""

    def arith_command(self, node: tree_sitter.Node) -> Result:
        result: int | None = None
        for child in node.named_children:
            result = self.arith_node(child)
        if result is None:
            return Result("unknown", "")
        return Result("true" if result != 0 else "false", "")

    def arith_text(self, word: Word, where: Where, raw: str) -> int | None:
        """``let`` words: a number, a sum, or ``NAME=``/``+=``/``-=`` one."""
        if word.value is None:
            return None
        m = _ARITH_ASSIGNMENT.fullmatch(word.value)
        if m:
            name, op, expr = m.groups()
            value = bash_integer(expr)
            if op != "=" and value is not None:
                value = bash_integer(f"{single_value(self.binding(name) or ()) or 0}{op[0]}({value})")
            self.assign(name, value, raw=raw, where=where, how="arithmetic", unknown=() if value else (raw,))
            return int(value) if value is not None else None
        return _integer(word.value)

    def arith_node(self, node: tree_sitter.Node) -> int | None:
        """Evaluate an arithmetic expression node (64-bit, as bash); None when any part is not known."""
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            evaluate = _NODES.get(node.type)
            return evaluate(self, node) if evaluate is not None else None
        finally:
            self.depth -= 1

    def _arith_name(self, node: tree_sitter.Node) -> int | None:
        text = self.raw(node)
        if not is_name(text):
            return _integer(text)
        value = self.lookup(text)[0]
        if value is None:
            return None
        return _integer(value or "0")

    def _arith_word(self, node: tree_sitter.Node) -> int | None:
        w = self.word(node)
        return _integer(w.value or "0") if w.value is not None else None

    def _arith_unary(self, node: tree_sitter.Node) -> int | None:
        op = node.children[0].type if node.children else ""
        operand = node.named_children[-1] if node.named_children else None
        number = self.arith_node(operand) if operand is not None else None
        if number is None:
            return None
        return wrap64({"-": -number, "+": number, "!": int(number == 0), "~": ~number}.get(op, number))

    def _arith_step(self, node: tree_sitter.Node) -> int | None:
        """``i++``, ``i--``, ``++i``, ``--i``."""
        operand = node.named_children[0] if node.named_children else None
        op = next((c.type for c in node.children if not c.is_named), "")
        if operand is None:
            return None
        before = self.arith_node(operand)
        name = self.raw(operand)
        after = None if before is None else before + (1 if op == "++" else -1)
        if is_name(name):
            self.assign(name, None if after is None else str(after), raw=self.raw(node), where=self.where(node),
                        how="arithmetic", unknown=() if after is not None else (self.raw(node),))
        return before if node.type == "postfix_expression" else after

    def _arith_ternary(self, node: tree_sitter.Node) -> int | None:
        parts = node.named_children
        if len(parts) != 3:
            return None
        cond = self.arith_node(parts[0])
        if cond is None:
            return None
        return self.arith_node(parts[1] if cond else parts[2])

    def _arith_binary(self, node: tree_sitter.Node) -> int | None:
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        op_node = node.child_by_field_name("operator")
        op = op_node.type if op_node is not None else ""
        if left is None or right is None:
            return None
        if op in _ASSIGNMENTS:
            return self._arith_assignment(node, left, op, right)
        a = self.arith_node(left)
        if op == "&&" and a == 0:
            return 0
        if op == "||" and a not in (0, None):
            return 1
        b = self.arith_node(right)
        if a is None or b is None:
            return None
        return binary(op, a, b)

    def _arith_assignment(self, node: tree_sitter.Node, left: tree_sitter.Node, op: str,
                    right: tree_sitter.Node) -> int | None:
        """``A = x``, ``A += x``, ``A <<= x``...: the value assigned."""
        name = self.raw(left)
        rhs = self.arith_node(right)
        if op != "=" and rhs is not None:
            current = self.arith_node(left)
            rhs = None if current is None else binary(op[:-1], current, rhs)
        if is_name(name):
            self.assign(name, None if rhs is None else str(rhs), raw=self.raw(node), where=self.where(node),
                        how="arithmetic", unknown=() if rhs is not None else (self.raw(node),))
        return rhs


_NODES: dict[str, Callable[[Arithmetic, tree_sitter.Node], int | None]] = {
    "number": lambda shell, node: _integer(shell.raw(node)),
    "variable_name": Arithmetic._arith_name,
    "word": Arithmetic._arith_name,
    **dict.fromkeys(("simple_expansion", "expansion", "string", "concatenation", "command_substitution"),
                    Arithmetic._arith_word),
    "parenthesized_expression": lambda shell, node: shell.arith_node(node.named_children[0])
    if node.named_children else None,
    "unary_expression": Arithmetic._arith_unary,
    "postfix_expression": Arithmetic._arith_step,
    "prefix_expression": Arithmetic._arith_step,
    "ternary_expression": Arithmetic._arith_ternary,
    "binary_expression": Arithmetic._arith_binary,
}
"""How each kind of arithmetic node evaluates (any other kind is unknown)."""
