"""Where Azure sells a catalogue size: the regions table ``azurefacts/availability.json``.

The table maps each catalogue size to its VM series and lists, per region, the series Microsoft's
"Products available by region" table shows as generally available there, with the date it was read.
It explains an *unknown* price: a size whose series is not listed in a region has no list price there,
and a cluster of it may not deploy (``amlgpu preflight`` asks the subscription's resource SKUs, which
are the authority). A listed series can still lack capacity or quota, so "listed" proves nothing more.

:func:`listed` answers True (listed), False (not listed) or None (unknown: a size the table does not
map, such as a retired one, or a region it does not cover). Nothing is inferred from other series;
:meth:`Availability.regions_with` names where a size is listed (what a finding or ``amlgpu init`` suggests).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from azurefacts.naming import arm_region
from kernel import bounded

TABLE = Path(__file__).with_name("availability.json")


@dataclass(frozen=True)
class Availability:
    """Size -> series, region -> series listed there, and when and where that was read."""

    series: dict[str, str]
    regions: dict[str, frozenset[str]]
    date: str
    source: str

    def series_of(self, size: str) -> str | None:
        return next((s for name, s in self.series.items() if name.lower() == size.lower()), None)

    def listed(self, size: str, region: str) -> bool | None:
        """Whether ``size``'s series is listed as generally available in ``region``; None when unknown."""
        series = self.series_of(size)
        offered = self.regions.get(arm_region(region))
        if series is None or offered is None:
            return None
        return series in offered

    def regions_with(self, size: str) -> list[str]:
        """The regions (ARM names, sorted) where ``size``'s series is listed; empty when the size is unmapped."""
        series = self.series_of(size)
        return sorted(region for region, offered in self.regions.items() if series is not None and series in offered)


REGIONS_SHOWN = 12
"""Regions a message names before it says how many more there are."""


def not_offered(size: str, region: str) -> str | None:
    """Why ``size`` cannot be had in ``region``, naming where it is listed and the table's date; None when it is
    listed there or the table does not know (the policy rule ``compute-size-offered-in-region`` and
    ``amlgpu init`` say this)."""
    table = load()
    if table.listed(size, region) is not False:
        return None
    where = table.regions_with(size)
    shown = ", ".join(where[:REGIONS_SHOWN]) + (f" and {len(where) - REGIONS_SHOWN} more"
                                                 if len(where) > REGIONS_SHOWN else "")
    return (f"{size} is not sold in {arm_region(region)} (Microsoft's products-by-region table as read "
            f"{table.date}); " + (f"it is listed in {shown}" if where else "no region the table covers lists it"))


@cache
def load(path: Path = TABLE) -> Availability:
    data = bounded.load_json_file(path, "a GPU availability table")
    return Availability(
        series=dict(data["series"]),
        regions={region: frozenset(series) for region, series in data["regions"].items()},
        date=data["date"],
        source=data["source"],
    )
