"""Which gate a stack gets is the platform owners' choice, never the stack file's: `amlgpu plan --stack S`
reads ``policies/config.<S>.json`` when it exists (prod's selects the strict profile), else
``policies/config.json``."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.catalogue import RULES
from policies.packconfig import DEFAULT_PATH, default_path, load, resolve
from tests.conftest import ROOT

HYGIENE = [rule for rule in RULES if rule.hygiene]


@pytest.mark.parametrize(("stack", "strict"), [("prod", True), ("dev", False)])
def test_the_shipped_stacks_get_their_profile(stack: str, strict: bool) -> None:
    path = default_path(ROOT, stack)
    config = load(path) if path.is_file() else None
    settings = resolve(config, source=str(path))
    assert HYGIENE, "the catalogue marks hygiene rules"
    levels = {settings[rule.id].enforcement for rule in HYGIENE if rule.enforcement == "advisory"}
    assert levels == ({"mandatory"} if strict else {"advisory"})


def test_a_stack_without_its_own_config_falls_back_to_the_project_config(tmp_path: Path) -> None:
    assert default_path(tmp_path, "team-a") == tmp_path / DEFAULT_PATH
    own = tmp_path / "policies" / "config.team-a.json"
    own.parent.mkdir()
    own.write_text('{"profile": "strict"}\n')
    assert default_path(tmp_path, "team-a") == own
    assert default_path(tmp_path, "team-b") == tmp_path / DEFAULT_PATH
