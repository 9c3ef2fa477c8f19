"""The inputs the stack sends for Azure Policy and the customer-managed key exist where it sends them: in the REST
spec example at the API version the installed provider uses, and as Azure Policy's own built-in definitions
evaluate them (tests/fixtures/provider-schema, with its sources)."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from planning.engine import ProgramRun, run_program
from planning.mocks import arm_id
from stack.stackfile import read
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "provider-schema"
EXAMPLE = json.loads((FIXTURES / "workspace-create-2025-12-01.json").read_text())
DEFINITIONS = json.loads((FIXTURES / "policy-rules.json").read_text())
WORKSPACE = "azure-native:machinelearningservices:Workspace"


@pytest.fixture(scope="module")
def prod_plan() -> ProgramRun:
    return run_program("prod", read(ROOT / "Pulumi.prod.yaml"), ROOT)


def _keys(value: Any, prefix: str = "") -> set[str]:
    if not isinstance(value, dict):
        return set()
    return {k for key, v in value.items() for k in {prefix + key} | _keys(v, prefix + key + ".")}


def test_the_provider_targets_the_api_version_of_the_example() -> None:
    # The module's source, read as a file: importing it directly would bypass the SDK's lazy module loading.
    spec = importlib.util.find_spec("pulumi_azure_native")
    assert spec is not None and spec.origin is not None
    source = (Path(spec.origin).parent / "machinelearningservices" / "workspace.py").read_text()
    versions = set(re.findall(r"Uses Azure REST API version ([0-9-]+)\.", source))
    assert versions == {EXAMPLE["api-version"]}


def test_the_customer_managed_key_names_the_identity_that_fetches_it(prod_plan: ProgramRun) -> None:
    (workspace,) = prod_plan.by_type(WORKSPACE)
    encryption = workspace.inputs["encryption"]
    # Every key the stack sends is one the spec example uses, at the same place.
    assert _keys(encryption) <= _keys(EXAMPLE["properties"]["encryption"])
    chosen = encryption["identity"]["userAssignedIdentity"]
    assert chosen == workspace.inputs["primaryUserAssignedIdentity"]
    assert chosen in workspace.inputs["identity"]["userAssignedIdentities"]


def test_no_key_no_identity(dev_plan: ProgramRun) -> None:
    (workspace,) = dev_plan.by_type(WORKSPACE)
    assert "encryption" not in workspace.inputs


# --------------------------------------------------------------------------------------------- the built-ins


def _field(resource: dict[str, Any], arm_type: str, alias: str) -> Any:
    """A policy alias (``<type>/<property path>``) read from the planned inputs, as Azure reads the request body."""
    if alias == "type":
        return arm_type
    if not alias.lower().startswith(arm_type.lower() + "/"):
        return None
    value: Any = resource["inputs"]
    for part in alias[len(arm_type) + 1:].split("."):
        found = [v for k, v in value.items() if k.lower() == part.lower()] if isinstance(value, dict) else []
        if not found:
            return None
        value = found[0]
    return value


def _text(value: Any) -> str:
    return str(value).lower() if not isinstance(value, bool) else ("true" if value else "false")


def holds(condition: dict[str, Any], resource: dict[str, Any], arm_type: str, parameters: dict[str, Any]) -> bool:
    """Azure Policy's ``if`` (allOf, anyOf, not, field with equals, notEquals, in, exists), strings compared
    ignoring case, booleans as "true"/"false"; ``count`` over a list the stack never sends counts zero."""
    if "allOf" in condition:
        return all(holds(c, resource, arm_type, parameters) for c in condition["allOf"])
    if "anyOf" in condition:
        return any(holds(c, resource, arm_type, parameters) for c in condition["anyOf"])
    if "not" in condition:
        return not holds(condition["not"], resource, arm_type, parameters)
    if "count" in condition:
        items = _field(resource, arm_type, condition["count"]["field"].removesuffix("[*]")) or []
        return len(items) > 0 if condition.get("greater") == 0 else False

    def resolve(value: Any) -> Any:
        match = re.fullmatch(r"\[parameters\('(\w+)'\)\]", value) if isinstance(value, str) else None
        return parameters[match.group(1)] if match else value

    value = _field(resource, arm_type, condition["field"])
    if "exists" in condition:
        return (value is not None) is (str(condition["exists"]).lower() == "true")
    if "equals" in condition:
        return value is not None and _text(value) == _text(resolve(condition["equals"]))
    if "notEquals" in condition:
        return value is None or _text(value) != _text(resolve(condition["notEquals"]))
    if "in" in condition:
        return value is not None and _text(value) in {_text(v) for v in resolve(condition["in"])}
    raise AssertionError(f"condition not understood: {condition}")


def flagged(plan: ProgramRun, guid: str, parameters: dict[str, Any] | None = None) -> list[str]:
    """The planned resources the built-in ``guid`` would deny (or audit) with these parameters."""
    definition = DEFINITIONS[guid]
    params = {**definition.get("parameters", {}), **(parameters or {})}
    out = []
    for r in plan.resources:
        if r.type.startswith("aml-gpu-training:") or r.type.startswith("pulumi-python:"):
            continue
        resource = r.to_json()
        path = arm_id(r.type, r.name, resource["inputs"]).split("/providers/")[-1].split("/")
        arm_type = "/".join([path[0], *path[1::2]][: (len(path) + 1) // 2])
        if holds(definition["policyRule"], resource, arm_type, params):
            out.append(f"{arm_type} {r.name}")
    return sorted(out)


@pytest.mark.parametrize(("guid", "parameters", "dev", "prod"), [
    ("7bca8353-aa3b-429b-904a-9229c4385837", None, [], []),
    ("6ddb1705-c8cf-450e-aa4b-19ad6703c440", None, [], []),
    ("0c4bd2e8-8872-4f37-a654-03f6f38ddc76", None, [], []),
    ("fa298e57-9444-42ba-bf04-86e8470e32c7", None, ["Microsoft.OperationalInsights/workspaces mlw-gpu-dev-logs"],
     ["Microsoft.OperationalInsights/workspaces mlw-gpu-prod-logs"]),
    ("bf045164-79ba-4215-8f95-f8048dc1780b", None, ["Microsoft.Storage/storageAccounts mlw-gpu-dev-storage"], []),
    ("7433c107-6db4-4ad1-b57a-a76dce0154a1", {"listOfAllowedSKUs": ["Standard_GZRS"]},
     ["Microsoft.Storage/storageAccounts mlw-gpu-dev-storage"], []),
], ids=lambda v: v[:8] if isinstance(v, str) else None)
def test_the_built_in_definitions_judge_the_plan_as_docs_azure_policy_says(
    dev_plan: ProgramRun, prod_plan: ProgramRun, guid: str, parameters: dict[str, Any] | None, dev: list[str],
    prod: list[str],
) -> None:
    assert flagged(dev_plan, guid, parameters) == dev
    assert flagged(prod_plan, guid, parameters) == prod
    assert guid in (ROOT / "docs" / "azure-policy.md").read_text()


def test_the_evaluator_can_flag(dev_plan: ProgramRun) -> None:
    """Without the stack's settings, the same definitions flag the resources: the evaluator is not vacuous."""
    plan = copy.deepcopy(dev_plan)
    for r in plan.resources:
        if r.type == "azure-native:network:Subnet":
            r.inputs["defaultOutboundAccess"] = True
        if r.type == WORKSPACE:
            del r.inputs["managedNetwork"]
    assert flagged(plan, "7bca8353-aa3b-429b-904a-9229c4385837") == [
        "Microsoft.Network/virtualNetworks/subnets mlw-gpu-dev-training-subnet"]
    assert flagged(plan, "6ddb1705-c8cf-450e-aa4b-19ad6703c440") == [
        "Microsoft.MachineLearningServices/workspaces mlw-gpu-dev-workspace"]
