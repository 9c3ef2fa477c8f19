"""One waiver ledger (issue 35, point 3) and fingerprints over the complete evidence (issue 36, point 2).

The offline gate and CrossGuard decide with :func:`policies.waivers.ledger`: the parity test runs one stack
and one set of waivers (the platform's and the stack file's) through both and compares the applied and
stale waivers. The evidence tests are the issue's attacks: a change that the finding's text does not show
(it shows eight operator ranges, it counts ranges) still makes the waiver stale and the finding open.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.crossguard import policies
from policies.engine import Report
from policies.rule import Message, evidence
from policies.waivers import Waivable, ledger
from stack.waivers import PlatformWaiver, Waiver
from tests.policies.test_baseline import STACK_NAME, Baseline, baseline
from tests.policies.test_crossguard import reported

NS = "aml-gpu-training"
STORAGE = "azure-native:storage:StorageAccount"
TODAY = dt.date.today()
"""CrossGuard judges waivers by today's date: both gates evaluate on it here."""
SOON = (TODAY + dt.timedelta(days=30)).isoformat()
REASON = "accepted for the launch week, ticket ML-77, removed after it"


def _with_idle_gpus_and_lrs(b: Baseline) -> Baseline:
    """The baseline with run ddp-per-process leaving 4 GPUs idle (and its storage's LRS finding, as shipped)."""
    b.run("ddp-per-process")["spec"]["distribution"]["process_count_per_instance"] = 4
    return b


def _fingerprints(report: Report) -> dict[tuple[str, str], str]:
    return {(f.rule.id, f.owner.name): f.fingerprint for f in report.findings}


def _gates(tmp_path: Path, b: Baseline, platform: list[dict[str, Any]],
           stack_file: list[dict[str, Any]]) -> tuple[Report, list[str]]:
    """The offline gate's report and CrossGuard's ``policy-waived-findings`` messages for one stack and one
    set of waivers: the pack config at policies/config.json, the stack file's waivers in Pulumi.<stack>.yaml."""
    pack_config = {"policy-waivers": {"waivers": [{"stack": STACK_NAME, "expires": SOON, "reason": REASON, **w}
                                                  for w in platform]}}
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "config.json").write_text(json.dumps(pack_config))
    own = [{"expires": SOON, "reason": REASON, **w} for w in stack_file]
    (tmp_path / f"Pulumi.{STACK_NAME}.yaml").write_text(yaml.safe_dump({"config": {f"{NS}:waivers": own}}))
    b.config[f"{NS}:waivers"] = own
    report = b.evaluate(pack_config=pack_config, today=TODAY)
    pack = {p.name: p for p in policies(tmp_path, STACK_NAME)}
    return report, [m for m, _ in reported(pack["policy-waived-findings"], b)]


_APPLIED = re.compile(r"^\[(?P<rule>[a-z0-9-]+)\] waived in the (?P<origin>stack file|pack config) \(.*?, until "
                      r"[0-9-]+\): (?P<text>.*)$")
_STALE = re.compile(r"^\[(?P<rule>[a-z0-9-]+)\] stale waiver in the (?P<origin>stack file|pack config), not applied: "
                    r"it was approved for finding (?P<was>\S+|\(no fingerprint\)), and the finding is now: .* "
                    r"\(fingerprint (?P<now>[0-9a-f]{32})\)$")


def test_the_offline_gate_and_crossguard_apply_and_stale_the_same_waivers(tmp_path: Path) -> None:
    """Every case where the two copies disagreed, and the plain ones: a platform waiver applied, a stack-file
    waiver of the same finding (a duplicate: unused, not stale), a waiver approved for another finding of the
    same thing (stale in both, whatever its place in the list), one with no fingerprint (stale), one whose
    thing has no finding (unused)."""
    b = _with_idle_gpus_and_lrs(baseline())
    prints = _fingerprints(b.evaluate(today=TODAY))
    idle = prints[("run-gpus-left-idle", "ddp-per-process")]
    lrs = prints[("storage-replication-redundant", "mlw-gpu-dev")]
    cmk = prints[("workspace-customer-managed-key", "mlw-gpu-dev")]
    report, messages = _gates(
        tmp_path, b,
        platform=[{"rule": "run-gpus-left-idle", "resource": "ddp-per-process", "fingerprint": idle},
                  {"rule": "storage-replication-redundant", "resource": "mlw-gpu-dev", "fingerprint": lrs}],
        stack_file=[
            {"rule": "run-gpus-left-idle", "resource": "ddp-per-process", "fingerprint": idle},  # duplicate
            {"rule": "storage-replication-redundant", "resource": "mlw-gpu-dev", "fingerprint": "0" * 32},  # stale
            {"rule": "workspace-customer-managed-key", "resource": "mlw-gpu-dev"},  # no fingerprint: stale
            {"rule": "run-gpus-left-idle", "resource": "torchrun-per-node", "fingerprint": idle},  # no finding
        ])

    offline_applied = {(f.rule.id, f.waiver.origin, f.text) for f in report.findings if f.waiver is not None}
    offline_stale = {(s.waiver.rule, s.waiver.origin, s.finding.fingerprint) for s in report.stale_waivers}
    applied = {(m["rule"], m["origin"], m["text"]) for m in map(_APPLIED.match, messages) if m}
    stale = {(m["rule"], m["origin"], m["now"]) for m in map(_STALE.match, messages) if m}
    assert len(applied) + len(stale) == len(messages), messages

    assert applied == offline_applied == {
        ("run-gpus-left-idle", "pack config",
         "run 'ddp-per-process': 4 GPU process(es) per node on Standard_ND96asr_v4: 4 of 8 GPUs stay idle"),
        ("storage-replication-redundant", "pack config",
         "workspace 'mlw-gpu-dev' (StorageAccount 'mlw-gpu-dev-storage'): replication is Standard_LRS: every copy "
         "is in one region"),
    }
    assert stale == offline_stale == {("storage-replication-redundant", "stack file", lrs),
                                      ("workspace-customer-managed-key", "stack file", cmk)}
    assert [(i, w.resource) for i, w in report.unused_waivers] == [(0, "ddp-per-process"), (3, "torchrun-per-node")]


def _waiver(rule: str, resource: str, fingerprint: str | None) -> Waiver:
    return Waiver(rule=rule, resource=resource, reason=REASON, expires=TODAY + dt.timedelta(days=30),
                  fingerprint=fingerprint)


def test_whether_a_waiver_is_stale_does_not_depend_on_the_other_waivers_or_their_order() -> None:
    """The old CrossGuard copy stopped at the first waiver that applied, so a stale waiver listed after it was
    never reported; the old offline copy called a duplicate of an applied waiver stale."""
    finding = Waivable("rule-a", "thing", "ab" * 16)
    right = _waiver("rule-a", "thing", "ab" * 6)
    wrong = _waiver("rule-a", "thing", "cd" * 6)
    platform = PlatformWaiver(stack="s", **right.model_dump())
    for order in ([(None, platform), (0, right), (1, wrong)], [(1, wrong), (0, right), (None, platform)]):
        decided = ledger(order, [finding], TODAY)
        assert [c[1] for c, _ in decided.stale] == [wrong]
        first = next(c for c in order if c[1] is not wrong)
        assert decided.applied == (first,)
        assert wrong not in [c[1] for c in decided.unused]
    expired = _waiver("rule-a", "thing", "ab" * 6).model_copy(update={"expires": TODAY - dt.timedelta(days=1)})
    decided = ledger([(0, expired)], [finding], TODAY)
    assert decided.applied == (None,) and decided.expired == ((0, expired),) and not decided.stale


# ------------------------------------------------------------------------------------------ complete evidence

def _ranges(b: Baseline, ranges: list[str]) -> Baseline:
    b.inputs(STORAGE)["networkRuleSet"]["ipRules"] = [{"iPAddressOrRange": r, "action": "Allow"} for r in ranges]
    return b


HALVES = ["0.0.0.0/1", "128.0.0.0/1"]
"""Two ranges that are the whole internet: what makes storage-operator-ranges-not-open report."""
SMALL = [f"198.51.100.{i}" for i in range(1, 9)]


def _open_ranges(ranges: list[str]) -> tuple[str, str]:
    """(message, fingerprint) of the critical finding for these operator ranges."""
    (found,) = [f for f in _ranges(baseline(), ranges).evaluate().findings
                if f.rule.id == "storage-operator-ranges-not-open"]
    return found.message, found.fingerprint


def _approved_then(before: list[str], after: list[str]) -> Report:
    """The platform approves the finding of ``before``; the stack then declares ``after``."""
    _, approved = _open_ranges(before)
    pack_config = {"policy-waivers": {"waivers": [{
        "stack": STACK_NAME, "rule": "storage-operator-ranges-not-open", "resource": "mlw-gpu-dev",
        "reason": "temporary operator access for the migration (NET-12)",
        "expires": (dt.date(2026, 6, 1) + dt.timedelta(days=30)).isoformat(), "fingerprint": approved}]}}
    return _ranges(baseline(), after).evaluate(pack_config=pack_config)


@pytest.mark.parametrize(("before", "after"), [
    # Issue 36: one operator address, ninth in the list (the text counts it: "and 1 more"), widened to a /9.
    ([*HALVES, *SMALL[:6], "203.0.113.7"], [*HALVES, *SMALL[:6], "203.0.0.0/9"]),
    # Issue 36: ten ranges, the two the text does not show swapped for others.
    ([*HALVES, *SMALL], [*HALVES, *SMALL[:6], "192.0.2.1", "192.0.2.2"]),
    # Variant: one more range the text only counts ("and 2 more" becomes "and 3 more" is shown; the same count
    # with another address is not).
    ([*HALVES, *SMALL, "192.0.2.9"], [*HALVES, *SMALL, "10.0.0.0/8"]),
], ids=["address-widened-to-a-slash-9", "two-of-ten-swapped", "hidden-address-replaced"])
def test_a_change_the_message_does_not_show_makes_the_waiver_stale(before: list[str], after: list[str]) -> None:
    assert _open_ranges(before)[0] == _open_ranges(after)[0], "the attack: the text is the same"
    assert _open_ranges(before)[1] != _open_ranges(after)[1]
    report = _approved_then(before, after)
    (finding,) = [f for f in report.findings if f.rule.id == "storage-operator-ranges-not-open"]
    assert not finding.waived and report.mandatory_failures >= 1
    (stale,) = report.stale_waivers
    assert stale.finding is finding and stale.waiver.origin == "pack config"
    # The unchanged ranges keep their waiver.
    same = _approved_then(before, before)
    assert [f.waived for f in same.findings if f.rule.id == "storage-operator-ranges-not-open"] == [True]
    assert same.stale_waivers == ()


def test_counted_ranges_and_listed_variables_are_evidence_too() -> None:
    """Variants in other rules whose text counts or cuts: the HBI workspace's storage ("admits 2 public IP
    range(s)") and the Batch AI variables a run reads (five shown)."""
    b = baseline()
    b.inputs("azure-native:machinelearningservices:Workspace")["hbiWorkspace"] = True
    b.inputs(STORAGE)["publicNetworkAccess"] = "Enabled"

    def hbi(ranges: list[str]) -> tuple[str, str]:
        (found,) = [f for f in _ranges(b, ranges).evaluate().findings if f.rule.id == "workspace-hbi-storage-private"]
        return found.message, found.fingerprint

    assert hbi(SMALL[:2])[0] == hbi(["192.0.2.0/24", SMALL[1]])[0]
    assert hbi(SMALL[:2])[1] != hbi(["192.0.2.0/24", SMALL[1]])[1]

    def legacy(names: list[str]) -> tuple[str, str]:
        run = baseline()
        run.run("ddp-per-process")["legacy_variables"] = names
        (found,) = [f for f in run.evaluate().findings if f.rule.id == "run-legacy-batchai-variables"]
        return found.message, found.fingerprint

    six = [f"train.py:{i} AZ_BATCHAI_VAR_{i}" for i in range(6)]
    assert legacy(six)[0] == legacy([*six[:5], "eval.py:1 AZ_BATCHAI_OTHER"])[0]
    assert legacy(six)[1] != legacy([*six[:5], "eval.py:1 AZ_BATCHAI_OTHER"])[1]


def test_a_plain_message_is_its_own_evidence() -> None:
    """Rules whose text states every fact keep the fingerprints they had (shipped waivers stay valid)."""
    assert evidence("keeps 1 node running") == ("keeps 1 node running",)
    message = Message("ranges a and 1 more", ["a", "b"])
    assert message == "ranges a and 1 more" and evidence(message) == ("a", "b")
