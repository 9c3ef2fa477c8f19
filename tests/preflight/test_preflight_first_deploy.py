"""The preflight's first-deployment checks against recorded answers of the real APIs (tests/fixtures/arm-preflight):
resource providers, AmlCompute's own size list, permissions read on the subscription before the resource group
exists, a soft-deleted key vault holding the name, a customer-managed key's vault, and the network path of the
build-context upload (this machine's address, its Azure region from the instance metadata service, and whether the
network exists yet)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from azurefacts.arm import token_object_id
from planning.engine import run_program
from planning.mocks import arm_id
from preflight.offline import REGISTERED_EVERYWHERE, required_providers
from stack.config import from_stackfile
from stack.stackfile import read
from tests.conftest import NS, ROOT
from tests.infra.test_first_deploy import STACKS
from tests.preflight.test_preflight import ARM, DEV_RG, IMDS, SUB, dev_routes, dev_variant, prod_routes, provider, rows
from tests.preflight.test_preflight import no_network as no_network  # the autouse socket guard
from tests.preflight.test_preflight import preflight as preflight  # the fixture
from tests.replay_http import RECORDED, RecordedToken, Replay

Run = Callable[..., tuple[int, dict[str, Any], Replay]]
OID = "0f1e2d3c-4b5a-4697-8a9b-c0d1e2f3a4b5"
SIGNED_IN = RecordedToken(claims={"oid": OID, "tid": "11111111-1111-1111-1111-111111111111"})


def body(name: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / name).read_text())
    data.update(changes)
    return data


@pytest.mark.parametrize("state", ["NotRegistered", "Registering"])
def test_a_provider_not_registered_is_a_problem_with_the_command(preflight: Run, state: str) -> None:
    routes = dev_routes(**{f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Network": provider("Microsoft.Network",
                                                                                              state)})
    code, report, replay = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "203.0.113.9",
                                     routes=routes)
    assert code == 1
    assert rows(report)["resource providers"] == (
        "PROBLEM", f"not registered: Microsoft.Network ({state}): pulumi up stops with MissingSubscriptionRegistration",
        "az provider register --namespace Microsoft.Network (Registering takes a few minutes; re-run the preflight)")
    asked = {m.group(1) for c in replay.calls
             if (m := re.match(r"https://management\.azure\.com/subscriptions/[^/]+/providers/([^/?]+)\?", str(c.url)))}
    assert asked == set(required_providers(from_stackfile(read(ROOT / "Pulumi.dev.yaml"), ROOT)))


def test_the_planned_resources_need_no_provider_the_preflight_does_not_ask_for() -> None:
    """Every namespace a shipped stack creates resources of (their ARM ids) is one the preflight checks."""
    for name, path in STACKS.items():
        stackfile = read(path)
        config = from_stackfile(stackfile, ROOT)
        planned = run_program(name.rsplit("/", 1)[-1], stackfile, ROOT).resources
        namespaces = {arm_id(r.type, r.name, r.inputs).rsplit("/providers/", 1)[-1].split("/")[0].lower()
                      for r in planned if r.custom and not r.type.startswith("pulumi-python:")
                      and "/providers/" in arm_id(r.type, r.name, r.inputs)}
        assert namespaces <= {ns.lower() for ns in (*required_providers(config), *REGISTERED_EVERYWHERE)}, name


def test_amlcompute_has_its_own_size_list(preflight: Run) -> None:
    """The Compute SKU list offers Standard_ND96asr_v4 in westeurope; Azure ML's own list does not: a PROBLEM the
    SKU list alone would miss."""
    sizes = body("aml-vm-sizes-westeurope.json")
    sizes["value"] = [s for s in sizes["value"] if s["name"] != "Standard_ND96asr_v4"]
    routes = dev_routes(**{f"{ARM}/subscriptions/{SUB}/providers/Microsoft.MachineLearningServices/locations/"
                           "westeurope/vmSizes": (200, sizes)})
    code, report, _ = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "203.0.113.9", routes=routes)
    found = rows(report)
    assert found["size Standard_ND96asr_v4 (gpu-a100)"][0] == "OK"
    assert found["Azure ML size Standard_ND96asr_v4 (gpu-a100)"][:2] == (
        "PROBLEM", "Azure ML does not offer Standard_ND96asr_v4 for compute clusters in westeurope")
    assert code == 1


def test_a_low_priority_cluster_needs_a_low_priority_capable_size(preflight: Run, tmp_path: Path) -> None:
    root = dev_variant(tmp_path, lambda c: c[f"{NS}:clusters"][0].update(tier="low_priority"))
    sizes = body("aml-vm-sizes-westeurope.json")
    for size in sizes["value"]:
        size["lowPriorityCapable"] = size["name"] != "Standard_ND96asr_v4"
    routes = dev_routes(**{f"{ARM}/subscriptions/{SUB}/providers/Microsoft.MachineLearningServices/locations/"
                           "westeurope/vmSizes": (200, sizes)})
    _, report, _ = preflight("--stack", "test", "--subscription", SUB, "--public-ip", "203.0.113.9", routes=routes,
                             root=root)
    assert rows(report)["Azure ML size Standard_ND96asr_v4 (gpu-a100)"][:2] == (
        "PROBLEM", "Standard_ND96asr_v4 is not low-priority capable in westeurope")


def _before_the_group(definition: dict[str, Any]) -> dict[str, Any]:
    role = "/subscriptions/11111111-1111-1111-1111-111111111111/providers/Microsoft.Authorization/roleDefinitions/"
    return dev_routes(**{
        f"{ARM}{DEV_RG}/providers/Microsoft.Authorization/permissions": (404, "resource-group-not-found.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Authorization/roleAssignments":
            (200, "role-assignments-subscription.json"),
        f"{ARM}{role}b24988ac-6180-42a0-ab88-20f7382dd24c": (200, definition),
    })


def test_before_the_group_exists_permissions_are_read_on_the_subscription(preflight: Run) -> None:
    routes = _before_the_group(body("role-definition-contributor.json"))
    code, report, replay = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "203.0.113.9",
                                     routes=routes, credential=SIGNED_IN)
    found = rows(report)
    assert found["permission: create the resource group"][0] == "OK"
    # Contributor cannot assign roles: the stack's assignments would fail. The assignment in another group counts
    # for nothing here (and its role definition is never asked for).
    assert found["permission: create role assignments"][:2] == (
        "PROBLEM", f"Microsoft.Authorization/roleAssignments/write on the subscription {SUB} is not granted")
    assert "permissions" not in found
    (listing,) = [c for c in replay.calls if str(c.url).split("?")[0].endswith("/roleAssignments")]
    assert replay.query(listing)["$filter"] == [f"assignedTo('{OID}')"]
    assert not [c for c in replay.calls if "18d7d88d" in str(c.url)]
    assert code == 1


def test_an_owner_on_the_subscription_passes_before_the_group_exists(preflight: Run) -> None:
    owner = body("role-definition-contributor.json")
    owner["properties"]["permissions"] = json.loads((RECORDED / "permissions-owner.json").read_text())["value"]
    _, report, _ = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "203.0.113.9",
                             routes=_before_the_group(owner), credential=SIGNED_IN)
    found = rows(report)
    assert {found[n][0] for n in ("permission: create the resource group", "permission: create role assignments",
                                  "permission: build-context upload (data role)")} == {"OK"}


def test_without_knowing_who_signed_in_the_missing_group_is_unknown(preflight: Run) -> None:
    routes = _before_the_group(body("role-definition-contributor.json"))
    _, report, replay = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "203.0.113.9",
                                  routes=routes)
    assert rows(report)["permissions"][0] == "UNKNOWN"
    assert not [c for c in replay.calls if "roleAssignments" in str(c.url)]


def test_the_object_id_is_the_tokens_oid_claim() -> None:
    assert token_object_id(SIGNED_IN.get_token("https://management.azure.com/.default").token) == OID
    assert token_object_id("recorded-token") is None
    assert token_object_id("a.!!!.c") is None


def test_a_customer_managed_key_vault_without_purge_protection_is_a_problem(preflight: Run) -> None:
    vault = body("key-vault-cmk.json")
    vault["properties"]["enablePurgeProtection"] = False
    routes = prod_routes()
    routes[f"{ARM}/subscriptions/22222222-2222-2222-2222-222222222222/resourceGroups/rg-keys/providers/"
           "Microsoft.KeyVault/vaults/kv-ml-keys-prod"] = (200, vault)
    _, report, _ = preflight("--stack", "prod", "--subscription", SUB, routes=routes)
    status, detail, fix = rows(report)["customer-managed key vault"]
    assert (status, detail) == ("PROBLEM", "kv-ml-keys-prod has no purge protection")
    assert "--enable-purge-protection true" in fix


@pytest.mark.parametrize(("region", "status"), [("westeurope", "PROBLEM"), ("northeurope", "OK")])
def test_an_azure_vm_in_the_storage_region_is_no_operator_range_path(preflight: Run, region: str,
                                                                       status: str) -> None:
    """dev's operator range admits 203.0.113.9; from an Azure VM in westeurope (the account's region) IP rules do
    not apply, whatever its address."""
    routes = dev_routes(**{IMDS: (200, body("imds-instance.json", compute={
        **body("imds-instance.json")["compute"], "location": region}))})
    _, report, _ = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "203.0.113.9", routes=routes)
    found = rows(report)["build-context network path"]
    assert found[0] == status
    if status == "PROBLEM":
        assert found[1].startswith("this machine is an Azure VM in westeurope, the storage account's region")


@pytest.mark.parametrize("workspace", [{}, {"public_network_access": "Enabled"}], ids=["private", "public-workspace"])
def test_private_storage_in_a_network_this_up_creates_has_no_path(preflight: Run, tmp_path: Path,
                                                                  workspace: dict[str, Any]) -> None:
    """Without an operator range the storage refuses public traffic, whatever the workspace's own access: and the
    network its private endpoint sits in does not exist before this pulumi up."""
    def mutate(c: dict[str, Any]) -> None:
        c[f"{NS}:network"].pop("operator_ip_ranges", None)
        c[f"{NS}:workspace"].update(workspace)

    routes = dev_routes(**{f"{ARM}{DEV_RG}/providers/Microsoft.Network/virtualNetworks/vnet-mlw-gpu-dev":
                           (404, "resource-group-not-found.json")})
    code, report, _ = preflight("--stack", "test", "--subscription", SUB, "--public-ip", "203.0.113.9",
                                routes=routes, root=dev_variant(tmp_path, mutate))
    status, detail, fix = rows(report)["build-context network path"]
    assert status == "PROBLEM" and "vnet-mlw-gpu-dev is created by this pulumi up" in detail
    assert "operator_ip_ranges" in fix and code == 1


def test_once_the_network_exists_the_path_is_unknown_not_ok(preflight: Run, tmp_path: Path) -> None:
    vnet = {"id": f"{DEV_RG}/providers/Microsoft.Network/virtualNetworks/vnet-mlw-gpu-dev", "name": "vnet-mlw-gpu-dev",
            "type": "Microsoft.Network/virtualNetworks", "location": "westeurope",
            "properties": {"addressSpace": {"addressPrefixes": ["10.40.0.0/16"]}, "provisioningState": "Succeeded"}}
    routes = dev_routes(**{f"{ARM}{DEV_RG}/providers/Microsoft.Network/virtualNetworks/vnet-mlw-gpu-dev": (200, vnet)})
    root = dev_variant(tmp_path, lambda c: c[f"{NS}:network"].pop("operator_ip_ranges", None))
    _, report, _ = preflight("--stack", "test", "--subscription", SUB, "--public-ip", "203.0.113.9", routes=routes,
                             root=root)
    status, detail, _ = rows(report)["build-context network path"]
    assert status == "UNKNOWN" and "inside vnet-mlw-gpu-dev or a network peered to it" in detail
