"""Resource type tokens are written once (azurefacts/resource_types.py, issue 35 point 3.5) and are the types a
planned stack really has: every azure-native type in the dev plan's resources.json is a constant there, and
every type the module says the program creates is in that plan."""

from __future__ import annotations

import ast
from pathlib import Path

from azurefacts import resource_types
from planning.engine import ProgramRun
from policies.rules import network, workspace
from tests.conftest import ROOT

PACKAGES = ("amlgpu", "planning", "policies", "infra", "jobs", "importer", "preflight", "stack", "analysis",
            "azurefacts", "kernel")


def _tokens() -> dict[str, str]:
    return {name: value for name, value in vars(resource_types).items()
            if name.isupper() and isinstance(value, str) and value.startswith("azure-native:")}


def test_the_dev_plan_creates_exactly_the_types_the_module_says_it_creates(dev_plan: ProgramRun) -> None:
    planned = {r.to_json()["type"] for r in dev_plan.resources}
    created = {t for t in planned if t.startswith("azure-native:")}
    assert created == resource_types.CREATED
    assert set(_tokens().values()) >= resource_types.CREATED


def test_the_types_rules_read_beyond_the_program_are_their_own() -> None:
    """The three tokens no plan creates are the ones rules accept from elsewhere: a standalone security rule, the
    diagnostic setting's v2 module, a user-assigned identity."""
    extra = set(_tokens().values()) - resource_types.CREATED - resource_types.CREATED_WHEN_ASKED
    assert {t for t in extra if ":get" not in t} == {resource_types.SECURITY_RULE,
                                                     resource_types.INSIGHTS_DIAGNOSTIC_SETTING,
                                                     resource_types.USER_ASSIGNED_IDENTITY}
    assert resource_types.SECURITY_RULE in network.nsg_no_internet_inbound.resource_types
    assert resource_types.INSIGHTS_DIAGNOSTIC_SETTING in workspace.DIAGNOSTIC_SETTINGS


def test_no_module_writes_a_type_token_of_its_own() -> None:
    """A string literal ``azure-native:<module>:<Type>`` appears only in azurefacts/resource_types.py."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(resource_types.__file__):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and node.value.startswith("azure-native:") and node.value.count(":") == 2):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert found == []
