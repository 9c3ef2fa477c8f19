"""Hourly prices of VM sizes per region and tier: the pricing table ``azurefacts/prices.json`` and its readers.

The table holds Linux prices in USD per node-hour, as Azure's public Retail Prices API publishes them
(``https://prices.azure.com/api/retail/prices``), each figure with the date it was read and where from::

    {
      "currency": "USD",
      "regions": {
        "eastus": {
          "Standard_ND96isr_H100_v5": {
            "dedicated": {"usd_per_hour": 98.32, "date": "2026-09-16", "source": "..."},
            "spot": {...}, "low_priority": {...}
          }
        }
      }
    }

Tiers: ``dedicated`` (the pay-as-you-go meter, what an Azure ML ``dedicated`` cluster node costs),
``low_priority`` (the "Low Priority" meter, what an Azure ML ``low_priority`` node costs) and ``spot``
(the "Spot" meter, kept for reference). Azure ML adds no surcharge to the VM price of its clusters.

A size, region or tier missing from the table has an *unknown* price, never zero: :func:`PriceTable.price`
returns None and every report says "unknown". A user's table (``--prices FILE``, e.g. negotiated rates)
overrides the shipped one figure by figure.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azurefacts.naming import arm_region
from azurefacts.skus import CATALOGUE
from kernel import bounded

DEFAULT_TABLE = Path(__file__).with_name("prices.json")
TIERS = ("dedicated", "low_priority", "spot")
HOURS_PER_MONTH = 730
"""Azure's billing convention for a month of a running VM (the pricing calculator's 730 hours)."""

RETAIL_API = "https://prices.azure.com/api/retail/prices"
RETAIL_SOURCE = "Azure Retail Prices API (prices.azure.com/api/retail/prices)"


class PriceTableError(ValueError):
    """A pricing table that cannot be read; ``key`` names the bad entry."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Price:
    """One figure: USD per node-hour, and where and when it was read."""

    usd_per_hour: float
    date: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"usd_per_hour": self.usd_per_hour, "date": self.date, "source": self.source}


class PriceTable:
    """Prices by (region, size, tier); lookups are case-insensitive on region and size, as Azure's are."""

    def __init__(self, entries: Mapping[tuple[str, str, str], Price], currency: str = "USD") -> None:
        self.currency = currency
        self._entries = {(r.lower(), s.lower(), t): p for (r, s, t), p in entries.items()}
        self._names = {(r.lower(), s.lower(), t): (r, s, t) for (r, s, t) in entries}

    def price(self, size: str, region: str, tier: str) -> Price | None:
        """The figure for one node of ``size`` in ``region`` on ``tier``; None when the table has none."""
        return self._entries.get((arm_region(region), size.lower(), tier))

    @property
    def regions(self) -> list[str]:
        return sorted({r for r, _, _ in self._names.values()})

    def overridden_by(self, other: PriceTable) -> PriceTable:
        """This table with every figure ``other`` has replaced by ``other``'s."""
        merged = {self._names[k]: p for k, p in self._entries.items()}
        merged = {(r.lower(), s.lower(), t): p for (r, s, t), p in merged.items()}
        merged.update({k: p for k, p in other._entries.items()})
        return PriceTable(merged, other.currency)

    def to_json(self) -> dict[str, Any]:
        regions: dict[str, dict[str, dict[str, Any]]] = {}
        for key in sorted(self._entries):
            region, size, tier = self._names[key]
            regions.setdefault(region, {}).setdefault(size, {})[tier] = self._entries[key].to_json()
        return {"currency": self.currency, "regions": regions}


def parse(data: Any) -> PriceTable:
    """A table from its JSON form; raises :class:`PriceTableError` naming the bad key."""
    if not isinstance(data, Mapping):
        raise PriceTableError("expected a JSON object with 'currency' and 'regions'")
    currency = data.get("currency", "USD")
    if currency != "USD":
        raise PriceTableError(f"currency {currency!r} is not supported (budgets are in USD)", key="currency")
    regions = data.get("regions")
    if not isinstance(regions, Mapping):
        raise PriceTableError("expected a mapping of region -> size -> tier -> figure", key="regions")
    entries: dict[tuple[str, str, str], Price] = {}
    for region, sizes in regions.items():
        if not isinstance(sizes, Mapping):
            raise PriceTableError("expected a mapping of size -> tier -> figure", key=f"regions.{region}")
        for size, tiers in sizes.items():
            where = f"regions.{region}.{size}"
            if not isinstance(tiers, Mapping):
                raise PriceTableError("expected a mapping of tier -> figure", key=where)
            for tier, figure in tiers.items():
                if tier not in TIERS:
                    raise PriceTableError(f"tier {tier!r} is not one of {', '.join(TIERS)}", key=f"{where}.{tier}")
                entries[(region, size, tier)] = _figure(figure, f"{where}.{tier}")
    return PriceTable(entries, currency)


def _figure(figure: Any, key: str) -> Price:
    if not isinstance(figure, Mapping):
        raise PriceTableError("expected {usd_per_hour, date, source}", key=key)
    value = figure.get("usd_per_hour")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        # Zero would read as "free": a figure nobody knows is left out of the table instead.
        raise PriceTableError(f"usd_per_hour must be a positive number, not {value!r}", key=f"{key}.usd_per_hour")
    for field in ("date", "source"):
        if not isinstance(figure.get(field), str) or not figure[field].strip():
            raise PriceTableError(f"every figure needs its {field}", key=f"{key}.{field}")
    return Price(float(value), figure["date"], figure["source"])


def load(path: Path = DEFAULT_TABLE) -> PriceTable:
    """Read a table file; :class:`PriceTableError` (with the key) for a bad one, OSError for an unreadable one.
    ``--prices`` names a file of the repository, which a pull request writes: it is read within
    :data:`kernel.bounded.JSON_FILE_BYTES`, and one nested too deeply is a bad table, not a ``RecursionError``."""
    try:
        data = bounded.load_json_file(path, "a pricing table")
    except bounded.BoundedInputError as err:
        raise PriceTableError(err.message, key=f"line {err.line}" if err.line else None) from None
    except json.JSONDecodeError as err:
        raise PriceTableError(f"not valid JSON: {err.msg}", key=f"line {err.lineno}") from None
    return parse(data)


# --- the Retail Prices API ------------------------------------------------------------------------


def retail_filter(region: str) -> str:
    """The OData ``$filter`` for one region's virtual machine consumption prices."""
    return f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' and armRegionName eq '{region}'"


def tier_of(item: Mapping[str, Any]) -> str | None:
    """The tier an API item prices, or None for items that are not a Linux per-hour VM price."""
    if item.get("type") != "Consumption" or item.get("unitOfMeasure") != "1 Hour":
        return None
    if str(item.get("productName", "")).endswith("Windows"):
        return None  # Linux and Windows share a meter name; only the product name tells them apart
    meter = str(item.get("meterName", ""))
    if meter.endswith(" Spot"):
        return "spot"
    if meter.endswith(" Low Priority"):
        return "low_priority"
    return "dedicated"


def from_retail_items(
    items: Iterable[Mapping[str, Any]], *, date: str, sizes: Iterable[str] = CATALOGUE
) -> dict[tuple[str, str, str], Price]:
    """The figures for ``sizes`` among Retail Prices API items (current prices only: no end date).

    Raises :class:`PriceTableError` when one size, region and tier has two different current prices:
    the table must not pick one silently.
    """
    wanted = {s.lower(): s for s in sizes}
    found: dict[tuple[str, str, str], Price] = {}
    for item in items:
        size = wanted.get(str(item.get("armSkuName", "")).lower())
        tier = tier_of(item)
        if size is None or tier is None or item.get("effectiveEndDate") or item.get("currencyCode", "USD") != "USD":
            continue
        value = item.get("retailPrice")
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            continue  # a zero or missing price is not a price: the size stays unknown
        key = (str(item["armRegionName"]), size, tier)
        price = Price(float(value), date, RETAIL_SOURCE)
        if key in found and found[key].usd_per_hour != price.usd_per_hour:
            raise PriceTableError(
                f"two current {tier} prices for {size} in {key[0]}: {found[key].usd_per_hour} and {value}",
                key=f"regions.{key[0]}.{size}.{tier}",
            )
        found[key] = price
    return found


STALE_AFTER_DAYS = 180
"""Figures older than this get a warning: Azure changes GPU list prices several times a year."""


def short_source(source: str) -> str:
    """A figure's source up to its first detail (``SkyPilot's public catalogue of Azure VM prices``)."""
    return source.split(":", 1)[0].split(",", 1)[0].split(" (", 1)[0].strip()


def provenance(figures: Iterable[tuple[str, str]], *, today: dt.date) -> tuple[str, str | None]:
    """Where ``figures`` (date, source) come from, as one phrase (each source with its dates), and a warning when
    the oldest is more than :data:`STALE_AFTER_DAYS` days before ``today`` (None when none is)."""
    by_source: dict[str, set[str]] = {}
    for date, source in figures:
        by_source.setdefault(short_source(source), set()).add(date)
    if not by_source:
        return "no figures", None
    text = "; ".join(f"{source} ({', '.join(sorted(dates))})"
                     for source, dates in sorted(by_source.items(), key=lambda item: min(item[1])))
    dates = sorted(d for found in by_source.values() for d in found)
    stale = [d for d in dates if (today - dt.date.fromisoformat(d)).days > STALE_AFTER_DAYS]
    if not stale:
        return text, None
    return text, (f"prices read {', '.join(stale)} are more than {STALE_AFTER_DAYS} days old (today {today}): "
                  "list prices change; refresh them with `amlgpu prices refresh --region R`")

