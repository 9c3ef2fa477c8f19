"""network.egress: Internet outbound denied below Azure ML's service tags and a team's allow-list (on by default for a
high-business-impact workspace), regional service tags, the optional storage service endpoint policy, and the rule
that flags a high-business-impact workspace whose subnet can reach the whole Internet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from planning.engine import ProgramRun
from policies.engine import evaluate
from stack.config import from_stackfile
from stack.infrastructure import Network
from stack.stackfile import read
from tests.conftest import NS, make_project, only
from tests.first_deploy import PROFILES, FirstDeploy, Subscription, deployer_of
from tests.infra.test_first_deploy import REGISTERED

Variant = Callable[[Callable[[dict[str, Any]], None]], ProgramRun]
NSG = "azure-native:network:NetworkSecurityGroup"
SUBNET = "azure-native:network:Subnet"
POLICY = "azure-native:network:ServiceEndpointPolicy"


def rules(plan: ProgramRun) -> list[dict[str, Any]]:
    return [r for r in only(plan, NSG)["inputs"]["securityRules"] if r["direction"] == "Outbound"]


def hbi(config: dict[str, Any]) -> None:
    config[f"{NS}:workspace"]["high_business_impact"] = True


def test_service_tags_are_regional_where_learn_allows_and_batch_is_any_protocol(dev_plan: ProgramRun) -> None:
    by_name = {r["name"]: r for r in rules(dev_plan)}
    assert by_name["allow-storage-tcp-out"]["destinationAddressPrefix"] == "Storage.WestEurope"
    assert by_name["allow-storage-tcp-out"]["destinationPortRanges"] == ["443"]
    batch = by_name["allow-batchnodemanagement-any-out"]
    assert (batch["destinationAddressPrefix"], batch["protocol"], batch["destinationPortRanges"]) == (
        "BatchNodeManagement.WestEurope", "*", ["443"])
    assert by_name["allow-microsoftcontainerregistry-tcp-out"]["destinationAddressPrefix"] == (
        "MicrosoftContainerRegistry.WestEurope")
    assert not [r for r in rules(dev_plan) if r["access"] == "Deny"]  # dev: not high business impact


def test_a_high_business_impact_workspace_denies_internet_below_the_allows(plan_variant: Variant) -> None:
    plan = plan_variant(hbi)
    out = rules(plan)
    deny = [r for r in out if r["access"] == "Deny"]
    assert [(r["name"], r["destinationAddressPrefix"], r["protocol"], r["destinationPortRange"], r["priority"])
            for r in deny] == [("deny-internet-out", "Internet", "*", "*", 4000)]
    assert max(r["priority"] for r in out if r["access"] == "Allow") < 4000


def test_a_team_allow_list_sits_above_the_deny(plan_variant: Variant) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config[f"{NS}:network"]["egress"] = {"restrict": True, "allow": [
            {"name": "pypi", "destinations": ["151.101.0.0/16", "146.75.0.0/16"]},
            {"name": "datasets-eastus", "destinations": ["Storage.EastUS"], "ports": [443]},
        ]}

    out = {r["name"]: r for r in rules(plan_variant(mutate))}
    assert out["allow-team-pypi-out"]["destinationAddressPrefixes"] == ["151.101.0.0/16", "146.75.0.0/16"]
    assert out["allow-team-datasets-eastus-out"]["destinationAddressPrefix"] == "Storage.EastUS"
    assert out["allow-team-pypi-out"]["priority"] < out["allow-team-datasets-eastus-out"]["priority"] < 4000
    assert out["deny-internet-out"]["priority"] == 4000


def test_the_storage_endpoint_policy_admits_the_workspace_account_and_azure_ml(plan_variant: Variant) -> None:
    extra = "/subscriptions/1/resourceGroups/rg-data/providers/Microsoft.Storage/storageAccounts/stdatasets"
    plan = plan_variant(lambda c: c[f"{NS}:network"].update(
        egress={"storage_endpoint_policy": True, "storage_accounts": [extra]}))
    policy = only(plan, POLICY)
    definitions = {d["name"]: d for d in policy["inputs"]["serviceEndpointPolicyDefinitions"]}
    account = only(plan, "azure-native:storage:StorageAccount")["inputs"]["accountName"]
    storage = definitions["storage-accounts"]
    assert storage["service"] == "Microsoft.Storage"
    assert storage["serviceResources"][0].endswith(f"/storageAccounts/{account}")
    assert storage["serviceResources"][1] == extra
    assert definitions["azure-machine-learning"] == {
        "name": "azure-machine-learning", "service": "Global", "serviceResources": ["/services/Azure/MachineLearning"],
        "description": "Microsoft-managed storage Azure ML compute needs to provision"}
    subnet = only(plan, SUBNET)["inputs"]
    assert subnet["serviceEndpointPolicies"][0]["id"].endswith("/serviceEndpointPolicies/sep-mlw-gpu-dev-storage")


def _gate(plan: ProgramRun, project_config: dict[str, Any], tmp_path: Any) -> set[str]:
    project = make_project(tmp_path / "gate", project_config)
    config = from_stackfile(read(project / "Pulumi.test.yaml"), project)
    return {f.rule.id for f in evaluate([r.to_json() for r in plan.resources], [], config).findings}


def test_the_rule_flags_a_high_business_impact_workspace_with_open_egress(plan_variant: Variant, tmp_path: Any
                                                                        ) -> None:
    from tests.conftest import dev_config

    open_config = dev_config()
    hbi(open_config)
    open_config[f"{NS}:network"]["egress"] = {"restrict": False}
    flagged = plan_variant(lambda c: (hbi(c), c[f"{NS}:network"].update(egress={"restrict": False})))
    assert "egress-restricted-for-hbi" in _gate(flagged, open_config, tmp_path)
    closed_config = dev_config()
    hbi(closed_config)
    closed = plan_variant(hbi)
    assert "egress-restricted-for-hbi" not in _gate(closed, closed_config, tmp_path)


def test_a_restricted_stack_still_converges_in_the_first_deploy_replay(plan_variant: Variant, tmp_path: Any) -> None:
    def mutate(config: dict[str, Any]) -> None:
        hbi(config)
        config[f"{NS}:network"]["egress"] = {"storage_endpoint_policy": True}

    plan = plan_variant(mutate)
    from tests.conftest import dev_config

    config = dev_config()
    mutate(config)
    project = make_project(tmp_path / "replay", config)
    deployer = deployer_of(from_stackfile(read(project / "Pulumi.test.yaml"), project))
    outcome = FirstDeploy([r.to_json() for r in plan.resources], root=project, deployer=deployer,
                          subscription=Subscription(REGISTERED), profile=PROFILES["azure-like"]).run()
    assert outcome.failures() == [] and outcome.converged


@pytest.mark.parametrize(("network", "message"), [
    ({"egress": {"allow": [{"name": "pypi", "destinations": ["pypi.org"]}]}}, "not host names"),
    ({"egress": {"allow": [{"name": "all", "destinations": ["0.0.0.0/0"]}]}}, "the whole Internet"),
    ({"egress": {"allow": [{"name": "Bad_Name", "destinations": ["10.1.0.0/16"]}]}}, "should match pattern"),
    ({"egress": {"storage_accounts": [
        "/subscriptions/1/resourceGroups/r/providers/Microsoft.Storage/storageAccounts/s"]}},
     "set storage_endpoint_policy: true"),
    ({"subnet_id": "/subscriptions/1/resourceGroups/r/providers/Microsoft.Network/virtualNetworks/v/subnets/s",
      "egress": {"restrict": True}}, "egress applies to a new subnet"),
])
def test_bad_egress_settings_say_why(network: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Network.model_validate(network)
