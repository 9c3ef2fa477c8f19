"""``${...}`` parameter expansions, one handler per operator (:data:`_OPERATORS`).

``${A}``, ``${#A}``, ``${!A}``, ``${A[0]}`` and every ``${A<op>word}`` form of bash but pattern-based case
changes; an expansion whose value or word is not known is an unknown piece of its word.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import tree_sitter

from analysis.shell.api import MAX_VALUE
from analysis.shell.patterns import ansi_c, remove_pattern, substitute_pattern
from analysis.shell.state import Seg, is_name
from analysis.shell.words import Words, literal


@dataclass(frozen=True)
class _Parameter:
    """One ``${NAME<op>operands}`` being expanded: what the operator handlers read."""

    node: tree_sitter.Node
    raw: str
    quoted: bool
    name: str
    value: str | None
    op: str
    rest: list[tree_sitter.Node]
    """The nodes after the name: the operator, then its operands."""

    @property
    def operands(self) -> list[tree_sitter.Node]:
        return self.rest[1:]

    @property
    def unknown(self) -> Seg:
        return Seg(None, self.raw, self.quoted, split=not self.quoted, causes=(self.raw,), variables=(self.name,))

    def known(self, text: str) -> Seg:
        return Seg(text, self.raw, self.quoted, split=not self.quoted, variables=(self.name,))


class Expansions(Words):
    """``${...}``: the layer above :class:`~analysis.shell.words.Words`."""

    def expansion(self, node: tree_sitter.Node, quoted: bool) -> Seg:
        raw = self.raw(node)
        children = [c for c in node.children if c.type not in ("${", "}")]
        unknown = Seg(None, raw, quoted, split=not quoted, causes=(raw,))
        prefix = ""
        if children and not children[0].is_named and children[0].type in ("#", "!"):
            prefix = children[0].type
            children = children[1:]
        if not children:
            return unknown
        name_node, rest = children[0], children[1:]
        if name_node.type == "subscript":
            inner = name_node.child_by_field_name("name")
            index = name_node.child_by_field_name("index")
            if inner is None or index is None or self.raw(index) not in ("0", "@", "*"):
                return replace(unknown, variables=(self.raw(inner),) if inner is not None else ())
            if self.raw(index) != "0" and not prefix:
                return replace(unknown, variables=(self.raw(inner),))
            name = self.raw(inner)
        elif name_node.type in ("variable_name", "special_variable_name"):
            name = self.src(name_node.start_byte, name_node.end_byte)
        else:
            return unknown
        if name in self.placeholder_names:
            value, causes = self.lookup(name)
            shown = "${{" + self.placeholder_names[name] + "}}"
            return Seg(value, shown, quoted, split=not quoted, causes=(shown,) if value is None else ())
        variables = (name,)
        if prefix == "!":
            return self._indirect(raw, quoted, name, bool(rest), unknown)
        value, causes = self.lookup(name)
        if prefix == "#":
            if rest:
                return replace(unknown, variables=variables)
            return Seg(None if value is None else str(len(value)), raw, quoted, split=not quoted,
                       causes=causes and (raw,), variables=variables)
        if not rest:
            return Seg(value, raw, quoted, split=not quoted, causes=causes and (raw,), variables=variables)
        op = rest[0].type if not rest[0].is_named else ""
        parameter = _Parameter(node, raw, quoted, name, value, op, rest)
        if op in _DEFAULTS:
            return self._default(parameter)
        handler = _OPERATORS.get(op)
        if value is None or handler is None:
            return parameter.unknown
        return handler(self, parameter, value)

    def _indirect(self, raw: str, quoted: bool, name: str, names: bool, unknown: Seg) -> Seg:
        """``${!A}``: the variable named by A's value; ``${!prefix*}`` (names, not values) is unknown."""
        if names:
            return replace(unknown, variables=(name,))
        target, _ = self.lookup(name)
        if target is None or not is_name(target):
            return replace(unknown, variables=(name,))
        value, _ = self.lookup(target)
        return Seg(value, raw, quoted, split=not quoted, causes=(raw,) if value is None else (),
                   variables=(name, target))

    def _default(self, p: _Parameter) -> Seg:
        """``${A:-w}``, ``${A-w}``, ``${A:=w}``, ``${A=w}``, ``${A:+w}``, ``${A+w}``, ``${A:?w}``, ``${A?w}``."""
        is_set = self.is_set(p.name)
        null_counts = p.op.startswith(":")
        if p.value is not None:
            use_word = (p.value == "" and null_counts) or (is_set is False)
            if p.op in (":+", "+"):
                use_word = not use_word
        elif is_set is False:
            use_word = p.op not in (":+", "+")
        else:
            return p.unknown
        if not use_word:
            return p.known("" if p.op in (":+", "+") else p.value or "")
        word = self.operand(p.operands, p.quoted)
        if p.op in (":=", "="):
            self.assign(p.name, word.text, raw=p.raw, where=self.where(p.node), how="default", unknown=word.causes)
        if p.op in (":?", "?"):
            return p.unknown
        return replace(word, raw=p.raw, split=not p.quoted and word.split, variables=(p.name, *word.variables),
                       causes=word.causes and (p.raw,))

    def _remove(self, p: _Parameter, value: str) -> Seg:
        """``${A#p}``, ``${A##p}``, ``${A%p}``, ``${A%%p}``."""
        pattern = self.operand(p.operands, True)
        if pattern.text is None:
            return p.unknown
        removed = remove_pattern(value, pattern.text, p.op)
        if removed is None:
            return p.unknown
        self.tick(1 + len(value) // 64)
        return p.known(removed)

    def _replace(self, p: _Parameter, value: str) -> Seg:
        """``${A/p/r}``, ``${A//p/r}``, ``${A/#p/r}``, ``${A/%p/r}``."""
        parts = _split_operands(p.operands, "/")
        pat = self.operand(parts[0], True) if parts else literal("", quoted=True)
        rep = self.operand(parts[1], True) if len(parts) > 1 else literal("", quoted=True)
        if pat.text is None or rep.text is None:
            return p.unknown
        self.tick(1 + len(value) // 64)
        replaced = substitute_pattern(value, pat.text, rep.text, p.op)
        if replaced is None or len(replaced) > MAX_VALUE:
            return p.unknown
        return p.known(replaced)

    def _substring(self, p: _Parameter, value: str) -> Seg:
        """``${A:offset}``, ``${A:offset:length}`` (arithmetic offsets, negative ones from the end)."""
        parts = _split_operands(p.operands, ":")
        offset = self.arith_node(parts[0][0]) if parts and parts[0] else 0
        length = self.arith_node(parts[1][0]) if len(parts) > 1 and parts[1] else None
        if offset is None or (len(parts) > 1 and length is None):
            return p.unknown
        start = offset if offset >= 0 else max(0, len(value) + offset)
        if length is None:
            return p.known(value[start:])
        if length >= 0:
            return p.known(value[start:start + length])
        return p.known(value[start:len(value) + length])

    def _case(self, p: _Parameter, value: str) -> Seg:
        """``${A^^}``, ``${A,,}``, ``${A^}``, ``${A,}`` (with a pattern: unknown)."""
        if p.operands:
            return p.unknown
        return p.known(_CASES[p.op](value))

    def _transform(self, p: _Parameter, value: str) -> Seg:
        """``${A@Q}``, ``${A@E}``, ``${A@U}``, ``${A@L}``, ``${A@u}``."""
        letter = self.raw(p.rest[1]) if len(p.rest) == 2 else ""
        transform = _TRANSFORMS.get(letter)
        return p.unknown if transform is None else p.known(transform(value))


_DEFAULTS = frozenset({":-", "-", ":=", "=", ":+", "+", ":?", "?"})
"""The operators that read whether the variable is set (:meth:`Expansions._default`), its value known or not."""
_OPERATORS: dict[str, Callable[[Expansions, _Parameter, str], Seg]] = {
    **dict.fromkeys(("#", "##", "%", "%%"), Expansions._remove),
    **dict.fromkeys(("/", "//", "/#", "/%"), Expansions._replace),
    ":": Expansions._substring,
    **dict.fromkeys(("^^", ",,", "^", ","), Expansions._case),
    "@": Expansions._transform,
}
"""The operators that work on a known value; any other operator, or an unknown value, is unknown."""
_CASES: dict[str, Callable[[str], str]] = {
    "^^": str.upper, ",,": str.lower, "^": lambda v: v[:1].upper() + v[1:], ",": lambda v: v[:1].lower() + v[1:],
}
_TRANSFORMS: dict[str, Callable[[str], str]] = {
    "Q": lambda v: "'" + v.replace("'", "'\\''") + "'", "E": ansi_c, "U": str.upper, "L": str.lower,
    "u": lambda v: v[:1].upper() + v[1:],
}


def _split_operands(nodes: list[tree_sitter.Node], separator: str) -> list[list[tree_sitter.Node]]:
    parts: list[list[tree_sitter.Node]] = [[]]
    for n in nodes:
        if not n.is_named and n.type == separator:
            parts.append([])
        else:
            parts[-1].append(n)
    return parts
