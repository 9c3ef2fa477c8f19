"""The pricing table (``azurefacts/prices.json``) and ``amlgpu prices refresh`` against recorded API pages.

No network: the pages of ``tests/fixtures/retail-prices/`` (see its README) are the answers a recorded
transport (``tests/replay_http.py``) gives the command's real ``requests`` calls, by URL and query, so the
paging (``NextPageLink``) is followed exactly as against the live API and a request for any other page fails.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from amlgpu.commands import prices as command
from azurefacts import availability, prices
from azurefacts.skus import CATALOGUE, CPU_SIZES
from kernel.errors import UserError
from stack.infrastructure import ImageBuildCompute
from tests.conftest import ROOT
from tests.replay_http import Replay

FIXTURES = ROOT / "tests" / "fixtures" / "retail-prices"
PAGE1, PAGE2 = (json.loads((FIXTURES / f"eastus-page{i}.json").read_text()) for i in (1, 2))


Serve = Callable[..., Replay]


@pytest.fixture
def retail_api(monkeypatch: pytest.MonkeyPatch) -> Serve:
    """The Retail Prices API answering the eastus listing with ``first`` (page 1 by default) and the page it
    links with ``second`` (page 2), through ``requests``' real session."""
    def serve(first: dict[str, Any] = PAGE1, second: dict[str, Any] = PAGE2) -> Replay:
        listing = f"GET {prices.RETAIL_API}?$filter={prices.retail_filter('eastus')}"
        return Replay({listing: (200, first), f"GET {PAGE1['NextPageLink']}": (200, second)}).install(monkeypatch)

    return serve


def test_the_shipped_table_is_valid_dated_and_sourced() -> None:
    data = json.loads(prices.DEFAULT_TABLE.read_text())
    table = prices.parse(data)
    for region, sizes in data["regions"].items():
        for size, tiers in sizes.items():
            assert size in CATALOGUE or size in CPU_SIZES, size
            for tier, figure in tiers.items():
                assert figure["usd_per_hour"] > 0 and figure["source"] and dt.date.fromisoformat(figure["date"])
                assert table.price(size, region, tier) == prices.Price(**figure)


SKYPILOT_ROWS = FIXTURES / "skypilot-catalog-azure-vms.csv"


def test_every_figure_taken_from_the_skypilot_catalogue_is_its_recorded_row() -> None:
    """The pay-as-you-go figures are exactly the recorded rows of the sizes a stack can use (every current
    catalogue size and the image-build cluster's default, Standard_DS3_v2), in every region the catalogue
    covers: each figure equals its row, and no row is left out."""
    builder = ImageBuildCompute.model_fields["size"].default
    usable = {size for size, sku in CATALOGUE.items() if sku.retired is None} | {builder}
    with SKYPILOT_ROWS.open(newline="") as handle:
        rows = {(r["Region"], r["InstanceType"]): float(r["Price"]) for r in csv.DictReader(handle)
                if r["InstanceType"] in usable}
    data = json.loads(prices.DEFAULT_TABLE.read_text())
    figures = [(region, size, tier, figure) for region, sizes in data["regions"].items()
               for size, tiers in sizes.items() for tier, figure in tiers.items()
               if "skypilot-catalog" in figure["source"]]
    assert {tier for _, _, tier, _ in figures} == {"dedicated"}
    taken = {(region, size): figure["usd_per_hour"] for region, size, _, figure in figures}
    assert taken == rows
    assert {region for region, _ in rows} == {"centralus", "eastus", "eastus2", "northcentralus", "southcentralus",
                                              "westcentralus", "westus", "westus2", "westus3"}
    assert all((region, builder) in taken for region in {region for region, _ in rows})


RADAR_ITEMS = FIXTURES / "azure-pricing-radar-vm-europe.json"
RADAR_ALIASES = {"ND96asr_A100_v4": "Standard_ND96asr_v4"}
"""The one meter whose skuName is not its size's name (see the fixture README): NDasr A100 v4's only size."""
RADAR_SECOND_METERS = {"ND96asrA100v4_NU": "Standard_ND96asr_v4", "ND96amsA100v4": "Standard_ND96amsr_A100_v4"}
"""Second Linux meters under the series of one size, kept in the fixture to show they bill the same price."""


def _meter(sku_name: str) -> str:
    """A skuName less its tier suffix."""
    return re.sub(r" (Spot|Low Priority)$", "", sku_name)


def _radar_size(sku_name: str, sizes: set[str]) -> str | None:
    """The size an item of the recorded listings prices: its skuName, less the tier suffix, is the size's name
    without ``Standard_``, underscores and spaces (``NC4as T4 v3``, ``ND96isrH100v5``, ``Standard_NC24ads_A100_v4``),
    or one of :data:`RADAR_ALIASES`."""
    def key(text: str) -> str:
        return re.sub(r"[_ ]", "", text.lower().removeprefix("standard_"))

    name = _meter(sku_name)
    return RADAR_ALIASES.get(name) or {key(size): size for size in sizes}.get(key(name))


def _radar_listings() -> dict[str, dict[str, dict[str, Any]]]:
    listings: dict[str, dict[str, dict[str, Any]]] = json.loads(RADAR_ITEMS.read_text())
    return listings


def test_every_figure_taken_from_the_pricing_radar_is_what_refresh_reads_from_its_recorded_items() -> None:
    """The European figures are exactly what the table's own API reader (``from_retail_items``: Linux items only,
    one price per size, region and tier) takes from the recorded listings, for the sizes a stack can use, in the
    pay-as-you-go and Low Priority tiers (Spot prices move): each figure equals its item, and no item is left out."""
    builder = ImageBuildCompute.model_fields["size"].default
    usable = {size for size, sku in CATALOGUE.items() if sku.retired is None} | {builder}
    items = [{**item, "type": key.split("|")[2], "armSkuName": _radar_size(item["skuName"], usable)}
             for listing in _radar_listings().values() for key, item in listing.items()
             if _meter(item["skuName"]) not in RADAR_SECOND_METERS
             and "Expired" not in item["meterName"]]  # a retired promotion's meter, not the size's price
    assert all(item["armSkuName"] for item in items)
    read = {key: price.usd_per_hour for key, price in prices.from_retail_items(
        items, date="2026-08-22", sizes=usable).items() if key[2] != "spot"}
    data = json.loads(prices.DEFAULT_TABLE.read_text())
    figures = {(region, size, tier): figure for region, sizes in data["regions"].items()
               for size, tiers in sizes.items() for tier, figure in tiers.items()
               if "azure-pricing-radar" in figure["source"]}
    assert {key: figure["usd_per_hour"] for key, figure in figures.items()} == read
    assert {figure["date"] for figure in figures.values()} == {"2026-08-22"}
    assert {region for region, _, _ in figures} == {"westeurope", "northeurope", "swedencentral", "francecentral"}
    assert all((region, builder, "dedicated") in figures for region, _, _ in figures)
    assert read["westeurope", "Standard_ND96asr_v4", "dedicated"] == 35.357  # the dev stack's GPU size


def test_a_second_meter_of_a_size_bills_the_figure_the_table_takes() -> None:
    """``ND96asrA100v4_NU`` (NDasr A100 v4) and ``ND96amsA100v4`` (NDamsr A100 v4) are Linux meters of the same series
    as the size the table prices: in every region and tier they show the table's figure, so whichever meter Azure
    bills, the price holds."""
    table = prices.load()
    checked = set()
    for listing in _radar_listings().values():
        for item in listing.values():
            size = RADAR_SECOND_METERS.get(_meter(item["skuName"]))
            tier = prices.tier_of({**item, "type": "Consumption"})
            if size is None or tier in (None, "spot"):
                continue
            figure = table.price(size, item["armRegionName"], tier)
            assert figure is not None and figure.usd_per_hour == item["retailPrice"], item
            checked.add((item["armRegionName"], size))
    assert checked == {("westeurope", "Standard_ND96asr_v4"), ("westeurope", "Standard_ND96amsr_A100_v4"),
                       ("swedencentral", "Standard_ND96amsr_A100_v4"), ("francecentral", "Standard_ND96amsr_A100_v4")}


def test_every_figure_names_its_source_plainly() -> None:
    """A repository, a path and a commit (or a page) for every figure: nothing "found by code search"."""
    data = json.loads(prices.DEFAULT_TABLE.read_text())
    for sizes in data["regions"].values():
        for tiers in sizes.values():
            for figure in tiers.values():
                assert re.search(r"@ [0-9a-f]{40}|at commit [0-9a-f]{40}", figure["source"]), figure["source"]
                assert "code search" not in figure["source"]


AVAILABILITY = ROOT / "tests" / "fixtures" / "region-availability" / "products-by-region-gpu.json"


def test_the_regions_table_is_derived_from_its_recorded_source() -> None:
    """``azurefacts/availability.json`` lists, per region, exactly the catalogue series the recorded
    products-by-region rows list there; every series it maps a size to appears in those rows."""
    rows = json.loads(AVAILABILITY.read_text())
    table = availability.load()
    mapped = set(table.series.values())
    assert mapped <= {f for r in rows for f in r["families"]}
    assert table.regions == {r["region"].replace("-", ""): frozenset(r["families"]) & mapped for r in rows}
    assert set(table.series) <= set(CATALOGUE)


@pytest.mark.parametrize(
    ("size", "region", "listed"),
    [
        ("Standard_ND96isr_H200_v5", "eastus2", True),
        ("Standard_ND96isr_H200_v5", "East US", False),  # a display name, as a stack may write it
        ("standard_nd96isr_mi300x_v5", "eastus2", False),
        ("Standard_ND128isr_GB300_v6", "eastus2", None),  # a series the table does not list anywhere
        ("Standard_NC24s_v3", "eastus", None),  # retired
        ("Standard_NC4as_T4_v3", "atlantis", None),  # a region the table does not cover
    ],
)
def test_listed_answers_true_false_or_unknown(size: str, region: str, listed: bool | None) -> None:
    assert availability.load().listed(size, region) is listed


LOW_PRIORITY_LINES = {
    ("eastus2", "Standard_ND96amsr_A100_v4"): {"low_priority": 6.554, "dedicated": 32.77},
}
"""The Linux meters quoted in the fixture README (azure-benchmark-scripts @ 1e213534, 2023-05-25)."""


def test_the_low_priority_figure_is_the_line_its_readme_quotes() -> None:
    table = prices.load()
    readme = (FIXTURES / "README.md").read_text()
    for (region, size), tiers in LOW_PRIORITY_LINES.items():
        for tier, value in tiers.items():
            assert table.price(size, region, tier).usd_per_hour == value  # type: ignore[union-attr]
        assert f"| {size} |        {tiers['low_priority']}  | {region}" in readme


def test_a_size_region_or_tier_not_in_the_table_is_unknown_never_zero() -> None:
    table = prices.load()
    assert table.price("Standard_ND96isr_H100_v5", "eastus2", "dedicated") is not None
    assert table.price("standard_nd96isr_h100_v5", "East US 2", "dedicated") is not None  # Azure ignores case
    for size, region, tier in [
        ("Standard_ND96isr_H100_v5", "eastus2", "low_priority"),
        ("Standard_ND96isr_H100_v5", "japaneast", "dedicated"),  # a region no recorded source covers
        ("Standard_ND96isr_H200_v5", "northeurope", "low_priority"),  # the series has no Low Priority meter there
        ("Standard_ND96asr_v4", "northeurope", "dedicated"),  # the listing has no NDasr A100 v4 item there
        ("Standard_NC4as_T4_v3", "eastus2", "low_priority"),
        ("Standard_ND96isr_MI300X_v5", "eastus", "dedicated"),
    ]:
        assert table.price(size, region, tier) is None


def test_refresh_follows_next_page_links_and_keeps_only_current_linux_prices(retail_api: Serve) -> None:
    api = retail_api()
    old = prices.parse({"regions": {"westus3": {"Standard_NC4as_T4_v3": {
        "dedicated": {"usd_per_hour": 0.5, "date": "2026-01-01", "source": "negotiated"}}}}})
    fresh = command.refresh(old, ["eastus"], command.http_get, dt.date(2026, 11, 23))
    assert [str(call.url) for call in api.calls][1] == PAGE1["NextPageLink"] and len(api.calls) == 2
    assert api.calls[0].headers["Accept"] == "application/json"
    h100 = "Standard_ND96isr_H100_v5"
    assert fresh.price(h100, "eastus", "dedicated") == prices.Price(98.32, "2026-11-23", prices.RETAIL_SOURCE)
    assert fresh.price(h100, "eastus", "spot") == prices.Price(18.169536, "2026-11-23", prices.RETAIL_SOURCE)
    # The only Low Priority meter recorded is the Windows one: the Linux low-priority price stays unknown.
    assert fresh.price(h100, "eastus", "low_priority") is None
    assert fresh.price("Standard_D2s_v3", "eastus", "dedicated") is None  # not a size the table tracks
    assert fresh.price("Standard_NC4as_T4_v3", "westus3", "dedicated") is not None  # other regions kept


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ({"NotItems": []}, "without an Items list"),
        ({"Items": [], "NextPageLink": "https://attacker.example/api/retail/prices"}, "outside it"),
    ],
)
def test_a_response_out_of_shape_is_refused(page: dict[str, Any], message: str, retail_api: Serve) -> None:
    retail_api(page)
    with pytest.raises(UserError, match=message):
        command.refresh(prices.PriceTable({}), ["eastus"], command.http_get, dt.date(2026, 11, 23))


def test_two_current_prices_for_one_meter_are_refused(retail_api: Serve) -> None:
    retail_api(second={**PAGE2, "Items": [{**PAGE1["Items"][0], "retailPrice": 77.0}]})
    with pytest.raises(UserError, match="two current dedicated prices"):
        command.refresh(prices.PriceTable({}), ["eastus"], command.http_get, dt.date(2026, 11, 23))


def test_an_api_that_fails_leaves_the_table_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The API's error answer (HTTP 503), then a machine with no route to it: one line each, exit 2."""
    out = tmp_path / "prices.json"
    out.write_text(json.dumps({"currency": "USD", "regions": {}}))
    listing = f"GET {prices.RETAIL_API}?$filter={prices.retail_filter('eastus')}"
    Replay({listing: (503, {"Error": {"Code": "ServiceUnavailable"}})}).install(monkeypatch)
    assert main(["prices", "refresh", "--region", "eastus", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: --region: cannot read the Retail Prices API (503 Server Error")
    monkeypatch.undo()

    def no_resolver(*args: Any, **kwargs: Any) -> Any:  # what a machine without a route to the API sees
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", no_resolver)
    assert main(["prices", "refresh", "--region", "eastus", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --region: cannot read the Retail Prices API (") and "Traceback" not in err
    assert json.loads(out.read_text()) == {"currency": "USD", "regions": {}}


def test_refresh_command_rewrites_the_table_whole(tmp_path: Path, retail_api: Serve) -> None:
    out = tmp_path / "prices.json"
    out.write_text(json.dumps({"_about": "team rates", "currency": "USD", "regions": {}}))
    retail_api()
    assert main(["prices", "refresh", "--region", "eastus", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["_about"] == "team rates"
    assert set(written["regions"]["eastus"]["Standard_ND96isr_H100_v5"]) == {"dedicated", "spot"}
    assert not (tmp_path / "prices.json.tmp").exists()


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"currency": "EUR", "regions": {}}, "currency"),
        ({"regions": {"eastus": {"Standard_ND96isr_H100_v5": {"dedicated": {"usd_per_hour": 0, "date": "d",
                                                                           "source": "s"}}}}},
         "regions.eastus.Standard_ND96isr_H100_v5.dedicated.usd_per_hour"),
        ({"regions": {"eastus": {"Standard_ND96isr_H100_v5": {"reserved": {}}}}},
         "regions.eastus.Standard_ND96isr_H100_v5.reserved"),
        ({"regions": {"eastus": {"Standard_ND96isr_H100_v5": {"spot": {"usd_per_hour": 1.0, "date": "d"}}}}},
         "regions.eastus.Standard_ND96isr_H100_v5.spot.source"),
    ],
)
def test_a_bad_user_table_exits_2_naming_file_and_key(
    table: dict[str, Any], key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(table))
    out = tmp_path / "plan"
    assert main(["plan", "--stack", "dev", "--out", str(out), "--prices", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and key in err and "Traceback" not in err
    assert not out.exists()
