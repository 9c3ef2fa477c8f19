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

from kernel import bounded, secrets
from kernel.errors import ConfigError, Problem
from stack import NAMESPACE

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


MAX_BYTES = bounded.STACK_FILE.max_bytes
"""The largest stack file read (:data:`kernel.bounded.STACK_FILE`)."""
MAX_NODES = bounded.STACK_FILE.max_nodes
"""The most values a stack file may expand to, aliases counted in full (:mod:`kernel.bounded`)."""
MAX_DEPTH = bounded.STACK_FILE.max_depth
"""The deepest nesting of lists and mappings (a stack file needs 7)."""


def _config_error(err: bounded.BoundedInputError, name: str) -> ConfigError:
    """A bounded reader's refusal as the stack file's config error, pointing at its line."""
    if err.line is not None and err.column is not None:
        return ConfigError(file=name, problems=[Problem("", err.message, err.line, err.column)])
    if err.line is not None:
        return ConfigError(err.message, file=name, key=f"line {err.line}")
    return ConfigError(err.message, file=name, key="YAML" if err.message.startswith("invalid YAML") else None)


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
    """Parse a stack file; any problem is a :class:`ConfigError` naming the file (and line). The file goes
    through the project's one bounded YAML reader (:mod:`kernel.bounded`, limits :data:`~kernel.bounded.STACK_FILE`)."""
    name = path.name
    try:
        text = bounded.read_text(path, bounded.STACK_FILE)
        secrets.remember_in_text(text)  # before parsing: a line that does not parse is quoted in the error
        node, document = bounded.parse(text, bounded.STACK_FILE)
        secrets.remember_in(document)
    except FileNotFoundError:
        raise ConfigError("stack file not found", file=str(path)) from None
    except OSError as err:
        raise ConfigError(f"cannot read stack file: {err.strerror or err}", file=str(path)) from None
    except bounded.BoundedInputError as err:
        raise _config_error(err, name) from None
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
