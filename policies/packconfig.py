"""Pack config: per-rule enforcement and parameters, in CrossGuard's policy-config shape.

The same dict drives both gates::

    {
      "all": {"enforcementLevel": "advisory"},                     # optional, every rule
      "compute-max-nodes": {"enforcementLevel": "mandatory", "max_nodes_per_cluster": 16},
      "compute-allowed-sizes": {"allowed_sizes": ["Standard_ND96isr_H100_v5"]},
      "run-tensorflow-parameter-servers": "disabled",              # a bare level is accepted too
      "policy-waivers": {"max_days": 90, "waivers": [...]},        # waiver governance: policies.waivers
      "profile": "strict"                                          # optional: hygiene rules mandatory
    }

Profiles (``"profile"``): ``default`` leaves every rule at its own level; ``strict`` makes every
hygiene rule (no timeout, unpinned environments, images and build bases, a small /dev/shm)
mandatory. A rule's own entry wins, then ``all``, then the profile.

CrossGuard reads it from ``pulumi preview --policy-pack policies --policy-pack-config FILE``; the
offline gate from a JSON file the caller names (:func:`load`). A rule id or parameter the pack
does not know is an error, not a silently ignored setting.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kernel import bounded
from kernel.errors import ConfigError
from policies.catalogue import BY_ID
from policies.rule import ENFORCEMENTS, Enforcement, Rule
from policies.waivers import CONFIG_KEY as WAIVERS_KEY
from policies.waivers import settings as waiver_settings

DEFAULT_PATH = Path("policies") / "config.json"
"""The project's pack config, relative to its root: ``amlgpu plan`` reads it unless told otherwise, the
deploy workflow passes it to ``pulumi up --policy-pack-config``, and CrossGuard reads the platform's
waivers from it. It belongs to the platform owners (CODEOWNERS)."""
LEVEL_KEY = "enforcementLevel"
ALL = "all"
PROFILE = "profile"
PROFILES = ("default", "strict")
STRICT_CONFIG = Path(__file__).with_name("strict.json")
"""The shipped pack config of the strict profile."""


def default_path(root: Path, stack: str | None) -> Path:
    """The pack config ``amlgpu plan --stack STACK`` reads unless told otherwise: the platform owners'
    ``policies/config.<stack>.json`` when it exists (prod's selects the strict profile), else
    :data:`DEFAULT_PATH` (also without a stack name: CrossGuard started without ``PULUMI_STACK``). Both live
    under ``policies/``, which CODEOWNERS gives the platform owners: a stack file cannot choose a laxer gate
    for itself."""
    if not stack:
        return root / DEFAULT_PATH
    per_stack = root / DEFAULT_PATH.with_name(f"config.{stack}.json")
    return per_stack if per_stack.is_file() else root / DEFAULT_PATH


def for_stack(root: Path, stack: str | None, given: Path | None = None) -> dict[str, Any] | None:
    """The pack config a stack's gate uses: ``given`` (``--policy-config``), else :func:`default_path` when that
    file exists, else none (every rule at its default)."""
    path = given or default_path(root, stack)
    return load(path) if given is not None or path.is_file() else None


@dataclass(frozen=True)
class RuleSettings:
    """One rule's effective enforcement and parameters."""

    enforcement: Enforcement
    params: Mapping[str, Any]


def defaults(rule: Rule) -> RuleSettings:
    return RuleSettings(rule.enforcement, MappingProxyType(dict(rule.parameters)))


def _level(value: Any, source: str, key: str) -> Enforcement:
    if value == "remediate":  # CrossGuard's level for fixing policies; these rules only validate
        return "mandatory"
    if value not in ENFORCEMENTS:
        raise ConfigError(f"enforcement level {value!r} is not one of {', '.join(ENFORCEMENTS)}", file=source, key=key)
    level: Enforcement = value
    return level


def _param(rule: Rule, name: str, value: Any, source: str) -> Any:
    key = f"{rule.id}.{name}"
    if name not in rule.parameters:
        known = ", ".join(rule.parameters) or "none"
        raise ConfigError(f"rule {rule.id} has no parameter {name!r} (parameters: {known})", file=source, key=key)
    default = rule.parameters[name]
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError("expected a list of strings", file=source, key=key)
        return tuple(value)
    # Otherwise an integer parameter (the only other kind a rule may declare, see policies.rule).
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # CrossGuard hands numbers over as floats
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError("expected a non-negative integer", file=source, key=key)
    return value


def _entry(value: Any, source: str, key: str) -> tuple[Enforcement | None, dict[str, Any]]:
    if isinstance(value, str):
        return _level(value, source, key), {}
    if not isinstance(value, Mapping):
        raise ConfigError("expected an enforcement level or a mapping", file=source, key=key)
    params = {k: v for k, v in value.items() if k != LEVEL_KEY}
    level = _level(value[LEVEL_KEY], source, f"{key}.{LEVEL_KEY}") if LEVEL_KEY in value else None
    return level, params


def resolve(pack_config: Mapping[str, Any] | None, *, source: str = "policy pack config") -> dict[str, RuleSettings]:
    """Every rule's effective settings: its defaults, then ``all``, then its own entry.

    Raises :class:`~kernel.errors.ConfigError` naming ``source`` and the key for an unknown rule, an
    unknown parameter, a bad level or a value of the wrong type.
    """
    config = dict(pack_config or {})
    profile = config.pop(PROFILE, "default")
    if profile not in PROFILES:
        raise ConfigError(f"profile {profile!r} is not one of {', '.join(PROFILES)}", file=source, key=PROFILE)
    for key in config:
        if key not in (ALL, WAIVERS_KEY) and key not in BY_ID:
            close = difflib.get_close_matches(key, list(BY_ID), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else " (see `amlgpu policy list`)"
            raise ConfigError(f"unknown rule{hint}", file=source, key=key)
    every_level, every_params = _entry(config[ALL], source, ALL) if ALL in config else (None, {})
    if every_params:
        raise ConfigError("'all' takes only enforcementLevel", file=source, key=f"{ALL}.{next(iter(every_params))}")
    out = {}
    for rule_id, rule in BY_ID.items():
        level, params = _entry(config[rule_id], source, rule_id) if rule_id in config else (None, {})
        default: Enforcement = "mandatory" if profile == "strict" and rule.hygiene else rule.enforcement
        out[rule_id] = RuleSettings(level or every_level or default, parameters(rule, params, source=source))
    return out


def parameters(rule: Rule, values: Mapping[str, Any], *, source: str) -> Mapping[str, Any]:
    """``rule``'s parameters: its defaults overridden by ``values`` (checked, ints restored from floats)."""
    checked = {name: _param(rule, name, value, source) for name, value in values.items()}
    return MappingProxyType({**rule.parameters, **checked})


def load(path: Path) -> dict[str, Any]:
    """Read a pack config JSON file (the ``--policy-pack-config`` file CrossGuard takes)."""
    try:
        data = bounded.load_json_file(path, "a pack config")
    except FileNotFoundError:
        raise ConfigError("policy pack config not found", file=str(path)) from None
    except OSError as err:
        raise ConfigError(f"cannot read policy pack config: {err.strerror or err}", file=str(path)) from None
    except bounded.BoundedInputError as err:
        raise ConfigError(str(err), file=path.name) from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"not valid JSON: {err.msg}", file=path.name, key=f"line {err.lineno}") from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object of rule id -> settings", file=path.name)
    resolve(data, source=path.name)  # fail now, naming the file, rather than at evaluation
    waiver_settings(data, source=path.name)
    return data
