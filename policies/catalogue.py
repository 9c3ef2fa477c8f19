"""The rule catalogue: every rule of every family module, by id, in a stable order.

Adding a rule is a row in ``policies/rules/properties.yaml`` when it only compares one property
(:mod:`policies.properties`), else a decorated function in a family module (or in a subject module of a
family package, such as ``policies/rules/runs/``); nothing else lists it.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import MappingProxyType, ModuleType

from policies.properties import table_rules
from policies.rule import Rule
from policies.rules import (
    budgets,
    compute,
    deploy_order,
    environments,
    fabric,
    hardening,
    launch,
    network,
    pipelines,
    runs,
    runtime,
    storage,
    workspace,
)

FAMILIES = (workspace, storage, network, deploy_order, compute, environments, runs, launch, runtime, fabric,
            pipelines, hardening, budgets)
"""Family modules, in the order listings and docs show them."""


def _name(module: object) -> str:
    return getattr(module, "__name__", "").rsplit(".", 1)[-1]


def _modules(family: ModuleType) -> list[ModuleType]:
    """A family module, or the subject modules of a family package (``policies/rules/runs/``)."""
    if not hasattr(family, "__path__"):
        return [family]
    return [importlib.import_module(f"{family.__name__}.{info.name}") for info in pkgutil.iter_modules(family.__path__)]


def _collect() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    table = table_rules()
    families = {_name(module) for module in FAMILIES}
    strays = sorted(rule.id for rule in table if rule.family not in families)
    if strays:
        raise ValueError(f"property rules {strays} name no family module")
    for module in FAMILIES:
        # A family's rules: its decorated functions, and the rules it makes from rows of its own table.
        coded = [v for part in _modules(module) for v in vars(part).values() if isinstance(v, Rule)]
        coded += list(getattr(module, "TABLE_RULES", ()))
        found = sorted([*coded, *(r for r in table if r.family == _name(module))], key=lambda r: r.id)
        for rule in found:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id} is declared twice ({seen[rule.id]}, {rule.family})")
            seen[rule.id] = rule.family
        rules.extend(found)
    return tuple(rules)


RULES: tuple[Rule, ...] = _collect()
"""Every rule, grouped by family (in :data:`FAMILIES` order), sorted by id within a family."""

BY_ID: MappingProxyType[str, Rule] = MappingProxyType({rule.id: rule for rule in RULES})
