"""Reading untrusted files within limits: the one YAML loader every YAML the project reads goes through, the one
Python parser for scripts and code folders, and JSON (files and text) read within a size.

Fork pull requests run the gate, so every file it reads is hostile input, read here within three limits
(:class:`Limits`): **size** (``max_bytes``), **expansion** (``max_nodes``, aliases counted in full: no alias
bomb) and **depth** (``max_depth``: no interpreter crash in a recursive composer or walk). Problems are
:class:`BoundedInputError` (a ``ValueError`` with the line when known). YAML is read as the Pulumi CLI's Go
reader would (duplicate keys refused, dates kept as strings). Why each limit: docs/development.md,
"kernel/bounded.py".
"""

from __future__ import annotations

import ast
import functools
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class BoundedInputError(ValueError):
    """A file past a limit, or not YAML: ``message`` says which, ``line`` (1-based) where, when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        super().__init__(message if line is None else f"line {line}: {message}")


@dataclass(frozen=True)
class Limits:
    """What a kind of file may be: bytes read, values after alias expansion, nesting depth."""

    kind: str
    """The kind of file, for messages ("a stack file", "a conda file")."""
    max_bytes: int
    max_nodes: int
    max_depth: int = 64


STACK_FILE = Limits("a stack file", max_bytes=8 * 1024 * 1024, max_nodes=500_000)
"""8 MiB is 15 times a generated stack of a thousand runs (556 KB); 500,000 values 12 times its 41,810. A stack
file needs 7 levels of nesting."""
SMALL_FILE = Limits("a YAML file of this kind", max_bytes=1024 * 1024, max_nodes=100_000)
"""Conda files, CLI v2 environment and job files, ``Pulumi.yaml``: a few hundred lines each. The largest conda
file in Azure/azureml-examples is under 3 KB; 1 MiB and 100,000 values leave room for generated ones."""
CONDA_FILE = Limits("a conda file", SMALL_FILE.max_bytes, SMALL_FILE.max_nodes)
ENVIRONMENT_FILE = Limits("an environment file", SMALL_FILE.max_bytes, SMALL_FILE.max_nodes)
JOB_FILE = Limits("a job file", SMALL_FILE.max_bytes, SMALL_FILE.max_nodes)
COMPONENT_FILE = Limits("a component file", SMALL_FILE.max_bytes, SMALL_FILE.max_nodes)
PROJECT_FILE = Limits("a Pulumi project file", SMALL_FILE.max_bytes, SMALL_FILE.max_nodes)
DATA_TABLE = Limits("a data table of the project", SMALL_FILE.max_bytes, SMALL_FILE.max_nodes)
"""The project's own YAML tables (policies/rules/properties.yaml, azurefacts/environment-capabilities.yaml)."""
JSON_FILE_BYTES = 8 * 1024 * 1024
"""The largest JSON file read (pack configs, an earlier plan's ``resources.json`` and ``waivers.json``)."""
SUBMISSION_SCRIPT = Limits("a submission script", max_bytes=1024 * 1024, max_nodes=200_000, max_depth=100)
"""What ``amlgpu import`` reads: a submission script is a few hundred lines and needs about 20 levels (1 MiB of
Python is at most about a million nodes)."""
CODE_MODULE = Limits("a Python module of a code folder", max_bytes=1024 * 1024, max_nodes=1_100_000,
                     max_depth=1000)
"""A module of a run's code folder, read for what it imports: 1 MiB is more than hand-written code holds, and
the node and depth limits only refuse what no hand-written module is (the walk over the tree needs none)."""


def read_bytes(path: Path, max_bytes: int, kind: str) -> bytes:
    """At most ``max_bytes`` of ``path``: a :class:`BoundedInputError` when it holds more. ``OSError``
    (missing, unreadable) is left to the caller, which knows what the file is."""
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BoundedInputError(f"larger than {max_bytes:,} bytes, the limit for {kind}")
    return data


def decode(data: bytes) -> str:
    """``data`` as UTF-8 text; a :class:`BoundedInputError` naming the line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise BoundedInputError(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} cannot be decoded; save the file as UTF-8", line
        ) from None


def read_text(path: Path, limits: Limits) -> str:
    """The text of ``path`` within ``limits.max_bytes``, as UTF-8."""
    return decode(read_bytes(path, limits.max_bytes, limits.kind))


def load_json(text: str, kind: str, max_bytes: int = JSON_FILE_BYTES) -> Any:
    """The value of the JSON ``text`` (``kind`` of text, for messages), at most ``max_bytes`` as UTF-8.

    A :class:`BoundedInputError` for longer text, or arrays and objects nested deeper than Python's JSON reader
    follows (``[[[[...``: a ``RecursionError``); ``json.JSONDecodeError`` (a ``ValueError`` with ``msg`` and
    ``lineno``) for text that is not JSON. Both are ``ValueError``s."""
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise BoundedInputError(f"larger than {max_bytes:,} bytes, the limit for {kind}")
    try:
        return json.loads(text)
    except RecursionError:
        raise BoundedInputError(f"nested too deeply to be {kind}") from None


def load_json_file(path: Path, kind: str, max_bytes: int = JSON_FILE_BYTES) -> Any:
    """The value of the JSON file at ``path`` (``kind`` of file, for messages), read within ``max_bytes``.

    A :class:`BoundedInputError` for a larger file, text that is not UTF-8, or arrays and objects nested deeper
    than Python's JSON reader follows (``[[[[...``: a ``RecursionError``); ``json.JSONDecodeError`` (a
    ``ValueError`` with ``msg`` and ``lineno``) for text that is not JSON; ``OSError`` is left to the caller."""
    return load_json(decode(read_bytes(path, max_bytes, kind)), kind, max_bytes)


# ------------------------------------------------------------------------------------------ the loaders


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key (a list or mapping used as a key): the constructor says so
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# Pulumi reads `expires: 2027-03-31` as the string it looks like; PyYAML would make it a date object.
_WITHOUT_TIMESTAMPS = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.yaml_implicit_resolvers = _WITHOUT_TIMESTAMPS


class FastUniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same loader on libyaml's parser when PyYAML has one (PyYAML's wheels do): a stack file of a
    thousand runs parses in 0.3 s instead of 2 s. Resolver and constructors are PyYAML's, so a file both
    parsers read gives the same values and lines. In corners no project file needs, libyaml follows the YAML
    spec where PyYAML does not: it accepts a tab, a byte-order mark or U+2028 inside a value, which PyYAML
    refuses, and reads a lone ``!`` tag as '' (PyYAML: None). Pulumi reads stack files with a Go port of
    libyaml."""


FastUniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
FastUniqueKeyLoader.yaml_implicit_resolvers = _WITHOUT_TIMESTAMPS
_EVENT_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _line(event: yaml.Event) -> int | None:
    return event.start_mark.line + 1 if event.start_mark is not None else None


def check(text: str, limits: Limits) -> None:
    """Refuse, before anything is built from it, a document whose expansion exceeds ``limits.max_nodes``,
    whose nesting exceeds ``limits.max_depth``, or with an alias inside its own anchor (a cycle).

    One pass over libyaml's parse events, in constant memory per anchor: it stops at the first event past a
    limit, so a bomb is refused in milliseconds. Syntax errors are left to the parse that follows."""
    sizes: dict[str, int] = {}
    """Expanded size of each anchored value seen so far (the latest definition of a name wins, as in YAML)."""
    open_: list[tuple[str | None, int]] = []
    """The collections being read, outermost first: their anchor and the count at their start."""
    count = 0
    try:
        for event in yaml.parse(text, Loader=_EVENT_LOADER):
            if isinstance(event, yaml.ScalarEvent):
                count += 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.CollectionStartEvent):
                count += 1
                open_.append((event.anchor, count))
                if len(open_) > limits.max_depth:
                    raise BoundedInputError(
                        f"nested more than {limits.max_depth} levels deep (the limit for {limits.kind})",
                        _line(event))
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, start = open_.pop()
                if anchor is not None:
                    sizes[anchor] = count - start + 1
            elif isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_):
                    raise BoundedInputError(
                        f"invalid YAML: alias *{event.anchor} is inside its own anchor &{event.anchor} "
                        "(a value that contains itself)", _line(event))
                count += sizes.get(event.anchor or "", 1)
            if count > limits.max_nodes:
                raise BoundedInputError(
                    f"expands to more than {limits.max_nodes:,} values (aliases counted in full), the limit for "
                    f"{limits.kind}: an alias bomb?", _line(event))
    except yaml.YAMLError as err:
        # libyaml (0.2.5 on) stops its scanner at 1,000 open flow collections, ahead of the events this
        # loop reads: that is nesting past the limit, not a syntax error for the (recursive) parse below.
        if "maximum nesting depth" in str(getattr(err, "problem", "")):
            mark = getattr(err, "problem_mark", None)
            raise BoundedInputError(
                f"nested more than {limits.max_depth} levels deep (the limit for {limits.kind})",
                mark.line + 1 if mark is not None else None) from None
        return


def _parse(text: str, loader_class: type[Any]) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for line numbers) and its value, from one parse."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def parse(text: str, limits: Limits) -> tuple[yaml.Node | None, Any]:
    """The node tree and value of ``text``, within ``limits`` (:func:`check` first). Not YAML (a syntax
    error, a duplicate key, a document stream) is a :class:`BoundedInputError` with the line and column."""
    check(text, limits)
    try:
        try:
            return _parse(text, FastUniqueKeyLoader)
        except yaml.YAMLError:
            # libyaml's messages are terser ("found character that cannot start any token"): parse the
            # broken file again with PyYAML's own parser, whose message names the character.
            return _parse(text, UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err)
        if mark is None:
            raise BoundedInputError(f"invalid YAML: {problem}") from None
        raise BoundedInputError(f"invalid YAML: {problem}", mark.line + 1, mark.column + 1) from None


def load(text: str, limits: Limits) -> Any:
    """The value of ``text``, within ``limits`` (see :func:`parse`)."""
    return parse(text, limits)[1]


def load_file(path: Path, limits: Limits) -> Any:
    """The value of the YAML file at ``path``, within ``limits``; ``OSError`` is left to the caller."""
    return load(read_text(path, limits), limits)


@functools.cache
def data_table(path: Path) -> dict[str, Any]:
    """One of the project's own YAML tables (a mapping at the top), read once within :data:`DATA_TABLE`.
    The value is shared by every caller: read it, never change it."""
    data: dict[str, Any] = load_file(path, DATA_TABLE)
    return data


def parse_python(source: str | bytes, filename: str, limits: Limits) -> ast.Module:
    """``source`` (the text of the file named ``filename``) as a syntax tree, within ``limits``.

    Raises ``SyntaxError`` for text that is not Python, :class:`BoundedInputError` for text past
    ``limits.max_bytes``, a tree Python itself cannot build, or one of more than ``limits.max_nodes`` nodes or
    deeper than ``limits.max_depth`` (walked without recursion, so any tree is checked)."""
    size = len(source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source)
    if size > limits.max_bytes:
        raise BoundedInputError(f"larger than {limits.max_bytes:,} bytes, the limit for {limits.kind}")
    try:
        tree = ast.parse(source, filename=filename)
    except (RecursionError, MemoryError):  # "maximum recursion depth exceeded during ast construction"
        raise BoundedInputError(f"nested too deeply for Python to read (more than {limits.max_depth} levels are "
                                "not followed)") from None
    except ValueError as err:  # a NUL byte (Python 3.11 raises ValueError for it, later versions SyntaxError)
        raise SyntaxError(str(err)) from None
    count = 0
    pending: list[tuple[ast.AST, int]] = [(tree, 0)]
    while pending:
        node, depth = pending.pop()
        count += 1
        if count > limits.max_nodes:
            raise BoundedInputError(f"more than {limits.max_nodes:,} syntax nodes: too large to be {limits.kind}",
                                    getattr(node, "lineno", None))
        if depth > limits.max_depth:
            raise BoundedInputError(f"nested more than {limits.max_depth} levels deep: too deep for {limits.kind}",
                                    getattr(node, "lineno", None))
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


SHLEX_LIMIT = 1 << 13
"""Longer shell text (or text with a word over :data:`SHLEX_WORD_LIMIT`) is split on white space instead:
:mod:`shlex` reads about 6 us a character and builds each word by string concatenation, time quadratic in
a word's length (a 1 MB command word took 108 s). No command a person writes comes near either limit."""
SHLEX_WORD_LIMIT = 1 << 10


def shlex_can_read(text: str) -> bool:
    """``text`` is short enough for :mod:`shlex` to read in bounded time (see :data:`SHLEX_LIMIT`)."""
    return len(text) <= SHLEX_LIMIT and max(map(len, text.split()), default=0) <= SHLEX_WORD_LIMIT


def split_words(text: str) -> list[str]:
    """``text`` split into words as ``shlex.split`` does, within :data:`SHLEX_LIMIT`; past it, or with unbalanced
    quotes, on white space. Raises nothing."""
    if not shlex_can_read(text):
        return text.split()
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()
