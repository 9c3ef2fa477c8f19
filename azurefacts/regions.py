"""Azure's region names: the table ``azurefacts/regions.json``, and the check every region a stack names passes.

A stack names its region as ARM does (``westeurope``, ``eastus2``) or by its display name (``West
Europe``), in any letter case, as ARM accepts both. Anything else is refused with the closest names the
table holds (``eastus3``: "did you mean eastus, eastus2 or westus3?"; ``east-us-2``: "eastus2"), so a
typo fails before a plan is shown, not at ``pulumi up``. Which GPU series each region offers is
:mod:`azurefacts.availability`'s; the table here only says which names exist.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from azurefacts.naming import arm_region
from kernel import bounded

TABLE = Path(__file__).with_name("regions.json")


@dataclass(frozen=True)
class Regions:
    """ARM name -> display name, and where the list comes from."""

    names: dict[str, str]
    sources: tuple[str, ...]

    def canonical(self, region: str) -> str | None:
        """The ARM name of ``region`` (an ARM or display name, any case); None when it is not a region."""
        name = arm_region(region)
        return name if name in self.names else None

    def suggestions(self, region: str) -> list[str]:
        """Up to three region names close to ``region`` (separators ignored), closest first."""
        flat = "".join(c for c in region.lower() if not (c.isspace() or c in "_-"))  # separators ignored
        if flat in self.names:
            return [flat]
        return difflib.get_close_matches(flat, sorted(self.names), n=3, cutoff=0.75)

    def check(self, region: str) -> str:
        """``region`` unchanged when it names an Azure region; ValueError saying what it may have meant."""
        if self.canonical(region) is not None:
            return region
        close = self.suggestions(region)
        if close:
            hint = f"did you mean {_either(close)}?"
        else:
            hint = f"Azure's region names are like westeurope or eastus2 ({len(self.names)} known)"
        raise ValueError(f"{region!r} is not an Azure region name: {hint}")


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@cache
def load(path: Path = TABLE) -> Regions:
    data = bounded.load_json_file(path, "a regions table")
    return Regions(names=dict(data["regions"]), sources=tuple(data["sources"]))


def check(region: str) -> str:
    """:meth:`Regions.check` against the shipped table (a pydantic ``AfterValidator``)."""
    return load().check(region)
