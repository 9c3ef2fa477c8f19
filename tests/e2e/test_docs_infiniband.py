"""docs/infiniband.md's size table says what the catalogue (azurefacts/skus.py) says, size by size."""

from __future__ import annotations

import re

from azurefacts.skus import CATALOGUE
from tests.conftest import ROOT

_ROW = re.compile(r"^\| `(?P<size>Standard_\w+)` \| (?P<gpus>\d+)x [^|]+ \| (?P<ib>[^|]+) \| (?P<gbps>[^|]+) \| "
                  r"(?P<status>[^|]+) \|$", re.M)


def test_the_size_table_matches_the_catalogue() -> None:
    rows = {m.group("size"): m for m in _ROW.finditer((ROOT / "docs" / "infiniband.md").read_text())}
    assert set(rows) == set(CATALOGUE)
    for size, row in rows.items():
        sku = CATALOGUE[size]
        assert int(row.group("gpus")) == sku.gpus, size
        assert row.group("ib").startswith("yes") == sku.infiniband, size
        if sku.infiniband:
            assert sku.ib_generation in row.group("ib"), size
        expected_gbps = str(sku.ib_gbps_per_vm) if sku.ib_gbps_per_vm else "-"
        assert row.group("gbps").strip() == expected_gbps, size
        status = row.group("status").strip()
        assert status == "current" if sku.retired is None else sku.retired in status, size
