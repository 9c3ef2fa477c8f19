"""What ``amlgpu plan`` prints for one stack: the findings by severity (mandatory with their fix, then
advisory, capped, the rest counted towards policy.md), the waivers in effect and those expired, and the cost
at list price with what the table cannot price."""

from __future__ import annotations

import datetime as dt
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from planning.render import ABBREVIATIONS, advisory_text, first_sentence
from planning.service import PlanOptions, plan_stack
from policies.catalogue import RULES
from policies.rule import Rule
from stack.project import load_stack
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.policies.test_baseline import baseline, fingerprint_of

REASON = "ticket ML-42: the research team needs this until the March migration"


def _plan_text(project: Path, stack: str, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", stack]) in (0, 1)
    return capsys.readouterr().out


def test_the_dev_plan_names_every_advisory_finding_and_its_cost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", dev_config(), stack="dev")
    out = _plan_text(project, "dev", monkeypatch, capsys)
    result = plan_stack(load_stack("dev", project), PlanOptions(project / "build" / "again"))
    advisory = [f for f in result.report.findings if f.enforcement == "advisory" and not f.waived]
    assert 0 < len(advisory) <= 10
    section = out.split("Advisory findings (reported, not blocking; fixes in build/dev/policy.md):\n", 1)[1]
    listed = section.split("\n\n", 1)[0].splitlines()
    assert len(listed) == len(advisory)
    for line, finding in zip(listed, advisory, strict=True):
        assert re.fullmatch(rf"  Pulumi\.dev\.yaml:\d+  {finding.rule.id}  \[{finding.rule.severity}\]  .+", line)
    severities = [line.split("[", 1)[1].split("]", 1)[0] for line in listed]
    assert severities == sorted(severities, key=["critical", "high", "medium", "low"].index)  # most severe first
    # 2 x 35.357 (Standard_ND96asr_v4, westeurope) + 1 x 0.272 (Standard_DS3_v2, westeurope), the pricing radar's
    # items of 2026-08-22; each cluster's ceiling rounded to cents, as cost.json has them.
    assert ("Cost at list price: 70.98 USD/h with every cluster at max nodes (gpu-a100 2 x 35.36, image-builder 1 x "
            "0.27), 0.00 USD/month idle floor (cost.json).") in out
    assert "Not priced" not in out


def test_advisory_findings_past_the_cap_are_counted_towards_policy_md(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", dev_config())
    result = plan_stack(load_stack("test", project), PlanOptions(project / "build"))
    report = result.report
    lines = advisory_text(report, "Pulumi.test.yaml", result.stack.file.line_of, shown=3)
    assert len(lines) == 1 + 3 + 1
    assert lines[-1] == f"  {report.advisory_failures - 3} more in policy.md."


def test_waivers_in_effect_and_expired_ones_are_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_config()
    today = dt.date.today()
    config[f"{NS}:waivers"] = [
        # a finding the dev stack keeps (its acpt-pytorch is a build context now: no image digest finding)
        {"rule": "storage-replication-redundant", "resource": "mlw-gpu-dev", "reason": REASON,
         "expires": (today + dt.timedelta(days=20)).isoformat(),
         "fingerprint": fingerprint_of(baseline(), "storage-replication-redundant", "mlw-gpu-dev")},
        {"rule": "workspace-customer-managed-key", "resource": "mlw-gpu-dev", "reason": REASON,
         "expires": (today - dt.timedelta(days=1)).isoformat()},
    ]
    out = _plan_text(make_project(tmp_path / "project", config), "test", monkeypatch, capsys)
    in_effect = out.split("Waivers in effect:\n", 1)[1].splitlines()
    assert in_effect[0] == (f"  storage-replication-redundant for mlw-gpu-dev until {(today + dt.timedelta(days=20))} "
                            f"(stack file, 1 finding waived): {REASON}")
    assert "workspace-customer-managed-key for mlw-gpu-dev until" not in out
    expired = out.split("Expired waivers (no longer applied: renew or remove them):\n", 1)[1].splitlines()
    assert expired[0] == (f"  waivers[1]: workspace-customer-managed-key for mlw-gpu-dev expired on "
                          f"{today - dt.timedelta(days=1)}")
    assert "workspace-customer-managed-key" in out.split("Advisory findings", 1)[1]  # no longer waived


def test_a_stack_in_a_priced_region_shows_its_figure_and_what_is_not_priced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", {}, stack="prod")
    shutil.copy(ROOT / "Pulumi.prod.yaml", project / "Pulumi.prod.yaml")
    out = _plan_text(project, "prod", monkeypatch, capsys)
    cost = [line for line in out.splitlines() if line.startswith("Cost at list price")]
    assert cost == ["Cost at list price: at least 813.01 USD/h with every cluster at max nodes (a100-spot 4 x 6.55, "
                    "h100 8 x 98.32, image-builder 1 x 0.23), 0.00 USD/month idle floor (cost.json)."]
    assert "  Not priced: h200 (Standard_ND96isr_H200_v5 in eastus2, dedicated)." in out


def test_a_fully_priced_stack_shows_one_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    config: dict[str, Any] = dev_config()
    config["azure-native:location"] = "eastus"
    out = _plan_text(make_project(tmp_path / "project", config), "test", monkeypatch, capsys)
    # 2 x 27.197 (Standard_ND96asr_v4, eastus) + 1 x 0.293 (Standard_DS3_v2, eastus), SkyPilot's rows; each
    # cluster's ceiling rounded to cents, as cost.json has them.
    assert ("Cost at list price: 54.68 USD/h with every cluster at max nodes (gpu-a100 2 x 27.20, image-builder 1 x "
            "0.29), 0.00 USD/month idle floor (cost.json).") in out
    assert "Not priced" not in out


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.id)
def test_every_fix_line_is_a_whole_sentence(rule: Rule) -> None:
    # A fix printed under a finding is its remediation's first sentence: never cut at "(e.g." or inside brackets.
    line = first_sentence(rule.remediation)
    assert line.count("(") == line.count(")") and not line.endswith(ABBREVIATIONS), line
    assert rule.remediation.replace("\n", " ").startswith(line[:40])


def test_the_first_sentence_ends_at_a_full_stop_outside_brackets() -> None:
    assert first_sentence("Use a size (e.g. ND96. Or another). Then plan.") == "Use a size (e.g. ND96. Or another)."
    sentence = "Set it, e.g. 32g on an 8-GPU node; or not."
    assert first_sentence(f"{sentence} More.") == sentence
    assert first_sentence("One sentence only") == "One sentence only"
