"""Workspace settings Azure enforces: serverless compute pinned to the stack's subnet, the CanNotDelete locks of a
locked stack, and the changes Azure cannot make in place planned as (blocked) replacements that say what they
destroy."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planning.engine import ProgramRun, run_program
from planning.review import diff
from stack.stackfile import read
from tests.conftest import ROOT, only, waits

WORKSPACE = "azure-native:machinelearningservices:Workspace"
SUBNET = "azure-native:network:Subnet"
LOCK = "azure-native:authorization:ManagementLockByScope"


@pytest.fixture(scope="module")
def prod_plan() -> ProgramRun:
    return run_program("prod", read(ROOT / "Pulumi.prod.yaml"), ROOT)


def test_serverless_compute_runs_in_the_new_subnet_without_public_ips(dev_plan: ProgramRun) -> None:
    workspace = only(dev_plan, WORKSPACE)
    subnet = only(dev_plan, SUBNET)
    settings = workspace["inputs"]["serverlessComputeSettings"]
    assert settings == {"serverlessComputeNoPublicIP": True, "serverlessComputeCustomSubnet": settings[
        "serverlessComputeCustomSubnet"]}
    assert settings["serverlessComputeCustomSubnet"].endswith("/virtualNetworks/vnet-mlw-gpu-dev/subnets/training")
    assert (SUBNET, subnet["name"]) in waits(workspace)  # the subnet exists when the workspace names it


def test_serverless_compute_runs_in_an_existing_subnet(prod_plan: ProgramRun) -> None:
    settings = only(prod_plan, WORKSPACE)["inputs"]["serverlessComputeSettings"]
    assert settings == {"serverlessComputeCustomSubnet": read(ROOT / "Pulumi.prod.yaml").config[
        "aml-gpu-training:network"]["subnet_id"], "serverlessComputeNoPublicIP": True}


def test_prod_locks_its_data_holders_and_not_its_resource_group(prod_plan: ProgramRun) -> None:
    locks = [r.to_json() for r in prod_plan.by_type(LOCK)]
    scopes = sorted(str(lock["inputs"]["scope"]).split("/providers/")[-1] for lock in locks)
    assert scopes == [
        "Microsoft.KeyVault/vaults/" + only(prod_plan, "azure-native:keyvault:Vault")["inputs"]["vaultName"],
        "Microsoft.MachineLearningServices/workspaces/mlw-gpu-prod",
        "Microsoft.Storage/storageAccounts/" + only(prod_plan, "azure-native:storage:StorageAccount")["inputs"][
            "accountName"],
    ]
    assert {(lock["inputs"]["level"], lock["inputs"]["lockName"]) for lock in locks} == {
        ("CanNotDelete", "do-not-delete")}
    assert all("/providers/" in str(lock["inputs"]["scope"]) for lock in locks)  # never the bare resource group


def test_dev_is_not_locked(dev_plan: ProgramRun) -> None:
    assert not dev_plan.by_type(LOCK)


def _changed(resources: list[dict[str, Any]], change: Any) -> list[dict[str, Any]]:
    head = copy.deepcopy(resources)
    for resource in head:
        if resource["type"] == WORKSPACE:
            change(resource["inputs"])
    return head


@pytest.mark.parametrize(("what", "change", "action"), [
    ("high business impact off", lambda i: i.update(hbiWorkspace=False), "replace"),
    ("customer-managed key off", lambda i: i.pop("encryption"), "replace"),
    ("key in another vault", lambda i: i["encryption"]["keyVaultProperties"].update(
        keyVaultArmId="/subscriptions/2/resourceGroups/k/providers/Microsoft.KeyVault/vaults/other"), "replace"),
    ("key rotated in the same vault", lambda i: i["encryption"]["keyVaultProperties"].update(
        keyIdentifier="https://kv-ml-keys-prod.vault.azure.net/keys/aml-workspace/0123"), "update"),
])
def test_changes_azure_cannot_make_in_place_are_blocked_replacements(prod_plan: ProgramRun, what: str, change: Any,
                                                                     action: str) -> None:
    base = [r.to_json() for r in prod_plan.resources]
    result = diff(base, _changed(base, change), base_label="base")
    (entry,) = [r for r in result["resources"] if r["type"] == WORKSPACE]
    assert entry["action"] == action, what
    if action == "replace":
        assert entry["blocked"] is True and entry["deleteBeforeReplace"] is True
        assert "BLOCKED: would replace protected Workspace mlw-gpu-prod-workspace (pulumi up refuses; a new " \
               "workspace: the old one's run history, registered models, data assets, environments and clusters " \
               "are deleted with it)" in result["verdict"]
    else:
        assert "BLOCKED" not in result["verdict"]


def test_the_workspace_declares_what_replaces_it(dev_plan: ProgramRun) -> None:
    assert only(dev_plan, WORKSPACE)["options"]["replaceOnChanges"] == [
        "encryption.keyVaultProperties.keyVaultArmId", "encryption.status", "hbiWorkspace"]
