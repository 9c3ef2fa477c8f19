"""The stack file's JSON Schema: committed and in sync, valid for every shipped stack, and as strict as the model.

Each case is checked both ways: what the schema rejects in the editor, ``amlgpu plan`` rejects too
(and the other way round), so the schema never tells a user something the tool contradicts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from amlgpu.cli import main
from kernel.errors import ConfigError
from stack import jsonschema as stack_schema_module
from stack.config import from_stackfile
from stack.stackfile import read
from tests.conftest import NS, ROOT, dev_config
from tests.conftest import shipped_stacks as conftest_shipped_stacks


class _PlainLoader(yaml.SafeLoader):
    """YAML as an editor's language server reads it (YAML 1.2 core: an unquoted date stays a string)."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load(path: Path) -> Any:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_PlainLoader)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    committed = json.loads((ROOT / stack_schema_module.SCHEMA_PATH).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(committed)
    return jsonschema.Draft202012Validator(committed)


def shipped_stacks() -> list[Path]:
    return sorted([*conftest_shipped_stacks(), *conftest_shipped_stacks("examples/multi-team")])


def test_there_are_stacks_to_check() -> None:
    names = [p.relative_to(ROOT).as_posix() for p in shipped_stacks()]
    assert "Pulumi.dev.yaml" in names and "Pulumi.prod.yaml" in names
    assert any(name.startswith("examples/") for name in names), names


@pytest.mark.parametrize("path", shipped_stacks(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_stack_validates(validator: jsonschema.Draft202012Validator, path: Path) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_load(path))]
    assert errors == []


def test_committed_files_equal_the_generated_ones(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["schema", "--check"]) == 0, capsys.readouterr().err
    assert "up to date" in capsys.readouterr().out


def test_check_names_a_stale_file_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: aml-gpu-training\nruntime: python\n")
    monkeypatch.chdir(tmp_path)
    assert main(["schema", "--write"]) == 0
    (tmp_path / "docs" / "config.md").write_text("# edited by hand\n")
    assert main(["schema", "--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/config.md is out of date" in err and "amlgpu schema --write" in err
    assert "stack.schema.json" not in err


def test_schema_command_prints_the_committed_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == (ROOT / stack_schema_module.SCHEMA_PATH).read_text(encoding="utf-8")
    assert json.loads(printed)["properties"]["config"]["required"] == [f"{NS}:workspace", f"{NS}:clusters"]


def test_every_key_is_documented_and_no_description_is_stale() -> None:
    assert stack_schema_module.undocumented_fields() == []
    assert stack_schema_module.stale_field_docs() == []


def _cluster(config: dict[str, Any]) -> dict[str, Any]:
    return config[f"{NS}:clusters"][0]


def _set(path: tuple[str | int, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        node: Any = config
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def _delete(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda config: config.pop(key)


def _move_location_into_workspace(config: dict[str, Any]) -> None:
    config[f"{NS}:workspace"]["location"] = config.pop("azure-native:location")


REJECTED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("max_instances as a word", _set((f"{NS}:clusters", 0, "max_instances"), "two"), "max_instances"),
    ("max_instances zero", _set((f"{NS}:clusters", 0, "max_instances"), 0), "max_instances"),
    ("unknown namespace key", _set((f"{NS}:clusterz",), []), f"{NS}:clusterz"),
    ("unknown cluster key", _set((f"{NS}:clusters", 0, "max_instance"), 2), "max_instance"),
    ("unknown workspace key", _set((f"{NS}:workspace", "public_access"), "Disabled"), "public_access"),
    ("tier outside its enum", _set((f"{NS}:clusters", 0, "tier"), "spot"), "tier"),
    ("tier in a spelling azure-ai-ml refuses", _set((f"{NS}:clusters", 0, "tier"), "LowPriority"), "tier"),
    ("distribution type misspelt", _set((f"{NS}:jobs", 0, "distribution", "type"), "Torch"), "distribution"),
    ("cluster name breaking Azure's rule", _set((f"{NS}:clusters", 0, "name"), "gpu-1"), "name"),
    ("workspace name too short", _set((f"{NS}:workspace", "name"), "ml"), "name"),
    ("no cluster", _set((f"{NS}:clusters",), []), f"{NS}:clusters"),
    ("no workspace", _delete(f"{NS}:workspace"), f"{NS}:workspace"),
    ("no region at all", _delete("azure-native:location"), "location"),
    ("size not in the catalogue", _set((f"{NS}:clusters", 0, "size"), "Standard_ND96asr_v9"), "size"),
    ("a boolean as a string", _set((f"{NS}:workspace", "protect"), "yes"), "protect"),
    ("a secret tag value", _set((f"{NS}:workspace", "tags", "owner"), {"secure": "v1:AAAA"}), "owner"),
]

ACCEPTED: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("the region under workspace", _move_location_into_workspace),
    ("another namespace's key", _set(("azure-native:subscriptionId",), "00000000-0000-0000-0000-000000000000")),
    ("a user-assigned identity", _set((f"{NS}:clusters", 0, "identity"), {
        "type": "user_assigned",
        "user_assigned_identities": [{"resource_id": "/subscriptions/1/resourceGroups/rg/providers/"
                                                     "Microsoft.ManagedIdentity/userAssignedIdentities/id"}],
    })),
    ("an existing subnet", _set((f"{NS}:network",), {
        "subnet_id": "/subscriptions/1/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s",
    })),
    # The letter case and camel case azure-ai-ml reads (azurefacts/enums.py): the editor takes them as the plan does.
    ("tier in Azure's portal case", _set((f"{NS}:clusters", 0, "tier"), "Dedicated")),
    ("tier in upper case", _set((f"{NS}:clusters", 0, "tier"), "LOW_PRIORITY")),
    ("a size in lower case", _set((f"{NS}:clusters", 0, "size"), "standard_nd96asr_v4")),
    ("distribution type PyTorch", _set((f"{NS}:jobs", 0, "distribution", "type"), "PyTorch")),
    ("distribution type MPI", _set((f"{NS}:jobs", 1, "distribution", "type"), "MPI")),
    ("distribution type TensorFlow", _set((f"{NS}:jobs", 3, "distribution", "type"), "TensorFlow")),
    ("identity in ARM's case", _set((f"{NS}:workspace", "identity", "type"), "SystemAssigned")),
    ("public access in lower case", _set((f"{NS}:workspace", "public_network_access"), "disabled")),
    ("output mode in upper case", _set((f"{NS}:jobs", 0, "outputs", "checkpoints", "mode"), "RW_MOUNT")),
]


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "Pulumi.case.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(("case", "mutate", "key"), REJECTED, ids=[c[0] for c in REJECTED])
def test_schema_and_model_reject_the_same_mistakes(
    validator: jsonschema.Draft202012Validator, tmp_path: Path, case: str,
    mutate: Callable[[dict[str, Any]], None], key: str,
) -> None:
    config = dev_config()
    mutate(config)
    path = _write(tmp_path, config)
    errors = list(validator.iter_errors(_load(path)))
    assert errors, f"the schema accepted {case}"
    # The editor points at the key: either its path or the error message names it.
    assert any(key in [*map(str, e.absolute_path), e.message] or key in e.message for e in errors), [
        (list(e.absolute_path), e.message) for e in errors
    ]
    with pytest.raises(ConfigError) as raised:
        from_stackfile(read(path), ROOT)
    assert raised.value.file == path.name


@pytest.mark.parametrize(("case", "mutate"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_schema_and_model_accept_the_same_variants(
    validator: jsonschema.Draft202012Validator, tmp_path: Path, case: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    config = dev_config()
    mutate(config)
    path = _write(tmp_path, config)
    assert [e.message for e in validator.iter_errors(_load(path))] == []
    from_stackfile(read(path), ROOT)


def test_a_secret_environment_variable_is_rejected(validator: jsonschema.Draft202012Validator) -> None:
    """``pulumi config set --secret --path '...environment_variables.X'`` writes ``{secure: ...}`` there: a run
    holds no secret (Azure ML keeps it readable in the job definition), so the editor flags it too."""
    document = {"config": copy.deepcopy(dev_config())}
    run = {"name": "r", "code": ".", "command": "python train.py", "environment": "acpt-pytorch",
           "compute": "gpu-a100", "distribution": {"type": "pytorch"},
           "environment_variables": {"WANDB_API_KEY": {"secure": "v1:AAAA"}}}
    document["config"][f"{NS}:jobs"] = [run]
    assert list(validator.iter_errors(document))
    run["environment_variables"] = {"WANDB_API_KEY": "not-a-secret"}
    assert [e.message for e in validator.iter_errors(document)] == []
