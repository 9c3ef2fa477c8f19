"""Waiver governance (issue 19, item 1): a change cannot waive its own findings.

Each attack of the issue is a row: a stack file that waives a critical finding, an expiry of
9999-12-31, a reason of spaces and an ``x``. The platform owners' waivers live in the pack config.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from kernel.errors import ConfigError
from policies.packconfig import load
from policies.summary import markdown
from policies.waivers import changed, from_records, to_records
from stack.waivers import PlatformWaiver, Waiver
from tests.conftest import NS, ROOT, make_project
from tests.policies.test_baseline import TODAY, Baseline, baseline, fingerprint_of, sarif_fingerprint

CONNECTION_STRING = (
    "DefaultEndpointsProtocol=https;AccountName=stdata;AccountKey=" + "Zm9vYmFy" * 11
    + "==;EndpointSuffix=core.windows.net"
)
REASON = "Pipeline-parallel model: each process drives two GPUs (ticket ML-42)."
SOON = (TODAY + dt.timedelta(days=30)).isoformat()


def with_secret(b: Baseline) -> Baseline:
    """The issue's attack: a storage connection string with its account key in a run's environment."""
    b.run("ddp-per-process")["spec"].setdefault("environment_variables", {})["AZURE_STORAGE_CONNECTION_STRING"] = (
        CONNECTION_STRING
    )
    return b


def idle_gpus(b: Baseline) -> Baseline:
    b.run("ddp-per-process")["spec"]["distribution"]["process_count_per_instance"] = 4
    return b


@functools.cache
def _fingerprints() -> dict[str, str]:
    """The fingerprint of the finding each rule waived here has (the run's idle GPUs, its secret)."""
    return {"run-gpus-left-idle": fingerprint_of(idle_gpus(baseline()), "run-gpus-left-idle"),
            "run-secrets-in-environment-variables": fingerprint_of(with_secret(baseline()),
                                                                   "run-secrets-in-environment-variables")}


def waiver(rule: str = "run-gpus-left-idle", **fields: Any) -> dict[str, Any]:
    return {"rule": rule, "resource": "ddp-per-process", "reason": REASON, "expires": SOON,
            "fingerprint": _fingerprints().get(rule), **fields}


def evaluate(b: Baseline, waivers: list[dict[str, Any]], pack: dict[str, Any] | None = None, stack: str = "dev") -> Any:
    from policies.engine import evaluate as run

    b.config[f"{NS}:waivers"] = waivers
    return run(b.resources, b.runs, b.stack(), pack_config=pack, today=TODAY, source="Pulumi.dev.yaml",
               stack_name=stack)


def test_the_secret_is_a_critical_mandatory_finding_to_begin_with() -> None:
    report = evaluate(with_secret(baseline()), [])
    found = [f for f in report.findings if f.rule.id == "run-secrets-in-environment-variables"]
    assert [(f.rule.severity, f.enforcement, f.waived) for f in found] == [("critical", "mandatory", False)]


@pytest.mark.parametrize(
    ("attack", "entry", "key", "says"),
    [
        ("waive a critical finding from the stack file", waiver("run-secrets-in-environment-variables"),
         f"{NS}:waivers[0].rule", "is critical: a stack file cannot waive it"),
        ("expire in 9999", waiver(expires="9999-12-31"), f"{NS}:waivers[0].expires",
         "a waiver may run at most 90 days"),
        ("expire one day past the maximum", waiver(expires=(TODAY + dt.timedelta(days=91)).isoformat()),
         f"{NS}:waivers[0].expires", "pick a date on or before 2026-08-30"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)
def test_a_stack_file_cannot_switch_the_gate_off(attack: str, entry: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        evaluate(with_secret(idle_gpus(baseline())), [entry])
    assert err.value.key == key and says in err.value.message and err.value.file == "Pulumi.dev.yaml"


def test_an_expiry_exactly_at_the_maximum_is_taken() -> None:
    report = evaluate(idle_gpus(baseline()), [waiver(expires=(TODAY + dt.timedelta(days=90)).isoformat())])
    assert report.waived == 1 and report.passed


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"reason": "          x"}, "does not say why"),
        ({"reason": "ok ok ok ok ok ok ok ok"}, "does not say why"),  # one word, repeated
        ({"reason": "fix later"}, "does not say why"),
        ({"expires": None}, "expires"),
    ],
)
def test_a_waiver_needs_a_real_reason_and_an_expiry(fields: dict[str, Any], says: str) -> None:
    entry = {k: v for k, v in waiver(**fields).items() if v is not None}
    with pytest.raises(ValueError, match=says):
        Waiver.model_validate(entry)


def test_a_reason_with_content_is_kept_with_its_whitespace_collapsed() -> None:
    assert Waiver.model_validate(waiver(reason="  Pipeline  parallel,\n two GPUs  each ")).reason == (
        "Pipeline parallel, two GPUs each"
    )


def test_the_maximum_is_the_platform_owners_to_set() -> None:
    far = waiver(expires=(TODAY + dt.timedelta(days=300)).isoformat())
    report = evaluate(idle_gpus(baseline()), [far], pack={"policy-waivers": {"max_days": 365}})
    assert report.waived == 1


def test_the_platform_can_close_stack_files_to_waivers() -> None:
    with pytest.raises(ConfigError) as err:
        evaluate(idle_gpus(baseline()), [waiver()], pack={"policy-waivers": {"stack_file": "none"}})
    assert err.value.key == f"{NS}:waivers[0]" and "no waivers from stack files" in err.value.message


def _platform(*entries: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {"policy-waivers": {"waivers": list(entries), **settings}}


def test_the_platform_owners_can_waive_a_critical_finding_in_the_pack_config() -> None:
    pack = _platform(waiver("run-secrets-in-environment-variables", stack="dev"))
    report = evaluate(with_secret(baseline()), [], pack=pack)
    (found,) = [f for f in report.findings if f.rule.id == "run-secrets-in-environment-variables"]
    assert found.waived and isinstance(found.waiver, PlatformWaiver) and found.waiver.origin == "pack config"
    assert report.passed


def test_a_platform_waiver_applies_to_its_own_stack_only() -> None:
    pack = _platform(waiver("run-secrets-in-environment-variables", stack="prod"))
    report = evaluate(with_secret(baseline()), [], pack=pack)
    assert report.mandatory_failures == 1 and report.platform_waivers == ()


def test_platform_waivers_expire_within_the_maximum_too() -> None:
    pack = _platform(waiver(stack="prod"), waiver(stack="dev", expires="9999-12-31"))
    with pytest.raises(ConfigError) as err:
        evaluate(idle_gpus(baseline()), [], pack=pack)
    # The key is the entry's place in the pack config's list, which holds every stack's waivers.
    assert (err.value.file, err.value.key) == ("policy pack config", "policy-waivers.waivers[1].expires")


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"max_days": 0}, "policy-waivers.max_days"),
        ({"stack_file": "all"}, "policy-waivers.stack_file"),
        ({"maximum": 30}, "policy-waivers.maximum"),
        ({"waivers": [waiver(stack="dev", reason="x")]}, "policy-waivers.waivers[0].reason"),
        ({"waivers": [waiver()]}, "policy-waivers.waivers[0].stack"),
    ],
)
def test_a_malformed_policy_waivers_entry_names_the_file_and_key(
    settings: dict[str, Any], key: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"policy-waivers": settings}))
    with pytest.raises(ConfigError) as err:
        load(path)
    assert (err.value.file, err.value.key) == ("config.json", key)


def test_the_verdict_puts_the_waivers_first() -> None:
    report = evaluate(idle_gpus(baseline()), [waiver()])
    text = markdown(report, "dev")
    top = text.split("| Outcome | Count |")[0]
    assert "### Waivers in effect" in top
    assert f"waives **1 high finding until {SOON}** (stack file): `run-gpus-left-idle` for `ddp-per-process`" in top


def test_against_a_base_the_verdict_names_what_the_change_waives() -> None:
    report = evaluate(with_secret(idle_gpus(baseline())), [waiver()],
                      pack=_platform(waiver("run-secrets-in-environment-variables", stack="dev")))
    base = [Waiver.model_validate(waiver())]  # the stack file's waiver was there already
    top = markdown(report, "dev", base_waivers=base).split("| Outcome | Count |")[0]
    assert "### Waivers this change adds or changes" in top
    assert f"this change waives **1 critical finding until {SOON}** (new, pack config)" in top
    assert "run-gpus-left-idle" not in top  # unchanged: shown with the waived findings further down


@pytest.mark.parametrize(
    ("edit", "mark"),
    [({}, None), ({"expires": "2026-06-30"}, "changed"), ({"reason": REASON + " Extended."}, "changed"),
     ({"resource": "torchrun-per-node"}, "new")],
)
def test_waiver_changes_against_the_base(edit: dict[str, Any], mark: str | None) -> None:
    head = Waiver.model_validate(waiver(**edit))
    assert changed([Waiver.model_validate(waiver())], [head]).get(head.key()) == mark
    assert changed(None, [head]) == {}


def test_recorded_waivers_read_back_for_a_later_comparison() -> None:
    waivers = [Waiver.model_validate(waiver()), PlatformWaiver.model_validate(waiver(stack="dev"))]
    back = from_records(json.loads(json.dumps(to_records(waivers))), source="waivers.json")
    assert [(w.key(), w.reason, w.expires) for w in back] == [(w.key(), w.reason, w.expires) for w in waivers]
    with pytest.raises(ConfigError):
        from_records([{"rule": "x"}], source="waivers.json")


def test_plan_refuses_a_critical_stack_file_waiver_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's first attack, end to end: nothing is written, the message names the file and key."""
    import yaml

    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    run = config[f"{NS}:jobs"][0]
    run.setdefault("environment_variables", {})["AZURE_STORAGE_CONNECTION_STRING"] = CONNECTION_STRING
    soon = (dt.date.today() + dt.timedelta(days=30)).isoformat()
    config[f"{NS}:waivers"] = [{"rule": "run-secrets-in-environment-variables", "resource": run["name"],
                                "reason": "we will rotate the key next sprint, promise", "expires": soon}]
    project = make_project(tmp_path / "project", config, stack="dev")
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "dev"]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"Pulumi\.dev\.yaml:\d+:\d+  {NS}:waivers\[0\]\.rule  rule run-secrets-in-environment-variables "
                     "is critical", err), err
    assert not (project / "build").exists()

    # The platform owners' pack config (policies/config.json, read by default) can grant it, for the finding
    # the plan shows (its fingerprint).
    config[f"{NS}:waivers"] = []
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}))
    assert main(["plan", "--stack", "dev"]) == 1
    fingerprint = sarif_fingerprint(project / "build" / "dev", "run-secrets-in-environment-variables")
    (project / "policies").mkdir()
    granted = {"stack": "dev", "rule": "run-secrets-in-environment-variables", "resource": run["name"],
               "reason": "key rotated and removed in ML-7, this run only", "expires": soon, "fingerprint": fingerprint}
    (project / "policies" / "config.json").write_text(json.dumps({"policy-waivers": {"waivers": [granted]}}))
    assert main(["plan", "--stack", "dev"]) == 0
    verdict = (project / "build" / "dev" / "policy.md").read_text()
    assert f"waives **1 critical finding until {soon}** (pack config)" in verdict
    recorded = json.loads((project / "build" / "dev" / "waivers.json").read_text())
    assert [w["origin"] for w in recorded] == ["pack config"]


def test_the_waiver_layout_is_hand_written_and_survives_regeneration() -> None:
    from policies.docs import hand_written, render

    page = (ROOT / "docs" / "policies.md").read_text(encoding="utf-8")
    (section,) = [s for s in hand_written(page) if s.startswith("<!-- hand-written: waivers -->")]
    assert '"stack_file": "none"' in section and "max_days" in section
    extra = "<!-- hand-written: figures -->\nmeasured: 3 of 4\n<!-- end hand-written: figures -->\n"
    regenerated = render(page + "\n" + extra)
    assert section in regenerated and extra in regenerated
    assert render(regenerated) == regenerated  # stable
    assert hand_written(render("")) == []  # nothing invented


def test_plan_against_a_base_folder_opens_with_the_waiver_the_change_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`amlgpu plan --base DIR`: the base plan's waivers.json is the reference; a new stack-file waiver comes
    first in the verdict, named as what this change waives."""
    import yaml

    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    project = make_project(tmp_path / "project", config, stack="dev")
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "dev", "--out", str(tmp_path / "base")]) == 0
    assert json.loads((tmp_path / "base" / "waivers.json").read_text()) == []

    cluster = config[f"{NS}:clusters"][0]
    cluster["min_instances"] = 1  # compute-scale-to-zero (medium, advisory): the finding to waive
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}))
    assert main(["plan", "--stack", "dev", "--out", str(tmp_path / "review")]) == 0
    soon = (dt.date.today() + dt.timedelta(days=30)).isoformat()
    config[f"{NS}:waivers"] = [{"rule": "compute-scale-to-zero", "resource": cluster["name"],
                                "reason": "one warm node for the launch week demo (ML-77)", "expires": soon,
                                "fingerprint": sarif_fingerprint(tmp_path / "review", "compute-scale-to-zero")}]
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}))
    assert main(["plan", "--stack", "dev", "--out", str(tmp_path / "head"), "--base", str(tmp_path / "base")]) == 0
    verdict = (tmp_path / "head" / "policy.md").read_text()
    top = verdict.split("| Outcome | Count |")[0]
    assert "### Waivers this change adds or changes" in top
    assert f"this change waives **1 medium finding until {soon}** (new, stack file): `compute-scale-to-zero`" in top
