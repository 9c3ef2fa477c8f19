"""``docs/config.md``: the stack config reference, rendered from the stack file's JSON Schema.

The schema is generated from the model (:mod:`stack.jsonschema`), so the reference's keys, types,
defaults and meanings are the model's and cannot drift from it: ``amlgpu schema --write`` rewrites
the page and ``amlgpu schema --check`` (run by the tests) fails when the committed one differs.
"""

from __future__ import annotations

import json
from typing import Any

from stack import NAMESPACE
from stack.jsonschema import SCHEMA_PATH, stack_schema
from stack.keys import LOCATION_KEY

DOCS_PATH = "docs/config.md"
"""Where the committed reference lives, relative to the project root."""

_INTRO = f"""\
# Stack config reference

<!-- Generated from stack.config.StackConfig by `amlgpu schema --write`. Do not edit by hand. -->

Everything a stack declares lives under `config:` in `Pulumi.<stack>.yaml`, in the `{NAMESPACE}:`
namespace, in Azure ML CLI v2 vocabulary. Other namespaces (`azure-native:subscriptionId`...) are
Pulumi's and the providers'. Unknown keys of this namespace are errors, with a "did you mean" hint.

* Editors: add `# yaml-language-server: $schema={SCHEMA_PATH}` as the first line of a stack file to
  get completion, hover help and these checks as you type (VS Code: the Red Hat YAML extension).
* Secrets: no value of this namespace may be set with `pulumi config set --secret`: names, sizes
  and tags are readable in Azure, and runs keep their settings readable in the job definition. Keep
  secrets in the workspace key vault ([operations.md](operations.md#secrets)).
* What a schema cannot say (a run's cluster exists, a build folder exists, exactly one of `image`,
  `build` or `reference`) is checked by `amlgpu plan`, with the file and key of the mistake.
* Whether a stack is *wise* (InfiniBand for multi-node runs, secure defaults kept...) is policy:
  [policies.md](policies.md). Runs in depth: [jobs.md](jobs.md).
"""


_INLINE_CHOICES = 6
"""Enums longer than this are listed in the meaning column rather than as the type."""


def _anchor(name: str) -> str:
    return name.lower()


def _ref_name(node: dict[str, Any]) -> str:
    return str(node["$ref"]).rsplit("/", 1)[-1]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _members(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in node.get("anyOf", node.get("oneOf", [])) if m.get("type") != "null"]


def _type(node: dict[str, Any]) -> str:
    """A schema node as a short Markdown type: ``integer ≥ 1``, ``list of [Cluster](#cluster)``..."""
    if "$ref" in node:
        name = _ref_name(node)
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in node or "oneOf" in node:
        return " or ".join(_type(m) for m in _members(node))
    if "const" in node:
        return f"`{node['const']}`"
    if "enum" in node:
        if len(node["enum"]) > _INLINE_CHOICES:
            return "string (see values)"
        return " | ".join(f"`{value}`" for value in node["enum"])
    kind = node.get("type")
    if kind == "array":
        text = f"list of {_type(node.get('items', {}))}"
        return text + (f", at least {node['minItems']}" if node.get("minItems") else "")
    if kind == "object":
        values = node.get("additionalProperties")
        return f"map of string to {_type(values)}" if isinstance(values, dict) else "mapping"
    if kind == "integer":
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and high is not None:
            return f"integer {low}..{high}"
        return "integer" + (f" ≥ {low}" if low is not None else "") + (f" ≤ {high}" if high is not None else "")
    if kind == "string":
        if node.get("format") == "date":
            return "date (YYYY-MM-DD)"
        if "pattern" in node and "patternErrorMessage" not in node:
            return f"string matching `{node['pattern']}`"
        length = node.get("minLength", 0)
        return "string" + {0: "", 1: ", not empty"}.get(length, f", at least {length} characters")
    return str(kind or "any")


def _default(node: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in node:
        return "unset"
    value = node["default"]
    if value is None:
        return "unset"
    if isinstance(value, dict) and value and "$ref" in node:
        return "its defaults"
    return f"`{json.dumps(value, separators=(', ', ': '))}`"


def _rule(node: dict[str, Any]) -> str | None:
    for candidate in (node, *_members(node)):
        if "patternErrorMessage" in candidate:
            return str(candidate["patternErrorMessage"])
    return None


def _choices(node: dict[str, Any]) -> list[Any]:
    """The enum of a node, of its non-null member or of its items."""
    for candidate in (node, *_members(node)):
        if "enum" in candidate:
            return list(candidate["enum"])
        if isinstance(candidate.get("items"), dict):
            return _choices(candidate["items"])
    return []


def _table(properties: dict[str, Any], required: list[str]) -> list[str]:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, node in properties.items():
        meaning = node.get("description", "")
        rule = _rule(node)
        if rule:
            meaning += f" Azure's rule: {rule.split(': ', 1)[-1]}."
        choices = _choices(node)
        if len(choices) > _INLINE_CHOICES:
            meaning += " Values: " + ", ".join(f"`{value}`" for value in choices) + "."
        lines.append(f"| `{key}` | {_cell(_type(node))} | {_default(node, key in required)} | {_cell(meaning)} |")
    return lines


def _references(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [_ref_name(node)] if "$ref" in node else []
        for key, value in node.items():
            if key != "default":
                found += _references(value)
        return found
    if isinstance(node, list):
        return [name for value in node for name in _references(value)]
    return []


def reference_markdown() -> str:
    """The whole ``docs/config.md`` page."""
    schema = stack_schema()
    config = schema["properties"]["config"]
    definitions: dict[str, Any] = schema["$defs"]
    top = dict(config["properties"])
    top[LOCATION_KEY] = {
        **top[LOCATION_KEY],
        "description": top[LOCATION_KEY]["description"] + " Required unless workspace.location is set.",
    }
    lines = [_INTRO, "## Keys of `config:`", "", *_table(top, config["required"]), ""]

    order: list[str] = []
    pending = _references(config["properties"])
    while pending:  # sections in the order a reader meets them, each once
        name = pending.pop(0)
        if name not in order:
            order.append(name)
            pending += _references(definitions[name])
    for name in order:
        node = definitions[name]
        lines += [f"## {name}", ""]
        if node.get("description"):
            lines += [node["description"], ""]
        lines += [*_table(node.get("properties", {}), node.get("required", [])), ""]
    return "\n".join(lines).rstrip("\n") + "\n"
