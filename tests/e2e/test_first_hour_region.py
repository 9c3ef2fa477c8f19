"""The first hour III, as a new user tries it: a GPU size that its region does not sell is a mandatory,
waivable finding naming the size, the region, where it is sold and the table's date, and `amlgpu init` warns
with those regions (issue 38, point 2)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from azurefacts import availability
from tests.conftest import NS, ROOT

WHERE = ("australiaeast, centralus, eastus, eastus2, japaneast, koreacentral, southafricanorth, swedencentral, "
         "uaenorth, westeurope, westus")
"""Where Standard_ND96isr_H100_v5's series is listed in azurefacts/availability.json (2026-02-12)."""


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new user's project: the program only; `amlgpu init` writes the stack and a starter script."""
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_init_warns_and_plan_fails_until_waived(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "br", "--region", "brazilsouth", "--sku", "Standard_ND96isr_H100_v5"]) == 0
    said = capsys.readouterr()
    assert said.out == "Wrote Pulumi.br.yaml and src/train.py.\nNext: amlgpu plan --stack br\n"
    assert said.err == (
        "warning: Standard_ND96isr_H100_v5 is not sold in brazilsouth (Microsoft's products-by-region table as "
        f"read 2026-02-12); it is listed in {WHERE}. `amlgpu plan` fails compute-size-offered-in-region until the "
        "stack moves (azure-native:location) or the size changes, or a waiver names the table's date\n")

    assert main(["plan", "--stack", "br"]) == 1
    out = capsys.readouterr().out
    assert ("compute-size-offered-in-region  [high]  cluster 'gpu-h100': Standard_ND96isr_H100_v5 is not sold in "
            f"brazilsouth (Microsoft's products-by-region table as read 2026-02-12); it is listed in {WHERE}") in out

    sarif = json.loads((scratch / "build" / "br" / "policy.sarif").read_text())
    (result,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "compute-size-offered-in-region"]
    stack = scratch / "Pulumi.br.yaml"
    config = yaml.safe_load(stack.read_text())
    config["config"][f"{NS}:waivers"] = [{
        "rule": "compute-size-offered-in-region", "resource": "gpu-h100",
        "expires": (dt.date.today() + dt.timedelta(days=30)).isoformat(),
        "reason": "resource SKUs of our subscription list it in brazilsouth; the table is from 2026-02-12 (ML-7)",
        "fingerprint": next(iter(result["partialFingerprints"].values()))[:16]}]
    stack.write_text(yaml.safe_dump(config, sort_keys=False))
    assert main(["plan", "--stack", "br"]) == 0
    assert "0 mandatory failure(s)" in capsys.readouterr().out


def test_init_in_a_region_that_sells_the_size_says_nothing_more(scratch: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "ok", "--region", "eastus2", "--sku", "Standard_ND96isr_H100_v5"]) == 0
    assert capsys.readouterr().err == ""


def test_a_size_or_region_the_table_does_not_cover_is_not_judged() -> None:
    assert availability.not_offered("Standard_ND96isr_H100_v5", "westeurope") is None
    assert availability.not_offered("Standard_ND96isr_H100_v5", "atlantis") is None
    assert availability.not_offered("Standard_NC24rs_v3", "brazilsouth") is None  # retired: not in the table
    many = availability.not_offered("Standard_NC4as_T4_v3", "belgiumcentral")  # listed in 25 regions: 12 named
    assert many is not None and many.endswith(", italynorth, japaneast and 13 more")
