"""examples/: every example stack validates and plans offline with no mandatory policy failure, exactly as a
team that copies it to its project root will see it; the multi-team layout keeps its promises."""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from azurefacts import availability
from stack.config import from_stackfile
from stack.stackfile import read
from tests.conftest import NS, ROOT, make_project, shipped_stacks

EXAMPLES = shipped_stacks("examples/multi-team")
MULTI_TEAM = ROOT / "examples" / "multi-team"


def _stack_name(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def test_the_multi_team_layout_has_several_stacks() -> None:
    assert len(shipped_stacks("examples/multi-team")) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_example_stack_validates(path: Path) -> None:
    config = from_stackfile(read(path), ROOT)
    assert config.clusters


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_example_stack_plans_offline_without_a_mandatory_failure(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Copied to a project root (the README's step 2) and planned with the real CLI."""
    stack = _stack_name(path)
    project = make_project(tmp_path / "project", {}, stack=stack)
    shutil.copy(path, project / path.name)  # the file as shipped, comments and all
    if path.parent == MULTI_TEAM:  # the README's step 2: the platform's pack config comes along
        (project / "policies").mkdir(exist_ok=True)
        shutil.copy(MULTI_TEAM / "policy-config.json", project / "policies" / "config.json")
    monkeypatch.chdir(project)
    code = main(["plan", "--stack", stack, "--format", "json"])
    summary = json.loads(capsys.readouterr().out)["stacks"][0]
    assert code == 0, (project / "build" / stack / "policy.md").read_text()
    assert summary["policy"]["mandatory_failures"] == 0
    declared = yaml.safe_load(path.read_text())["config"].get(f"{NS}:jobs", [])
    # Declared runs, plus the generated fabric check of each InfiniBand cluster.
    generated = {r for r in summary["runs"] if r.startswith("fabric-check-")}
    assert sorted(set(summary["runs"]) - generated) == sorted(run["name"] for run in declared)
    for run in summary["runs"]:
        assert (project / "build" / stack / "jobs" / f"{run}.yml").is_file()


@pytest.mark.parametrize("path", [*EXAMPLES, *shipped_stacks()],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_shipped_stack_uses_gpu_sizes_microsoft_sells_in_its_region(path: Path) -> None:
    """What we ship as a model to copy must deploy: no cluster on a size whose series Microsoft's
    products-by-region table leaves out of the stack's region (``azurefacts/availability.json``)."""
    config = from_stackfile(read(path), ROOT)
    sold = availability.load()
    for cluster in config.clusters:
        region = config.workspace_location
        assert sold.listed(cluster.size, region) is True, (cluster.name, cluster.size, region)


def test_teams_do_not_collide() -> None:
    """Distinct workspaces and resource groups, and address spaces that can be peered with each other."""
    configs = [from_stackfile(read(path), ROOT) for path in shipped_stacks("examples/multi-team")]
    workspaces = [c.workspace.name for c in configs]
    groups = [c.workspace.resource_group_name for c in configs]
    assert len(set(workspaces)) == len(workspaces) and len(set(groups)) == len(groups)
    spaces = [ipaddress.ip_network(c.network.address_space) for c in configs if c.network.creates_network]
    assert len(spaces) >= 2
    for i, space in enumerate(spaces):
        for other in spaces[i + 1:]:
            assert not space.overlaps(other), f"{space} overlaps {other}"


def test_every_example_stack_has_an_owner_and_a_line_in_the_readme() -> None:
    owners = (MULTI_TEAM / "CODEOWNERS").read_text()
    readme = (MULTI_TEAM / "README.md").read_text()
    for path in shipped_stacks("examples/multi-team"):
        assert f"/{path.name} " in owners
        assert f"`{path.name}`" in readme
    assert "amlgpu plan --stack" in readme


def _owners(codeowners: str, path: str) -> set[str]:
    """GitHub's CODEOWNERS semantics for the patterns used here: the last matching line wins; ``/x/`` is a
    folder anchored at the root, ``/x`` a root file, ``*`` everything."""
    owners: set[str] = set()
    for line in codeowners.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pattern, *names = line.split()
        if pattern == "*" or (pattern.endswith("/") and path.startswith(pattern.lstrip("/"))) or (
            path == pattern.lstrip("/")
        ):
            owners = set(names)
    return owners


GATE_FILES = (".github/workflows/pr.yml", ".github/workflows/pr-publish.yml", ".github/CODEOWNERS",
              "policies/config.json", "policies/rules/runs/gpus.py", "Makefile", "pyproject.toml", "Pulumi.yaml",
              "__main__.py", "kernel/secrets.py", "analysis/interconnect.py", "azurefacts/prices.json",
              "stack/config.py", "planning/engine.py")


@pytest.mark.parametrize("path", GATE_FILES)
def test_the_platform_owners_alone_own_what_decides_the_gate(path: str) -> None:
    assert _owners((ROOT / ".github" / "CODEOWNERS").read_text(), path) == {"@YOUR-ORG/platform-owners"}
    assert _owners((MULTI_TEAM / "CODEOWNERS").read_text(), path) == {"@example-org/ml-platform"}


def test_each_team_alone_owns_its_stack_file_and_waivers_are_the_platforms() -> None:
    codeowners = (MULTI_TEAM / "CODEOWNERS").read_text()
    for path in shipped_stacks("examples/multi-team"):
        team = _stack_name(path)
        assert _owners(codeowners, path.name) == {f"@example-org/{team}"}
        assert f"{NS}:waivers" not in yaml.safe_load(path.read_text())["config"]
    pack = json.loads((MULTI_TEAM / "policy-config.json").read_text())
    assert pack["policy-waivers"]["stack_file"] == "none"
    from policies.packconfig import load

    load(MULTI_TEAM / "policy-config.json")  # a valid pack config
