"""Registered components a pipeline step names, and where their pulled specs live in the project.

A step's ``component`` may be registered in the workspace (``azureml:<name>:<version>``) or in a registry
(``azureml://registries/<registry>/components/<name>/versions/<version>``), the two forms of Azure ML's
"Manage components" reference syntax (CLI v2 ``component:``). The gate judges only what it can read, so
``amlgpu components pull`` (:mod:`jobs.components`) writes each such component's spec into the project as
component YAML a person can review, under :data:`FOLDER`, and records in :data:`LOCK` where it came from, its
version and the hashes of its spec and of the file written. Plan reads the file as it reads a
``file:`` component; a step whose component has no pulled file is a mandatory finding
(``pipeline-component-not-pulled``); ``amlgpu submit`` compares the registered spec with the lock.

A registered component's code is an uploaded snapshot (``code: azureml:...``) the gate cannot read: the lock
keeps its asset id and the pulled file leaves it out, so the step is judged without a code folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NamedTuple

from kernel import bounded
from kernel import regex as linear

FOLDER = "components/registered"
"""Where pulled component specs are written, relative to the project root."""
LOCK = f"{FOLDER}/lock.json"
"""The lock: one entry per pulled reference."""

_WORKSPACE = linear.compile(r"^azureml:(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]*):(?P<version>[A-Za-z0-9_.-]+)$")
_REGISTRY = linear.compile(r"^azureml://registries/(?P<registry>[A-Za-z0-9][A-Za-z0-9_-]*)/components/"
                           r"(?P<name>[A-Za-z0-9_][A-Za-z0-9_.-]*)/versions/(?P<version>[A-Za-z0-9_.-]+)$")
_SAFE = linear.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class Registered(NamedTuple):
    """A registered component a step names."""

    reference: str
    """As written: ``azureml:<name>:<version>`` or the registry URI."""
    name: str
    version: str
    registry: str | None
    """The registry, or None for the workspace's own."""

    @property
    def source(self) -> str:
        return f"registry {self.registry}" if self.registry else "workspace"

    @property
    def file(self) -> str:
        """The pulled spec's path relative to the project root."""
        where = f"registries/{self.registry}" if self.registry else "workspace"
        return f"{FOLDER}/{where}/{self.name}/{self.version}.yml"


def is_registered(reference: str) -> bool:
    """Whether a step's ``component`` string names a registered component (``azureml:...``)."""
    return reference.startswith("azureml:")


def parse(reference: str) -> Registered:
    """The registered component ``reference`` names. Raises ValueError naming the forms Azure ML takes, and
    asking for a version: the gate judges one spec, and ``@latest`` or no version is whichever is newest."""
    for pattern in (_WORKSPACE, _REGISTRY):
        match = pattern.match(reference)
        if match is not None:
            name, version = match.group("name"), match.group("version")
            if not (_SAFE.match(name) and _SAFE.match(version)) or ".." in reference:
                break
            return Registered(reference, name, version, match.group("registry") if pattern is _REGISTRY else None)
    raise ValueError(
        f"component {reference!r}: name a registered component with its version, azureml:<name>:<version> or "
        "azureml://registries/<registry>/components/<name>/versions/<version> (the gate judges one version; "
        "@latest or no version is whichever is newest at submission)"
    )


def spec_hash(spec: dict[str, Any]) -> str:
    """The content hash of a component spec: SHA-256 of its canonical JSON (keys sorted, no spaces)."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def file_hash(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_lock(root: Path) -> dict[str, dict[str, Any]]:
    """The lock's entries by reference (empty when there is none). Raises ValueError when it is unreadable."""
    path = root / LOCK
    if not path.is_file():
        return {}
    try:
        data = bounded.load_json_file(path, "component lock", 1 << 20)
    except (OSError, ValueError, bounded.BoundedInputError) as err:
        raise ValueError(f"{LOCK} cannot be read: {err}") from None
    entries = data.get("components") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "reference" in e for e in entries):
        raise ValueError(f"{LOCK}: expected {{\"components\": [{{\"reference\": ...}}, ...]}}; pull again")
    return {str(e["reference"]): e for e in entries}


def lock_text(entries: list[dict[str, Any]]) -> str:
    """The lock file for ``entries`` (sorted by reference, stable bytes)."""
    ordered = sorted(entries, key=lambda e: str(e["reference"]))
    return json.dumps({"components": ordered}, indent=2, sort_keys=True) + "\n"
