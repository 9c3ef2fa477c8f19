"""Declarations: ``export``, ``declare``/``typeset``, ``local``, ``readonly``, ``unset``, and assignment words.

Their flags (``-x``, ``+x``, ``-n``, ``-i``, ``-l``, ``-u``, ``-r``, ``-g``, ``-f``) become variable attributes
(:class:`~analysis.shell.api.Variable`) that later assignments honour (:meth:`~analysis.shell.state.State.assign`).
"""

from __future__ import annotations

from dataclasses import replace

import tree_sitter

from analysis.shell.api import AssignmentHow, Command, Where, Word
from analysis.shell.conditions import Conditions
from analysis.shell.state import REDIRECTS, Prefix, Result, is_name, short
from analysis.shell.words import split_fields
from kernel import regex as linear

_ASSIGNMENT_WORD = linear.compile(r"(?s)([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?=)(.*)")
DECLARATIONS = frozenset({"export", "declare", "typeset", "local", "readonly"})


class Declarations(Conditions):
    """Declarations: the layer above :class:`~analysis.shell.conditions.Conditions`."""

    def declaration_node(self, node: tree_sitter.Node) -> Result:
        """``export``/``declare``/``local``/``readonly``/``typeset``/``unset`` as the parser gives them."""
        keyword = node.children[0].type if node.children else ""
        where = self.where(node)
        raw = self.raw(node)
        items: list[tuple[Word, tree_sitter.Node | None]] = []
        args = [c for c in node.children[1:] if c.is_named and c.type != "comment" and c.type not in REDIRECTS]
        for group in self.group(args):
            child = group[0]
            if len(group) > 1:
                raw_group = self.src(group[0].start_byte, group[-1].end_byte)
                items.extend((w, None) for w in split_fields(self.joined(group), raw_group, self.line(child),
                                                        self.ifs_default()))
            elif child.type == "variable_assignment":
                parts = self.assignment_parts(child)
                if parts is not None:
                    value = parts.value
                    op = "+=" if parts.append else "="
                    shown = f"{parts.name}{op}{value.shown}"
                    known = None if value.value is None else f"{parts.name}{op}{value.value}"
                    items.append((Word(self.raw(child), known, self.line(child), value.variables, value.unknown,
                                       shown), child))
            else:
                items.extend((w, None) for w in self.words(child))
        head = Word(keyword, keyword, where.line, shown=keyword)
        words = (head, *(w for w, _ in items))
        self.commands.append(Command(words, words, (), (), self.environ(), self.frame.cwd, where, self.maybe,
                                     "builtin", (), short(raw, 400)))
        if keyword == "unset":
            self.unset_words([w for w, _ in items], where, raw)
        else:
            self.declaration(keyword, items, where, raw)
        return Result("true", "")

    def declaration(self, keyword: str, items: list[tuple[Word, tree_sitter.Node | None]], where: Where,
                    raw: str) -> None:
        add = set("x" if keyword == "export" else "r" if keyword == "readonly" else "")
        remove: set[str] = set()
        options = True
        functions = False
        how: AssignmentHow = ("export" if keyword == "export" else "readonly" if keyword == "readonly"
                              else "local" if keyword == "local" else "declare")
        for word, node in items:
            value = word.value
            if node is None and options and value is not None and value[:1] in "-+" and len(value) > 1:
                if value == "--":
                    options = False
                    continue
                letters = set(value[1:])
                if keyword == "export":
                    letters = {"unexport" if c == "n" else c for c in letters}
                    if "unexport" in letters:
                        remove.add("x")
                        add.discard("x")
                    if "f" in letters:
                        functions = True
                elif value[0] == "-":
                    add |= letters
                    if "f" in letters or "F" in letters:
                        functions = True
                else:
                    remove |= letters
                continue
            options = False
            if functions:
                continue
            exported: bool | None = True if "x" in add else False if "x" in remove else None
            attrs = "".join(sorted(add & set("rilnua")))
            local = keyword == "local" or (keyword in ("declare", "typeset") and self.frame.kind == "function"
                                           and "g" not in add)
            if node is not None:
                self.assignment_node(node, how=how, export=exported, attributes=attrs, remove="".join(remove),
                                     local=local)
                continue
            if value is None:
                self.unknown("dynamic name", raw, where)
                continue
            m = _ASSIGNMENT_WORD.fullmatch(value)
            if m is None:
                if is_name(value):
                    if local:
                        self.frame.locals.add(value)
                    if exported is not None:
                        self.set_export(value, exported, raw=raw, where=where, how=how)
                    elif attrs or remove:
                        self.set_attributes(value, attrs, "".join(remove))
                continue
            name, subscript, op, rhs = m.groups()
            if subscript and subscript not in ("[0]",):
                self.assign(name, None, raw=raw, where=where, how=how, unknown=(f"{name}{subscript}",))
                continue
            self.assign(name, rhs, raw=raw, where=where, how="append" if op == "+=" else how, export=exported,
                        attributes=attrs, remove="".join(remove), append=op == "+=", local=local)

    def set_attributes(self, name: str, attrs: str, remove: str) -> None:
        old = self.binding(name)
        if not old:
            return
        self.set_binding(name, tuple(
            replace(v, attributes=frozenset((set(v.attributes) | set(attrs)) - set(remove))) if v else None
            for v in old))

    def assignment_parts(self, node: tree_sitter.Node) -> Prefix | None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return None
        append = any(c.type == "+=" for c in node.children)
        name = self.raw(name_node)
        raw = self.raw(node)
        array = value_node is not None and value_node.type == "array"
        subscript = name_node.type == "subscript"
        if subscript:
            inner = name_node.child_by_field_name("name")
            index = name_node.child_by_field_name("index")
            name = self.raw(inner) if inner is not None else name
            if index is None or self.raw(index) != "0":
                unknown = Word(raw, None, self.line(node), unknown=(self.raw(name_node),))
                return Prefix(name, unknown, append, raw, True, True)
        if value_node is None:
            value = Word("", "", self.line(node), shown="")
        elif array:
            elements = [w for c in value_node.named_children for w in self.words(c)]
            first = elements[0] if elements else Word("", "", self.line(node))
            value = replace(first, raw=self.raw(value_node))
        else:
            value = self.word(value_node, assignment=True)
        return Prefix(name, value, append, raw, array or subscript, subscript)

    def assignment_node(self, node: tree_sitter.Node, *, how: AssignmentHow, export: bool | None = None,
                        attributes: str = "", remove: str = "", local: bool = False) -> None:
        parts = self.assignment_parts(node)
        if parts is None:
            return
        if parts.array:
            attributes += "a"  # an array (A=(..), A[i]=..): bash never exports arrays
        self.assign(parts.name, parts.value.value, raw=self.raw(node), where=self.where(node),
                    how="append" if parts.append and how == "assign" else how, export=export, attributes=attributes,
                    remove=remove, append=parts.append, unknown=parts.value.unknown, local=local)


    def unset_words(self, args: list[Word], where: Where, raw: str) -> None:
        functions = False
        for w in args:
            if w.value is None:
                self.unknown("dynamic name", raw, where)
                continue
            if w.value.startswith("-"):
                functions = "f" in w.value
                continue
            if functions:
                self.frame.functions.pop(w.value, None)
                continue
            if is_name(w.value):
                self.unset(w.value, raw=raw, where=where)
