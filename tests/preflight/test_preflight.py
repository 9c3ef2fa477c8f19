"""``amlgpu preflight`` against recorded Azure Resource Manager responses (tests/fixtures/arm-preflight/).

The recorded answers go through azure-core's real pipeline and transport (tests/replay_http.py); no call
leaves the process: a socket guard fails any test that opens a connection or resolves a name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.identity import EnvironmentCredential

from amlgpu.cli import build_parser, main
from amlgpu.commands import preflight as command
from kernel.errors import EXIT_NOTHING_CHECKED
from preflight.checks import Check, nothing_checked, shared_cause
from preflight.deploy import _allowed
from preflight.offline import demand
from stack.project import load_stack
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.replay_http import NO_HOST, RECORDED, RecordedToken, Replay, bearer_claims, transport
from tests.replay_http import no_network as refuse_sockets

SUB = "11111111-1111-1111-1111-111111111111"
HUB = "22222222-2222-2222-2222-222222222222"
ARM = "GET https://management.azure.com"
DEV_RG = f"/subscriptions/{SUB}/resourceGroups/rg-aml-gpu-dev"
PROD_RG = f"/subscriptions/{SUB}/resourceGroups/rg-aml-gpu-prod"
PROD_SUBNET = (f"/subscriptions/{HUB}/resourceGroups/rg-network-prod/providers/Microsoft.Network/virtualNetworks/"
               "vnet-hub-eastus2/subnets/snet-aml-training")
HUB_DNS = f"/subscriptions/{HUB}/resourceGroups/rg-dns-hub/providers/Microsoft.Network/privateDnsZones"
ZONES = ("privatelink.api.azureml.ms", "privatelink.azurecr.io", "privatelink.blob.core.windows.net",
         "privatelink.file.core.windows.net", "privatelink.notebooks.azure.net", "privatelink.vaultcore.azure.net")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_sockets(monkeypatch)
    for variable in ("AZURE_SUBSCRIPTION_ID", "ARM_SUBSCRIPTION_ID", "AZURE_CLIENT_ID", "AZURE_TENANT_ID",
                     "AZURE_CLIENT_SECRET", "AZURE_USERNAME", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(variable, raising=False)


NAMESPACES = ("Microsoft.MachineLearningServices", "Microsoft.Storage", "Microsoft.KeyVault",
              "Microsoft.ContainerRegistry", "Microsoft.Insights", "Microsoft.OperationalInsights", "Microsoft.Network",
              "Microsoft.ManagedIdentity", "Microsoft.DocumentDB", "Microsoft.Search")
IMDS = "GET http://169.254.169.254/metadata/instance"


def provider(namespace: str, state: str = "Registered") -> tuple[int, dict[str, Any]]:
    """The recorded provider answer (tests/fixtures/arm-preflight/provider-registered.json) for ``namespace``."""
    body = json.loads((RECORDED / "provider-registered.json").read_text())
    body.update(id=f"/subscriptions/{SUB}/providers/{namespace}", namespace=namespace, registrationState=state)
    return 200, body


def common(location: str, group: str, workspace: str) -> dict[str, tuple[int, str | dict[str, Any]]]:
    vault = load_stack("prod" if "prod" in workspace else "dev", ROOT).config.workspace.key_vault_name
    return {
        **{f"{ARM}/subscriptions/{SUB}/providers/{ns}": provider(ns) for ns in NAMESPACES},
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.MachineLearningServices/locations/{location}/vmSizes":
            (200, f"aml-vm-sizes-{location}.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.KeyVault/locations/{location}/deletedVaults/{vault}":
            (404, "deleted-vault-not-found.json"),
        IMDS: (NO_HOST, "not an Azure VM"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Compute/skus": (200, f"compute-skus-{location}.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.MachineLearningServices/locations/{location}/usages":
            (200, "mls-usages.json"),
        f"{ARM}{group}/providers/Microsoft.MachineLearningServices/workspaces/{workspace}":
            (404, "workspace-not-found.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Insights/eventtypes/management/values":
            (200, "activity-log-empty.json"),
        "GET https://api.ipify.org/": (200, "ipify.json"),
    }


def dev_routes(**changes: tuple[int, str | dict[str, Any]]) -> dict[str, tuple[int, str | dict[str, Any]]]:
    routes = common("westeurope", DEV_RG, "mlw-gpu-dev")
    routes[f"{ARM}{DEV_RG}/providers/Microsoft.Authorization/permissions"] = (200, "permissions-owner.json")
    return {**routes, **changes}


def prod_routes() -> dict[str, tuple[int, str | dict[str, Any]]]:
    routes = common("eastus2", PROD_RG, "mlw-gpu-prod")
    routes |= {
        f"{ARM}{PROD_RG}/providers/Microsoft.Authorization/permissions": (200, "permissions-contributor.json"),
        f"{ARM}/subscriptions/{HUB}/resourceGroups/rg-network-prod/providers/Microsoft.Authorization/permissions":
            (200, "permissions-reader.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Insights/eventtypes/management/values":
            (200, "activity-log-workspace-deleted.json"),
        f"{ARM}/subscriptions/{HUB}/providers/Microsoft.Network/privateDnsZones": (200, "private-dns-zones-hub.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Network/privateDnsZones": (200, "private-dns-zones-none.json"),
        f"{ARM}{HUB_DNS}/privatelink.api.azureml.ms/virtualNetworkLinks": (200, "vnet-links-api-hub.json"),
        f"{ARM}{HUB_DNS}/privatelink.blob.core.windows.net/virtualNetworkLinks": (200, "vnet-links-blob-spoke.json"),
        f"{ARM}/subscriptions/{HUB}/resourceGroups/rg-identity/providers/Microsoft.Authorization/permissions":
            (200, "permissions-reader.json"),
        f"{ARM}/subscriptions/{HUB}/resourceGroups/rg-dns-hub/providers/Microsoft.Authorization/permissions":
            (200, "permissions-reader.json"),
        f"{ARM}/subscriptions/{HUB}/resourceGroups/rg-keys/providers/Microsoft.KeyVault/vaults/kv-ml-keys-prod":
            (200, "key-vault-cmk.json"),
        f"{ARM}{PROD_SUBNET}": (200, "subnet-hub.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.KeyVault/locations/eastus2/deletedVaults/"
        f"{load_stack('prod', ROOT).config.workspace.key_vault_name}": (200, "deleted-vault.json"),
    }
    for zone in ZONES:
        routes[f"{ARM}{HUB_DNS}/{zone}"] = (200, "private-dns-zone.json")
    return routes


Run = Callable[..., tuple[int, dict[str, Any], Replay]]


@pytest.fixture
def preflight(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run ``amlgpu preflight`` in ``root`` against ``routes``; returns (exit code, JSON report, replay)."""

    def run(*argv: str, routes: dict[str, Any], root: Path = ROOT, credential: Any = None) -> Any:
        monkeypatch.chdir(root)
        replay = Replay(routes)
        args = build_parser().parse_args(["preflight", *argv, "--format", "json"])
        code = command.run(args, credential=credential or RecordedToken(), transport=transport(replay))
        return code, json.loads(capsys.readouterr().out), replay

    return run


def rows(report: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["name"]: (c["status"], c["detail"], c["fix"]) for c in report["checks"]}


def dev_variant(tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> Path:
    config = dev_config()
    mutate(config)
    return make_project(tmp_path / "project", config)


def test_a_ready_stack_passes_every_check(preflight: Run, tmp_path: Path) -> None:
    root = dev_variant(tmp_path, lambda c: c[f"{NS}:network"].update(operator_ip_ranges=["203.0.113.0/24"]))
    code, report, replay = preflight("--stack", "test", "--subscription", SUB, routes=dev_routes(), root=root)
    assert code == 0
    assert {name: status for name, (status, _, _) in rows(report).items()} == {
        "resource providers": "OK",
        "Azure ML size Standard_ND96asr_v4 (gpu-a100)": "OK",
        "Azure ML size Standard_DS3_v2 (image-builder)": "OK",
        "soft-deleted key vault": "OK",
        "size Standard_ND96asr_v4 (gpu-a100)": "OK",
        "quota standardNDASv4_A100Family dedicated": "OK",
        "quota standardDSv2Family dedicated": "OK",
        "quota regional total dedicated": "OK",
        "permission: create role assignments": "OK",
        "permission: build-context upload (data role)": "OK",
        "soft-deleted workspace": "OK",
        "private DNS zones": "OK",
        "training subnet addresses": "OK",
        "build-context network path": "OK",
    }
    assert rows(report)["quota standardNDASv4_A100Family dedicated"][1] == \
        "needs 192 vCPUs, 288 free (limit 384, 96 in use)"  # the workspace-scoped row of the same family is ignored
    arm_calls = [c for c in replay.calls if c.url and "management.azure.com" in c.url]
    assert all(bearer_claims(c)["aud"] == "https://management.azure.com" for c in arm_calls)
    assert all("api-version" in replay.query(c) for c in arm_calls)
    assert {c.method for c in replay.calls} == {"GET"}  # read-only
    imds = next(c for c in replay.calls if "169.254.169.254" in str(c.url))
    assert imds.headers["Metadata"] == "true" and replay.query(imds)["api-version"] == ["2021-02-01"]
    assert "Authorization" not in imds.headers  # the token goes to Azure Resource Manager only
    skus = next(c for c in arm_calls if "/Microsoft.Compute/skus" in str(c.url))
    assert replay.query(skus)["$filter"] == ["location eq 'westeurope'"]
    log = next(c for c in arm_calls if "eventtypes" in str(c.url))
    assert "resourceUri eq '/subscriptions/11111111-1111-1111-1111-111111111111/resourceGroups/rg-aml-gpu-dev/" \
           "providers/Microsoft.MachineLearningServices/workspaces/mlw-gpu-dev'" in replay.query(log)["$filter"][0]


def prod_without_zone_ids(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"]
    del config[f"{NS}:network"]["private_dns_zone_ids"]
    return make_project(tmp_path / "project", config)


def test_prod_against_a_contributor_and_a_hub_network_lists_each_problem(preflight: Run, tmp_path: Path) -> None:
    routes = prod_routes()
    routes[f"{ARM}/subscriptions/{SUB}/providers/Microsoft.DocumentDB"] = provider("Microsoft.DocumentDB",
                                                                                   "NotRegistered")
    code, report, _ = preflight("--stack", "test", "--subscription", SUB, routes=routes,
                                root=prod_without_zone_ids(tmp_path))
    assert code == 1
    found = rows(report)
    problems = {name for name, (status, _, _) in found.items() if status == "PROBLEM"}
    assert problems == {
        "resource providers",
        "quota standardNDSH100v5Family dedicated",
        "size Standard_ND96isr_H200_v5 (h200)",
        "Azure ML size Standard_ND96isr_H200_v5 (h200)",
        "permission: create role assignments",
        "permission: build-context upload (data role)",
        "permission: create locks",  # prod locks its data holders; Contributor cannot
        "permission: join the existing subnet",
        "permission: assign user-assigned identity id-aml-prod",
        "soft-deleted workspace",
        "soft-deleted key vault",
        "private DNS zone privatelink.api.azureml.ms",
    }
    assert found["resource providers"][1].startswith("not registered: Microsoft.DocumentDB (NotRegistered)")
    assert found["resource providers"][2].startswith("az provider register --namespace Microsoft.DocumentDB")
    assert "purge-protected until 2026-12-31" in found["soft-deleted key vault"][1]
    assert found["customer-managed key vault"][0] == "OK"
    assert found["customer-managed key access"][0] == "UNKNOWN"
    assert "a232010e-820c-4083-83bb-3ace5fc29d0b" in found["customer-managed key access"][1]
    # Inside the hub network or not cannot be seen from here: UNKNOWN, with where to run.
    assert found["build-context network path"][0] == "UNKNOWN"
    assert "vnet-hub-eastus2" in found["build-context network path"][2]
    assert found["quota standardNDSH100v5Family dedicated"][1].startswith("needs 768 vCPUs, 384 free (limit 384")
    assert "request at least 768 vCPUs" in found["quota standardNDSH100v5Family dedicated"][2]
    assert "NotAvailableForSubscription" in found["size Standard_ND96isr_H200_v5 (h200)"][1]
    spot = found["size Standard_ND96amsr_A100_v4 (a100-spot)"]
    assert spot[:2] == ("OK", "offered in eastus2 (some zones restricted)")
    assert found["quota regional total low-priority"][:2] == ("OK", "needs 384 vCPUs, 500 free (limit 500, 0 in use)")
    assert "deleted on 2026-11-18" in found["soft-deleted workspace"][1]
    assert "Recently deleted" in found["soft-deleted workspace"][2]
    # Linked to the hub VNet (ids compared case-insensitively); the blob zone is linked to another VNet only.
    assert found["private DNS zone privatelink.api.azureml.ms"][2] == (
        f"add it to network.private_dns_zone_ids: {{privatelink.api.azureml.ms: {HUB_DNS}/privatelink.api.azureml.ms}}")
    assert "private DNS zone privatelink.blob.core.windows.net" not in found


def test_hub_zones_in_private_dns_zone_ids_must_exist_and_be_joinable(preflight: Run) -> None:
    routes = prod_routes()
    routes[f"{ARM}{HUB_DNS}/privatelink.azurecr.io"] = (404, "private-dns-zone-not-found.json")
    code, report, _ = preflight("--stack", "prod", "--subscription", SUB, routes=routes)
    found = rows(report)
    assert found["private DNS zone privatelink.api.azureml.ms"][0] == "OK"  # linked, and given: used
    assert found["private DNS zone privatelink.azurecr.io"][:2] == (
        "PROBLEM", f"{HUB_DNS}/privatelink.azurecr.io does not exist (ResourceNotFound)")
    joins = {n: v for n, v in found.items() if n.startswith("permission: join private DNS zone")}
    assert len(joins) == 6 and {v[0] for v in joins.values()} == {"PROBLEM"}  # Reader on rg-dns-hub
    assert "Private DNS Zone Contributor" in joins["permission: join private DNS zone privatelink.azurecr.io"][2]
    assert found["permission: read the user-assigned identity"][0] == "OK"  # Reader on rg-identity
    assert code == 1


def test_missing_credentials_give_one_line_and_unknown_rows(preflight: Run, capsys: Any) -> None:
    # azure-identity's own EnvironmentCredential with no AZURE_* variables: what a fresh machine has.
    code, report, replay = preflight("--stack", "dev", "--subscription", SUB, routes={},
                                     credential=EnvironmentCredential())
    # Nothing could be checked: a CI step with broken credentials must not go green (issue 38).
    assert code == EXIT_NOTHING_CHECKED == 4 and report["nothing_checked"] is True
    assert {c["status"] for c in report["checks"]} == {"UNKNOWN"}
    assert len(report["checks"]) == 10  # one per live check, the subnet's addresses included
    assert report["checks"][0]["detail"].startswith("no usable Azure credentials (EnvironmentCredential")
    assert replay.calls == []
    args = build_parser().parse_args(["preflight", "--stack", "dev", "--subscription", SUB, "--strict"])
    assert command.run(args, credential=EnvironmentCredential()) == EXIT_NOTHING_CHECKED
    text = capsys.readouterr().out
    assert text.count("no usable Azure credentials") == 1  # the shared cause, once
    assert "Nothing could be checked: no usable Azure credentials" in text
    assert "  fix: run `az login`" in text
    assert "  not checked: resource providers, size offered, Azure ML size, quota, permissions" in text
    assert "Traceback" not in text


def test_a_refused_token_stops_at_the_first_call(preflight: Run) -> None:
    routes = {key: (401, "unauthorized.json") for key in dev_routes()}
    code, report, replay = preflight("--stack", "dev", "--subscription", SUB, routes=routes)
    assert code == EXIT_NOTHING_CHECKED
    assert {c["status"] for c in report["checks"]} == {"UNKNOWN"}
    assert "InvalidAuthenticationToken" in report["checks"][0]["detail"]
    assert len(replay.calls) == 1


def test_what_cannot_be_read_is_unknown_not_a_problem(preflight: Run) -> None:
    routes = dev_routes(**{
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.Insights/eventtypes/management/values":
            (403, "forbidden-activity-log.json"),
        f"{ARM}{DEV_RG}/providers/Microsoft.Authorization/permissions": (404, "resource-group-not-found.json"),
    })
    code, report, _ = preflight("--stack", "dev", "--subscription", SUB, "--public-ip", "198.51.100.4",
                                routes=routes)
    found = rows(report)
    assert found["soft-deleted workspace"][0] == "UNKNOWN"
    assert "AuthorizationFailed" in found["soft-deleted workspace"][1]
    assert found["permissions"][0] == "UNKNOWN"
    assert "az group create -n rg-aml-gpu-dev" in found["permissions"][2]
    # dev lists 203.0.113.0/24: the given address is outside it, the one certain problem.
    assert code == 1
    assert [n for n, (s, _, _) in found.items() if s == "PROBLEM"] == ["build-context network path"]


def test_offline_looks_up_no_credentials(preflight: Run) -> None:
    class Refuse:
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise AssertionError("credentials looked up offline")

    code, report, replay = preflight("--stack", "prod", "--offline", routes={}, credential=Refuse())
    assert code == 0
    assert report["checks"] == [] and replay.calls == []
    assert [(d["family"], d["tier"], d["vcpus"]) for d in report["demand"]] == [
        ("standardNDSH100v5Family", "dedicated", 768),
        ("standardNDISRH200V5Family", "dedicated", 384),
        ("standardNDAMSv4_A100Family", "low_priority", 384),
        ("standardDSv2Family", "dedicated", 4),
    ]
    actions = [p["action"] for p in report["permissions"]]
    assert actions == ["Microsoft.Resources/subscriptions/resourceGroups/write",
                       "Microsoft.Authorization/roleAssignments/write",
                       "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write",
                       "Microsoft.Authorization/locks/write",  # prod: workspace.lock
                       "Microsoft.ManagedIdentity/userAssignedIdentities/read",
                       "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
                       "Microsoft.Network/virtualNetworks/subnets/join/action",
                       *["Microsoft.Network/privateDnsZones/join/action"] * 6]


def test_a_cluster_in_another_region_is_checked_there(preflight: Run, tmp_path: Path) -> None:
    def east(c: dict[str, Any]) -> None:
        c[f"{NS}:clusters"].append({"name": "h100-east", "size": "Standard_ND96isr_H100_v5", "max_instances": 2,
                                    "location": "eastus2"})
        c[f"{NS}:network"].update(operator_ip_ranges=["203.0.113.0/24"])

    routes = dev_routes(**{
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.MachineLearningServices/locations/eastus2/usages":
            (200, "mls-usages.json"),
        f"{ARM}/subscriptions/{SUB}/providers/Microsoft.MachineLearningServices/locations/eastus2/vmSizes":
            (200, "aml-vm-sizes-eastus2.json"),
    })
    # One skus route serves both regions (the $filter differs): the recorded file is westeurope's, without H100.
    code, report, replay = preflight("--stack", "test", "--subscription", SUB, routes=routes,
                                     root=dev_variant(tmp_path, east))
    found = rows(report)
    assert found["size Standard_ND96isr_H100_v5 (h100-east)"][:2] == (
        "PROBLEM", "Standard_ND96isr_H100_v5 is not offered in eastus2")
    assert found["quota standardNDSH100v5Family dedicated in eastus2"][:2] == (
        "OK", "needs 192 vCPUs, 384 free (limit 384, 0 in use)")
    assert "quota regional total dedicated in eastus2" in found
    filters = sorted(replay.query(c)["$filter"][0] for c in replay.calls if "Microsoft.Compute/skus" in str(c.url))
    assert filters == ["location eq 'eastus2'", "location eq 'westeurope'"]
    assert code == 1


def test_no_subscription_is_said_not_guessed(preflight: Run) -> None:
    code, report, _ = preflight("--stack", "dev", routes={})
    assert code == EXIT_NOTHING_CHECKED
    assert report["checks"][0]["detail"].startswith("no subscription: set azure-native:subscriptionId")


def test_the_stack_subscription_comes_before_the_environment(tmp_path: Path) -> None:
    root = dev_variant(tmp_path, lambda c: c.__setitem__("azure-native:subscriptionId", SUB))
    stack = load_stack("test", root)
    assert command.subscription_of(stack, None, {"AZURE_SUBSCRIPTION_ID": HUB}) == SUB
    assert command.subscription_of(stack, HUB, {}) == HUB
    assert command.subscription_of(load_stack("dev", ROOT), None, {"ARM_SUBSCRIPTION_ID": HUB}) == HUB


def test_families_sum_across_clusters_and_tiers_stay_apart(tmp_path: Path) -> None:
    def two_more(c: dict[str, Any]) -> None:
        c[f"{NS}:clusters"] += [
            {"name": "a100-b", "size": "standard_nd96asr_v4", "max_instances": 3},
            {"name": "a100-spot", "size": "Standard_ND96asr_v4", "max_instances": 4, "tier": "low_priority"},
            {"name": "mi300x", "size": "Standard_ND96isr_MI300X_v5", "max_instances": 1},
            {"name": "a100-east", "size": "Standard_ND96asr_v4", "max_instances": 1, "location": "East US 2"},
        ]

    stack = load_stack("test", dev_variant(tmp_path, two_more))
    got = [(d.family, d.tier, d.region, d.vcpus, [c.name for c in d.clusters]) for d in demand(stack.config)]
    assert got == [
        ("standardNDASv4_A100Family", "dedicated", "westeurope", 480, ["gpu-a100", "a100-b"]),
        ("standardNDASv4_A100Family", "low_priority", "westeurope", 384, ["a100-spot"]),
        ("standardNDASv4_A100Family", "dedicated", "eastus2", 96, ["a100-east"]),
        (None, "dedicated", "westeurope", 96, ["mi300x"]),
        ("standardDSv2Family", "dedicated", "westeurope", 4, ["image-builder"]),
    ]


OWNER = {"actions": ["*"], "notActions": []}
CONTRIBUTOR = {"actions": ["*"], "notActions": ["Microsoft.Authorization/*/Write", "Microsoft.Authorization/*/Delete"]}
UAA = {"actions": ["*/read", "Microsoft.Authorization/*", "Microsoft.Support/*"], "notActions": []}
BLOB_CONTRIBUTOR = {"actions": [], "dataActions": ["Microsoft.Storage/storageAccounts/blobServices/containers/blobs/*"],
                    "notDataActions": []}


@pytest.mark.parametrize(("permissions", "action", "data", "allowed"), [
    ([OWNER], "Microsoft.Authorization/roleAssignments/write", False, True),
    ([CONTRIBUTOR], "Microsoft.Authorization/roleAssignments/write", False, False),
    ([CONTRIBUTOR, UAA], "Microsoft.Authorization/roleAssignments/write", False, True),
    ([CONTRIBUTOR], "Microsoft.Network/virtualNetworks/subnets/join/action", False, True),
    ([{"actions": ["*/read"]}], "Microsoft.Network/virtualNetworks/subnets/join/action", False, False),
    ([OWNER], "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write", True, False),
    ([BLOB_CONTRIBUTOR], "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write", True, True),
    ([{"dataActions": ["*"], "notDataActions": ["Microsoft.Storage/*/write"]}],
     "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/write", True, False),
])
def test_rbac_actions_minus_not_actions(permissions: list[dict[str, Any]], action: str, data: bool,
                                        allowed: bool) -> None:
    assert _allowed(permissions, action, data=data) is allowed


def test_plan_writes_the_offline_half(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "plan"
    assert main(["plan", "--stack", "dev", "--out", str(out)]) == 0
    written = json.loads((out / "preflight.json").read_text())
    assert written["demand"][0] == {
        "family": "standardNDASv4_A100Family", "tier": "dedicated", "region": "westeurope", "vcpus": 192,
        "clusters": [{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 2, "vcpus_per_node": 96}],
    }
    assert "standardNDASv4_A100Family" in capsys.readouterr().out


@pytest.mark.parametrize(("variables", "expected"), [
    ({"ARM_CLIENT_ID": "c", "ARM_CLIENT_SECRET": "s", "ARM_TENANT_ID": "t"}, "ClientSecretCredential"),
    ({"ARM_CLIENT_ID": "c", "ARM_CLIENT_SECRET": "s", "ARM_TENANT_ID": "t", "AZURE_CLIENT_ID": "a"},
     "DefaultAzureCredential"),
    ({"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t"}, "DefaultAzureCredential"),
])
def test_every_azure_call_signs_in_as_pulumi_up_does(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str],
                                                     expected: str) -> None:
    """One credential for the build-context upload inside ``pulumi up``, preflight, submit and ``amlgpu job``:
    the provider's ARM_* service principal when it is complete (and AZURE_* names none), else
    DefaultAzureCredential. Building a credential sends nothing."""
    from azurefacts.arm import default_credential

    for name in ("ARM_CLIENT_ID", "ARM_CLIENT_SECRET", "ARM_TENANT_ID", "AZURE_CLIENT_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert type(default_credential()).__name__ == expected


def _prod_subnet(prefix: str, configurations: int) -> tuple[int, dict[str, Any]]:
    subnet = json.loads((RECORDED / "subnet-hub.json").read_text())
    subnet["properties"]["addressPrefix"] = prefix
    subnet["properties"]["ipConfigurations"] = subnet["properties"]["ipConfigurations"][:1] * configurations
    return 200, subnet


@pytest.mark.parametrize(("prefix", "used", "status", "detail"), [
    ("10.20.4.0/26", 2, "OK", "57 free of 59 usable in 10.20.4.0/26 (2 in use); 22 needed (max nodes h100 8, h200 4, "
     "a100-spot 4, image-builder 1; 5 private endpoints)"),
    ("10.20.4.0/27", 6, "PROBLEM", "21 free of 27 usable in 10.20.4.0/27 (6 in use); 22 needed"),
])
def test_an_existing_subnet_is_counted_against_what_the_stack_places_there(
        preflight: Run, prefix: str, used: int, status: str, detail: str) -> None:
    routes = prod_routes() | {f"{ARM}{PROD_SUBNET}": _prod_subnet(prefix, used)}
    _, report, replay = preflight("--stack", "prod", "--subscription", SUB, routes=routes)
    found = rows(report)["training subnet addresses"]
    assert found[0] == status and found[1].startswith(detail), found
    if status == "PROBLEM":
        assert "larger subnet, or lower max_instances" in found[2]
    (call,) = replay.sent("GET", f"https://management.azure.com{PROD_SUBNET}")
    assert replay.query(call)["api-version"] == ["2024-05-01"]


def test_a_missing_existing_subnet_is_a_problem(preflight: Run) -> None:
    routes = prod_routes() | {f"{ARM}{PROD_SUBNET}": (404, "workspace-not-found.json")}
    _, report, _ = preflight("--stack", "prod", "--subscription", SUB, routes=routes)
    assert rows(report)["training subnet addresses"][0] == "PROBLEM"


def test_the_offline_half_names_providers_addresses_and_what_it_cannot_see(preflight: Run, capsys: Any) -> None:
    from preflight.offline import CMK_VAULT_NETWORK, HUB_ROUTES

    code, report, _ = preflight("--stack", "prod", "--offline", routes={})
    assert code == 0 and report["checks"] == []
    assert report["providers"] == ["Microsoft.MachineLearningServices", "Microsoft.Storage", "Microsoft.KeyVault",
                                   "Microsoft.ContainerRegistry", "Microsoft.Insights",
                                   "Microsoft.OperationalInsights", "Microsoft.Network", "Microsoft.ManagedIdentity",
                                   "Microsoft.DocumentDB", "Microsoft.Search"]
    assert report["addresses"]["needed"] == 22 and "subnet_id" in report["addresses"]
    assert report["network_notes"] == [HUB_ROUTES, CMK_VAULT_NETWORK]
    assert "UDP 5831" in HUB_ROUTES and "BatchNodeManagement" in HUB_ROUTES
    text = preflight_text(preflight, "dev")
    assert "The subscription must have registered: Microsoft.MachineLearningServices" in text
    assert ("Training subnet addresses: 8 needed (max nodes gpu-a100 2, image-builder 1; 5 private endpoints), "
            "new subnet 10.40.0.0/20: 4091 usable") in text


def preflight_text(preflight: Run, stack: str) -> str:
    from preflight.offline import render_offline
    from stack.project import load_stack

    loaded = load_stack(stack, ROOT)
    return "\n".join(render_offline(loaded.config))


def test_a_cmk_vault_that_admits_no_trusted_service_is_a_problem(preflight: Run) -> None:
    vault = json.loads((RECORDED / "key-vault-cmk.json").read_text())
    vault["properties"] |= {"publicNetworkAccess": "Enabled",
                            "networkAcls": {"defaultAction": "Deny", "bypass": "None"}}
    routes = prod_routes() | {f"{ARM}/subscriptions/{HUB}/resourceGroups/rg-keys/providers/Microsoft.KeyVault/vaults/"
                              "kv-ml-keys-prod": (200, vault)}
    _, report, _ = preflight("--stack", "prod", "--subscription", SUB, routes=routes)
    found = rows(report)["customer-managed key vault network"]
    assert found[0] == "PROBLEM" and "--bypass AzureServices" in found[2]
    _, report, _ = preflight("--stack", "prod", "--subscription", SUB, routes=prod_routes())
    assert rows(report)["customer-managed key vault network"][0] == "UNKNOWN"  # public access disabled: not visible


def test_rows_that_all_could_not_be_read_for_different_reasons_are_nothing_checked_with_no_shared_cause() -> None:
    rows = [Check("quota", "UNKNOWN", "403 on usages", "grant Reader"), Check("size", "UNKNOWN", "500", "retry")]
    assert nothing_checked(rows) and shared_cause(rows) is None
    assert not nothing_checked([*rows, Check("providers", "OK", "registered")])
    assert not nothing_checked([])  # --offline: nothing was asked
