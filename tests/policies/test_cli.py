"""``amlgpu policy list`` and ``amlgpu policy docs`` as a user runs them, and the docs page kept in sync."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from amlgpu.cli import main
from policies.catalogue import RULES
from policies.docs import render
from tests import cli
from tests.conftest import ROOT


def amlgpu(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return cli.amlgpu(cwd, *args, timeout=120)


def test_policy_list_table_fits_100_columns() -> None:
    result = amlgpu("policy", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0].split() == ["RULE", "SEVERITY", "ENFORCEMENT"]
    listed = [line.split()[0] for line in lines[2:] if line and not line.startswith(" ")][:len(RULES)]
    assert listed == [r.id for r in RULES]
    at = next(i for i, line in enumerate(lines) if line.startswith("run-gpus-left-idle "))
    assert lines[at].split()[1:] == ["high", "mandatory"]
    assert lines[at + 1].startswith("    ")
    assert "(distributed runs)" in " ".join(lines[at + 1:at + 3])
    mandatory = sum(1 for r in RULES if r.enforcement == "mandatory")
    assert lines[-1] == f"{len(RULES)} rules: {mandatory} mandatory, {len(RULES) - mandatory} advisory, 0 disabled."


def test_policy_list_wide_puts_each_rule_on_one_line() -> None:
    result = amlgpu("policy", "list", "--wide")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["RULE", "SEVERITY", "ENFORCEMENT", "APPLIES", "TO", "TITLE"]
    assert [line.split()[0] for line in lines[1:len(RULES) + 1]] == [r.id for r in RULES]
    row = next(line for line in lines if line.startswith("run-gpus-left-idle "))
    assert row.split()[1:4] == ["high", "mandatory", "distributed"]


def test_policy_list_json_with_a_pack_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"run-gpus-left-idle": "advisory", "compute-max-nodes": {"max_nodes_per_cluster": 8}}))
    assert main(["policy", "list", "--format", "json", "--config", str(config)]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert list(rows) == [r.id for r in RULES]
    assert rows["run-gpus-left-idle"]["enforcement"] == "advisory"
    assert rows["compute-max-nodes"]["parameters"] == {"max_nodes_per_cluster": 8}
    assert rows["workspace-public-network-disabled"]["reference"].startswith("https://learn.microsoft.com/")


def test_policy_list_with_a_bad_pack_config_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "policy.json"
    config.write_text('{"run-gpus-idle": "advisory"}')
    result = amlgpu("policy", "list", "--config", str(config))
    assert result.returncode == 2
    expected = "error: policy.json: run-gpus-idle: unknown rule; did you mean 'run-gpus-left-idle'?"
    assert result.stderr.strip() == expected
    assert "Traceback" not in result.stderr


def test_docs_page_is_in_sync_with_the_rules() -> None:
    assert (ROOT / "docs" / "policies.md").read_text(encoding="utf-8") == render(), (
        "docs/policies.md is out of date: run `amlgpu policy docs`"
    )


def test_docs_page_documents_every_rule() -> None:
    page = render()
    for rule in RULES:
        assert f"### `{rule.id}`" in page and rule.reference in page and rule.remediation in page


def test_policy_docs_writes_and_checks(tmp_path: Path) -> None:
    out = tmp_path / "policies.md"
    assert amlgpu("policy", "docs", "--check", "--out", str(out)).returncode == 1
    written = amlgpu("policy", "docs", "--out", str(out))
    assert written.returncode == 0 and out.read_text() == render()
    assert amlgpu("policy", "docs", "--check", "--out", str(out)).returncode == 0
    printed = amlgpu("policy", "docs", "--out", "-")
    assert printed.stdout == render()
