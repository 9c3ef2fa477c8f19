"""What a first `pulumi up` needs from Azure RBAC and subscriptions, planned offline:

* the workspace's primary user-assigned identity gets the roles Microsoft documents, dependencies first;
* no role assignment Azure makes by itself (a cluster identity's AcrPull on the workspace registry);
* every id the workspace needs in its own subscription is there, or the stack stops naming the key (exit 2).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from azurefacts.ids import CONTRIBUTOR, KEY_VAULT_ADMINISTRATOR, STORAGE_BLOB_DATA_CONTRIBUTOR
from planning.engine import ProgramRun, run_program
from stack.stackfile import read
from tests.conftest import NS, ROOT, dev_config, make_project, waits

ASSIGNMENT = "azure-native:authorization:RoleAssignment"
ACR_PULL = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
PROD_UAI = ("/subscriptions/22222222-2222-2222-2222-222222222222/resourceGroups/rg-identity/providers/"
            "Microsoft.ManagedIdentity/userAssignedIdentities/id-aml-prod")


@pytest.fixture(scope="module")
def prod_plan() -> ProgramRun:
    return run_program("prod", read(ROOT / "Pulumi.prod.yaml"), ROOT)


def _uai_principal(plan: ProgramRun) -> str:
    """The principal id Azure reports for the identity on the workspace (identity.userAssignedIdentities)."""
    from planning.mocks import computed_outputs

    ws = next(r for r in plan.by_type("azure-native:machinelearningservices:Workspace"))
    return computed_outputs(ws.type, ws.name, ws.inputs, "")["identity"]["userAssignedIdentities"][PROD_UAI][
        "principalId"]


@pytest.mark.parametrize(
    ("scope_type", "role", "before_workspace"),
    [
        ("Microsoft.Storage/storageAccounts", CONTRIBUTOR, True),
        ("Microsoft.Storage/storageAccounts", STORAGE_BLOB_DATA_CONTRIBUTOR, True),
        ("Microsoft.KeyVault/vaults", CONTRIBUTOR, True),
        ("Microsoft.KeyVault/vaults", KEY_VAULT_ADMINISTRATOR, True),
        ("Microsoft.ContainerRegistry/registries", CONTRIBUTOR, True),
        ("Microsoft.Insights/components", CONTRIBUTOR, True),
        ("Microsoft.MachineLearningServices/workspaces", CONTRIBUTOR, False),
    ],
)
def test_prod_user_assigned_identity_gets_its_documented_roles(
    prod_plan: ProgramRun, scope_type: str, role: str, before_workspace: bool
) -> None:
    principal = _uai_principal(prod_plan)
    found = [
        r for r in prod_plan.by_type(ASSIGNMENT)
        if r.inputs["principalId"] == principal and r.inputs["roleDefinitionId"].endswith(role)
        and r.inputs["scope"].rsplit("/", 1)[0].endswith(scope_type)
    ]
    assert len(found) == 1, [r.name for r in found]
    assert found[0].inputs["principalType"] == "ServicePrincipal"
    workspace = next(r for r in prod_plan.by_type("azure-native:machinelearningservices:Workspace"))
    assert ((ASSIGNMENT, found[0].name) in waits(workspace)) is before_workspace
    if not before_workspace:
        assert ("azure-native:machinelearningservices:Workspace", "mlw-gpu-prod-workspace") in waits(found[0])


def test_a_system_assigned_workspace_needs_no_grants(dev_plan: ProgramRun) -> None:
    assert not [r for r in dev_plan.by_type(ASSIGNMENT) if "-identity-" in r.name]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_role_assignment_azure_makes_itself(stack: str, dev_plan: ProgramRun, prod_plan: ProgramRun) -> None:
    """Azure ML grants a cluster identity AcrPull on the workspace registry; a duplicate would be refused (409)."""
    plan = dev_plan if stack == "dev" else prod_plan
    assignments = plan.by_type(ASSIGNMENT)
    assert assignments and not [r for r in assignments if r.inputs["roleDefinitionId"].endswith(ACR_PULL)]
    keys = [(r.inputs["principalId"], r.inputs["roleDefinitionId"], r.inputs["scope"]) for r in assignments]
    assert len(keys) == len(set(keys))  # never the same principal, role and scope twice
    cluster_roles = {r.inputs["roleDefinitionId"].rsplit("/", 1)[-1] for r in assignments if r.name.endswith(
        "-access-storage-blob-data-contributor")}
    assert cluster_roles == {STORAGE_BLOB_DATA_CONTRIBUTOR}


OTHER = "44444444-4444-4444-4444-444444444444"
SUBNET = "/subscriptions/{}/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/hub/subnets/training"
VAULT = "/subscriptions/{}/resourceGroups/rg-keys/providers/Microsoft.KeyVault/vaults/kv-keys"
UAI = "/subscriptions/{}/resourceGroups/rg-id/providers/Microsoft.ManagedIdentity/userAssignedIdentities/aml"
SUB = "22222222-2222-2222-2222-222222222222"


def _stack(subscription: str | None, subnet: str | None = None, vault: str | None = None,
           uai: str | None = None) -> dict[str, Any]:
    config = dev_config()
    if subscription:
        config["azure-native:subscriptionId"] = subscription
    if subnet:
        config[f"{NS}:network"] = {"subnet_id": SUBNET.format(subnet)}
    if vault:
        config[f"{NS}:workspace"]["customer_managed_key"] = {
            "key_vault": VAULT.format(vault), "key_uri": "https://kv-keys.vault.azure.net/keys/aml/0123456789abcdef"}
    if uai:
        config[f"{NS}:workspace"]["identity"] = {"type": "system_assigned,user_assigned",
                                                 "user_assigned_identities": [{"resource_id": UAI.format(uai)}]}
    return config


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (_stack(SUB, subnet=OTHER), "network.subnet_id"),
        (_stack(SUB, vault=OTHER), "workspace.customer_managed_key.key_vault"),
        (_stack(SUB, uai=OTHER), "workspace.primary_user_assigned_identity"),
        (_stack(None, vault=SUB, subnet=OTHER), "network.subnet_id"),
        (_stack(None, vault=SUB, subnet=SUB, uai=OTHER), "workspace.primary_user_assigned_identity"),
    ],
    ids=["subnet-vs-pinned", "vault-vs-pinned", "identity-vs-pinned", "subnet-vs-vault", "identity-vs-vault"],
)
def test_an_id_in_another_subscription_stops_the_plan_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config: dict[str, Any],
    key: str,
) -> None:
    monkeypatch.chdir(make_project(tmp_path / "project", config))
    assert main(["plan", "--stack", "test", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    first, summary = err.splitlines()
    assert re.match(rf"Pulumi\.test\.yaml:\d+:\d+  {re.escape(NS)}:{re.escape(key)}  subscription ", first), first
    assert summary == "error: 1 problem in Pulumi.test.yaml"
    assert OTHER in err and ("workspace's subscription" in err or "deployment subscription" in err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "config",
    [_stack(SUB, subnet=SUB, vault=SUB.upper(), uai=SUB), _stack(None, subnet=OTHER, vault=OTHER)],
    ids=["all-in-the-pinned-subscription", "consistent-without-a-pin"],
)
def test_ids_in_one_subscription_plan(tmp_path: Path, config: dict[str, Any]) -> None:
    project = make_project(tmp_path / "project", config)
    plan = run_program("test", read(project / "Pulumi.test.yaml"), project)
    assert plan.by_type("azure-native:machinelearningservices:Workspace")


def test_pinned_subscription_must_be_a_guid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(make_project(tmp_path / "project", _stack("my-subscription")))
    assert main(["plan", "--stack", "test", "--out", str(tmp_path / "out")]) == 2
    assert "azure-native:subscriptionId  expected a subscription id (a GUID)" in capsys.readouterr().err


def test_pulumi_up_compares_with_the_subscription_it_deploys_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpinned, the program itself compares the ids with the provider's subscription (getClientConfig)."""
    import pulumi

    from planning import mocks

    monkeypatch.setattr(mocks, "SUBSCRIPTION_ID", OTHER)  # the engine now answers: deploying to OTHER
    project = make_project(tmp_path / "project", _stack(None, subnet=SUB))
    with pytest.raises(pulumi.RunError, match=rf"{NS}:network.subnet_id: subscription {SUB} differs from {OTHER}"):
        run_program("test", read(project / "Pulumi.test.yaml"), project)
