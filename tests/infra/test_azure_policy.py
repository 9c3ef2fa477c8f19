"""The shipped stacks against Azure's Deny-capable built-in policies (docs/azure-policy.md): each default on the
wire, each stack setting that relaxes one, and hub-and-spoke DNS (network.private_dns_zone_ids)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kernel.errors import ConfigError
from planning.engine import ProgramRun, run_program
from stack.stackfile import read
from tests.conftest import NS, ROOT, dev_config, only

Variant = Callable[[Callable[[dict[str, Any]], None]], ProgramRun]

STORAGE = "azure-native:storage:StorageAccount"
REGISTRY = "azure-native:containerregistry:Registry"
INSIGHTS = "azure-native:applicationinsights:Component"
LOGS = "azure-native:operationalinsights:Workspace"
SUBNET = "azure-native:network:Subnet"


def _at(value: Any, path: str) -> Any:
    for key in path.split("."):
        value = value[key]
    return value


@pytest.fixture(scope="module")
def prod_plan() -> ProgramRun:
    return run_program("prod", read(ROOT / "Pulumi.prod.yaml"), ROOT)


# (built-in definition GUID, resource type, input path, planned value) for both shipped stacks.
DEFAULTS = [
    ("b2982f36-99f2-4db5-8eff-283140c09693", STORAGE, "publicNetworkAccess", "Disabled"),
    ("bc1b984e-ddae-40cc-801a-050a030e4fbe", STORAGE, "sasPolicy.expirationAction", "Block"),
    ("7aa1c9d5-3d7e-4579-8117-d85e99211757", STORAGE, "sasPolicy.sasExpirationPeriod", "7.00:00:00"),
    ("1bc02227-0cb6-4e11-8f53-eb0b22eab7e8", INSIGHTS, "publicNetworkAccessForIngestion", "Disabled"),
    ("1bc02227-0cb6-4e11-8f53-eb0b22eab7e8", INSIGHTS, "publicNetworkAccessForQuery", "Disabled"),
    ("199d5677-e4d9-4264-9465-efe1839c06bd", INSIGHTS, "disableLocalAuth", True),
    ("6c53d030-cc64-46f0-906d-2bc061cd1334", LOGS, "publicNetworkAccessForIngestion", "Disabled"),
    ("6c53d030-cc64-46f0-906d-2bc061cd1334", LOGS, "publicNetworkAccessForQuery", "Disabled"),
    ("e15effd4-2278-4c65-a0da-4d6f6d1890e2", LOGS, "features.disableLocalAuth", True),
    ("524b0254-c285-4903-bee6-bb8126cde579", REGISTRY, "policies.exportPolicy.status", "disabled"),
    ("42781ec6-6127-4c30-bdfa-fb423a0047d3", REGISTRY, "policies.azureADAuthenticationAsArmPolicy.status", "disabled"),
    ("9d2b0a20-57d6-474c-9d12-44a4a20999c6", REGISTRY, "zoneRedundancy", "Enabled"),
    ("7bca8353-aa3b-429b-904a-9229c4385837", SUBNET, "defaultOutboundAccess", False),
    ("6ddb1705-c8cf-450e-aa4b-19ad6703c440", "azure-native:machinelearningservices:Workspace",
     "managedNetwork.isolationMode", "Disabled"),
    ("0c4bd2e8-8872-4f37-a654-03f6f38ddc76", INSIGHTS, "forceCustomerStorageForProfiler", True),
]


NOT_THERE = {
    ("dev", "b2982f36-99f2-4db5-8eff-283140c09693"): "dev's operator range (its build-context upload path) opens its "
                                                     "storage behind a deny-by-default firewall: test below",
    ("prod", "7bca8353-aa3b-429b-904a-9229c4385837"): "prod deploys into the hub's subnet: it creates none",
}
"""Built-ins a shipped stack relaxes on purpose, or whose resource it does not create."""


MET = [(stack, *d) for stack in ("dev", "prod") for d in DEFAULTS if (stack, d[0]) not in NOT_THERE]


@pytest.mark.parametrize(("stack", "guid", "token", "path", "expected"), MET,
                         ids=[f"{m[1][:8]}-{m[3]}-{m[0]}" for m in MET])
def test_deny_capable_builtins_are_met_by_default(
    stack: str, dev_plan: ProgramRun, prod_plan: ProgramRun, guid: str, token: str, path: str, expected: object
) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    assert _at(only(plan, token)["inputs"], path) == expected, guid


TAGGABLE = (
    "azure-native:resources:ResourceGroup", LOGS, INSIGHTS, STORAGE, "azure-native:keyvault:Vault", REGISTRY,
    "azure-native:machinelearningservices:Workspace", "azure-native:machinelearningservices:Compute",
    "azure-native:network:NetworkSecurityGroup", "azure-native:network:VirtualNetwork",
    "azure-native:network:NatGateway", "azure-native:network:PublicIPAddress",
    "azure-native:network:PrivateEndpoint", "azure-native:privatedns:PrivateZone",
    "azure-native:privatedns:VirtualNetworkLink",
)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_required_tag_is_on_every_taggable_resource(stack: str, dev_plan: ProgramRun, prod_plan: ProgramRun) -> None:
    """Azure Policy 871b6d14 'Require a tag on resources' with tagName cost-center."""
    plan = dev_plan if stack == "dev" else prod_plan
    taggable = [r for r in plan.resources if r.type in TAGGABLE]
    assert len({r.type for r in taggable}) >= 9
    missing = [f"{r.type} {r.name}" for r in taggable if "cost-center" not in (r.inputs.get("tags") or {})]
    assert missing == []


def test_storage_with_operator_ranges_keeps_public_access_behind_its_firewall(plan_variant: Variant) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:network"].update(operator_ip_ranges=["203.0.113.7"]))
    account = only(plan, STORAGE)["inputs"]
    assert account["publicNetworkAccess"] == "Enabled"
    assert account["networkRuleSet"]["defaultAction"] == "Deny"


@pytest.mark.parametrize(
    ("setting", "expected"),
    [({}, "Disabled"), ({"monitoring_public_network_access": "Enabled"}, "Enabled"),
     ({"public_network_access": "Enabled"}, "Enabled"),
     ({"public_network_access": "Enabled", "monitoring_public_network_access": "Disabled"}, "Disabled")],
    ids=["private-default", "explicit-open", "public-workspace", "public-workspace-private-logs"],
)
def test_monitoring_public_access_follows_the_workspace_unless_set(
    plan_variant: Variant, setting: dict[str, str], expected: str
) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:workspace"].update(setting))
    for token in (INSIGHTS, LOGS):
        inputs = only(plan, token)["inputs"]
        assert inputs["publicNetworkAccessForIngestion"] == inputs["publicNetworkAccessForQuery"] == expected


@pytest.mark.parametrize(
    ("workspace", "expected"),
    [({}, "Standard_LRS"), ({"high_business_impact": True}, "Standard_ZRS"),
     ({"storage_sku": "Standard_GZRS"}, "Standard_GZRS")],
)
def test_storage_replication(plan_variant: Variant, workspace: dict[str, Any], expected: str) -> None:
    plan = plan_variant(lambda c: c[f"{NS}:workspace"].update(workspace))
    assert only(plan, STORAGE)["inputs"]["sku"]["name"] == expected


NAT = "/subscriptions/1/resourceGroups/rg-net/providers/Microsoft.Network/natGateways/nat-training"


STACK_NAT = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-aml-gpu-dev/providers/" \
            "Microsoft.Network/natGateways/nat-mlw-gpu-dev"


@pytest.mark.parametrize(
    ("network", "outbound", "nat", "created"),
    [({}, False, STACK_NAT, True), ({"nat_gateway_id": NAT}, False, NAT, False),
     ({"default_outbound_access": True}, True, None, False)],
    ids=["default-private-with-the-stacks-nat", "existing-nat-gateway", "azure-default-outbound"],
)
def test_the_training_subnet_is_private_with_an_outbound_path(
    plan_variant: Variant, network: dict[str, Any], outbound: bool, nat: str | None, created: bool
) -> None:
    """Azure Policy 7bca8353 'Subnets should be private' (defaultOutboundAccess false); nodes without public IPs go
    out through a NAT gateway: the stack's (with one static Standard address) or an existing one."""
    plan = plan_variant(lambda c: c[f"{NS}:network"].update(network))
    subnet = only(plan, SUBNET)
    assert subnet["inputs"]["defaultOutboundAccess"] is outbound
    assert subnet["inputs"].get("natGateway", {}).get("id") == nat
    assert subnet["options"]["replaceOnChanges"] == ["defaultOutboundAccess"]
    gateways = plan.by_type("azure-native:network:NatGateway")
    assert bool(gateways) is created
    if created:
        address = only(plan, "azure-native:network:PublicIPAddress")["inputs"]
        assert (address["sku"], address["publicIPAllocationMethod"]) == ({"name": "Standard", "tier": "Regional"},
                                                                       "Static")
        assert gateways[0].inputs["publicIpAddresses"] == [{"id": address_id(address)}]


def address_id(inputs: dict[str, Any]) -> str:
    return (f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/{inputs['resourceGroupName']}"
            f"/providers/Microsoft.Network/publicIPAddresses/{inputs['publicIpAddressName']}")


ZONE = "/subscriptions/9/resourceGroups/rg-dns/providers/Microsoft.Network/privateDnsZones/{}"
ALL_ZONES = (
    "privatelink.api.azureml.ms", "privatelink.notebooks.azure.net", "privatelink.blob.core.windows.net",
    "privatelink.file.core.windows.net", "privatelink.vaultcore.azure.net", "privatelink.azurecr.io",
)


def test_hub_zones_are_used_and_neither_created_nor_linked(plan_variant: Variant) -> None:
    zones = {z: ZONE.format(z) for z in ALL_ZONES}
    plan = plan_variant(lambda c: c[f"{NS}:network"].update(private_dns_zone_ids=zones))
    assert not plan.by_type("azure-native:privatedns:PrivateZone")
    assert not plan.by_type("azure-native:privatedns:VirtualNetworkLink")
    used = {cfg["privateDnsZoneId"] for g in plan.by_type("azure-native:network:PrivateDnsZoneGroup")
            for cfg in g.inputs["privateDnsZoneConfigs"]}
    assert used == set(zones.values())


def test_zones_not_listed_are_still_created(plan_variant: Variant) -> None:
    given = {"privatelink.azurecr.io": ZONE.format("privatelink.azurecr.io")}
    plan = plan_variant(lambda c: c[f"{NS}:network"].update(private_dns_zone_ids=given))
    created = sorted(r.inputs["privateZoneName"] for r in plan.by_type("azure-native:privatedns:PrivateZone"))
    assert created == sorted(set(ALL_ZONES) - set(given))
    assert len(plan.by_type("azure-native:privatedns:VirtualNetworkLink")) == len(created)


@pytest.mark.parametrize(
    ("network", "key", "message"),
    [
        ({"private_dns_zone_ids": {"privatelink.example.com": ZONE.format("privatelink.example.com")}},
         "network.private_dns_zone_ids", "'privatelink.example.com' is not a zone the workspace's private endpoints"),
        ({"private_dns_zone_ids": {"privatelink.azurecr.io": "/subscriptions/9/zones/x"}},
         "network.private_dns_zone_ids", "is not a private DNS zone id"),
        ({"private_dns_zone_ids": {"privatelink.azurecr.io": ZONE.format("privatelink.vaultcore.azure.net")}},
         "network.private_dns_zone_ids", "names zone 'privatelink.vaultcore.azure.net', not 'privatelink.azurecr.io'"),
        ({"subnet_id": "/subscriptions/1/resourceGroups/r/providers/Microsoft.Network/virtualNetworks/v/subnets/s",
          "address_space": None, "subnet_prefix": None, "nat_gateway_id": NAT},
         "network", "nat_gateway_id applies to a new subnet"),
        ({"nat_gateway_id": NAT, "default_outbound_access": True}, "network", "contradicts it"),
        ({"operator_ip_ranges": ["192.168.10.0/24"]}, "network.operator_ip_ranges", "private (RFC 1918) range"),
        ({"operator_ip_ranges": ["203.0.113.7/32"]}, "network.operator_ip_ranges", "give the address itself"),
    ],
    ids=["unknown-zone", "not-a-zone-id", "id-of-another-zone", "nat-on-existing-subnet", "nat-and-default-outbound",
         "private-operator-range", "slash-32-operator-range"],
)
def test_bad_network_settings_name_the_key(network: dict[str, Any], key: str, message: str) -> None:
    from stack.config import build

    config = dev_config()
    values = {k.removeprefix(f"{NS}:"): v for k, v in config.items() if k.startswith(f"{NS}:")}
    values["network"] = {k: v for k, v in {**values["network"], **network}.items() if v is not None}
    with pytest.raises(ConfigError) as caught:
        build(values, location="westeurope", file="Pulumi.test.yaml", root=ROOT)
    assert caught.value.key == f"{NS}:{key}" and message in caught.value.message


def _refused_by_fe8a9af4(resource: dict[str, Any]) -> bool:
    """The condition of "Public IPs and Public IP prefixes should have FirstPartyUsage tag" (Azure/azure-policy
    built-in-policies/policyDefinitions/Network/PublicIPWithFPUOnly_Audit.json @ f4a50bac) on a planned address."""
    inputs = resource["inputs"]
    no_prefix = not (inputs.get("publicIPPrefix") or {}).get("id")
    tagged = [t for t in inputs.get("ipTags") or [] if t.get("ipTagType") == "FirstPartyUsage"]
    return no_prefix and not tagged


def _refused_by_db4f9b05(resource: dict[str, Any]) -> bool:
    """StorageAccountOnlyVnetRulesEnabledWithDatabricksExcluded_Audit.json @ f4a50bac: default action not Deny, or
    any IP rule."""
    rules = resource["inputs"].get("networkRuleSet") or {}
    return rules.get("defaultAction") != "Deny" or len(rules.get("ipRules") or []) >= 1


def test_the_unmet_builtins_are_unmet_where_the_table_says(dev_plan: ProgramRun, prod_plan: ProgramRun) -> None:
    dev_ips = [r.to_json() for r in dev_plan.by_type("azure-native:network:PublicIPAddress")]
    assert len(dev_ips) == 1 and _refused_by_fe8a9af4(dev_ips[0])  # the NAT gateway's address
    assert not prod_plan.by_type("azure-native:network:PublicIPAddress")  # an existing subnet: no address
    assert _refused_by_db4f9b05(only(dev_plan, STORAGE))  # dev lists an operator range
    assert not _refused_by_db4f9b05(only(prod_plan, STORAGE))


def test_the_policy_table_names_each_audited_builtin_where_it_belongs() -> None:
    text = (ROOT / "docs" / "azure-policy.md").read_text()
    sections = {title: body for title, _, body in (part.partition("\n") for part in text.split("\n## "))}
    settings = next(b for t, b in sections.items() if t.startswith("Stack settings"))
    not_adopted = next(b for t, b in sections.items() if t.startswith("Not adopted"))
    audit_only = next(b for t, b in sections.items() if t.startswith("Audit only"))
    assert "`fe8a9af4-a003-4c7d-b7a4-b9808310c4f8`" in settings and "`db4f9b05-5ffd-4b34-b714-3c710dbb3fd6`" in settings
    assert "`40cec1dd-a100-4920-b15b-3024fe8901ab`" in not_adopted and "`5f0bc445-3935-4915-9981-011aa2b46147`" in \
        not_adopted
    assert "`a6abeaec-4d90-4a02-805f-6b26c4d3fbe9`" in audit_only
    assert "`a6abeaec-4d90-4a02-805f-6b26c4d3fbe9` | Audit, Deny" not in text  # it cannot Deny
