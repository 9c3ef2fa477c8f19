"""The order ``pulumi up`` creates a planned stack in: what each resource waits for before it is created.

Pulumi's engine creates a resource once its registration reaches it, and the SDK registers a resource only
when (``pulumi.runtime.resource.prepare_resource``):

* every resource it depends on exists: its explicit ``depends_on`` and every resource one of its inputs'
  Outputs came from, a component standing for the resources below it. The plan records these as the
  resource's ``options.dependsOn`` (``{"type", "name"}`` entries), as the engine receives them;
* its parent's URN is known. A component's URN is known once its own registration went through, that is once
  *its* dependencies exist; a custom resource's once it is created. So a resource also waits for whatever
  its component ancestors wait for, and for a custom parent itself.

Everything else runs at the same time: two resources neither of which waits for the other may be created in
either order, or together. :class:`DependencyGraph` answers "does A wait for B" on exactly these edges; the
deploy-order rules (:mod:`policies.rules.deploy_order`) and the first-deploy replay in the tests use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import Any

from stack import NAMESPACE

Key = tuple[str, str]
"""A planned resource by (type token, logical name): logical names are unique per type only."""

COMPONENT_PREFIX = f"{NAMESPACE}:"
"""The project's own component types (``aml-gpu-training:infra:Workspace``, ``...:DistributedRun``); every other
type in a plan is a custom resource Azure (or a dynamic provider) creates."""


def key_of(resource: Mapping[str, Any]) -> Key:
    return str(resource["type"]), str(resource["name"])


def is_component(key: Key) -> bool:
    return key[0].startswith(COMPONENT_PREFIX)


def dependencies(resource: Mapping[str, Any]) -> frozenset[Key]:
    """The resource's own dependencies as recorded (``options.dependsOn``)."""
    entries = (resource.get("options") or {}).get("dependsOn") or []
    return frozenset((str(e["type"]), str(e["name"])) for e in entries if isinstance(e, Mapping))


class DependencyGraph:
    """The planned resources and what each waits for (see the module docstring)."""

    def __init__(self, resources: Iterable[Mapping[str, Any]]) -> None:
        self.resources: dict[Key, Mapping[str, Any]] = {key_of(r): r for r in resources}

    @cached_property
    def _direct(self) -> dict[Key, frozenset[Key]]:
        return {k: frozenset(d for d in dependencies(r) if d in self.resources) for k, r in self.resources.items()}

    def direct(self, key: Key) -> frozenset[Key]:
        """What the resource's own inputs and ``depends_on`` name (the relation "A uses B")."""
        return self._direct.get(key, frozenset())

    @cached_property
    def _users(self) -> dict[Key, frozenset[Key]]:
        users: dict[Key, set[Key]] = {k: set() for k in self.resources}
        for k, deps in self._direct.items():
            for d in deps:
                users[d].add(k)
        return {k: frozenset(v) for k, v in users.items()}

    def users(self, key: Key) -> frozenset[Key]:
        """The resources whose own inputs or ``depends_on`` name this one (the relation "B is used by A")."""
        return self._users.get(key, frozenset())

    def parent(self, key: Key) -> Key | None:
        resource = self.resources.get(key) or {}
        name, kind = resource.get("parent"), resource.get("parentType")
        found = (str(kind), str(name)) if name and kind else None
        return found if found in self.resources else None

    @cached_property
    def _before(self) -> dict[Key, frozenset[Key]]:
        out: dict[Key, frozenset[Key]] = {}
        for start in self.resources:
            chain: list[Key] = []
            current: Key | None = start
            while current is not None and current not in out and current not in chain:
                chain.append(current)
                current = self.parent(current)
            inherited = out.get(current, frozenset()) if current is not None else frozenset()
            for k in reversed(chain):  # from the top ancestor down: each adds its own to its parent's
                parent = self.parent(k)
                own = set(self.direct(k))
                if parent is not None and not is_component(parent):
                    own.add(parent)
                inherited = out[k] = frozenset(own | inherited)
        return out

    def before(self, key: Key) -> frozenset[Key]:
        """The custom resources the engine creates before it starts on this one (not transitively)."""
        return frozenset(k for k in self._before.get(key, frozenset()) if not is_component(k))

    @cached_property
    def _after_all(self) -> dict[Key, frozenset[Key]]:
        out: dict[Key, frozenset[Key]] = {}
        for start in self.resources:
            if start in out:
                continue
            stack: list[tuple[Key, bool]] = [(start, False)]
            visiting: set[Key] = set()
            while stack:
                node, done = stack.pop()
                if done:
                    visiting.discard(node)
                    found: set[Key] = set()
                    for d in self.before(node):
                        found.add(d)
                        found |= out.get(d, frozenset())
                    out[node] = frozenset(found)
                    continue
                if node in out or node in visiting:
                    continue  # a cycle cannot be planned (the SDK refuses it); never loop on one here
                visiting.add(node)
                stack.append((node, True))
                stack.extend((d, False) for d in self.before(node) if d not in out)
        return out

    def waits_for(self, key: Key) -> frozenset[Key]:
        """Every custom resource created before this one starts (transitively)."""
        return self._after_all.get(key, frozenset())

    def custom(self) -> list[Key]:
        """The resources the engine creates (components are bookkeeping), in plan order."""
        return [k for k in self.resources if not is_component(k)]
