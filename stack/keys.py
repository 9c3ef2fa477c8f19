"""Where a value is written in the stack file: key paths, the provider's own keys, and how messages name them."""

from __future__ import annotations

from collections.abc import Callable

from stack import NAMESPACE

LOCATION_KEY = "azure-native:location"
SUBSCRIPTION_KEY = "azure-native:subscriptionId"

KeyPath = tuple[str | int, ...]
"""A path into the stack file: the config key (``aml-gpu-training:clusters``), then keys and list indexes."""
Locate = Callable[[KeyPath], tuple[int, int]]
"""``(line, column)`` of a path in the stack file, (0, 0) when unknown."""


def key_text(path: KeyPath) -> str:
    """``aml-gpu-training:jobs[0].limits.timeout`` for ``("aml-gpu-training:jobs", 0, "limits", "timeout")``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def in_file(path: KeyPath) -> KeyPath:
    """A path below the namespace as a path in the stack file (the region's and subscription's keys are their own)."""
    if path and path[0] in (LOCATION_KEY, SUBSCRIPTION_KEY):
        return path
    if path and path[0] == "subscription_id":
        return (SUBSCRIPTION_KEY, *path[1:])
    return (f"{NAMESPACE}:{path[0]}", *path[1:]) if path else (NAMESPACE,)
