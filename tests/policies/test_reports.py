"""What the gate writes: ``policy.sarif`` (validated against the official SARIF 2.1.0 schema, vendored
from the OASIS errata01 release) and ``policy.md`` (the PR comment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from policies.catalogue import RULES
from policies.engine import Report
from policies.sarif import to_sarif
from policies.summary import markdown
from stack.stackfile import StackFile, read
from tests.policies.test_baseline import Baseline, baseline, fingerprint_of

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "sarif-schema-2.1.0.json").read_text())


def failing(b: Baseline) -> Baseline:
    """Two mandatory findings, one advisory, one waived, one expired waiver."""
    b.run("ddp-per-process")["spec"]["distribution"]["process_count_per_instance"] = 4  # waived below
    b.run("torchrun-per-node")["spec"]["environment_variables"]["MASTER_PORT"] = "29500"
    b.inputs("azure-native:machinelearningservices:Compute", "gpu-a100")["properties"]["properties"][
        "enableNodePublicIp"] = True
    idle = fingerprint_of(b, "run-gpus-left-idle")
    b.config["aml-gpu-training:waivers"] = [
        {"rule": "run-gpus-left-idle", "resource": "ddp-per-process", "reason": "Two GPUs per process | pipeline",
         "expires": "2026-07-31", "fingerprint": idle},
        {"rule": "compute-scale-to-zero", "resource": "gpu-a100", "reason": "a warm pool for the launch demo",
         "expires": "2026-01-31"},
    ]
    return b


def _names_first(value: Any) -> Any:
    """Entries with their ``name`` key first, as people write stack files."""
    if isinstance(value, dict):
        ordered = {"name": value["name"]} if "name" in value else {}
        return {**ordered, **{k: _names_first(v) for k, v in value.items() if k != "name"}}
    if isinstance(value, list):
        return [_names_first(v) for v in value]
    return value


@pytest.fixture
def stack_file(tmp_path: Path) -> tuple[StackFile, Report]:
    b = failing(baseline())
    path = tmp_path / "Pulumi.baseline.yaml"
    path.write_text(yaml.safe_dump({"config": _names_first(b.config)}, sort_keys=False))
    return read(path), b.evaluate()


def sarif_of(stack_file: tuple[StackFile, Report]) -> dict[str, Any]:
    file, report = stack_file
    return to_sarif(report, file.display, file.line_of)


def test_sarif_validates_against_the_sarif_2_1_0_schema(stack_file: tuple[StackFile, Report]) -> None:
    log = sarif_of(stack_file)
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    assert log["version"] == "2.1.0"


def test_sarif_rules_carry_the_metadata(stack_file: tuple[StackFile, Report]) -> None:
    rules = sarif_of(stack_file)["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.id for r in RULES]
    first = rules[0]
    assert set(first) >= {"id", "name", "shortDescription", "fullDescription", "help", "helpUri", "properties"}
    assert first["properties"]["severity"] in ("critical", "high", "medium", "low")
    assert first["properties"]["enforcement"] in ("mandatory", "advisory")


def test_sarif_results_levels_suppressions_and_locations(stack_file: tuple[StackFile, Report]) -> None:
    file, _ = stack_file
    results = sarif_of(stack_file)["runs"][0]["results"]
    by_rule = {r["ruleId"]: r for r in results}
    assert by_rule["run-launcher-variables-overridden"]["level"] == "error"
    assert by_rule["compute-no-node-public-ip"]["level"] == "error"
    assert by_rule["storage-replication-redundant"]["level"] == "warning"  # an advisory the dev stack keeps
    waived = by_rule["run-gpus-left-idle"]
    assert waived["level"] == "note"
    assert waived["suppressions"] == [{"kind": "external", "status": "accepted",
                                       "justification": "Two GPUs per process | pipeline (until 2026-07-31)"}]
    located = by_rule["compute-no-node-public-ip"]["locations"][0]
    assert located["physicalLocation"]["artifactLocation"]["uri"] == "Pulumi.baseline.yaml"
    assert located["physicalLocation"]["region"]["startLine"] == file.line_of(("aml-gpu-training:clusters", 0))
    assert located["logicalLocations"][0]["fullyQualifiedName"] == "cluster/gpu-a100"
    assert "cluster 'gpu-a100'" in by_rule["compute-no-node-public-ip"]["message"]["text"]
    text = (file.path.read_text().splitlines())[located["physicalLocation"]["region"]["startLine"] - 1]
    assert "gpu-a100" in text
    run_line = by_rule["run-launcher-variables-overridden"]["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert "environment_variables" in file.path.read_text().splitlines()[run_line - 1]


def test_sarif_reports_expired_waivers(stack_file: tuple[StackFile, Report]) -> None:
    notes = sarif_of(stack_file)["runs"][0]["invocations"][0]["toolConfigurationNotifications"]
    assert [n["descriptor"]["id"] for n in notes] == ["expired-waiver"]
    assert "compute-scale-to-zero" in notes[0]["message"]["text"]


def test_sarif_is_deterministic(stack_file: tuple[StackFile, Report]) -> None:
    first = json.dumps(sarif_of(stack_file), sort_keys=True)
    assert first == json.dumps(sarif_of(stack_file), sort_keys=True)
    assert "2026-" not in first.replace("2026-01-31", "").replace("2026-07-31", "")  # only the waivers' own dates


def test_markdown_summary_for_a_failing_stack(stack_file: tuple[StackFile, Report]) -> None:
    _, report = stack_file
    text = markdown(report, "baseline")
    assert text.splitlines()[0] == "## ❌ Policy check failed for stack `baseline`: 2 mandatory findings"
    assert "| Mandatory failures (block) | 2 |" in text and "| Waived | 1 |" in text
    row = next(line for line in text.splitlines() if "run-launcher-variables-overridden" in line)
    assert "run 'torchrun-per-node'" in row and "sets MASTER_PORT" in row and "Remove the variable" in row
    assert "### Waived" in text and "Two GPUs per process \\| pipeline" in text
    assert "### Expired waivers" in text and "`compute-scale-to-zero` for `gpu-a100`" in text


def test_markdown_summary_for_a_passing_stack() -> None:
    text = markdown(baseline().evaluate(), "dev")
    assert text.startswith("## ✅ Policy check passed for stack `dev`: no mandatory finding")
    assert "### Waived" not in text
