"""The offline gate: waivers, pack config, deterministic reports, and the shipped stacks passing."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pytest

from kernel.errors import ConfigError
from policies.packconfig import load
from tests import cli
from tests.conftest import ROOT, shipped_stack_names
from tests.policies.test_baseline import TODAY, Baseline, baseline, fingerprint_of


def with_waivers(b: Baseline, *waivers: dict[str, Any]) -> Baseline:
    b.config["aml-gpu-training:waivers"] = list(waivers)
    return b


def idle_gpus(b: Baseline) -> Baseline:
    """A mandatory finding to waive: ddp-per-process uses 4 of its node's 8 GPUs."""
    b.run("ddp-per-process")["spec"]["distribution"]["process_count_per_instance"] = 4
    return b


WAIVER = {"rule": "run-gpus-left-idle", "resource": "ddp-per-process",
          "reason": "Pipeline-parallel model: each process drives two GPUs.", "expires": "2026-07-31",
          "fingerprint": fingerprint_of(idle_gpus(baseline()), "run-gpus-left-idle")}


def test_an_active_waiver_excuses_the_finding_but_keeps_it_counted() -> None:
    report = with_waivers(idle_gpus(baseline()), WAIVER).evaluate()
    waived = [f for f in report.findings if f.waived]
    assert [(f.rule.id, f.owner.name, f.level) for f in waived] == [("run-gpus-left-idle", "ddp-per-process", "note")]
    assert waived[0].waiver is not None and waived[0].waiver.reason.startswith("Pipeline-parallel")
    assert report.mandatory_failures == 0 and report.waived == 1 and report.passed
    assert report.unused_waivers == () and report.expired_waivers == ()


def test_an_expired_waiver_no_longer_applies_and_is_reported() -> None:
    report = with_waivers(idle_gpus(baseline()), {**WAIVER, "expires": "2026-05-31"}).evaluate(today=TODAY)
    assert report.mandatory_failures == 1 and report.waived == 0
    assert [(i, w.rule) for i, w in report.expired_waivers] == [(0, "run-gpus-left-idle")]


def test_a_waiver_is_active_through_its_expiry_day() -> None:
    report = with_waivers(idle_gpus(baseline()), {**WAIVER, "expires": TODAY.isoformat()}).evaluate(today=TODAY)
    assert report.waived == 1


def test_a_waiver_with_nothing_to_excuse_is_reported_unused() -> None:
    report = with_waivers(baseline(), WAIVER).evaluate()
    assert [(i, w.resource) for i, w in report.unused_waivers] == [(0, "ddp-per-process")]


@pytest.mark.parametrize(("field", "value", "key", "says"), [
    ("rule", "run-gpus-idle", "aml-gpu-training:waivers[1].rule", "did you mean 'run-gpus-left-idle'"),
    ("resource", "ddp-per-proces", "aml-gpu-training:waivers[1].resource", "did you mean 'ddp-per-process'"),
])
def test_a_waiver_naming_an_unknown_rule_or_resource_is_an_error(field: str, value: str, key: str, says: str) -> None:
    b = with_waivers(baseline(), WAIVER, {**WAIVER, field: value})
    with pytest.raises(ConfigError) as err:
        b.evaluate()
    assert err.value.key == key and says in err.value.message


def test_waivers_may_name_the_workspace_network_and_image_builder() -> None:
    names = ("mlw-gpu-dev", "network", "image-builder", "gpu-a100", "tf-gpu")
    reason = "reviewed by the platform team"
    waivers = [{"rule": "compute-scale-to-zero", "resource": n, "reason": reason, "expires": "2026-08-01"}
               for n in names]
    assert len(with_waivers(baseline(), *waivers).evaluate().unused_waivers) == len(names)


def test_pack_config_changes_enforcement_and_parameters() -> None:
    b = idle_gpus(baseline())
    assert b.evaluate().mandatory_failures == 1
    advisory = b.evaluate(pack_config={"run-gpus-left-idle": "advisory"})
    assert advisory.mandatory_failures == 0 and advisory.advisory_failures >= 1
    disabled = b.evaluate(pack_config={"run-gpus-left-idle": {"enforcementLevel": "disabled"}})
    assert not [f for f in disabled.findings if f.rule.id == "run-gpus-left-idle"]
    assert disabled.counts["rules_disabled"] == 1
    capped = baseline().evaluate(pack_config={"compute-max-nodes": {"enforcementLevel": "mandatory",
                                                                    "max_nodes_per_cluster": 1}})
    assert [(f.rule.id, f.owner.name, f.enforcement) for f in capped.findings if f.rule.id == "compute-max-nodes"] == [
        ("compute-max-nodes", "gpu-a100", "mandatory")]
    only_h100 = {"compute-allowed-sizes": {"allowed_sizes": ["Standard_ND96isr_H100_v5"]}}
    narrowed = baseline().evaluate(pack_config=only_h100)
    assert [f.owner.name for f in narrowed.findings if f.rule.id == "compute-allowed-sizes"] == ["gpu-a100"]
    everything = b.evaluate(pack_config={"all": "advisory"})
    assert everything.mandatory_failures == 0


@pytest.mark.parametrize(("config", "key", "says"), [
    ({"run-gpu-left-idle": "advisory"}, "run-gpu-left-idle", "did you mean 'run-gpus-left-idle'"),
    ({"compute-max-nodes": {"max_nodes": 4}}, "compute-max-nodes.max_nodes", "no parameter 'max_nodes'"),
    ({"compute-max-nodes": {"max_nodes_per_cluster": "four"}}, "compute-max-nodes.max_nodes_per_cluster",
     "non-negative integer"),
    ({"compute-max-nodes": "blocking"}, "compute-max-nodes", "not one of mandatory, advisory, disabled"),
    ({"all": {"max_nodes_per_cluster": 4}}, "all.max_nodes_per_cluster", "only enforcementLevel"),
])
def test_bad_pack_config_is_an_error_naming_the_key(config: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        baseline().evaluate(pack_config=config)
    assert err.value.key == key and says in err.value.message


def test_pack_config_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"compute-max-nodes": {"max_nodes_per_cluster": 8}}')
    assert load(path) == {"compute-max-nodes": {"max_nodes_per_cluster": 8}}
    path.write_text("{nope")
    with pytest.raises(ConfigError) as err:
        load(path)
    assert err.value.file == "policy.json" and "not valid JSON" in err.value.message


def test_findings_are_sorted_the_same_whatever_the_plan_order() -> None:
    b = idle_gpus(baseline())
    b.one("azure-native:storage:StorageAccount", None)["inputs"]["minimumTlsVersion"] = "TLS1_0"
    expected = [(f.rule.id, f.owner.name, f.message) for f in b.evaluate().findings]
    random.Random(7).shuffle(b.resources)
    assert [(f.rule.id, f.owner.name, f.message) for f in b.evaluate().findings] == expected
    # Mandatory first, then by severity (both are high here), then by rule id.
    assert [e[0] for e in expected[:2]] == ["run-gpus-left-idle", "storage-minimum-tls-1-2"]


def test_findings_point_at_the_declaration_in_the_stack_file() -> None:
    b = idle_gpus(baseline())
    b.inputs("azure-native:machinelearningservices:Compute", "gpu-a100")["properties"]["properties"][
        "enableNodePublicIp"] = True
    by_rule = {f.rule.id: f.location for f in b.evaluate().findings}
    assert by_rule["run-gpus-left-idle"] == ("aml-gpu-training:jobs", 0, "distribution", "process_count_per_instance")
    assert by_rule["compute-no-node-public-ip"] == ("aml-gpu-training:clusters", 0, "enable_node_public_ip")


@pytest.mark.parametrize("stack", shipped_stack_names())
@pytest.mark.slow
def test_shipped_stacks_have_no_mandatory_finding(stack: str, tmp_path: Path) -> None:
    result = cli.amlgpu(ROOT, "plan", "--stack", stack, "--out", str(tmp_path), "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    sarif = json.loads((tmp_path / "policy.sarif").read_text())
    errors = [r["message"]["text"] for r in sarif["runs"][0]["results"] if r["level"] == "error"]
    assert errors == []
    assert "✅ Policy check passed" in (tmp_path / "policy.md").read_text()


def test_evaluation_date_defaults_to_today() -> None:
    report = with_waivers(idle_gpus(baseline()), {**WAIVER, "expires": "2000-01-01"}).evaluate(today=dt.date.today())
    assert len(report.expired_waivers) == 1
