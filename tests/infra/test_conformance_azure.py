"""Every planned resource of every shipped stack against Azure's constraints the SDK's types do not enforce.

pulumi-azure-native types an enum property as ``str | Enum`` and a name as ``str``: any string passes the
type, and Azure refuses it at ``pulumi up``. Checked here, for dev, prod and examples/multi-team:

* **enum values**: every input the SDK annotates with one of its enums (found by walking the SDK's own
  type annotations, resource -> ``*Args`` -> nested ``*Args``) holds one of that enum's values;
* **names**: the name rules Microsoft documents per resource type (Microsoft Learn, "Naming rules and
  restrictions for Azure resources", azure-resource-manager/management/resource-name-rules; Azure ML's
  compute and asset names from its own docs and REST spec patterns);
* **ISO-8601 durations** where the API takes one (``nodeIdleTimeBeforeScaleDown``);
* **resource-ID shapes**: every value that is a resource id (by key, or by starting with ``/subscriptions/``);
* **required combinations**: a cluster without node public IPs sits in a subnet; a private endpoint only to a
  registry SKU that supports one (Premium); a workspace with public access disabled has a private endpoint.

The checks are run on mutated plans too: each must fail on its violation.
"""

from __future__ import annotations

import copy
import enum
import functools
import importlib
import re
import typing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from planning.engine import run_program
from stack.stackfile import read
from tests.conftest import ROOT, shipped_stacks

Resource = dict[str, Any]

STACKS = {
    "dev": ROOT / "Pulumi.dev.yaml",
    "prod": ROOT / "Pulumi.prod.yaml",
    **{f"multi-team/{p.stem.removeprefix('Pulumi.')}": p
       for p in shipped_stacks("examples/multi-team")},
}

# --------------------------------------------------------------------------------------------- names

_VNET_LIKE = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_])?"
_SUBNET_LIKE = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,78}[A-Za-z0-9_])?"
_GUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_DNS = r"(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}"

NAME_RULES: dict[str, tuple[str, str, str]] = {
    # token: (input holding the name, pattern, rule as documented)
    "azure-native:resources:ResourceGroup": ("resourceGroupName", r"[-\w.()]{0,89}[-\w()]", "1-90, no trailing '.'"),
    "azure-native:storage:StorageAccount": ("accountName", r"[a-z0-9]{3,24}", "3-24 lowercase letters and digits"),
    "azure-native:storage:BlobContainer": ("containerName", r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]",
                                           "3-63 lowercase, digits, single hyphens"),
    "azure-native:keyvault:Vault": ("vaultName", r"[A-Za-z](?!.*--)[A-Za-z0-9-]{1,22}[A-Za-z0-9]",
                                    "3-24, starts with a letter, no '--'"),
    "azure-native:containerregistry:Registry": ("registryName", r"[A-Za-z0-9]{5,50}", "5-50 letters and digits"),
    "azure-native:applicationinsights:Component": ("resourceName", r"[^%&\\?/]{0,259}[^%&\\?/. ]",
                                                   "1-260, none of %&\\?/, no trailing '.' or space"),
    "azure-native:operationalinsights:Workspace": ("workspaceName", r"[A-Za-z0-9][A-Za-z0-9-]{2,61}[A-Za-z0-9]",
                                                   "4-63 letters, digits, hyphens"),
    "azure-native:machinelearningservices:Workspace": ("workspaceName", r"[A-Za-z0-9][A-Za-z0-9_-]{2,32}",
                                                       "3-33 letters, digits, '-', '_'"),
    "azure-native:machinelearningservices:Compute": ("computeName", r"[A-Za-z][A-Za-z0-9-]{2,23}",
                                                     "3-24, starts with a letter, letters, digits, hyphens"),
    "azure-native:machinelearningservices:EnvironmentContainer": ("name", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}",
                                                                  "1-255, starts with a letter or digit"),
    "azure-native:machinelearningservices:EnvironmentVersion": ("name", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}",
                                                                "1-255, starts with a letter or digit"),
    "azure-native:network:VirtualNetwork": ("virtualNetworkName", _VNET_LIKE, "2-64"),
    "azure-native:network:Subnet": ("subnetName", _SUBNET_LIKE, "1-80"),
    "azure-native:network:NetworkSecurityGroup": ("networkSecurityGroupName", _SUBNET_LIKE, "1-80"),
    "azure-native:network:NatGateway": ("natGatewayName", _SUBNET_LIKE, "1-80"),
    "azure-native:network:PublicIPAddress": ("publicIpAddressName", _SUBNET_LIKE, "1-80"),
    "azure-native:network:PrivateEndpoint": ("privateEndpointName", _VNET_LIKE, "2-64"),
    "azure-native:network:PrivateDnsZoneGroup": ("privateDnsZoneGroupName", _SUBNET_LIKE, "1-80"),
    "azure-native:privatedns:PrivateZone": ("privateZoneName", _DNS, "a DNS name of two or more labels"),
    "azure-native:privatedns:VirtualNetworkLink": ("virtualNetworkLinkName", _SUBNET_LIKE, "1-80"),
    "azure-native:authorization:RoleAssignment": ("roleAssignmentName", _GUID, "a GUID"),
    "azure-native:authorization:ManagementLockByScope": ("lockName", r"[^<>*%{}&:\\?+/#|]{0,89}[^<>*%{}&:\\?+/#|. ]",
                                                         "1-90, none of <>*%{}&:\\?+/#|, no trailing '.' or space"),
    "azure-native:network:ServiceEndpointPolicy": ("serviceEndpointPolicyName", _SUBNET_LIKE, "1-80"),
    "azure-native:monitor:DiagnosticSetting": ("name", r"[^*#&+:<>?/%\\]{1,260}", "1-260, none of *#&+:<>?/%\\"),
    "azure-native:managedidentity:UserAssignedIdentity": ("resourceName", r"[A-Za-z0-9][A-Za-z0-9_-]{2,127}", "3-128"),
}
AUTO_NAME_SUFFIX = 8
"""Pulumi auto-names a resource whose name input is left out: the logical name, '-' and 7 hex digits."""

NOT_AZURE = ("aml-gpu-training:", "pulumi-python:dynamic/", "pulumi:")
"""Component resources and the dynamic provider: no Azure resource of their own."""


def name_problems(resource: Resource) -> list[str]:
    rule = NAME_RULES.get(resource["type"])
    if rule is None:
        return [f"{resource['type']} has no name rule here: add Azure's documented rule to NAME_RULES"]
    key, pattern, text = rule
    value = resource["inputs"].get(key)
    if value is None:
        value = resource["name"] + "-" + "0" * (AUTO_NAME_SUFFIX - 1)
    if not re.fullmatch(pattern, str(value)):
        return [f"{resource['type']} {resource['name']}: {key} {value!r} breaks Azure's rule ({text})"]
    return []


# --------------------------------------------------------------------------------------------- enums


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _refs(annotation: Any) -> list[str]:
    """The SDK class names an annotation mentions (forward references and real classes)."""
    text = str(annotation)
    names = re.findall(r"ForwardRef\('(?:_inputs\.|_enums\.)?([A-Za-z0-9_]+)'\)", text)
    names += [a.__name__ for a in typing.get_args(annotation) if isinstance(a, type)]
    return names


@functools.cache
def _fields(module: str, cls_name: str) -> dict[str, Any]:
    """Wire name -> annotation of an SDK resource's or ``*Args`` class's inputs."""
    cls = getattr(importlib.import_module(module), cls_name)
    init = cls._internal_init if hasattr(cls, "_internal_init") else cls.__init__
    return {_camel(k): v for k, v in init.__annotations__.items() if k not in ("return", "resource_name", "opts")}


def enum_problems(resource: Resource) -> list[str]:
    _, module_name, cls_name = resource["type"].split(":")
    module = f"pulumi_azure_native.{module_name}"
    return list(_walk_enums(module, _fields(module, cls_name), resource["inputs"], f"{resource['name']}"))


def _walk_enums(module: str, fields: dict[str, Any], value: Any, path: str) -> Iterator[str]:
    if not isinstance(value, dict):
        return
    package = importlib.import_module(module)
    for key, inner in value.items():
        annotation = fields.get(key)
        if annotation is None:
            continue
        classes = [getattr(package, n) for n in _refs(annotation) if hasattr(package, n)]
        enums = [c for c in classes if isinstance(c, type) and issubclass(c, enum.Enum)]
        nested = [c.__name__ for c in classes if isinstance(c, type) and c.__name__.endswith("Args")]
        items = inner if isinstance(inner, list) else [inner]
        for i, item in enumerate(items):
            where = f"{path}.{key}" + (f"[{i}]" if isinstance(inner, list) else "")
            if enums and isinstance(item, str):
                # Case-insensitive, as Azure compares them: Microsoft's own ARM templates write
                # systemDatastoresAuthMode "identity" for the SDK's SystemDatastoresAuthMode.IDENTITY "Identity".
                allowed = {str(m.value) for e in enums for m in e}
                folded = {a.lower() for a in allowed}
                parts = [item] if item.lower() in folded else [p.strip() for p in item.split(",")]
                bad = [p for p in parts if p.lower() not in folded]
                if bad:
                    yield f"{where} = {item!r} is not one of {sorted(allowed)} ({', '.join(e.__name__ for e in enums)})"
            elif nested and isinstance(item, dict):
                # A union of Args types (Compute.properties): the member its discriminator names
                # (computeType AmlCompute -> AmlComputeArgs), else the one that knows the most keys given.
                tags = {f"{item.get(k)}Args".lower() for k in ("computeType", "type", "kind") if item.get(k)}
                named = [n for n in nested if n.lower() in tags]
                candidates = [_fields(module, n) for n in named or nested]
                best = max(candidates, key=lambda f: sum(k in f for k in item))
                yield from _walk_enums(module, best, item, where)


# --------------------------------------------------------------------------------------------- durations, ids

ISO_DURATION = re.compile(r"P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?")
DURATION_KEYS = {"nodeIdleTimeBeforeScaleDown"}
ID_KEYS = {"id", "scope", "privateLinkServiceId", "keyVault", "storageAccount", "containerRegistry",
           "applicationInsights", "keyVaultArmId", "roleDefinitionId", "workspaceId", "primaryUserAssignedIdentity",
           "privateDnsZoneId"}
_PROVIDER = re.compile(r"[A-Za-z][A-Za-z0-9]*(\.[A-Za-z0-9]+)+")


def is_arm_id(value: str) -> bool:
    """``/subscriptions/<guid>[/resourceGroups/<rg>][/providers/<Namespace>/<type>/<name>[/<type>/<name>]...]``."""
    parts = value.split("/")
    if parts[:2] != ["", "subscriptions"] or len(parts) < 3 or not re.fullmatch(_GUID, parts[2]):
        return False
    rest = parts[3:]
    if rest[:1] and rest[0].lower() == "resourcegroups":
        if len(rest) < 2 or not re.fullmatch(r"[-\w.()]{1,90}", rest[1]):
            return False
        rest = rest[2:]
    if not rest:
        return True
    if rest[0].lower() != "providers" or len(rest) < 4 or not _PROVIDER.fullmatch(rest[1]):
        return False
    pairs = rest[2:]
    return len(pairs) % 2 == 0 and all(pairs)


def _strings(value: Any, path: str) -> Iterator[tuple[str, str, str]]:
    """(path, key, string) for every string in a JSON value, with the key it sits under."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(inner, str):
                yield f"{path}.{key}", key, inner
            if isinstance(key, str) and key.startswith("/subscriptions/"):
                yield f"{path}[key]", "id", key
            yield from _strings(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            if isinstance(inner, str):
                yield f"{path}[{i}]", "", inner
            yield from _strings(inner, f"{path}[{i}]")


def value_problems(resource: Resource) -> list[str]:
    out = []
    for where, key, text in _strings(resource["inputs"], resource["name"]):
        if key in DURATION_KEYS and not ISO_DURATION.fullmatch(text):
            out.append(f"{where} = {text!r} is not an ISO-8601 duration (PT15M)")
        if (key in ID_KEYS or text.startswith("/subscriptions/")) and not is_arm_id(text):
            out.append(f"{where} = {text!r} is not a resource id (/subscriptions/<guid>/resourceGroups/...)")
    return out


# --------------------------------------------------------------------------------------------- combinations


def combination_problems(resources: list[Resource]) -> list[str]:
    out = []
    by_type: dict[str, list[Resource]] = {}
    for r in resources:
        by_type.setdefault(r["type"], []).append(r)
    for compute in by_type.get("azure-native:machinelearningservices:Compute", []):
        props = compute["inputs"].get("properties", {})
        inner = props.get("properties", {})
        if props.get("computeType") == "AmlCompute" and inner.get("enableNodePublicIp") is False \
                and not (inner.get("subnet") or {}).get("id"):
            out.append(f"{compute['name']}: enableNodePublicIp false needs a subnet (Azure: no-public-IP clusters "
                       "must be in a virtual network)")
    registries = {r["inputs"].get("registryName", "").lower(): r for r in by_type.get(
        "azure-native:containerregistry:Registry", [])}
    endpoints = by_type.get("azure-native:network:PrivateEndpoint", [])
    for endpoint in endpoints:
        for connection in endpoint["inputs"].get("privateLinkServiceConnections", []):
            target = str(connection.get("privateLinkServiceId", ""))
            if "/microsoft.containerregistry/registries/" in target.lower():
                registry = registries.get(target.rsplit("/", 1)[-1].lower())
                sku = (registry or {}).get("inputs", {}).get("sku", {}).get("name")
                if registry is not None and sku != "Premium":
                    out.append(f"{endpoint['name']}: a private endpoint to registry {target.rsplit('/', 1)[-1]} needs "
                               f"the Premium SKU (it is {sku})")
    workspace_endpoints = [e for e in endpoints for c in e["inputs"].get("privateLinkServiceConnections", [])
                           if "amlworkspace" in (c.get("groupIds") or [])]
    for workspace in by_type.get("azure-native:machinelearningservices:Workspace", []):
        if workspace["inputs"].get("publicNetworkAccess") == "Disabled" and not workspace_endpoints:
            out.append(f"{workspace['name']}: public network access disabled and no private endpoint to it")
    return out


def violations(resources: list[Resource]) -> list[str]:
    out = combination_problems(resources)
    for resource in resources:
        if resource["type"].startswith(NOT_AZURE):
            continue
        out += name_problems(resource) + enum_problems(resource) + value_problems(resource)
    return out


# --------------------------------------------------------------------------------------------- tests


@functools.cache
def planned(stack: str) -> tuple[Resource, ...]:
    path = STACKS[stack]
    return tuple(r.to_json() for r in run_program(path.stem.removeprefix("Pulumi."), read(path), ROOT).resources)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_planned_resource_conforms(stack: str) -> None:
    assert violations(list(planned(stack))) == []


def test_the_enum_walk_reaches_nested_and_union_inputs() -> None:
    """The walk finds the SDK's enums where they are: a wrong value at each depth is reported."""
    resources = [copy.deepcopy(r) for r in planned("dev")]
    compute = next(r for r in resources if r["name"] == "gpu-a100")
    storage = next(r for r in resources if r["type"] == "azure-native:storage:StorageAccount")
    compute["inputs"]["properties"]["properties"]["vmPriority"] = "Spot"  # union member AmlCompute, nested Args
    storage["inputs"]["sku"]["name"] = "Standard_XRS"
    storage["inputs"]["networkRuleSet"]["bypass"] = "AzureServices, Everything"  # a flags enum, comma-separated
    found = violations(resources)
    assert any("gpu-a100.properties.properties.vmPriority = 'Spot'" in v and "VmPriority" in v for v in found)
    assert any(".sku.name = 'Standard_XRS'" in v and "SkuName" in v for v in found)
    assert any(".networkRuleSet.bypass = 'AzureServices, Everything'" in v for v in found)
    assert len(found) == 3, found


Mutation = Callable[[list[Resource]], None]


def _first(resources: list[Resource], token: str) -> Resource:
    return next(r for r in resources if r["type"] == token)


def _set(token: str, path: str, value: Any) -> Mutation:
    def mutate(resources: list[Resource]) -> None:
        *head, last = path.split(".")
        target = _first(resources, token)["inputs"]
        for part in head:
            target = target[part]
        target[last] = value

    return mutate


def _drop_subnet(resources: list[Resource]) -> None:
    compute = next(r for r in resources if r["name"] == "gpu-a100")
    del compute["inputs"]["properties"]["properties"]["subnet"]


def _drop_workspace_endpoint(resources: list[Resource]) -> None:
    resources[:] = [r for r in resources if not (r["type"] == "azure-native:network:PrivateEndpoint"
                    and "workspace" in r["name"])]


@pytest.mark.parametrize(("mutate", "expected"), [
    pytest.param(_set("azure-native:storage:StorageAccount", "accountName", "St_Dev"), "breaks Azure's rule (3-24",
                 id="storage-name"),
    pytest.param(_set("azure-native:keyvault:Vault", "vaultName", "kv--dev"), "no '--'", id="vault-name"),
    pytest.param(_set("azure-native:authorization:RoleAssignment", "roleAssignmentName", "gpu-a100-acr"), "a GUID",
                 id="role-assignment-name"),
    pytest.param(_set("azure-native:machinelearningservices:Compute", "computeName", "gpu_a100"), "3-24",
                 id="compute-name"),
    pytest.param(_set("azure-native:machinelearningservices:Compute",
                      "properties.properties.scaleSettings.nodeIdleTimeBeforeScaleDown", "900s"), "ISO-8601",
                 id="duration"),
    pytest.param(_set("azure-native:network:Subnet", "virtualNetworkName", "/subscriptions/x/resourceGroups/rg"),
                 "is not a resource id", id="resource-id"),
    pytest.param(_set("azure-native:authorization:RoleAssignment", "scope",
                      "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg/providers/Microsoft.Storage"),
                 "is not a resource id", id="truncated-id"),
    pytest.param(_set("azure-native:machinelearningservices:Workspace", "publicNetworkAccess", "Off"),
                 "PublicNetworkAccess", id="enum"),
    pytest.param(_drop_subnet, "needs a subnet", id="no-public-ip-without-subnet"),
    pytest.param(_set("azure-native:containerregistry:Registry", "sku.name", "Basic"), "needs the Premium SKU",
                 id="registry-endpoint-sku"),
    pytest.param(_drop_workspace_endpoint, "no private endpoint to it", id="private-workspace-without-endpoint"),
])
def test_a_violation_fails(mutate: Mutation, expected: str) -> None:
    resources = [copy.deepcopy(r) for r in planned("dev")]
    mutate(resources)
    found = violations(resources)
    assert any(expected in v for v in found), found


def test_an_unknown_resource_type_must_get_a_name_rule() -> None:
    found = violations([{"type": "azure-native:network:ApplicationGateway", "name": "agw", "inputs": {}}])
    assert found == ["azure-native:network:ApplicationGateway has no name rule here: add Azure's documented rule "
                     "to NAME_RULES"]


SUB_ID = f"/subscriptions/{uuid.UUID(int=1)}"


@pytest.mark.parametrize(("value", "ok"), [
    ("/subscriptions/00000000-0000-0000-0000-000000000000", True),
    (f"{SUB_ID}/resourceGroups/rg-1/providers/Microsoft.Network/virtualNetworks/v/subnets/s", True),
    (f"{SUB_ID}/providers/Microsoft.Authorization/roleDefinitions/{uuid.UUID(int=2)}", True),
    (f"{SUB_ID}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets", False),
    ("/subscriptions/not-a-guid/resourceGroups/rg", False),
    (f"{SUB_ID}/resourceGroups/rg/providers/network/virtualNetworks/v", False),
])
def test_resource_id_grammar(value: str, ok: bool) -> None:
    assert is_arm_id(value) is ok


def test_stacks_cover_the_examples() -> None:
    assert set(STACKS) == {"dev", "prod", "multi-team/nlp", "multi-team/research", "multi-team/vision"}


def test_duration_pattern() -> None:
    assert all(ISO_DURATION.fullmatch(v) for v in ("PT15M", "PT0S", "PT1H30M", "P1D", "PT2.5S"))
    assert not any(ISO_DURATION.fullmatch(v) for v in ("P", "PT", "15M", "PT15", "900"))


def test_the_walk_resolves_sdk_annotations() -> None:
    fields = _fields("pulumi_azure_native.machinelearningservices", "AmlComputePropertiesArgs")
    assert "VmPriority" in _refs(fields["vmPriority"])
    assert Path(importlib.import_module("pulumi_azure_native").__file__ or "").exists()
