"""Reading resource inputs in wire shape: camelCase paths, and values not known until deployment.

The offline plan writes a value that depends on another resource's output as :data:`UNKNOWN`
(``pulumi preview`` of a new stack cannot know it either); the CrossGuard adapter turns Pulumi's
unknown sentinels into the same marker. Rules decide only on what is known: an unknown value is
never reported as a violation, and a present-but-unknown value still counts as *set*.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNKNOWN = "[unknown]"
"""The marker for a value that only exists after deployment (an id, a generated name)."""


def get(mapping: Mapping[str, Any] | None, path: str, default: Any = None) -> Any:
    """The value at a dotted camelCase ``path`` (``"properties.properties.vmSize"``), or ``default``."""
    value: Any = mapping
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return default if value is None else value


def inputs(resource: Mapping[str, Any]) -> Mapping[str, Any]:
    """A planned resource's inputs (empty when it has none)."""
    return resource.get("inputs") or {}


def known(value: Any) -> bool:
    """False for a value only the deployment will know."""
    return bool(value != UNKNOWN)


def is_true(value: Any) -> bool:
    """Whether a wire boolean is explicitly true (strings from loosely typed programs included)."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def is_false(value: Any) -> bool:
    """Whether a wire boolean is explicitly false."""
    return value is False or (isinstance(value, str) and value.lower() == "false")


def same(a: Any, b: Any) -> bool:
    """Case-insensitive equality for Azure names and enum values (Azure ignores case in both)."""
    return isinstance(a, str) and isinstance(b, str) and a.lower() == b.lower()
