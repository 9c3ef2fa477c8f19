"""The first hour on the command line: --version, help without markup, a policy list that fits a
terminal, `amlgpu init`, findings on the terminal when the gate fails, counts that agree, and no
notices from dependencies."""

from __future__ import annotations

import json
import logging
import re
import shutil
import tomllib
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import COMMANDS, build_parser, main
from tests.conftest import NS, ROOT, copy_project_folders, dev_config, make_project


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out == f"amlgpu {version}\n"


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS), ["policy", "list"], ["policy", "docs"]],
                         ids=lambda c: " ".join(c) or "amlgpu")
def test_help_has_no_restructuredtext(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: amlgpu")
    assert not re.search(r"``|:(mod|class|func|data|meth|attr):`", text), text


def test_plain_turns_roles_into_words() -> None:
    from amlgpu.cli import plain

    assert plain("``amlgpu plan`` uses :mod:`jobs.render` and :class:`~stack.config.StackConfig`") == (
        "amlgpu plan uses jobs.render and StackConfig"
    )


def test_every_command_is_registered() -> None:
    parser = build_parser()
    for command in COMMANDS:
        assert parser.parse_args([command, *_required(command)]).command == command


def _required(command: str) -> list[str]:
    return {"init": ["--stack", "x"], "plan": ["--stack", "x"], "run-local": ["r", "--stack", "x"],
            "submit": ["r", "--stack", "x"], "job": ["show", "j", "--stack", "x"], "policy": ["list"],
            "import": ["job.yml"], "components": ["pull", "--stack", "x"],
            "prices": ["show"], "preflight": ["--stack", "x"]}.get(command, [])


# ------------------------------------------------------------------------------------------------ init


@pytest.fixture
def bare_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clone of the project: the program, the sample workloads, no stack of its own."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, project / name)
    copy_project_folders(project)
    monkeypatch.chdir(project)
    return project


def test_init_writes_a_commented_stack_that_plans_clean(bare_project: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "mine", "--sku", "standard_nd96isr_h100_v5", "--nodes", "2",
                 "--region", "eastus2"]) == 0
    assert capsys.readouterr().out == "Wrote Pulumi.mine.yaml.\nNext: amlgpu plan --stack mine\n"
    text = (bare_project / "Pulumi.mine.yaml").read_text()
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert len(comments) >= 10
    config = yaml.safe_load(text)["config"]
    assert config["azure-native:location"] == "eastus2"
    assert config[f"{NS}:clusters"] == [{"name": "gpu-h100", "size": "Standard_ND96isr_H100_v5", "min_instances": 0,
                                         "max_instances": 2, "tier": "dedicated",
                                         "idle_time_before_scale_down": 900}]
    (run,) = config[f"{NS}:jobs"]
    assert (run["resources"], run["distribution"]) == ({"instance_count": 2},
                                                       {"type": "pytorch", "process_count_per_instance": 8})

    assert main(["plan", "--stack", "mine", "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)["stacks"][0]
    assert summary["policy"]["mandatory_failures"] == 0
    assert summary["runs"] == ["ddp-train", "fabric-check-gpu-h100"]


def test_init_without_the_sample_workloads_writes_the_starter_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    monkeypatch.chdir(project)
    assert main(["init", "--stack", "t", "--sku", "Standard_NC24ads_A100_v4"]) == 0
    assert capsys.readouterr().out == "Wrote Pulumi.t.yaml and src/train.py.\nNext: amlgpu plan --stack t\n"
    from stack.project import load_stack

    (run,) = load_stack("t", project).config.jobs  # one node without InfiniBand: no fabric check
    assert (run.code, run.command, run.resources.instance_count) == ("src", "python train.py", 1)
    compile((project / "src" / "train.py").read_text(), "train.py", "exec")


def test_init_states_the_upload_path_it_is_given(bare_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "mine", "--operator-ip-range", "203.0.113.7",
                 "--operator-ip-range", "198.51.100.0/24"]) == 0
    config = yaml.safe_load((bare_project / "Pulumi.mine.yaml").read_text())["config"]
    assert config[f"{NS}:network"]["operator_ip_ranges"] == ["203.0.113.7", "198.51.100.0/24"]
    assert main(["init", "--stack", "other"]) == 0
    text = (bare_project / "Pulumi.other.yaml").read_text()
    assert "operator_ip_ranges" not in yaml.safe_load(text)["config"][f"{NS}:network"]
    assert "operator_ip_ranges: [<address or CIDR>]" in text  # said where to put one, as a comment


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stack", "dev"], "error: --stack: Pulumi.dev.yaml exists; give --force to replace it, or choose another "
                             "--stack\n"),
        (["--stack", "x", "--operator-ip-range", "10.1.0.0/16"],
         "error: --operator-ip-range: '10.1.0.0/16' is a private (RFC 1918) range: storage firewall rules take "
         "public addresses; a machine inside the network reaches the storage through its private endpoint and "
         "needs no rule\n"),
        (["--stack", "x", "--operator-ip-range", "203.0.113.7/32"],
         "error: --operator-ip-range: '203.0.113.7/32': storage firewall rules take no /31 or /32 range; give the "
         "address itself (203.0.113.7)\n"),
        (["--stack", "x", "--operator-ip-range", "2001:db8::1"],
         "error: --operator-ip-range: '2001:db8::1': storage firewall rules take IPv4 addresses only\n"),
        (["--stack", "x", "--sku", "Standard_ND96isr_MI300X_v5"],
         "error: --sku: Standard_ND96isr_MI300X_v5 has MI300X GPUs (ROCm): init writes a CUDA environment; start "
         "from an NVIDIA size and change the environment (docs/frameworks.md)\n"),
        (["--stack", "x", "--sku", "Standard_NC24r"], "error: --sku: Standard_NC24r is retired (retired): choose a "
                                                      "current size\n"),
        (["--stack", "x", "--nodes", "0"], "error: --nodes: --nodes 0: give 1 to 64 nodes\n"),
        (["--stack", "x", "--region", "eastus3"], "error: --region: 'eastus3' is not an Azure region name: did you "
                                                  "mean eastus, westus3 or eastus2?\n"),
        (["--stack", "../x"], "error: --stack: stack name '../x' is invalid: 1-29 letters, digits, '_', '.' or '-'\n"),
        # Python's $ also matched before a final newline: init wrote src/ and failed on 'Pulumi.x\n.yaml'
        (["--stack", "x\n"], "error: --stack: stack name 'x\\n' is invalid: 1-29 letters, digits, '_', '.' or '-'\n"),
    ],
    ids=["exists", "private-range", "slash-32", "ipv6", "amd", "retired", "no-nodes", "region", "path", "newline"],
)
def test_init_refuses_bad_input_and_writes_nothing(bare_project: Path, capsys: pytest.CaptureFixture[str],
                                                   argv: list[str], message: str) -> None:
    (bare_project / "Pulumi.dev.yaml").write_text("# mine\n")
    before = sorted(p.name for p in bare_project.iterdir())
    assert main(["init", *argv]) == 2
    assert capsys.readouterr().err == message
    assert sorted(p.name for p in bare_project.iterdir()) == before
    assert (bare_project / "Pulumi.dev.yaml").read_text() == "# mine\n"


def test_init_unknown_size_suggests_one(bare_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "x", "--sku", "Standard_ND96isr_H100_v4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --sku: ") and "Standard_ND96isr_H100_v5" in err


# ------------------------------------------------------------------------------------------------ plan


def _public_cluster(config: dict[str, Any]) -> None:
    config[f"{NS}:clusters"][0]["enable_node_public_ip"] = True


def test_a_failed_gate_prints_each_mandatory_finding_and_counts_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = dev_config()
    _public_cluster(config)
    project = make_project(tmp_path / "project", config)
    monkeypatch.chdir(project)
    lines = (project / "Pulumi.test.yaml").read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if text.strip() == "enable_node_public_ip: true")

    assert main(["plan", "--stack", "test"]) == 1
    text = capsys.readouterr().out
    failures = text[text.index("Mandatory policy failures:\n"):].splitlines()
    assert failures[1] == (f"Pulumi.test.yaml:{line}  compute-no-node-public-ip  [high]  cluster 'gpu-a100': node "
                           "public IPs are enabled")
    assert failures[2] == "    fix: Set clusters[].enable_node_public_ip: false (the default)."
    summary = next(line for line in failures if line.startswith("1 mandatory failure"))
    assert re.fullmatch(r"1 mandatory failure \(exit 1\); \d+ advisory warnings? and the full report in policy.md\.",
                        summary)
    resources = int(re.search(r"^(\d+) Azure resources to create", text, re.M).group(1))  # type: ignore[union-attr]

    assert main(["plan", "--stack", "test", "--format", "json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["stacks"][0]["resources"] == resources
    assert failures[1] in err.splitlines()  # stdout is the JSON document; the failure still shows


def test_text_and_json_count_the_same_resources(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--stack", "prod", "--out", str(tmp_path / "a")]) == 0
    text = capsys.readouterr().out
    assert main(["plan", "--stack", "prod", "--format", "json", "--out", str(tmp_path / "b")]) == 0
    summary = json.loads(capsys.readouterr().out)["stacks"][0]
    assert f"\n{summary['resources']} Azure resources to create ({summary['protected']} protected" in text
    written = json.loads((tmp_path / "b" / "resources.json").read_text())
    assert summary["resources"] + summary["components"] == len(written)


# ------------------------------------------------------------------------------------------------ noise


def test_rendering_a_job_with_experimental_settings_says_nothing(caplog: pytest.LogCaptureFixture,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """QueueSettings is an experimental class in azure-ai-ml, which logs a notice on first use; and its
    marshmallow schemas raise deprecation warnings. Neither reaches the user."""
    from azure.ai.ml._utils import _experimental

    from jobs.render import job_yaml

    _experimental._warning_cache.clear()  # the notice is logged once per process: make this the first time
    spec = {"type": "command", "name": "x", "code": ".", "command": "echo", "environment": "azureml:e:1",
            "compute": "azureml:c", "resources": {"instance_count": 1},
            "distribution": {"type": "pytorch", "process_count_per_instance": 1},
            "queue_settings": {"job_tier": "spot"}}
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        text = job_yaml(spec, code_relative_to=ROOT, root=ROOT)
    assert "job_tier: spot" in text
    assert [r.getMessage() for r in caplog.records if "experimental" in r.getMessage()] == []
    assert [str(w.message) for w in caught if "marshmallow" in type(w.message).__module__] == []
    assert capsys.readouterr() == ("", "")


def test_the_package_metadata_builds_without_the_license_table_warning() -> None:
    """setuptools >= 77 deprecates `license = {text = ...}`; an SPDX string is the fix, not a filter."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert project["build-system"]["requires"] == ["setuptools>=77"]
