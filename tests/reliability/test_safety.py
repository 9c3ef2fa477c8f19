"""Nothing a user cares about is destroyed by accident: the resource options that make Pulumi refuse, keep or
replace, checked on the planned resources. (Protection on/off, the Compute option list and environment
versions kept on delete are in tests/infra/test_variants.py; this module covers the rest.)

A config change replaces a cluster exactly when it changes an input under one of the cluster's
``replaceOnChanges`` paths, which is how the engine decides: the tests change each config key and
compare the planned inputs, so a renamed wire path (camelCase drift) cannot slip through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from infra.gpu_cluster import IMMUTABLE_PROPERTIES
from planning.engine import ProgramRun
from tests.conftest import NS, only

COMPUTE = "azure-native:machinelearningservices:Compute"
WORKSPACE = "azure-native:machinelearningservices:Workspace"
DATA_HOLDERS = {
    "azure-native:resources:ResourceGroup",
    "azure-native:machinelearningservices:Workspace",
    "azure-native:storage:StorageAccount",
    "azure-native:keyvault:Vault",
}
SUBNET_ID = "/subscriptions/1/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/hub/subnets/training"

Variant = Callable[[Callable[[dict[str, Any]], None]], ProgramRun]


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}" if path else key)
    else:
        yield path, value


def _changed_paths(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    old, new = dict(_leaves(before)), dict(_leaves(after))
    return {path for path in old.keys() | new.keys() if old.get(path) != new.get(path)}


def _replaces(path: str, replace_on_changes: list[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in replace_on_changes)


def _cluster(config: dict[str, Any]) -> dict[str, Any]:
    return config[f"{NS}:clusters"][0]


CHANGES: list[tuple[str, Callable[[dict[str, Any]], None], bool]] = [
    ("size", lambda c: _cluster(c).update(size="Standard_ND96amsr_A100_v4"), True),
    ("tier", lambda c: _cluster(c).update(tier="low_priority"), True),
    ("node public IP", lambda c: _cluster(c).update(enable_node_public_ip=True), True),
    ("subnet", lambda c: c.__setitem__(f"{NS}:network", {"subnet_id": SUBNET_ID}), True),
    ("max instances", lambda c: _cluster(c).update(max_instances=4), False),
    ("min instances", lambda c: _cluster(c).update(min_instances=1), False),
    ("idle time", lambda c: _cluster(c).update(idle_time_before_scale_down=1800), False),
    ("description", lambda c: _cluster(c).update(description="A100 pool for the vision team"), False),
]


@pytest.mark.parametrize(("key", "change", "replaced"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_cluster_is_replaced_exactly_when_an_immutable_property_changes(
    dev_plan: ProgramRun, plan_variant: Variant, key: str, change: Callable[[dict[str, Any]], None], replaced: bool
) -> None:
    before = only(dev_plan, COMPUTE, "gpu-a100")
    after = only(plan_variant(change), COMPUTE, "gpu-a100")
    changed = _changed_paths(before["inputs"], after["inputs"])
    assert changed, f"changing {key} changed nothing on the wire"
    replacing = sorted(p for p in changed if _replaces(p, after["options"]["replaceOnChanges"]))
    assert bool(replacing) is replaced, (changed, replacing)
    # Same name after the replacement: runs keep targeting it, so the old one must go first.
    assert after["inputs"]["computeName"] == "gpu-a100"
    assert after["options"]["deleteBeforeReplace"] is True


def test_every_compute_of_the_stack_is_replaced_delete_first(dev_plan: ProgramRun) -> None:
    computes = [r.to_json() for r in dev_plan.by_type(COMPUTE)]
    assert {c["inputs"]["computeName"] for c in computes} == {"gpu-a100", "image-builder"}
    for compute in computes:
        assert compute["options"]["replaceOnChanges"] == sorted(IMMUTABLE_PROPERTIES)
        assert compute["options"]["deleteBeforeReplace"] is True


def test_the_immutable_paths_exist_on_the_wire(dev_plan: ProgramRun) -> None:
    """Each replaceOnChanges path names an input the program sends; a misspelt path would never trigger."""
    sent = {path for path, _ in _leaves(only(dev_plan, COMPUTE, "gpu-a100")["inputs"])}
    for path in IMMUTABLE_PROPERTIES:
        assert any(p == path or p.startswith(path + ".") for p in sent), path


def test_only_data_holders_are_protected_so_clusters_stay_replaceable(dev_plan: ProgramRun) -> None:
    """A protected Compute could never be replaced: `pulumi up` would stop at every size change."""
    protected = {r.type for r in dev_plan.resources if r.options.get("protect")}
    assert protected == DATA_HOLDERS


def test_the_workspace_is_replaced_delete_first(dev_plan: ProgramRun) -> None:
    # Its name is its identity for every job and datastore; while protected, Pulumi refuses the replacement.
    options = only(dev_plan, WORKSPACE)["options"]
    assert options["deleteBeforeReplace"] is True
    assert options["protect"] is True


def test_environment_containers_outlive_the_stack_like_their_versions(dev_plan: ProgramRun) -> None:
    containers = dev_plan.by_type("azure-native:machinelearningservices:EnvironmentContainer")
    assert {c.inputs["name"] for c in containers} == {"acpt-pytorch", "tf-gpu", "horovod"}
    for container in containers:
        assert container.options["retainOnDelete"] is True


def test_global_names_depend_only_on_the_resource_group_and_workspace_name(
    dev_plan: ProgramRun, plan_variant: Variant
) -> None:
    """Storage, key vault and registry names are derived, not random: the same config in another folder asks
    for the same names, another workspace name for new ones (a key vault name stays taken for 90 days after
    deletion: docs/operations.md)."""
    same = plan_variant(lambda c: None)
    renamed = plan_variant(lambda c: c[f"{NS}:workspace"].update(name="mlw-gpu-dev2"))
    for token, key in (("azure-native:keyvault:Vault", "vaultName"), ("azure-native:storage:StorageAccount",
                       "accountName"), ("azure-native:containerregistry:Registry", "registryName")):
        names = [only(plan, token)["inputs"][key] for plan in (dev_plan, same, renamed)]
        assert names[0] == names[1] != names[2], token
