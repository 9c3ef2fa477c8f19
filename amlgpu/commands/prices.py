"""``amlgpu prices``: the pricing table behind ``cost.json`` and the budget rules.

``amlgpu prices refresh [--region R ...]`` rewrites ``azurefacts/prices.json`` (or ``--out FILE``) from Azure's
public Retail Prices API (no credentials): for each region, every Linux per-hour price of the GPU size
catalogue and of the image-build size, pay-as-you-go, low-priority and spot, following the API's
``NextPageLink`` paging. Regions refreshed are replaced whole; the other regions of the table stay as
they were. Each figure records the day it was read and its source. A size the API does not price in a
region stays out of the table (its price is unknown, never zero).

``amlgpu prices show`` prints the table's figures, each with its date and source, then the sources; a warning
(stderr) names the dates more than 180 days old.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from azurefacts import prices
from azurefacts.skus import CATALOGUE
from kernel import bounded
from kernel.errors import EXIT_OK, UserError
from planning.artifacts import write_text
from stack.infrastructure import ImageBuildCompute

MAX_PAGES = 200
"""A region's VM prices fill a few pages of 1000 items; more than this means the API misbehaves."""
TIMEOUT_S = 60

Fetch = Callable[[str], Mapping[str, Any]]
"""GET one URL of the Retail Prices API and return its JSON body."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "prices",
        help="the pricing table: refresh it from Azure's Retail Prices API, or show it",
        description=__doc__,
    )
    what = parser.add_actions()
    refresh = what.add_parser("refresh", help="rewrite the table from the Retail Prices API (online)")
    refresh.add_argument("--region", action="append", metavar="R",
                         help="an ARM region name (eastus2); repeat for more (default: the table's regions)")
    refresh.add_argument("--out", type=Path, default=prices.DEFAULT_TABLE,
                         help="the table to write (default: %(default)s)")
    refresh.set_defaults(func=run_refresh)
    show = what.add_parser("show", help="print the table's figures")
    show.add_argument("--prices", type=Path, default=prices.DEFAULT_TABLE, help="the table to read")
    show.set_defaults(func=run_show)


class ApiError(Exception):
    """The Retail Prices API could not be read: no answer, an HTTP error, or a body that is not JSON."""


def http_get(url: str) -> Mapping[str, Any]:
    """The live fetch: one GET with ``requests``, JSON body (the API needs no credentials)."""
    import requests

    try:
        response = requests.get(url, headers={"Accept": "application/json", "User-Agent": "amlgpu"},
                                timeout=TIMEOUT_S)  # the fixed https host of the API
        response.raise_for_status()
        body: Mapping[str, Any] = response.json()
    except requests.RequestException as err:  # no route, a timeout, an HTTP error status, a body not JSON
        raise ApiError(str(err)) from None
    return body


def pages(region: str, fetch: Fetch) -> Iterator[Mapping[str, Any]]:
    """Every item of one region's VM consumption prices, page after page (``NextPageLink``)."""
    url: str | None = f"{prices.RETAIL_API}?{urllib.parse.urlencode({'$filter': prices.retail_filter(region)})}"
    for _ in range(MAX_PAGES):
        assert url is not None
        body = fetch(url)
        items = body.get("Items")
        if not isinstance(items, list):
            raise UserError(f"the Retail Prices API answered without an Items list for {region}", key="--region")
        yield from items
        url = body.get("NextPageLink") or None
        if url is None:
            return
        if not url.startswith(prices.RETAIL_API):
            raise UserError(f"the Retail Prices API sent a next page outside it: {url!r}", key="--region")
    raise UserError(f"the Retail Prices API sent over {MAX_PAGES} pages for {region}", key="--region")


def refresh(table: prices.PriceTable, regions: list[str], fetch: Fetch, today: dt.date) -> prices.PriceTable:
    """``table`` with ``regions`` replaced by what the API prices today for the catalogue sizes."""
    sizes = [*CATALOGUE, ImageBuildCompute.model_fields["size"].default]
    wanted = {r.lower() for r in regions}
    kept = {
        (region, size, tier): figure
        for region, by_size in table.to_json()["regions"].items() if region.lower() not in wanted
        for size, by_tier in by_size.items()
        for tier, figure in by_tier.items()
    }
    entries = {key: prices.Price(**figure) for key, figure in kept.items()}
    for region in regions:
        try:
            fresh = prices.from_retail_items(pages(region, fetch), date=today.isoformat(), sizes=sizes)
        except prices.PriceTableError as err:
            raise UserError(str(err), key=err.key) from None
        entries.update(fresh)
    return prices.PriceTable(entries)


def _read(path: Path) -> prices.PriceTable:
    try:
        return prices.load(path)
    except FileNotFoundError:
        raise UserError("pricing table not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the pricing table: {err}", file=str(path)) from None
    except prices.PriceTableError as err:
        raise UserError(str(err), file=str(path), key=err.key) from None


def run_refresh(args: argparse.Namespace, fetch: Fetch = http_get) -> int:
    table = _read(args.out) if args.out.exists() else prices.PriceTable({})
    regions = [r.strip().lower() for r in (args.region or table.regions)]
    if not regions or not all(r.isalnum() for r in regions):
        raise UserError(f"expected ARM region names such as eastus2, got {regions or 'none'}", key="--region")
    about = bounded.load_json_file(args.out, "a pricing table").get("_about") if args.out.exists() else None
    try:
        fresh = refresh(table, regions, fetch, dt.date.today())
    except ApiError as err:
        raise UserError(f"cannot read the Retail Prices API ({err}); the table is unchanged", key="--region") from None
    data = {**({"_about": about} if about else {}), **fresh.to_json()}
    staging = args.out.with_name(args.out.name + ".tmp")
    write_text(staging, json.dumps(data, indent=2) + "\n")
    os.replace(staging, args.out)  # all at once: a reader never sees half a table
    counts = {r: sum(1 for _ in _figures(fresh, r)) for r in regions}
    print(f"Wrote {args.out}: " + ", ".join(f"{n} figure(s) in {r}" for r, n in counts.items()), file=sys.stderr)
    return EXIT_OK


def _figures(table: prices.PriceTable, region: str) -> Iterator[tuple[str, str, prices.Price]]:
    for size, by_tier in table.to_json()["regions"].get(region, {}).items():
        for tier, figure in by_tier.items():
            yield size, tier, prices.Price(**figure)


def run_show(args: argparse.Namespace) -> int:
    table = _read(args.prices)
    figures = [(region, *row) for region in table.regions for row in sorted(_figures(table, region))]
    for region, size, tier, figure in figures:
        print(f"{region:<14} {size:<32} {tier:<13} {figure.usd_per_hour:>10.4f} USD/h  {figure.date}  "
              f"{prices.short_source(figure.source)}")
    said, stale = prices.provenance(((f.date, f.source) for *_, f in figures), today=dt.date.today())
    print(f"Sources: {said}; each figure's full source is in {args.prices}.")
    if stale:
        print(f"warning: {stale}", file=sys.stderr)
    return EXIT_OK
