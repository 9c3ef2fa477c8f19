"""The first hour: broken stack files as a newcomer writes them, each answered with every problem at once.

Each case edits ``tests/fixtures/first-hour/base.yaml`` (a small valid stack, written out so line numbers
are visible) and asserts the whole of stderr of ``amlgpu plan``: one ``file:line:col  key  message`` line
per problem, in file order, then the count; exit 2, nothing on stdout, nothing written, and no secret
value quoted back. The cases are issue 18's (a typo beside a bad value, a missing ``config:`` wrapper,
the wrong namespace, CLI v2 keys at the wrong level, enum values in another case) and more from a
newcomer's walk-through (keys from ARM or job files, a token pasted into a list...).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from amlgpu.cli import main
from stack.config import build
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "first-hour" / "base.yaml"
BASE = FIXTURE.read_text(encoding="utf-8")
TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
"""A Hugging Face token's shape: it must never appear in any message."""


def edit(*changes: tuple[str, str]) -> str:
    """The base stack with each ``old`` text (which must be there) replaced by ``new``."""
    text = BASE
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    problems: tuple[str, ...]
    """Every line before the count, ``Pulumi.t.yaml:LINE:COL  KEY  MESSAGE``."""


RUN_COUNTS = ("      resources:\n        instance_count: 2\n      distribution:\n        type: pytorch\n"
              "      limits:\n        timeout: 3600\n")

CASES = [
    Case("typo-beside-a-bad-value",
         edit(("      max_instances: 2\n", "      min_instances: -1\n      max_instance: 2\n")), (
        "Pulumi.t.yaml:8:7  aml-gpu-training:clusters[0].min_instances  must be at least 0 (got -1)",
        "Pulumi.t.yaml:9:7  aml-gpu-training:clusters[0].max_instance  unknown key 'max_instance'; "
        "did you mean 'max_instances'?",
    )),
    Case("no-config-wrapper", "\n".join(line.removeprefix("  ") for line in BASE.splitlines()[1:]) + "\n", (
        "Pulumi.t.yaml:1:1  config  no 'config:' key, and 5 setting(s) at the top level (azure-native:location, "
        "aml-gpu-training:workspace, aml-gpu-training:clusters, aml-gpu-training:environments, "
        "aml-gpu-training:jobs): stack settings live under 'config:': add 'config:' as the first line and indent "
        "every setting below it",
    )),
    Case("setting-beside-config", BASE + "aml-gpu-training:waivers: []\n", (
        "Pulumi.t.yaml:25:1  aml-gpu-training:waivers  'aml-gpu-training:waivers' is at the top level of the "
        "file: indent it under the 'config:' key",
    )),
    Case("wrong-namespace", edit(("  aml-gpu-training:clusters:", "  aml-gpu:clusters:")), (
        "Pulumi.t.yaml:5:3  aml-gpu:clusters  'aml-gpu:clusters' is in namespace 'aml-gpu', but this project "
        "reads its settings from 'aml-gpu-training' (the project name in Pulumi.yaml): write "
        "'aml-gpu-training:clusters'",
    )),
    Case("no-namespace", edit(("  aml-gpu-training:workspace:", "  workspace:")), (
        "Pulumi.t.yaml:3:3  config.workspace  config keys are 'namespace:key': write 'aml-gpu-training:workspace'",
    )),
    Case("location-in-the-project-namespace", edit(("  azure-native:location:", "  aml-gpu-training:location:")), (
        "Pulumi.t.yaml:2:3  aml-gpu-training:location  unknown key 'location': the region is set with "
        "azure-native:location (or workspace.location), not aml-gpu-training:location",
    )),
    Case("cli-v2-keys-at-run-level", edit((RUN_COUNTS, "      instance_count: 2\n      timeout: 3600\n"
                                           "      distribution:\n        type: pytorch\n"
                                           "        process_count_per_instance: 8\n")), (
        "Pulumi.t.yaml:19:7  aml-gpu-training:jobs[0].instance_count  'instance_count' belongs in the run's "
        "'resources', not here: write resources: {instance_count: 2} (at the level of command and compute)",
        "Pulumi.t.yaml:20:7  aml-gpu-training:jobs[0].timeout  'timeout' belongs in the run's 'limits', not "
        "here: write limits: {timeout: 3600} (at the level of command and compute)",
    )),
    Case("process-count-under-resources",
         edit(("        instance_count: 2\n", "        instance_count: 2\n        process_count_per_instance: 8\n")), (
        "Pulumi.t.yaml:21:9  aml-gpu-training:jobs[0].resources.process_count_per_instance  "
        "'process_count_per_instance' belongs in the run's 'distribution', not here: write distribution: "
        "{process_count_per_instance: 8} (at the level of command and compute)",
    )),
    Case("distribution-type-unknown", edit(("        type: pytorch", "        type: horovod")), (
        "Pulumi.t.yaml:21:7  aml-gpu-training:jobs[0].distribution  type must be one of 'pytorch', 'mpi', "
        "'tensorflow' (got \"horovod\")",
    )),
    Case("tier-unknown", edit(("      max_instances: 2\n", "      max_instances: 2\n      tier: spot\n")), (
        "Pulumi.t.yaml:9:7  aml-gpu-training:clusters[0].tier  must be 'dedicated' or 'low_priority' (got \"spot\")",
    )),
    Case("public-access-unknown", edit(("    name: mlw-first\n", "    name: mlw-first\n"
                                                                "    public_network_access: private_only\n")), (
        "Pulumi.t.yaml:5:5  aml-gpu-training:workspace.public_network_access  must be 'Disabled' or 'Enabled' "
        "(got \"private_only\")",
    )),
    Case("environment-variables-as-a-list-with-a-token",
         edit(("      compute: gpu-a100\n", f"      compute: gpu-a100\n      environment_variables:\n"
                                           f"        - HF_TOKEN={TOKEN}\n")), (
        "Pulumi.t.yaml:19:7  aml-gpu-training:jobs[0].environment_variables  expected a mapping (key: value) "
        "(got a list of 1 item)",
    )),
    Case("token-as-a-list-input", edit(("      compute: gpu-a100\n", f"      compute: gpu-a100\n      inputs:\n"
                                                                  f"        hf_token: [{TOKEN}]\n")), (
        "Pulumi.t.yaml:20:9  aml-gpu-training:jobs[0].inputs.hf_token  expected true or false or a whole number "
        "or a number or a string or a mapping (key: value) (got a list of 1 item)",
    )),
    Case("dangling-references", edit(("      environment: acpt-pytorch\n      compute: gpu-a100\n",
                                      "      environment: acpt\n      compute: gpu-h100\n")), (
        "Pulumi.t.yaml:17:7  aml-gpu-training:jobs[0].environment  run 'ddp': unknown environment 'acpt'; known: "
        "acpt-pytorch (or give a full azureml: reference, file: or an inline environment)",
        "Pulumi.t.yaml:18:7  aml-gpu-training:jobs[0].compute  run 'ddp': unknown cluster 'gpu-h100'; did you "
        "mean 'gpu-a100'?",
    )),
    Case("duplicate-cluster-and-dangling-references",
         edit(("      max_instances: 2\n", "      max_instances: 2\n    - name: GPU-A100\n"
                                          "      size: Standard_ND96asr_v4\n      max_instances: 2\n"),
              ("      environment: acpt-pytorch\n      compute: gpu-a100\n",
               "      environment: acpt\n      compute: gpu-h100\n")), (
        "Pulumi.t.yaml:9:7  aml-gpu-training:clusters[1].name  duplicate name 'GPU-A100'",
        "Pulumi.t.yaml:20:7  aml-gpu-training:jobs[0].environment  run 'ddp': unknown environment 'acpt'; known: "
        "acpt-pytorch (or give a full azureml: reference, file: or an inline environment)",
        "Pulumi.t.yaml:21:7  aml-gpu-training:jobs[0].compute  run 'ddp': unknown cluster 'gpu-h100'; did you "
        "mean 'gpu-a100'?",
    )),
    Case("arm-vocabulary", edit(("      size: Standard_ND96asr_v4\n      max_instances: 2\n",
                                 "      vm_size: Standard_ND96asr_v4\n      max_nodes: 2\n")), (
        "Pulumi.t.yaml:7:7  aml-gpu-training:clusters[0].vm_size  unknown key 'vm_size': this stack file calls "
        "it 'size'",
        "Pulumi.t.yaml:8:7  aml-gpu-training:clusters[0].max_nodes  unknown key 'max_nodes': this stack file "
        "calls it 'max_instances'",
    )),
    Case("count-as-a-string", edit(("        instance_count: 2\n", '        instance_count: "2"\n')), (
        "Pulumi.t.yaml:20:9  aml-gpu-training:jobs[0].resources.instance_count  expected a whole number (got \"2\")",
    )),
    Case("runs-not-jobs", edit(("  aml-gpu-training:jobs:", "  aml-gpu-training:runs:")), (
        "Pulumi.t.yaml:13:3  aml-gpu-training:runs  unknown key 'runs': this stack file calls it 'jobs'",
    )),
    Case("job-file-keys-pasted", edit(("    - name: ddp\n", "    - name: ddp\n      $schema: https://azuremlschemas."
                                                            "azureedge.net/latest/commandJob.schema.json\n"
                                                            "      type: command\n")), (
        "Pulumi.t.yaml:15:7  aml-gpu-training:jobs[0].$schema  unknown key '$schema': stack files are checked "
        "against schema/stack.schema.json, not a job schema: remove it",
        "Pulumi.t.yaml:16:7  aml-gpu-training:jobs[0].type  unknown key 'type': every declared run is an Azure "
        "ML command job (`type: command` is implied): remove it",
    )),
    Case("tab-indentation", edit(("    name: mlw-first\n", "    name: mlw-first\n\tsku: Basic\n")), (
        "Pulumi.t.yaml:5:1  invalid YAML: found character '\\t' that cannot start any token",
    )),
    Case("command-as-a-list", edit(("      command: python train.py --epochs 1\n",
                                    "      command: [python, train.py]\n")), (
        "Pulumi.t.yaml:16:7  aml-gpu-training:jobs[0].command  expected a string (got a list of 2 items)",
    )),
    Case("missing-keys", edit(("      size: Standard_ND96asr_v4\n      max_instances: 2\n", ""),
                              ("      command: python train.py --epochs 1\n", "")), (
        "Pulumi.t.yaml:6:7  aml-gpu-training:clusters[0].size  required key is missing",
        "Pulumi.t.yaml:6:7  aml-gpu-training:clusters[0].max_instances  required key is missing",
        "Pulumi.t.yaml:12:7  aml-gpu-training:jobs[0].command  required key is missing",
    )),
]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    (folder / "src").mkdir()
    (folder / "src" / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(folder)
    return folder


def test_the_base_stack_is_valid(project: Path) -> None:
    from stack.project import load_stack

    (project / "Pulumi.t.yaml").write_text(BASE)
    assert [run.name for run in load_stack("t", project).config.jobs] == ["ddp"]  # no workload: no fabric check


def test_at_least_fifteen_cases() -> None:
    assert len(CASES) >= 15
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_problem_at_once_in_file_order(case: Case, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "Pulumi.t.yaml").write_text(case.text, encoding="utf-8")

    code = main(["plan", "--stack", "t"])

    out, err = capsys.readouterr()
    count = len(case.problems)
    summary = f"error: {count} problem{'s' if count != 1 else ''} in Pulumi.t.yaml"
    assert err == "\n".join([*case.problems, summary]) + "\n"
    assert (code, out) == (2, "")
    assert not (project / "build").exists()
    assert TOKEN not in err and "Traceback" not in err
    positions = [re.match(r"Pulumi\.t\.yaml:(\d+):(\d+)", p) for p in case.problems]
    lines = [(int(m.group(1)), int(m.group(2))) for m in positions if m]
    assert len(lines) == len(positions) and lines == sorted(lines)


# ------------------------------------------------------------------------------------------------ what is accepted

ACCEPTED = [
    # (the edit, the key path, the canonical value the model holds): what azure-ai-ml's casing transforms accept
    (("        type: pytorch", "        type: PyTorch"), ("jobs", 0, "distribution", "type"), "pytorch"),
    (("        type: pytorch", "        type: MPI"), ("jobs", 0, "distribution", "type"), "mpi"),
    (("      max_instances: 2\n", "      max_instances: 2\n      tier: Dedicated\n"), ("clusters", 0, "tier"),
     "dedicated"),
    (("      max_instances: 2\n", "      max_instances: 2\n      tier: LOW_PRIORITY\n"), ("clusters", 0, "tier"),
     "low_priority"),
    (("    name: mlw-first\n", "    name: mlw-first\n    public_network_access: enabled\n"),
     ("workspace", "public_network_access"), "Enabled"),
    (("    name: mlw-first\n", "    name: mlw-first\n    identity:\n      type: SystemAssigned\n"),
     ("workspace", "identity", "type"), "system_assigned"),
    (("      compute: gpu-a100\n", "      compute: gpu-a100\n      identity:\n        type: AMLToken\n"),
     ("jobs", 0, "identity", "type"), "aml_token"),
    (("      compute: gpu-a100\n", "      compute: gpu-a100\n      queue_settings:\n        job_tier: Spot\n"),
     ("jobs", 0, "queue_settings", "job_tier"), "spot"),
]


@pytest.mark.parametrize(("change", "path", "canonical"), ACCEPTED,
                         ids=[a[0][1].split(":")[-1].strip() for a in ACCEPTED])
def test_enum_values_azure_ml_accepts_in_another_case_are_accepted(
    project: Path, change: tuple[str, str], path: tuple[str | int, ...], canonical: str
) -> None:
    import yaml

    config = yaml.safe_load(edit(change))["config"]
    values = {k.removeprefix("aml-gpu-training:"): v for k, v in config.items() if k.startswith("aml-gpu-training:")}
    model = build(values, location="westeurope", file="Pulumi.t.yaml", root=project)
    value: object = model
    for part in path:
        value = value[part] if isinstance(part, int) else getattr(value, part)  # type: ignore[index]
    assert value == canonical


# ------------------------------------------------------------------------------------------------ the docs' example


def test_the_quickstarts_error_transcript_is_what_plan_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """docs/quickstart.md shows the dev stack with three mistakes; the transcript is the real output."""
    from tests.conftest import copy_project_folders

    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    transcript = re.search(r"```console\n\$ amlgpu plan --stack dev\n(.*?)```", quickstart, re.S)
    assert transcript is not None
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    copy_project_folders(project)
    text = (ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8")
    for old, new in (("      min_instances: 0\n", "      min_instances: -1\n"),
                     ("      max_instances: 2\n", "      max_instance: 2\n"),
                     ("      limits:\n        timeout: 3600\n", "      timeout: 3600\n")):
        assert old in text
        text = text.replace(old, new, 1)
    (project / "Pulumi.dev.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "dev"]) == 2
    assert capsys.readouterr().err == transcript.group(1)


@pytest.mark.parametrize("value", [["dedicated", "dedicated"], {"a": 1}, 3, None, True])
def test_an_enum_of_the_wrong_type_is_a_message_not_a_crash(project: Path, value: object) -> None:
    """Found by tests/reliability/test_properties.py: the casing transform met a list."""
    import yaml

    from kernel.errors import ConfigError

    config = yaml.safe_load(BASE)["config"]
    values = {k.removeprefix("aml-gpu-training:"): v for k, v in config.items() if k.startswith("aml-gpu-training:")}
    values["clusters"][0]["tier"] = value
    with pytest.raises(ConfigError) as caught:
        build(values, location="westeurope", file="Pulumi.t.yaml", root=project)
    assert caught.value.key == "aml-gpu-training:clusters[0].tier"
    assert caught.value.message.startswith("must be 'dedicated' or 'low_priority' (got ")
