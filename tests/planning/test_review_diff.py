"""``amlgpu plan --base``: the plan diff, Pulumi's replacement semantics, protection, runs and the verdict.

The stack variants are planned by the real program (only Azure is mocked), so a replacement comes from
the ``replaceOnChanges`` the program declares and from the provider facts in ``azurefacts/replacements.json``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from planning.engine import ProgramRun
from planning.review import REPLACEMENTS, diff, diff_markdown, force_new
from tests.conftest import NS, ROOT

SUBNET_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-net/providers/"
    "Microsoft.Network/virtualNetworks/vnet-shared/subnets/gpu"
)


def _resources(plan: ProgramRun) -> list[dict[str, Any]]:
    return json.loads(json.dumps([r.to_json() for r in plan.resources]))


def _cluster(config: dict[str, Any]) -> dict[str, Any]:
    return config[f"{NS}:clusters"][0]


def _add_run(config: dict[str, Any]) -> None:
    run = copy.deepcopy(config[f"{NS}:jobs"][0])
    run["name"] = "ddp-train-long"
    run["limits"] = {"timeout": 7200}
    config[f"{NS}:jobs"].append(run)


@dataclass(frozen=True)
class Case:
    name: str
    mutate: Callable[[dict[str, Any]], None]
    replaced: tuple[str, ...]
    """Inputs of the cluster's Compute that replace it (empty: no replacement)."""
    updated: tuple[str, ...] = ()
    """Inputs of the cluster's Compute updated in place."""
    runs: tuple[tuple[str, str], ...] = ()
    """(run, action) expected in the runs diff."""
    verdict: str = ""


CASES = [
    Case("size", lambda c: _cluster(c).update(size="Standard_ND96amsr_A100_v4"),
         replaced=("properties.properties.vmSize",),
         runs=(("allreduce-health", "change"), ("ddp-torchrun", "change"), ("ddp-train", "change"),
               ("fabric-check-gpu-a100", "change"), ("mnist-tf-multiworker", "change")),
         verdict="replaces cluster gpu-a100 (size Standard_ND96asr_v4 -> Standard_ND96amsr_A100_v4): queued and "
                 "running jobs on it are cancelled"),
    Case("tier", lambda c: _cluster(c).update(tier="low_priority"), replaced=("properties.properties.vmPriority",),
         runs=(("allreduce-health", "change"), ("ddp-torchrun", "change"), ("ddp-train", "change"),
               ("fabric-check-gpu-a100", "change"), ("mnist-tf-multiworker", "change")),
         verdict="replaces cluster gpu-a100 (tier Dedicated -> LowPriority)"),
    Case("subnet", lambda c: c.update({f"{NS}:network": {"subnet_id": SUBNET_ID}}),
         replaced=("properties.properties.subnet.id",), verdict="replaces cluster gpu-a100 (subnet training -> gpu)"),
    Case("max_instances", lambda c: _cluster(c).update(max_instances=4), replaced=(),
         updated=("properties.properties.scaleSettings.maxNodeCount",),
         verdict="resources: 1 updated in place"),
    Case("add a run", _add_run, replaced=(), runs=(("ddp-train-long", "add"),), verdict="runs: 1 added"),
]


@pytest.fixture(scope="module")
def dev_resources(dev_plan: ProgramRun) -> list[dict[str, Any]]:
    return _resources(dev_plan)


def test_a_plan_against_itself_reports_no_change(dev_resources: list[dict[str, Any]]) -> None:
    result = diff(dev_resources, copy.deepcopy(dev_resources), base_label="itself")
    assert result["resources"] == [] and result["runs"] == []
    assert result["verdict"].startswith("No change")
    assert result["counts"] == {"add": 0, "update": 0, "replace": 0, "remove": 0}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_stack_changes_are_judged_as_pulumi_would(
    case: Case, dev_resources: list[dict[str, Any]], plan_variant: Callable[..., ProgramRun]
) -> None:
    head = _resources(plan_variant(case.mutate))
    # The variant is planned as stack "test": compare like with like by renaming the base's stack tag.
    base = json.loads(json.dumps(dev_resources).replace('"stack": "dev"', '"stack": "test"'))
    result = diff(base, head, base_label="dev")
    computes = [r for r in result["resources"] if r["type"].endswith(":Compute") and r["name"] == "gpu-a100"]
    if case.replaced or case.updated:
        assert len(computes) == 1, result["resources"]
        compute = computes[0]
        assert compute["action"] == ("replace" if case.replaced else "update")
        assert tuple(c["input"] for c in compute["changes"] if "replaces" in c) == case.replaced
        assert tuple(c["input"] for c in compute["changes"] if "replaces" not in c) == case.updated
        if case.replaced:
            assert compute["deleteBeforeReplace"] is True and compute["blocked"] is False
    else:
        assert computes == []
        assert [r for r in result["resources"]] == []
    assert tuple((r["name"], r["action"]) for r in result["runs"]) == case.runs
    assert case.verdict in result["verdict"]


def test_a_run_change_carries_the_resolved_values(
    dev_resources: list[dict[str, Any]], plan_variant: Callable[..., ProgramRun]
) -> None:
    def more_nodes(config: dict[str, Any]) -> None:
        _cluster(config)["max_instances"] = 4
        config[f"{NS}:jobs"][0]["resources"]["instance_count"] = 4

    base = json.loads(json.dumps(dev_resources).replace('"stack": "dev"', '"stack": "test"'))
    result = diff(base, _resources(plan_variant(more_nodes)), base_label="dev")
    run = next(r for r in result["runs"] if r["name"] == "ddp-train")
    assert {"field": "nodes", "old": 2, "new": 4} in run["changes"]
    assert run["cluster"] == "gpu-a100" and run["nodes"] == 4 and run["processes_per_node"] == 8
    assert run["environment"] == "azureml:acpt-pytorch:1"


def _with(resources: list[dict[str, Any]], type_: str, name: str, edit: Callable[[dict[str, Any]], None]) -> list[Any]:
    out = copy.deepcopy(resources)
    edit(next(r for r in out if r["type"] == type_ and r["name"] == name))
    return out


STORAGE = "azure-native:storage:StorageAccount"
BLOB_CONTAINER = "azure-native:storage:BlobContainer"


@pytest.mark.parametrize(
    ("label", "type_", "name", "edit", "action", "blocked", "reason"),
    [
        ("forceNew of the provider", STORAGE, "mlw-gpu-dev-storage",
         lambda r: r["inputs"].update(location="northeurope"), "replace", True, "provider: immutable"),
        ("path parameter", BLOB_CONTAINER, "environment-builds",
         lambda r: r["inputs"].update(containerName="builds"), "replace", False, "provider: immutable"),
        ("mutable input", STORAGE, "mlw-gpu-dev-storage",
         lambda r: r["inputs"].update(minimumTlsVersion="TLS1_3"), "update", False, None),
        ("ignoreChanges", STORAGE, "mlw-gpu-dev-storage",
         lambda r: (r["inputs"].update(minimumTlsVersion="TLS1_3"),
                    r.setdefault("options", {}).update(ignoreChanges=["minimumTlsVersion"])), "update", False, None),
    ],
)
def test_provider_facts_protection_and_ignore_changes(
    dev_resources: list[dict[str, Any]], label: str, type_: str, name: str, edit: Callable[[dict[str, Any]], Any],
    action: str, blocked: bool, reason: str | None,
) -> None:
    head = _with(dev_resources, type_, name, edit)
    (entry,) = diff(dev_resources, head, base_label="base")["resources"]
    assert entry["action"] == action
    assert entry.get("blocked", False) is blocked
    if label == "ignoreChanges":
        assert entry["changes"] == [] and "ignoreChanges" in entry["options"]
    else:
        assert entry["changes"][0].get("replaces") == reason


def test_removing_a_protected_resource_is_blocked_and_said_first(dev_resources: list[dict[str, Any]]) -> None:
    head = [r for r in dev_resources if r["type"] != STORAGE]
    result = diff(dev_resources, head, base_label="base")
    (entry,) = result["resources"]
    assert entry["action"] == "remove" and entry["blocked"] is True
    assert result["verdict"].startswith("BLOCKED: would delete protected StorageAccount mlw-gpu-dev-storage")
    assert "⛔ blocked remove" in diff_markdown(result)


def test_provider_facts_cover_every_type_the_program_plans(dev_resources: list[dict[str, Any]]) -> None:
    planned = {r["type"] for r in dev_resources if not r["type"].startswith("aml-gpu-training:")}
    prod = json.loads((ROOT / "tests" / "fixtures" / "policy-baseline.json").read_text())
    planned |= {r["type"] for r in prod["resources"] if not r["type"].startswith("aml-gpu-training:")}
    assert planned <= set(force_new()), planned - set(force_new())
    # Every path parameter listed is an input the program sends for that type.
    facts = json.loads(REPLACEMENTS.read_text())["types"]
    for r in dev_resources:
        for param in facts.get(r["type"], {}).get("path", []):
            if param != "virtualNetworkLinkName":  # auto-named by the provider when the program leaves it out
                assert param in r["inputs"], (r["type"], param)


def test_every_create_only_input_of_the_spec_replaces_its_resource(dev_resources: list[dict[str, Any]]) -> None:
    """The force-new inputs taken from the REST specs (each with its evidence) are inputs the program sends,
    and changing any of them is reported as a replacement."""
    facts = json.loads(REPLACEMENTS.read_text())["types"]
    checked = []
    for type_, fact in sorted(facts.items()):
        assert set(fact.get("evidence", {})) == set(fact["forceNew"]) or type_.startswith("pulumi-python:"), type_
        resource = next((r for r in dev_resources if r["type"] == type_), None)
        if resource is None:
            continue
        for name in fact["forceNew"]:
            if name not in resource["inputs"]:
                continue
            head = _with(dev_resources, type_, resource["name"], lambda r, n=name: r["inputs"].update({n: "changed"}))
            (entry,) = diff(dev_resources, head, base_label="base")["resources"]
            assert (entry["action"], entry["changes"][0].get("replaces")) == ("replace", "provider: immutable"), \
                (type_, name)
            checked.append(f"{type_.rsplit(':', 1)[1]}.{name}")
    assert {"Component.applicationType", "Component.location", "Registry.location", "Workspace.location",
            "PrivateZone.location"} <= set(checked), checked
