"""The variables a construct may set, read from its syntax without running it.

When a bound stops the evaluation inside a loop (:meth:`analysis.shell.state.State.bounded`), what the loop
would have gone on to set is not known; these are the names it can be seen to set (assignments, ``for``
variables, declarations, ``read``/``printf -v``/``let``, ``${A:=x}``, arithmetic assignments), each with
whether it may be exported. Names set through ``eval``, ``source`` or a function are not seen here: the
:class:`~analysis.shell.api.Unknown` the bound leaves covers them.
"""

from __future__ import annotations

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
    seen to set."""
    found: dict[str, bool] = {}

    def _name(node: tree_sitter.Node | None) -> str | None:
        """The variable a node names (``A``, ``A[1]``, ``A=x`` give ``A``); None for anything else."""
        if node is not None and node.type == "subscript":
            node = node.child_by_field_name("name")
        if node is None:
            return None
        m = _NAME.fullmatch(src[node.start_byte:node.end_byte].decode("utf-8", "replace"))
        return m.group(1) if m else None

    def add(name: str | None, exported: bool = False) -> None:
        if name is not None:
            found[name] = found.get(name, False) or exported

    stack = [construct]
    for _ in range(MAX_SCANNED):
        if not stack:
            break
        node = stack.pop()
        kind = node.type
        if kind == "variable_assignment":
            in_declaration = node.parent is not None and node.parent.type == "declaration_command"
            add(_name(node.child_by_field_name("name")), in_declaration)
        elif kind in ("declaration_command", "unset_command"):
            for child in node.named_children:
                if child.type in ("variable_name", "word"):
                    add(_name(child), kind == "declaration_command")
        elif kind in ("for_statement", "select_statement"):
            add(_name(node.child_by_field_name("variable")))
        elif kind == "command":
            program = _name(node.child_by_field_name("name"))
            if program in _SETTERS:
                for argument in node.children_by_field_name("argument"):
                    add(_name(argument), program in ("export", "declare", "typeset"))
                add(_DEFAULT_NAMES.get(program or ""))
        elif kind in ("expansion", "binary_expression", "postfix_expression", "prefix_expression") and any(
                not c.is_named and c.type in _ASSIGNING for c in node.children):
            add(next((n for n in map(_name, node.named_children) if n is not None), None))
        stack.extend(reversed(node.children))
    return found

