"""The docs speak to users and say what the code does: no notes from the people who wrote them, and every
count or claim that the code decides is checked against the code."""

from __future__ import annotations

import copy
import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from amlgpu.cli import main
from azurefacts import capabilities
from policies.catalogue import RULES
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.policies.test_baseline import sarif_fingerprint

PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.md")))

INTERNAL = {
    r"\bissues? #?\d+": "a reference to the project's own tracker",
    r"\blent\b": "how the page's writers were equipped",
    r"\bthis (session|task)\b": "the writers' own work",
    r"found by code search": "a source that is not named",
    r"\bcoordinator\b": "the project's own process",
}


@pytest.mark.parametrize("page", PAGES)
def test_pages_carry_no_internal_notes(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    found = [f"{page}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r} ({why})"
             for pattern, why in INTERNAL.items() for m in re.finditer(pattern, text, re.I)]
    assert found == []


def test_the_internal_notes_check_catches_what_it_looks_for() -> None:
    samples = ["as issue 12 showed", "no GPU machine was lent to the tasks", "in this session", "Issues #7"]
    assert all(any(re.search(p, s, re.I) for p in INTERNAL) for s in samples)


@pytest.mark.parametrize("page", PAGES)
def test_rule_counts_are_the_catalogues(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    for evaluated, disabled in re.findall(r"\| Rules evaluated \| (\d+) \((\d+) disabled\) \|", text):
        assert int(evaluated) + int(disabled) == len(RULES), page
    for count in re.findall(r"^(\d+) rules$", text, re.M):
        assert int(count) == len(RULES), page


def test_the_deepspeed_section_shows_as_many_ways_as_it_says() -> None:
    text = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    section = text.split("## DeepSpeed", 1)[1].split("\n## ", 1)[0]
    words = {"Two": 2, "Three": 3, "Four": 4}
    said = re.search(r"^(\w+) ways\.", section, re.M)
    assert said and said.group(1) in words
    runs = [name for block in re.findall(r"```yaml stack\n(.*?)```", section, re.S)
            for name in re.findall(r"- name: (deepspeed-[\w-]+)", block)]
    assert len(runs) == words[said.group(1)], runs
    assert "for all three" in section and words[said.group(1)] == 3


def test_the_infiniband_page_claims_only_what_the_evidence_table_says() -> None:
    """The images the page says have the InfiniBand user space are those the table marks present; the ones it
    calls unknown are unknown there."""
    text = " ".join((ROOT / "docs" / "infiniband.md").read_text(encoding="utf-8").split())
    said = text.split("have it (their public build recipes", 1)[0].rsplit("support.", 1)[1]
    unknown = text.split("For the Azure Container for PyTorch (ACPT) images", 1)[1].split("reports it as unknown", 1)[0]
    images = {
        "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:1": "openmpi4.1.0-cuda",
        "mcr.microsoft.com/azureml/curated/tensorflow-2.16-cuda12:1": "tensorflow-2.16-cuda",
        "nvcr.io/nvidia/pytorch:24.01-py3": "NGC PyTorch",
    }
    for image, named in images.items():
        assert named in said and capabilities.of_reference(image).state("infiniband") == "present", image
    assert "openmpi5.0-cuda" in unknown
    for image in ("mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
                  "mcr.microsoft.com/azureml/openmpi5.0-cuda12.4-ubuntu22.04:1"):
        assert capabilities.of_reference(image).state("infiniband") == "unknown", image


def test_the_gitops_guides_first_sample_is_what_the_plan_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """docs/gitops.md, "What the comment looks like": a change that runs ddp-train with 4 processes per node
    and waives run-gpus-left-idle for it. Every line the sample shows is a line of the real pull-request
    comment (``--format markdown``: the table, then the stack's policy.md), in order (the workflow's marker
    comment aside; the expiry date and base label are the sample's)."""
    config = dev_config()
    project = make_project(tmp_path / "project", config, stack="dev")
    monkeypatch.chdir(project)
    assert main(["plan", "--stack", "dev", "--out", str(tmp_path / "base")]) in (0, 1)
    changed = copy.deepcopy(config)
    changed[f"{NS}:jobs"][0]["distribution"]["process_count_per_instance"] = 4
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": changed}, sort_keys=False))
    assert main(["plan", "--stack", "dev", "--out", str(tmp_path / "review")]) == 1  # the finding, as reviewed
    expires = (dt.date.today() + dt.timedelta(days=30)).isoformat()
    changed[f"{NS}:waivers"] = [{"rule": "run-gpus-left-idle", "resource": "ddp-train", "expires": expires,
                                 "reason": "Pipeline-parallel model, each process drives two GPUs (ML-42)",
                                 "fingerprint": sarif_fingerprint(tmp_path / "review", "run-gpus-left-idle")}]
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": changed}, sort_keys=False))
    capsys.readouterr()
    assert main(["plan", "--stack", "dev", "--out", str(tmp_path / "head"), "--base", str(tmp_path / "base"),
                 "--format", "markdown"]) == 0
    written = capsys.readouterr().out.replace(str(tmp_path / "base"), "main (<commit>)")
    assert (tmp_path / "head" / "policy.md").read_text().replace(str(tmp_path / "base"), "main (<commit>)") in written
    guide = (ROOT / "docs" / "gitops.md").read_text()
    sample = guide.split("### What the comment looks like", 1)[1].split("```markdown\n", 1)[1].split("```", 1)[0]
    lines = iter(written.replace(expires, "2027-01-31").splitlines())
    for line in sample.splitlines()[1:]:  # the first is the workflow's marker
        assert any(line == got for got in lines), f"not in the plan's policy.md (or out of order): {line}"
