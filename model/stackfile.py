"""Reading ``Pulumi.<stack>.yaml``: the raw config, as the Pulumi CLI would hand it to the program.

The Pulumi CLI passes each config key to the program as a string, structured values JSON-encoded,
and lists the keys set with ``--secret``. :func:`read` returns exactly that, plus a map from config
paths to line numbers so errors and policy findings can point into the file.

A top-level ``environment:`` (Pulumi ESC imports) is refused: its values reach ``pulumi up`` but never
the offline gate. Encrypted values (``secure: v1:...``) cannot be decrypted offline; they are replaced by
:data:`SECRET_PLACEHOLDER` and their top-level keys reported as secret, which is how the program
sees them under ``pulumi preview`` too: as secret values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra import secrets
from model import NAMESPACE
from model.errors import ConfigError, Problem

SECRET_PLACEHOLDER = "[secret]"

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class StackFile:
    path: Path
    config: dict[str, Any]
    """Every config key (``namespace:key``) with its decoded value."""
    secret_keys: frozenset[str]
    lines: dict[Path_, int] = field(repr=False)
    columns: dict[Path_, int] = field(default_factory=dict, repr=False)
    """The column (1-based) of each key, or of each list item's first character, for messages."""

    @property
    def display(self) -> str:
        return self.path.name

    def line_of(self, path: Path_) -> int:
        """The line of the deepest part of ``path`` found in the file (1 when none is)."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1

    def position_of(self, path: Path_) -> tuple[int, int]:
        """``(line, column)`` of the deepest part of ``path`` found in the file ((0, 0) when none is)."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]], self.columns.get(path[:end], 0)
        return 0, 0

    def cli_config(self) -> dict[str, str]:
        """Config as the Pulumi CLI hands it to a program: strings, structured values as JSON."""
        return {
            key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            for key, value in self.config.items()
        }


def _index_lines(node: yaml.Node, path: Path_, out: dict[Path_, int], columns: dict[Path_, int]) -> None:
    out[path] = node.start_mark.line + 1
    columns[path] = node.start_mark.column + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            _index_lines(value_node, (*path, key), out, columns)
            out[(*path, key)] = key_node.start_mark.line + 1
            columns[(*path, key)] = key_node.start_mark.column + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, (*path, i), out, columns)


def _strip_secrets(value: Any) -> tuple[Any, bool]:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return SECRET_PLACEHOLDER, True
        found = False
        out = {}
        for k, v in value.items():
            out[k], secret = _strip_secrets(v)
            found = found or secret
        return out, found
    if isinstance(value, list):
        items = [_strip_secrets(v) for v in value]
        return [v for v, _ in items], any(s for _, s in items)
    return value, False


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# Pulumi reads `expires: 2027-03-31` as the string it looks like; PyYAML would make it a date object.
_WITHOUT_TIMESTAMPS = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.yaml_implicit_resolvers = _WITHOUT_TIMESTAMPS


class _FastUniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same loader on libyaml's parser when PyYAML has one (PyYAML's wheels do): a stack file of a
    thousand runs parses in 0.3 s instead of 2 s. Resolver and constructors are PyYAML's, so a file both
    parsers read gives the same values and lines. In corners no stack file needs, libyaml follows the YAML
    spec where PyYAML does not: it accepts a tab, a byte-order mark or U+2028 inside a value, which PyYAML
    refuses, and reads a lone ``!`` tag as '' (PyYAML: None). Pulumi reads stack files with a Go port of
    libyaml."""


_FastUniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_FastUniqueKeyLoader.yaml_implicit_resolvers = _WITHOUT_TIMESTAMPS
_EVENT_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


MAX_BYTES = 8 * 1024 * 1024
"""The largest stack file read: 15 times a generated stack of a thousand runs (556 KB)."""
MAX_NODES = 500_000
"""The most values (scalars, lists, mappings) a stack file may expand to, each alias counted as the whole
value it repeats: 12 times a thousand-run stack (41,810). Go's YAML reader, which Pulumi and Kubernetes
use, bounds alias expansion the same way (CVE-2019-11253); without a bound a 10-line file of nested
anchors expands to billions of values."""
MAX_DEPTH = 64
"""The deepest nesting of lists and mappings (a stack file needs 7). libyaml's composer recurses in C,
where a document nested 100,000 levels deep crashes the interpreter instead of raising an error."""


def _line_of(event: yaml.Event) -> str:
    """``line N`` of where a YAML event starts (every event the parser emits carries its mark)."""
    return f"line {event.start_mark.line + 1}" if event.start_mark is not None else "line ?"


def _check_bounds(text: str, name: str) -> None:
    """Refuse, before anything is built from it, a document whose expansion exceeds :data:`MAX_NODES` or
    whose nesting exceeds :data:`MAX_DEPTH`, or with an alias inside its own anchor (a cycle).

    One pass over libyaml's parse events, in constant memory per anchor: it stops at the first event past
    a limit, so a bomb is refused in milliseconds. Syntax errors are left to the parse that follows."""
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
                if len(open_) > MAX_DEPTH:
                    raise ConfigError(
                        f"nested more than {MAX_DEPTH} levels deep (the limit for a stack file)",
                        file=name, key=_line_of(event),
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, start = open_.pop()
                if anchor is not None:
                    sizes[anchor] = count - start + 1
            elif isinstance(event, yaml.AliasEvent):
                if any(anchor == event.anchor for anchor, _ in open_):
                    raise ConfigError(
                        f"invalid YAML: alias *{event.anchor} is inside its own anchor &{event.anchor} "
                        "(a value that contains itself)",
                        file=name, key=_line_of(event),
                    )
                count += sizes.get(event.anchor or "", 1)
            if count > MAX_NODES:
                raise ConfigError(
                    f"expands to more than {MAX_NODES:,} values (aliases counted in full), the limit for a "
                    "stack file: an alias bomb?",
                    file=name, key=_line_of(event),
                )
    except yaml.YAMLError as err:
        # libyaml (0.2.5 on) stops its scanner at 1,000 open flow collections, ahead of the events this
        # loop reads: that is nesting past the limit, not a syntax error for the (recursive) parse below.
        if "maximum nesting depth" in str(getattr(err, "problem", "")):
            mark = getattr(err, "problem_mark", None)
            raise ConfigError(
                f"nested more than {MAX_DEPTH} levels deep (the limit for a stack file)",
                file=name, key=f"line {mark.line + 1}" if mark is not None else "line ?",
            ) from None
        return


def _parse(text: str, loader_class: type[Any]) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for line numbers) and its value, from one parse (``yaml.compose`` then
    ``yaml.load`` parsed the file twice)."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


PULUMI_STACK_KEYS = frozenset({"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"})
"""The top-level keys of a Pulumi stack file (Pulumi's ``ProjectStack``)."""


def _check_top_level(document: dict[Any, Any], node: yaml.Node | None, name: str) -> None:
    """Settings written at the top level instead of under ``config:`` (a missing wrapper or a key
    indented one level too little) are reported with their line, and the fix."""
    stray = [k for k in document if isinstance(k, str) and ":" in k and k not in PULUMI_STACK_KEYS]
    if not stray:
        return
    positions = {}
    if isinstance(node, yaml.MappingNode):
        positions = {k.value: (k.start_mark.line + 1, k.start_mark.column + 1) for k, _ in node.value}
    if "config" not in document:
        raise ConfigError(file=name, problems=[Problem(
            "config", f"no 'config:' key, and {len(stray)} setting(s) at the top level ({', '.join(stray)}): stack "
            "settings live under 'config:': add 'config:' as the first line and indent every setting below it",
            *positions.get(stray[0], (0, 0)),
        )])
    raise ConfigError(file=name, problems=[
        Problem(key, f"'{key}' is at the top level of the file: indent it under the 'config:' key",
                *positions.get(key, (0, 0)))
        for key in stray
    ])


def read(path: Path) -> StackFile:
    """Parse a stack file; any problem is a :class:`ConfigError` naming the file (and line)."""
    name = path.name
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("stack file not found", file=str(path)) from None
    except OSError as err:
        raise ConfigError(f"cannot read stack file: {err.strerror or err}", file=str(path)) from None
    if len(data) > MAX_BYTES:
        raise ConfigError(
            f"larger than {MAX_BYTES:,} bytes, the limit for a stack file", file=name
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} cannot be decoded; save the file as UTF-8",
            file=name, key=f"line {line}",
        ) from None
    _check_bounds(text, name)
    try:
        secrets.remember_in_text(text)  # before parsing: a line that does not parse is quoted in the error
    except secrets.TooManySecrets as err:
        raise ConfigError(str(err), file=name) from None
    try:
        try:
            node, document = _parse(text, _FastUniqueKeyLoader)
        except yaml.YAMLError:
            # libyaml's messages are terser ("found character that cannot start any token"): parse the
            # broken file again with PyYAML's own parser, whose message names the character.
            node, document = _parse(text, _UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err)
        if mark is None:
            raise ConfigError(f"invalid YAML: {problem}", file=name, key="YAML") from None
        raise ConfigError(file=name, problems=[
            Problem("", f"invalid YAML: {problem}", mark.line + 1, mark.column + 1)
        ]) from None
    try:
        secrets.remember_in(document)
    except secrets.TooManySecrets as err:
        raise ConfigError(str(err), file=name) from None
    if document is None:
        raise ConfigError("the file is empty; expected a 'config:' mapping", file=name)
    if not isinstance(document, dict):
        raise ConfigError("expected a mapping at the top level with a 'config:' key", file=name)
    _check_top_level(document, node, name)
    imports = document.get("environment")
    if imports:
        shown = ", ".join(str(i) for i in imports) if isinstance(imports, list) else json.dumps(imports, default=str)
        raise ConfigError(
            f"imports Pulumi ESC environment(s) {shown[:200]}: their values (which can set any config key) are "
            "only known to `pulumi up`, so the offline gate would judge a stack other than the one deployed. Put "
            "the values in this file (secrets as `pulumi config set --secret`), or remove the import",
            file=name, key="environment",
        )
    config = document.get("config", {})
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError("expected a mapping of 'namespace:key: value'", file=name, key="config")
    lines: dict[Path_, int] = {}
    columns: dict[Path_, int] = {}
    if node is not None:
        for key_node, value_node in node.value:
            if key_node.value == "config":
                _index_lines(value_node, (), lines, columns)
    bare = [key for key in config if not isinstance(key, str) or ":" not in key]
    if bare:
        raise ConfigError(file=name, problems=[
            Problem(f"config.{key}", f"config keys are 'namespace:key': write "
                    f"'{'azure-native' if key == 'location' else NAMESPACE}:{key}'",
                    lines.get((key,), 0), columns.get((key,), 0))
            for key in bare
        ])
    decoded: dict[str, Any] = {}
    secret: set[str] = set()
    for key, value in config.items():
        decoded[key], is_secret = _strip_secrets(value)
        if is_secret:
            secret.add(key)
    return StackFile(path=path, config=decoded, secret_keys=frozenset(secret), lines=lines, columns=columns)
