"""The first hour III, as a new user reads the cost: the prices' source and date in `amlgpu prices show` and
beside the plan's cost line, and a warning when they are more than 180 days old (issue 38, point 10)."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from amlgpu.cli import main
from azurefacts import prices
from tests.conftest import ROOT


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_prices_show_names_each_figures_source_and_warns_of_old_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prices", "show"]) == 0
    said = capsys.readouterr()
    rows = said.out.splitlines()
    assert any(r.startswith("eastus2 ") and r.endswith("2024-08-18  SkyPilot's public catalogue of Azure VM prices")
               for r in rows)
    assert any(r.startswith("westeurope ") and "2026-08-22  Azure Pricing Radar's public record" in r for r in rows)
    assert rows[-1].startswith("Sources: Azure Retail Prices API (2023-05-25); SkyPilot's public catalogue of Azure "
                               "VM prices (2024-08-18); Azure Pricing Radar's public record of Azure's Retail "
                               "Prices API (2026-08-22); each figure's full source is in ")
    assert said.err.startswith("warning: prices read 2023-05-25, 2024-08-18 are more than 180 days old (today ")


def test_the_plans_cost_line_says_where_prices_come_from(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--stack", "old", "--region", "eastus2", "--sku", "Standard_ND96isr_H100_v5"]) == 0
    assert main(["init", "--stack", "new", "--region", "westeurope", "--sku", "Standard_ND96isr_H100_v5"]) == 0
    capsys.readouterr()
    assert main(["plan", "--stack", "old"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Cost at list price: "))
    assert lines[at + 1] == ("  Prices: SkyPilot's public catalogue of Azure VM prices (2024-08-18); `amlgpu prices "
                             "show` lists them.")
    assert lines[at + 2].startswith("  warning: prices read 2024-08-18 are more than 180 days old")
    assert main(["plan", "--stack", "new"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Cost at list price: "))
    assert lines[at + 1] == ("  Prices: Azure Pricing Radar's public record of Azure's Retail Prices API "
                             "(2026-08-22); `amlgpu prices show` lists them.")
    assert "warning" not in lines[at + 2]


def test_the_warning_starts_after_180_days() -> None:
    figure = [("2026-06-01", prices.RETAIL_SOURCE)]
    assert prices.provenance(figure, today=dt.date(2026, 11, 28)) == (
        "Azure Retail Prices API (2026-06-01)", None)
    _, stale = prices.provenance(figure, today=dt.date(2026, 11, 29))
    assert stale is not None
    assert stale.startswith("prices read 2026-06-01 are more than 180 days old (today 2026-11-29)")
