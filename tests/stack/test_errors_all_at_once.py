"""One run of ``amlgpu plan`` reports every mistake it can see, each with its file and line: schema errors,
runs naming an unknown cluster or environment, and the waivers' own mistakes, together."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from tests.conftest import NS, dev_config, make_project

TODAY = dt.date.today()
SOON = (TODAY + dt.timedelta(days=30)).isoformat()
REASON = "ticket ML-42: the research team needs this until the March migration"


def _waiver(rule: str, resource: str = "gpu-a100", *, expires: str = SOON, reason: str = REASON) -> dict[str, Any]:
    return {"rule": rule, "resource": resource, "reason": reason, "expires": expires}


def _plan(tmp_path: Path, config: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    project = make_project(tmp_path / "project", config)
    monkeypatch.chdir(project)
    code = main(["plan", "--stack", "test"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.startswith("Pulumi.test.yaml")]


def _keys(lines: list[str]) -> list[str]:
    """The key of each ``file:line:col  key  message`` line; every line must carry a line number."""
    keys = []
    for line in lines:
        match = re.match(r"Pulumi\.test\.yaml:(\d+)(?::\d+)?  (\S+)  ", line)
        assert match and int(match.group(1)) > 0, line
        keys.append(match.group(2))
    return keys


def test_schema_reference_and_waiver_mistakes_come_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_config()
    config[f"{NS}:clusters"][0]["min_instances"] = -1  # a schema error
    config[f"{NS}:jobs"][0]["compute"] = "gpu-a10"  # an unknown cluster...
    config[f"{NS}:jobs"][1]["environment"] = "acpt-pytorc"  # ...and environment, hidden by it before
    config[f"{NS}:waivers"] = [
        _waiver("no-such-rule"),  # unknown rule: the policy engine's check, before only after a clean load
        _waiver("compute-scale-to-zero", expires=(TODAY + dt.timedelta(days=400)).isoformat()),  # too far ahead
        _waiver("compute-scale-to-zero"),  # the same rule for the same cluster again
        _waiver("run-timeout-set", reason="short"),  # a reason that says nothing
    ]
    code, lines = _plan(tmp_path, config, monkeypatch, capsys)
    assert code == 2
    assert _keys(lines) == [
        f"{NS}:clusters[0].min_instances",
        f"{NS}:jobs[0].compute",
        f"{NS}:jobs[1].environment",
        f"{NS}:waivers[0].rule",
        f"{NS}:waivers[1].expires",
        f"{NS}:waivers[2]",
        f"{NS}:waivers[3].reason",
    ]
    text = "\n".join(lines)
    assert "unknown cluster 'gpu-a10'; did you mean 'gpu-a100'?" in text
    assert "unknown environment 'acpt-pytorc'; did you mean 'acpt-pytorch'?" in text
    assert "duplicate waiver: waivers[1] already waives compute-scale-to-zero for 'gpu-a100'" in text
    assert not (tmp_path / "project" / "build").exists()


def test_five_bad_waivers_are_five_lines_of_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A stack that is otherwise valid: the policy engine reports every waiver at once, each at its line."""
    config = dev_config()
    config[f"{NS}:waivers"] = [
        _waiver("no-such-rule"),
        _waiver("cluster-scales-to-zero"),
        _waiver("compute-scale-to-zero", resource="gpu-a200"),
        _waiver("run-timeout-set", resource="nope"),
        _waiver("compute-ssh-disabled", expires=(TODAY + dt.timedelta(days=365)).isoformat()),
    ]
    code, lines = _plan(tmp_path, config, monkeypatch, capsys)
    assert code == 2
    assert _keys(lines) == [f"{NS}:waivers[0].rule", f"{NS}:waivers[1].rule", f"{NS}:waivers[2].resource",
                            f"{NS}:waivers[3].resource", f"{NS}:waivers[4].expires"]
    assert "did you mean 'compute-scale-to-zero'?" in lines[1]
    assert "`amlgpu policy list` shows every rule" in lines[0]  # not the 91 rule ids on one line
    assert "did you mean 'gpu-a100'?" in lines[2]


def test_a_duplicate_waiver_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_config()
    config[f"{NS}:waivers"] = [_waiver("compute-scale-to-zero"), _waiver("run-timeout-set", "ddp-train"),
                               _waiver("compute-scale-to-zero", reason=REASON + ", renewed")]
    code, lines = _plan(tmp_path, config, monkeypatch, capsys)
    assert code == 2
    assert _keys(lines) == [f"{NS}:waivers[2]"]
    assert "duplicate waiver: waivers[0] already waives compute-scale-to-zero for 'gpu-a100'" in lines[0]


def test_an_expired_waiver_is_not_in_effect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = dev_config()
    config[f"{NS}:clusters"][0]["min_instances"] = 1  # an advisory finding of compute-scale-to-zero
    config[f"{NS}:waivers"] = [_waiver("compute-scale-to-zero", expires=(TODAY - dt.timedelta(days=1)).isoformat())]
    code, _ = _plan(tmp_path, config, monkeypatch, capsys)
    assert code in (0, 1)
    policy = (tmp_path / "project" / "build" / "test" / "policy.md").read_text()
    assert "Waivers in effect" not in policy
    expired = policy.split("### Expired waivers (no longer applied)", 1)[1]
    assert "`compute-scale-to-zero` for `gpu-a100` expired on" in expired
