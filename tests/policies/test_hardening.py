"""Settings that open the door (issue 19, item 5): each planned with exit 0 before; now each is a finding
or a refusal naming the file and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from kernel.errors import ConfigError
from stack.project import load_stack
from stack.stackfile import read
from tests.conftest import NS, ROOT, make_project
from tests.policies.test_baseline import Baseline, baseline

STORAGE = "azure-native:storage:StorageAccount"
RUN = "ddp-per-process"


def _storage_rules(b: Baseline, *ranges: str) -> Baseline:
    storage = next(r for r in b.resources if r["type"] == STORAGE)
    storage["inputs"]["networkRuleSet"]["ipRules"] = [{"iPAddressOrRange": r, "action": "Allow"} for r in ranges]
    return b


def _found(b: Baseline, rule: str, pack: dict[str, Any] | None = None) -> list[str]:
    return [f.message for f in b.evaluate(pack_config=pack).findings if f.rule.id == rule]


@pytest.mark.parametrize(
    ("ranges", "count"),
    [(("0.0.0.0/0",), 1), (("0.0.0.0/1", "128.0.0.0/1"), 1), (("10.0.0.0/7",), 1), (("203.0.113.7",), 0),
     (("203.0.113.0/24", "198.51.100.0/22"), 0), (("52.0.0.0/8",), 0), (("not-an-address",), 0)],
)
def test_an_operator_range_that_opens_the_storage_firewall(ranges: tuple[str, ...], count: int) -> None:
    found = _found(_storage_rules(baseline(), *ranges), "storage-operator-ranges-not-open")
    assert len(found) == count
    if ranges == ("0.0.0.0/0",):
        assert found == ["operator range 0.0.0.0/0 lets the whole internet through the storage firewall "
                         "(the shortest allowed prefix is /8)"]


def test_the_shortest_allowed_prefix_is_a_pack_parameter() -> None:
    b = _storage_rules(baseline(), "52.0.0.0/8")
    pack = {"storage-operator-ranges-not-open": {"min_prefix_length": 16}}
    assert _found(b, "storage-operator-ranges-not-open", pack) == [
        "operator range 52.0.0.0/8 lets 2^24 addresses through the storage firewall (the shortest allowed prefix "
        "is /16)"]


def test_operator_ranges_reach_the_storage_rules_from_the_stack_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: `network.operator_ip_ranges: [0.0.0.0/0]` in a stack file fails the plan (exit 1)."""
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    config[f"{NS}:network"]["operator_ip_ranges"] = ["0.0.0.0/0"]
    project = make_project(tmp_path / "project", config, stack="dev")
    out = tmp_path / "out"
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "dev", "--out", str(out), "--format", "json"]) == 1
    assert "storage-operator-ranges-not-open" in (out / "policy.md").read_text()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ("--privileged", ["--privileged gives the container every capability"]),
        ("--cap-add=SYS_ADMIN", ["--cap-add SYS_ADMIN adds kernel capabilities"]),
        ("--network host", ["--network host shares the node's network namespace"]),
        ("--net=host --pid=host", ["--net host shares", "--pid host shares"]),
        ("--device /dev/mem", ["--device /dev/mem hands a host device"]),
        ("-v /:/host", ["-v /:/host mounts the node's / into the container"]),
        ("--mount type=bind,source=/var/run/docker.sock,target=/s", ["--mount type=bind"]),
        ("--security-opt seccomp=unconfined", ["--security-opt seccomp=unconfined lifts"]),
        ("--shm-size 16g --ulimit memlock=-1", []),
        ("--ipc host", []),
        ("--privileged=false", []),
        ("-v data:/data", []),  # a named volume, not a host path
    ],
)
def test_docker_args_that_hand_the_node_to_the_container(args: str, says: list[str]) -> None:
    b = baseline()
    b.run(RUN)["spec"]["resources"]["docker_args"] = args
    found = _found(b, "run-docker-args-confined")
    assert len(found) == len(says)
    for message, expected in zip(found, says, strict=True):
        assert expected in message


@pytest.mark.parametrize(
    ("services", "identity", "ssh", "notebook"),
    [
        ({"debug": {"type": "ssh"}}, None, 1, 0),
        ({"debug": {"type": "ssh", "ssh_public_keys": "ssh-ed25519 AAAAC3Nz user@host"}}, None, 0, 0),
        ({"nb": {"type": "jupyter_lab"}, "code": {"type": "vs_code"}}, None, 0, 2),
        ({"nb": {"type": "jupyter_lab"}}, {"type": "managed_identity"}, 0, 1),
        ({"nb": {"type": "jupyter_lab"}}, {"type": "user_identity"}, 0, 0),
        ({"tb": {"type": "tensor_board", "log_dir": "outputs/tb"}}, None, 0, 0),
    ],
)
def test_interactive_services_need_a_key_or_the_users_identity(
    services: dict[str, Any], identity: dict[str, str] | None, ssh: int, notebook: int
) -> None:
    b = baseline()
    spec = b.run(RUN)["spec"]
    spec["services"] = services
    if identity:
        spec["identity"] = identity
    report = b.evaluate()
    assert sum(1 for f in report.findings if f.rule.id == "run-ssh-service-has-key") == ssh
    assert sum(1 for f in report.findings if f.rule.id == "run-notebook-service-user-identity") == notebook
    assert report.passed is (ssh == 0)


def test_a_stack_file_importing_esc_environments_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("environment:\n  - aml/prod-overrides\nconfig:\n  aml-gpu-training:jobs: []\n")
    with pytest.raises(ConfigError) as err:
        read(path)
    assert (err.value.file, err.value.key) == ("Pulumi.dev.yaml", "environment")
    assert "aml/prod-overrides" in err.value.message and "only known to `pulumi up`" in err.value.message


def test_an_empty_environment_key_is_no_import(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text("environment: []\nconfig: {}\n")
    assert read(path).config == {}


def test_a_project_moving_its_stack_files_is_refused(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    project = make_project(tmp_path / "project", config, stack="dev")
    text = (project / "Pulumi.yaml").read_text()
    (project / "Pulumi.yaml").write_text(text + "stackConfigDir: config/\n")
    with pytest.raises(ConfigError) as err:
        load_stack("dev", project)
    assert (err.value.file, err.value.key) == ("Pulumi.yaml", "stackConfigDir")
    assert "'config/'" in err.value.message
