"""The rule catalogue: every rule of every family module, by id, in a stable order.

Adding a rule is writing a decorated function in a family module; nothing else needs listing it.
"""

from __future__ import annotations

from types import MappingProxyType

from policies.rule import Rule
from policies.rules import compute, environments, fabric, hardening, network, runs, storage, workspace

FAMILIES = (workspace, storage, network, compute, environments, runs, fabric, hardening)
"""Family modules, in the order listings and docs show them."""


def _collect() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for module in FAMILIES:
        found = sorted((v for v in vars(module).values() if isinstance(v, Rule)), key=lambda r: r.id)
        for rule in found:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id} is declared twice ({seen[rule.id]}, {rule.family})")
            seen[rule.id] = rule.family
        rules.extend(found)
    return tuple(rules)


RULES: tuple[Rule, ...] = _collect()
"""Every rule, grouped by family (in :data:`FAMILIES` order), sorted by id within a family."""

BY_ID: MappingProxyType[str, Rule] = MappingProxyType({rule.id: rule for rule in RULES})
