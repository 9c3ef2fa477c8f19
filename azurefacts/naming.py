"""Azure's naming rules for the names a user writes, and the names the program derives.

Each rule is a pattern plus the sentence Azure itself uses to explain it, so a config error reads
like the portal's own message and points at the exact key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

from kernel import regex as linear


def arm_region(name: str) -> str:
    """A region as ARM and the pricing API spell it (``westeurope``), from either spelling a stack may use
    (``westeurope`` or the display name ``West Europe``)."""
    return name.lower().replace(" ", "")


@dataclass(frozen=True)
class NamingRule:
    what: str
    pattern: linear.Pattern | re.Pattern[str]
    """The rule as a pattern the whole name must match (the editor schema's ``pattern`` too)."""
    explanation: str

    def check(self, value: str) -> str:
        if not self.pattern.fullmatch(value):
            raise ValueError(f"{self.what} {value!r} is invalid: {self.explanation}")
        return value


WORKSPACE = NamingRule(
    "workspace name",
    linear.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{2,32}"),
    "3-33 characters, letters, digits, hyphens and underscores, starting with a letter or digit",
)
CLUSTER = NamingRule(
    "cluster name",
    # Azure rejects compute names that end in a hyphen followed only by digits ("gpu-1"). Python's re: RE2 has no
    # look-ahead, and this one is linear (read once, from the start: its `*` runs over the name, and `[0-9]+`
    # over the digits after each hyphen, so each character is read at most three times).
    re.compile(r"[A-Za-z](?![A-Za-z0-9-]*-[0-9]+$)[A-Za-z0-9-]{2,23}"),
    "3-24 characters, letters, digits and hyphens, starting with a letter, "
    "and not ending in a hyphen followed by digits",
)
ENVIRONMENT = NamingRule(
    "environment name",
    linear.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}"),
    "1-255 characters, letters, digits, '.', '-' and '_', starting with a letter or digit",
)
ASSET_VERSION = NamingRule(
    "version",
    # Azure's REST spec puts no pattern on asset version names (workspaces/environments/versions `name`,
    # Microsoft.MachineLearningServices 2024-04-01, as generated in Azure/bicep-types-az); container names
    # are limited to 255 characters there, and Azure ML's own anonymous versions are 64 hex digits.
    linear.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}"),
    "1-255 characters, letters, digits, '.', '-' and '_', starting with a letter or digit",
)
RUN = NamingRule(
    "run name",
    linear.compile(r"[A-Za-z][A-Za-z0-9_-]{0,254}"),
    "1-255 characters, letters, digits, '-' and '_', starting with a letter",
)
RESOURCE_GROUP = NamingRule(
    "resource group name",
    linear.compile(r"[A-Za-z0-9_().-]{0,89}[A-Za-z0-9_()-]"),
    "1-90 characters, letters, digits, '_', '-', '.', '(' and ')', not ending in '.'",
)


WorkspaceName = Annotated[str, AfterValidator(WORKSPACE.check)]
ClusterName = Annotated[str, AfterValidator(CLUSTER.check)]
EnvironmentName = Annotated[str, AfterValidator(ENVIRONMENT.check)]
AssetVersion = Annotated[str, AfterValidator(ASSET_VERSION.check)]
RunName = Annotated[str, AfterValidator(RUN.check)]
ResourceGroupName = Annotated[str, AfterValidator(RESOURCE_GROUP.check)]


_LOWER_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


def _stable_suffix(seed: str, length: int = 6) -> str:
    # Global names (storage, key vault, registry) must be unique across Azure; a short hash of the
    # resource group and workspace keeps them unique per deployment yet identical on every run.
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def global_name(kind: str, workspace: str, resource_group: str, max_len: int, *, hyphens: bool) -> str:
    """A deterministic, globally-unique-looking name for a workspace dependency.

    ``kind`` is a short prefix (``st``, ``kv``, ``cr``); storage and registry names allow only
    lowercase letters and digits, key vault names also allow hyphens.
    """
    suffix = _stable_suffix(f"{resource_group}/{workspace}/{kind}")
    body = workspace.lower()
    kept = _LOWER_ALNUM + ("-" if hyphens else "")
    body = "".join(c for c in body if c in kept).strip("-")
    room = max_len - len(kind) - len(suffix) - (2 if hyphens else 0)
    body = body[:room].strip("-")
    if hyphens:
        body = "-".join(part for part in body.split("-") if part)  # no leading or trailing one: one per run
        return "-".join(part for part in (kind, body, suffix) if part)
    return f"{kind}{body}{suffix}"
