"""``amlgpu plan --base``'s terminal tree marks each resource as ``pulumi preview`` does: ``+`` create, ``~`` update,
``+-`` replace, ``-`` delete (resources of the base the plan no longer has), no glyph when unchanged; each in its
colour when colour is on (none when piped); and a summary line in pulumi's words.

Through the console script, in a scratch project: the dev stack with a second cluster planned as the base, then
the stack changed (a cluster added, a cluster's max nodes raised, a cluster's size changed, an environment and its
run removed) and planned against it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.terminal import BRIGHT_MAGENTA, GREEN, RED, RESET, YELLOW
from planning.render import change_summary
from tests import cli
from tests.conftest import NS, dev_config, make_project

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cluster(name: str, max_instances: int = 2) -> dict[str, Any]:
    return {"name": name, "size": "Standard_ND96amsr_A100_v4", "min_instances": 0, "max_instances": max_instances,
            "tier": "dedicated"}


def _write(root: Path, config: dict[str, Any]) -> None:
    (root / "Pulumi.test.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """(the head plan's output with --color, the same piped without it, the base-reading message line)."""
    base = dev_config()
    base[f"{NS}:clusters"].append(_cluster("gpu-b"))
    root = make_project(tmp_path_factory.mktemp("project"), base)
    first = cli.amlgpu(root, "plan", "--stack", "test", "--out", "base")
    assert first.returncode in (0, 1), first.stderr
    head = dev_config()
    clusters = head[f"{NS}:clusters"]
    clusters[0]["size"] = "Standard_ND96amsr_A100_v4"  # the VM size is immutable: replaced
    clusters.append(_cluster("gpu-b", max_instances=4))  # max nodes: updated in place
    clusters.append(_cluster("gpu-c"))  # created
    head[f"{NS}:environments"] = [e for e in head[f"{NS}:environments"] if e["name"] != "tf-gpu"]  # deleted
    head[f"{NS}:jobs"] = [j for j in head[f"{NS}:jobs"] if j.get("environment") != "tf-gpu"]
    _write(root, head)
    coloured = cli.amlgpu(root, "--color", "plan", "--stack", "test", "--out", "head", "--base", "base")
    assert coloured.returncode in (0, 1), coloured.stderr
    piped = cli.amlgpu(root, "plan", "--stack", "test", "--out", "head2", "--base", "base")
    return coloured.stdout, piped.stdout, coloured.stderr


STEPS = [
    # (glyph, colour, the resource's line without its glyph and indentation)
    ("+ ", GREEN, "GpuCluster gpu-c"),
    ("+ ", GREEN, "machinelearningservices:Compute gpu-c  [replaced on immutable change]"),
    ("+ ", GREEN, "authorization:RoleAssignment gpu-c-access-storage-blob-data-contributor"),
    ("~ ", YELLOW, "machinelearningservices:Compute gpu-b  [replaced on immutable change]"),
    ("+-", BRIGHT_MAGENTA, "machinelearningservices:Compute gpu-a100  [replaced on immutable change]"),
    ("- ", RED, "Environment tf-gpu"),
    ("- ", RED, "machinelearningservices:EnvironmentVersion tf-gpu-1 (1)  [kept on delete]"),
    ("- ", RED, "BuildContextUpload tf-gpu-1-context (tf-gpu/1/c439c5431aef0763/)"),
    ("  ", None, "GpuCluster gpu-a100"),
    ("  ", None, "machinelearningservices:Workspace mlw-gpu-dev-workspace (mlw-gpu-dev)  [protected, replaced on "
                 "immutable change]"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("glyph", "colour", "label"), STEPS, ids=[s[2].split("  ")[0] for s in STEPS])
def test_each_resource_is_marked_with_its_step(planned: tuple[str, str, str], glyph: str, colour: str | None,
                                               label: str) -> None:
    coloured, piped, _ = planned
    shape = re.compile(rf"{re.escape(glyph)} (?:  )*{re.escape(label)}")
    lines = [line for line in piped.splitlines() if shape.fullmatch(line)]
    assert len(lines) == 1, piped[:4000]
    painted = [line for line in coloured.splitlines() if ANSI.sub("", line) == lines[0]]
    assert painted == ([f"{colour}{lines[0]}{RESET}"] if colour else [lines[0]])


@pytest.mark.slow
def test_the_summary_counts_each_step_in_pulumis_words(planned: tuple[str, str, str]) -> None:
    coloured, piped, _ = planned
    summary = [line for line in piped.splitlines() if line.startswith("Resources: ")]
    assert len(summary) == 1
    assert re.fullmatch(r"Resources: \+ 2 to create, ~ 1 to update, - 3 to delete, \+-1 to replace, \d+ unchanged",
                        summary[0]), summary
    assert f"{GREEN}+ 2 to create{RESET}, {YELLOW}~ 1 to update{RESET}, {RED}- 3 to delete{RESET}, " \
           f"{BRIGHT_MAGENTA}+-1 to replace{RESET}" in coloured
    assert "\x1b[" not in piped  # piped: no colour


@pytest.mark.slow
def test_the_base_folder_is_read_and_the_message_says_so(planned: tuple[str, str, str]) -> None:
    _, _, err = planned
    assert "Reading the base plan from base/resources.json..." in err
    assert "Planning the base" not in err


@pytest.mark.parametrize(
    ("counts", "azure", "text"),
    [
        ({"add": 0, "update": 0, "replace": 0, "remove": 0}, 40, "Resources: 40 unchanged"),
        ({"add": 2, "update": 1, "replace": 1, "remove": 1}, 44, "Resources: + 2 to create, ~ 1 to update, "
                                                                 "- 1 to delete, +-1 to replace, 40 unchanged"),
        ({"add": 0, "update": 0, "replace": 0, "remove": 5}, 10, "Resources: - 5 to delete, 10 unchanged"),
    ],
)
def test_change_summary(counts: dict[str, int], azure: int, text: str) -> None:
    assert change_summary({"counts": counts}, azure) == text
