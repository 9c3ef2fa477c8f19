"""Words as bash expands them: quotes, escapes, ``$VAR``, ``~``, command substitution, field splitting.

Each kind of word node has its expansion in :data:`_SEGMENTS`; ``${...}`` is :mod:`analysis.shell.expansions`,
``$((..))`` :mod:`analysis.shell.arithmetic`. A word is built from :class:`Seg` pieces, then joined
(:func:`one_word`) or split into fields (:func:`split_fields`).
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable
from dataclasses import replace

import tree_sitter

from analysis.shell.api import MAX_DEPTH, MAX_VALUE, Word
from analysis.shell.patterns import ansi_c, unescape_dq, unescape_word
from analysis.shell.state import Result, Seg, State, Stop, is_name
from kernel import regex as linear

EXPANSIONS = frozenset({"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion",
                        "process_substitution"})
MAX_BRACE = 256
"""The most words one word's brace expansion makes (``{a,b}{c,d}`` makes 4); more make it unknown."""
_SEQUENCE = linear.compile(r"(-?[0-9]+)\.\.(-?[0-9]+)(?:\.\.(-?[0-9]+))?|([a-zA-Z])\.\.([a-zA-Z])(?:\.\.(-?[0-9]+))?")


class Words(State, abc.ABC):
    """Expanding words: the layer above :class:`~analysis.shell.state.State`."""

    # ---- the layers above ------------------------------------------------------------------------------

    @abc.abstractmethod
    def expansion(self, node: tree_sitter.Node, quoted: bool) -> Seg:
        """``${...}`` (:mod:`analysis.shell.expansions`)."""

    @abc.abstractmethod
    def arith_node(self, node: tree_sitter.Node) -> int | None:
        """An arithmetic expression (:mod:`analysis.shell.arithmetic`)."""

    @abc.abstractmethod
    def block(self, node: tree_sitter.Node, stdin: str | None = "") -> Result:
        """The statements under a node (:mod:`analysis.shell.interpreter`)."""

    @abc.abstractmethod
    def sequence(self, nodes: list[tree_sitter.Node], stdin: str | None) -> Result:
        """Statements in order (:mod:`analysis.shell.interpreter`)."""

    def words(self, node: tree_sitter.Node) -> list[Word]:
        """A source word as the words it expands to (field splitting applied)."""
        self.tick()
        segs = self.segments(node, quoted=False, first=True)
        return split_fields(segs, self.raw(node), self.line(node), self.ifs_default())

    def word(self, node: tree_sitter.Node, *, assignment: bool = False) -> Word:
        """A source word expanded without field splitting (assignment values, here-strings, case words)."""
        self.tick()
        segs = self.segments(node, quoted=False, first=True)
        return one_word(segs, self.raw(node), self.line(node))

    def ifs_default(self) -> bool:
        b = self.binding("IFS")
        return b is None or (len(b) == 1 and b[0] is not None and b[0].value == " \t\n")

    def segments(self, node: tree_sitter.Node, *, quoted: bool, first: bool = False) -> list[Seg]:
        self.tick()
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise Stop("too deep", f"syntax nested more than {MAX_DEPTH} levels deep")
            return self._segments(node, quoted=quoted, first=first)
        finally:
            self.depth -= 1

    def _segments(self, node: tree_sitter.Node, *, quoted: bool, first: bool) -> list[Seg]:
        expand = _SEGMENTS.get(node.type)
        if expand is None:  # a brace expression, or a construct not followed
            raw = self.raw(node)
            return [Seg(None, raw, quoted, causes=(raw,))]
        return expand(self, node, quoted, first)

    def _plain(self, node: tree_sitter.Node, quoted: bool, first: bool) -> list[Seg]:
        raw = self.raw(node)
        text = self.src(node.start_byte, node.end_byte)
        if first and not quoted and text.startswith("~"):
            return self.tilde(text, raw)
        if not quoted:
            return brace_syntax(text, raw)
        return [literal(text, quoted=quoted, raw=raw)]

    def _concatenation(self, node: tree_sitter.Node, quoted: bool, first: bool) -> list[Seg]:
        out: list[Seg] = []
        children = node.children
        for i, child in enumerate(children):
            if child.type == "$" and i + 1 < len(children) and children[i + 1].type == "string":
                continue
            if child.type == "$":
                out.append(literal("$", quoted=quoted))
                continue
            out.extend(self.segments(child, quoted=quoted, first=first and i == 0))
        return out

    def _arithmetic_expansion(self, node: tree_sitter.Node, quoted: bool, first: bool) -> list[Seg]:
        raw = self.raw(node)
        inner = node.named_children
        value = self.arith_node(inner[0]) if len(inner) == 1 else None
        if value is None:
            return [Seg(None, raw, quoted, split=not quoted, causes=(raw,))]
        return [Seg(str(value), raw, quoted, split=not quoted)]

    def _process_substitution(self, node: tree_sitter.Node, quoted: bool, first: bool) -> list[Seg]:
        raw = self.raw(node)
        frame = self.push("subshell")
        try:
            self.scoped(lambda: self.block(node, None), "exit")
        finally:
            self.pop(frame, merge="discard")
        return [Seg(None, raw, quoted, causes=(raw,))]

    def tilde(self, text: str, raw: str) -> list[Seg]:
        head, sep, tail = text.partition("/")
        if head != "~":
            return [Seg(None, raw, False, causes=(head,))]
        home, _ = self.lookup("HOME")
        rest = literal(sep + unescape_word(tail), quoted=False)
        if home is None:
            return [Seg(None, "~", False, causes=("~",), variables=("HOME",)), rest]
        return [Seg(home, "~", True, variables=("HOME",)), rest]

    def quoted_segments(self, node: tree_sitter.Node, cursor: int, end: int,
                        unescape: Callable[[str], str]) -> list[Seg]:
        """The bytes ``cursor..end`` of ``node`` as quoted text: the expansions among its children evaluated,
        the text between them unescaped by the quoting's rules (``"..."``, an unquoted here-document)."""
        segs: list[Seg] = []
        for child in node.named_children:
            if child.type in EXPANSIONS:
                if child.start_byte > cursor:
                    segs.append(literal(unescape(self.src(cursor, child.start_byte)), quoted=True))
                segs.extend(self.segments(child, quoted=True))
                cursor = child.end_byte
        if end > cursor:
            segs.append(literal(unescape(self.src(cursor, end)), quoted=True))
        return segs

    def string(self, node: tree_sitter.Node) -> list[Seg]:
        start = node.start_byte + 1
        end = node.end_byte - 1
        if self.text.src[node.start_byte:node.start_byte + 1] == b"$":
            start += 1
        segs = self.quoted_segments(node, start, end, unescape_dq)
        if not segs:
            segs.append(literal("", quoted=True))
        return segs

    def lookup(self, name: str) -> tuple[str | None, tuple[str, ...]]:
        """A variable's value for expansion: (value, causes when unknown)."""
        if name in self.placeholder_names:
            expression = self.placeholder_names[name]
            if self.placeholders is not None and expression in self.placeholders:
                return self.placeholders[expression], ()
            return None, ("${{" + expression + "}}",)
        if name.isdigit() or name in ("@", "*", "#", "0"):
            return self.positional(name)
        if name in ("?", "$", "!", "-", "_", "RANDOM", "SECONDS", "LINENO", "BASHPID", "PPID", "EPOCHSECONDS"):
            return None, (f"${name}",)
        if name == "PWD":
            cwd = self.frame.cwd
            if cwd is not None and cwd.startswith("/"):
                return cwd, ()
        name = self.resolve(name)
        binding = self.binding(name)
        if binding is None:
            return None, (f"${name}",)
        values = {v.value if v is not None else "" for v in binding}
        if len(values) == 1:
            (value,) = values
            if value is None:
                return None, (f"${name}",)
            return value, ()
        return None, (f"${name}",)

    def is_set(self, name: str) -> bool | None:
        """Whether a parameter is set: None when not known (inherited, or set on some paths only)."""
        positional = self.frame.positional
        if name in ("@", "*"):
            return None if positional is None else bool(positional)
        if name == "#" or name in self.placeholder_names:
            return True
        if name.isdigit():
            index = int(name)
            if index == 0:
                return True if self.frame.zero is not None else None
            return None if positional is None else index <= len(positional)
        binding = self.binding(self.resolve(name))
        if binding is None:
            return None
        states = {v is not None for v in binding}
        return states.pop() if len(states) == 1 else None

    def positional(self, name: str) -> tuple[str | None, tuple[str, ...]]:
        if name == "0":
            return (self.frame.zero, ()) if self.frame.zero is not None else (None, ("$0",))
        positional = self.frame.positional
        if positional is None:
            return None, (f"${name}",)
        if name == "#":
            return str(len(positional)), ()
        if name in ("@", "*"):
            if any(p is None for p in positional):
                return None, (f"${name}",)
            return " ".join(p or "" for p in positional), ()
        index = int(name)
        if index == 0:
            return self.positional("0")
        if index > len(positional):
            return "", ()
        value = positional[index - 1]
        return (value, ()) if value is not None else (None, (f"${name}",))

    def simple_expansion(self, node: tree_sitter.Node, quoted: bool) -> Seg:
        raw = self.raw(node)
        name_node = node.named_children[0] if node.named_children else None
        if name_node is None:
            return literal(raw, quoted=quoted)
        name = self.src(name_node.start_byte, name_node.end_byte)
        value, causes = self.lookup(name)
        variables = () if name in self.placeholder_names else (name,)
        raw_shown = raw if name not in self.placeholder_names else "${{" + self.placeholder_names[name] + "}}"
        return Seg(value, raw_shown, quoted, split=not quoted, causes=causes, variables=variables)

    def operand(self, nodes: list[tree_sitter.Node], quoted: bool) -> Seg:
        """The word of ``${A:-word}``: its pieces joined (empty when there are none)."""
        segs: list[Seg] = []
        for n in nodes:
            segs.extend(self.segments(n, quoted=quoted))
        text: str | None = ""
        for s in segs:
            text = None if text is None or s.text is None else text + s.text
        causes = tuple(c for s in segs for c in s.causes)
        variables = tuple(v for s in segs for v in s.variables)
        raw = "".join(s.raw for s in segs)
        return Seg(text, raw, quoted, split=any(s.split for s in segs), causes=causes, variables=variables)

    def command_substitution(self, node: tree_sitter.Node, quoted: bool) -> Seg:
        raw = self.raw(node)
        frame = self.push("subshell")
        try:  # its output is every statement's output (block), each of which may be unknown
            result = self.bounded(node, lambda: self.scoped(lambda: self.block(node, None), "exit", "return"),
                                  sets=False)
        finally:
            self.pop(frame, merge="discard")
        output = result.output
        if output is None:
            return Seg(None, raw, quoted, split=not quoted, causes=(raw,))
        return Seg(output.rstrip("\n"), raw, quoted, split=not quoted)

    def group(self, nodes: list[tree_sitter.Node]) -> list[list[tree_sitter.Node]]:
        """Nodes that make one shell word: the parser splits a word at a line continuation
        (``NCCL_IB_\\<newline>DISABLE=1``) and sometimes after a name (``export A''B=1``); bash does not."""
        groups: list[list[tree_sitter.Node]] = []
        for n in nodes:
            if groups and not self.text.src[groups[-1][-1].end_byte:n.start_byte].replace(b"\\\n", b""):
                groups[-1].append(n)
            else:
                groups.append([n])
        return groups

    def joined(self, group: list[tree_sitter.Node]) -> list[Seg]:
        """The segments of a word the parser split into several nodes."""
        segs: list[Seg] = []
        for i, n in enumerate(group):
            if n.type == "command_name" and n.named_children:
                n = n.named_children[0]
            if n.type == "variable_assignment":
                name_node = n.child_by_field_name("name")
                value_node = n.child_by_field_name("value")
                head = self.src(n.start_byte, value_node.start_byte if value_node is not None else n.end_byte)
                segs.append(literal(unescape_word(head) if name_node is not None else head, quoted=False))
                if value_node is not None:
                    segs.extend(self.segments(value_node, quoted=False))
            elif n.type == "variable_name":
                segs.append(literal(self.src(n.start_byte, n.end_byte), quoted=False))
            else:
                segs.extend(self.segments(n, quoted=False, first=i == 0))
        return segs


_Expand = Callable[[Words, tree_sitter.Node, bool, bool], list[Seg]]
_SEGMENTS: dict[str, _Expand] = {
    **dict.fromkeys(("word", "number", "variable_name", "extglob_pattern", "regex", "test_operator",
                     "special_variable_name", "file_descriptor"), Words._plain),
    "raw_string": lambda shell, node, quoted, first: [literal(shell.raw(node)[1:-1], quoted=True,
                                                              raw=shell.raw(node))],
    "ansi_c_string": lambda shell, node, quoted, first: [literal(ansi_c(shell.raw(node)[2:-1]), quoted=True,
                                                                 raw=shell.raw(node))],
    "string": lambda shell, node, quoted, first: shell.string(node),
    "translated_string": lambda shell, node, quoted, first: shell.string(node),
    "concatenation": Words._concatenation,
    "simple_expansion": lambda shell, node, quoted, first: [shell.simple_expansion(node, quoted)],
    "expansion": lambda shell, node, quoted, first: [shell.expansion(node, quoted)],
    "command_substitution": lambda shell, node, quoted, first: [shell.command_substitution(node, quoted)],
    "arithmetic_expansion": Words._arithmetic_expansion,
    "process_substitution": Words._process_substitution,
    "$": lambda shell, node, quoted, first: [literal("$", quoted=quoted)],
    "brace_expression": lambda shell, node, quoted, first: brace_syntax(shell.raw(node), shell.raw(node)),
}
"""How each kind of word node expands (any other kind, a brace expression included, is unknown)."""


def literal(text: str, *, quoted: bool, raw: str | None = None) -> Seg:
    return Seg(text, text if raw is None else raw, quoted)


def as_assignment(segs: list[Seg]) -> tuple[str, bool, list[Seg]] | None:
    """A word that is an assignment (``NAME=value``, ``NAME+=value``, the name unquoted and literal):
    the name, whether it appends, and the value's segments."""
    head = ""
    for index, seg in enumerate(segs):
        if seg.text is None or seg.quoted or seg.split:
            return None
        position = seg.text.find("=")
        if position < 0:
            head += seg.text
            continue
        head += seg.text[:position]
        append = head.endswith("+")
        name = head[:-1] if append else head
        if not is_name(name):
            return None
        rest = [replace(seg, text=seg.text[position + 1:], raw=seg.raw), *segs[index + 1:]]
        return name, append, rest
    return None


def one_word(segs: list[Seg], raw: str, line: int) -> Word:
    text: str | None = ""
    shown = ""
    causes: list[str] = []
    variables: list[str] = []
    for s in segs:
        text = None if text is None or s.text is None else text + s.text
        shown += s.text if s.text is not None else s.raw
        causes.extend(s.causes)
        variables.extend(s.variables)
    if text is not None and len(text) > MAX_VALUE:
        text, causes = None, [f"a value longer than {MAX_VALUE:,} characters"]
    return Word(raw, text, line, tuple(dict.fromkeys(variables)), tuple(dict.fromkeys(causes)) if text is None
                else (), shown[:4096])


def brace_syntax(text: str, raw: str) -> list[Seg]:
    """Unquoted source text as segments: a backslash-escaped character is a literal, the rest brace syntax."""
    if "\\" not in text:
        return [Seg(text, raw, False, brace=True)]
    out: list[Seg] = []
    run = ""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            if run:
                out.append(Seg(run, raw, False, brace=True))
                run = ""
            escaped = text[i + 1:i + 2]
            if escaped and escaped != "\n":  # a backslash-newline disappears
                out.append(Seg(escaped, raw, True))
            i += 2
            continue
        run += text[i]
        i += 1
    if run:
        out.append(Seg(run, raw, False, brace=True))
    return out


_Token = tuple[str, Seg | None]
"""One character of brace syntax (its text, None), or a segment brace expansion does not look into."""


def brace_expand(segs: list[Seg]) -> list[list[Seg]] | None:
    """Bash's brace expansion (bash(1) "Brace Expansion", braces.c ``brace_expand``) of one word: the first
    unquoted ``{`` with a matching ``}`` holding an unquoted ``,`` at its level, or a sequence ``{x..y[..incr]}``
    of integers or letters, makes one word per item, preamble and postscript kept, left to right, nested and
    repeated braces expanded in turn; a ``{`` that opens no such expression is an ordinary character; ``${``
    is not brace syntax. None when it makes more than :data:`MAX_BRACE` words (or the word is longer than
    :data:`~analysis.shell.api.MAX_VALUE`)."""
    tokens: list[_Token] = []
    for s in segs:
        if s.brace and s.text is not None:
            tokens.extend((c, None) for c in s.text)
        else:
            tokens.append(("", s))
    if len(tokens) > MAX_VALUE or _after_name(tokens):
        return None
    try:
        return [_as_segs(t) for t in _expand_tokens(tokens, 0)]
    except _TooMany:
        return None


class _TooMany(Exception):
    """A brace expansion of more than :data:`MAX_BRACE` words, or nested deeper than ``MAX_DEPTH``."""


def _after_name(tokens: list[_Token]) -> bool:
    """A ``{`` right after ``$NAME``: bash expands braces first (``$X{a,b}`` is ``$Xa $Xb``), which the
    segments, already expanded, no longer show."""
    return any(c == "{" and seg is None and i > 0 and tokens[i - 1][1] is not None
               and (tokens[i - 1][1] or Seg(None, "", False)).raw[:2] not in ("${", "$(", "$[")
               and (tokens[i - 1][1] or Seg(None, "", False)).raw.startswith("$")
               for i, (c, seg) in enumerate(tokens))


def _as_segs(tokens: list[_Token]) -> list[Seg]:
    out: list[Seg] = []
    text = ""
    for c, seg in tokens:
        if seg is None:
            text += c
            continue
        if text:
            out.append(Seg(text, text, False))
            text = ""
        out.append(seg)
    if text:
        out.append(Seg(text, text, False))
    return out


def _matches(tokens: list[_Token]) -> dict[int, int]:
    """Each brace-syntax ``{`` (not after ``$``) -> its matching ``}``, in one pass."""
    stack: list[int] = []
    found: dict[int, int] = {}
    for i, token in enumerate(tokens):
        if token == ("{", None) and not (i > 0 and tokens[i - 1] == ("$", None)):
            stack.append(i)
        elif token == ("}", None) and stack:
            found[stack.pop()] = i
    return found


def _expand_tokens(tokens: list[_Token], depth: int) -> list[list[_Token]]:
    if depth > MAX_DEPTH:
        raise _TooMany
    matches = _matches(tokens)
    for opening in sorted(matches):
        closing = matches[opening]
        commas: list[int] = []
        i = opening + 1
        while i < closing:  # the commas at this level: nested braces jumped over
            if i in matches:
                i = matches[i] + 1
                continue
            if tokens[i] == (",", None):
                commas.append(i)
            i += 1
        if len(commas) + 1 > MAX_BRACE:
            raise _TooMany
        items: list[list[_Token]] | None
        if commas:
            bounds = [opening, *commas, closing]
            items = []
            for a, b in itertools.pairwise(bounds):
                items.extend(_expand_tokens(tokens[a + 1:b], depth + 1))
                if len(items) > MAX_BRACE:
                    raise _TooMany
        else:
            items = _sequence(tokens[opening + 1:closing])
        if items is None:
            continue  # not a brace expansion: this `{` is an ordinary character
        rest = _expand_tokens(tokens[closing + 1:], depth + 1)
        if len(items) * len(rest) > MAX_BRACE:
            raise _TooMany
        return [[*tokens[:opening], *item, *tail] for item in items for tail in rest]
    return [tokens]


def _sequence(inner: list[_Token]) -> list[list[_Token]] | None:
    """``x..y[..incr]``: integers (zero-padded when either end is) or single letters; None when not one."""
    if any(seg is not None for _, seg in inner):
        return None
    m = _SEQUENCE.fullmatch("".join(c for c, _ in inner))
    if m is None:
        return None
    step = abs(int(m.group(3) or m.group(6) or 1)) or 1
    if m.group(1) is not None:
        first, last = int(m.group(1)), int(m.group(2))
        if abs(last - first) // step + 1 > MAX_BRACE:
            raise _TooMany
        padded = any(g.lstrip("-").startswith("0") and len(g.lstrip("-")) > 1 for g in (m.group(1), m.group(2)))
        width = max(len(m.group(1)), len(m.group(2))) if padded else 0
        numbers = range(first, last + (1 if last >= first else -1), step if last >= first else -step)
        texts = [f"{n:0{width}d}" if width else str(n) for n in numbers]
    else:
        a, b = ord(m.group(4)), ord(m.group(5))
        texts = [chr(n) for n in range(a, b + (1 if b >= a else -1), step if b >= a else -step)]
    return [[(c, None) for c in t] for t in texts]


def split_fields(segs: list[Seg], raw: str, line: int, ifs_default: bool) -> list[Word]:
    """Brace expansion (:func:`brace_expand`), then field splitting (IFS space, tab, newline) of the
    unquoted expansion results in each word; an unquoted expansion that expands to nothing leaves no word."""
    if any(s.brace and s.text is not None and "{" in s.text for s in segs):
        variants = brace_expand(segs)
        if variants is None:
            return [Word(raw, None, line, unknown=(f"{raw[:200]} (a brace expansion of more than {MAX_BRACE} "
                                                   "words, or after $NAME)",),
                         shown=raw[:4096])]
        if len(variants) > 1 or variants[0] != segs:
            return [w for variant in variants for w in _split(variant, raw, line, ifs_default)]
    return _split(segs, raw, line, ifs_default)


def _split(segs: list[Seg], raw: str, line: int, ifs_default: bool) -> list[Word]:
    if any(s.split and s.text is None for s in segs) or (not ifs_default and any(s.split for s in segs)):
        return [one_word(segs, raw, line)]
    fields: list[list[Seg]] = []
    current: list[Seg] = []
    has = False
    for s in segs:
        if s.split and s.text is not None:
            text = s.text
            if not text:
                continue
            pieces = text.split()
            if text[0].isspace() and has:
                fields.append(current)
                current, has = [], False
            for i, piece in enumerate(pieces):
                if i > 0:
                    fields.append(current)
                    current = []
                current.append(replace(s, text=piece))
                has = True
            if text[-1].isspace() and pieces:
                fields.append(current)
                current, has = [], False
        else:
            current.append(s)
            has = has or s.quoted or s.text is None or bool(s.text)
    if has:
        fields.append(current)
    return [one_word(f, raw, line) for f in fields]
