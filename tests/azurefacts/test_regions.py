"""Region names: the table (``azurefacts/regions.json``) against its recorded sources, and every place a stack
names a region refusing what Azure does not have, with the closest names."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from amlgpu.cli import main
from azurefacts import availability, regions
from tests.conftest import NS, ROOT, dev_config, make_project

FIXTURES = ROOT / "tests" / "fixtures"


def test_the_table_is_azure_cores_list_plus_the_regions_microsoft_lists_gpus_in() -> None:
    with (FIXTURES / "regions" / "azure-core-locations.csv").open(newline="") as handle:
        expected = {row["name"]: row["display_name"] for row in csv.DictReader(handle)}
    assert len(expected) == 64
    for row in json.loads((FIXTURES / "region-availability" / "products-by-region-gpu.json").read_text()):
        expected.setdefault(row["region"].replace("-", ""), row["location"].split(" - ")[0])
    table = regions.load()
    assert table.names == expected
    assert set(availability.load().regions) <= set(table.names)  # every region with GPU series is a region


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("eastus3", "did you mean eastus, westus3 or eastus2?"),
        ("east-us-2", "did you mean eastus2?"),
        ("West_Europe", "did you mean westeurope?"),
        ("mars", "Azure's region names are like westeurope or eastus2"),
        ("", "Azure's region names are like westeurope or eastus2"),
    ],
)
def test_a_name_azure_does_not_have_is_refused_with_the_closest_ones(given: str, message: str) -> None:
    with pytest.raises(ValueError, match="is not an Azure region name") as refused:
        regions.check(given)
    assert message in str(refused.value)


@pytest.mark.parametrize("given", ["westeurope", "WestEurope", "West Europe", "eastus2", "belgiumcentral",
                                   "usgovvirginia"])
def test_arm_and_display_names_in_any_case_are_accepted(given: str) -> None:
    assert regions.check(given) == given


def _stack(tmp_path: Path, mutate: Any) -> Path:
    config = dev_config()
    mutate(config)
    return make_project(tmp_path / "project", config)


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda c: c.update({"azure-native:location": "eastus3"}), "azure-native:location"),
        (lambda c: c[f"{NS}:clusters"][0].update({"location": "eastus3"}), f"{NS}:clusters[0].location"),
        (lambda c: (c.pop("azure-native:location"), c[f"{NS}:workspace"].update({"location": "eastus3"})),
         f"{NS}:workspace.location"),
    ],
    ids=["provider-location", "cluster-location", "workspace-location"],
)
def test_plan_exits_2_naming_the_key_and_the_closest_region(
        tmp_path: Path, mutate: Any, key: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    project = _stack(tmp_path, mutate)
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "test"]) == 2
    err = capsys.readouterr().err
    assert f"{key}  'eastus3' is not an Azure region name: did you mean eastus" in err, err
    assert err.count("eastus3") == 1 and "Traceback" not in err  # one problem, not also "no region"
    assert not (project / "build").exists()


def test_init_refuses_a_region_azure_does_not_have(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", dev_config())
    monkeypatch.chdir(project)
    assert main(["init", "--stack", "mine", "--region", "east-us-2"]) == 2
    assert "--region: 'east-us-2' is not an Azure region name: did you mean eastus2?" in capsys.readouterr().err
    assert not (project / "Pulumi.mine.yaml").exists()
    assert main(["init", "--stack", "mine", "--region", "West Europe"]) == 0
    assert "  azure-native:location: westeurope\n" in (project / "Pulumi.mine.yaml").read_text()  # ARM's spelling


def test_a_misspelt_stack_name_gets_the_closest_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", dev_config(), stack="dev")
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "dve"]) == 2
    err = capsys.readouterr().err
    assert "no stack file Pulumi.dve.yaml" in err and "did you mean dev?" in err
    assert main(["plan", "--stack", "zzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err
