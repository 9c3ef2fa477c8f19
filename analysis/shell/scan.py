"""The variables a construct may set, read from its syntax without running it.

When a bound stops the evaluation inside a loop (:meth:`analysis.shell.state.State.bounded`), what the loop
would have gone on to set is not known; these are the names it can be seen to set (assignments, ``for``
variables, declarations, ``read``/``printf -v``/``let``, ``${A:=x}``, arithmetic assignments), each with
whether it may be exported. Names set through ``eval``, ``source`` or a function are not seen here: the
:class:`~analysis.shell.api.Unknown` the bound leaves covers them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import tree_sitter

from kernel import regex as linear

MAX_SCANNED = 20_000
"""Syntax nodes read per construct; past them, the names found so far (the Unknown covers the rest)."""

_SETTERS = frozenset({"read", "mapfile", "readarray", "getopts", "printf", "let", "export", "declare", "typeset",
                      "local", "readonly", "unset"})
"""Commands whose arguments may name variables they set."""
_DEFAULT_NAMES = {"read": "REPLY", "mapfile": "MAPFILE", "readarray": "MAPFILE", "getopts": "OPTARG"}
_ASSIGNING = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", ":=", "++", "--"})
_NAME = linear.compile(r"(?s)([A-Za-z_][A-Za-z0-9_]*)(?:\+?=.*|\[.*)?")


def names_set(construct: tree_sitter.Node, src: bytes) -> dict[str, bool]:
    """Name -> whether it may be exported, for every variable ``construct`` (a node of the text ``src``) can be
    seen to set: each kind of node that sets one has its reader in :data:`_SETS`."""
    found: dict[str, bool] = {}
    stack = [construct]
    for _ in range(MAX_SCANNED):
        if not stack:
            break
        node = stack.pop()
        read = _SETS.get(node.type)
        for name, exported in read(node, src) if read is not None else ():
            if name is not None:
                found[name] = found.get(name, False) or exported
        stack.extend(reversed(node.children))
    return found


def _name(node: tree_sitter.Node | None, src: bytes) -> str | None:
    """The variable a node names (``A``, ``A[1]``, ``A=x`` give ``A``); None for anything else."""
    if node is not None and node.type == "subscript":
        node = node.child_by_field_name("name")
    if node is None:
        return None
    m = _NAME.fullmatch(src[node.start_byte:node.end_byte].decode("utf-8", "replace"))
    return m.group(1) if m else None


_Sets = Iterable[tuple[str | None, bool]]


def _assignment(node: tree_sitter.Node, src: bytes) -> _Sets:
    """``A=1``, ``A[2]=x``; exported when it is an ``export``/``declare`` argument."""
    in_declaration = node.parent is not None and node.parent.type == "declaration_command"
    return [(_name(node.child_by_field_name("name"), src), in_declaration)]


def _declaration(node: tree_sitter.Node, src: bytes) -> _Sets:
    """``export A``, ``declare -x A``, ``unset A``."""
    return [(_name(c, src), node.type == "declaration_command") for c in node.named_children
            if c.type in ("variable_name", "word")]


def _command(node: tree_sitter.Node, src: bytes) -> _Sets:
    """``read A B`` (``REPLY`` without names), ``printf -v A``, ``let A=1``, ``mapfile``, ``getopts``."""
    program = _name(node.child_by_field_name("name"), src)
    if program not in _SETTERS:
        return []
    exported = program in ("export", "declare", "typeset")
    return [*((_name(a, src), exported) for a in node.children_by_field_name("argument")),
            (_DEFAULT_NAMES.get(program or ""), False)]


def _operator(node: tree_sitter.Node, src: bytes) -> _Sets:
    """``${A:=x}``, ``$((A=1))``, ``((A+=2))``, ``A++``: the first name of a node with an assigning operator."""
    if not any(not c.is_named and c.type in _ASSIGNING for c in node.children):
        return []
    return [(next((n for n in (_name(c, src) for c in node.named_children) if n is not None), None), False)]


_SETS: dict[str, Callable[[tree_sitter.Node, bytes], _Sets]] = {
    "variable_assignment": _assignment,
    "declaration_command": _declaration,
    "unset_command": _declaration,
    "for_statement": lambda node, src: [(_name(node.child_by_field_name("variable"), src), False)],
    "select_statement": lambda node, src: [(_name(node.child_by_field_name("variable"), src), False)],
    "command": _command,
    **dict.fromkeys(("expansion", "binary_expression", "postfix_expression", "prefix_expression"), _operator),
}
"""The kinds of node that may set a variable, and how to read which."""
