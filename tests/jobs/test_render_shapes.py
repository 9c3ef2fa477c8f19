"""Job files rendered once per shape are byte-identical to job files rendered by azure-ai-ml run by run.

:func:`jobs.render.job_document` serialises a job through azure-ai-ml once per distinct shape (the spec without
its free texts) and fills each run's texts into that document. Every file here is rendered both ways, the
shape cache on and off, over the shipped stacks, Microsoft's public examples, every kind of setting, a
generated stack, pipelines and sweeps, and texts chosen to break the filling (the slot marker itself,
line breaks, characters the emitter escapes, empty values).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs import render
from jobs.pipeline_render import composite_yaml
from jobs.pipelines import resolve_composites
from jobs.resolve import resolve_all
from stack import stackfile
from stack.config import from_stackfile
from tests.conftest import ROOT
from tests.jobs.test_pipelines import pipeline, sweep
from tests.jobs.test_pipelines import root as pipeline_root  # noqa: F401  (a fixture)
from tests.jobs.test_render import EXAMPLES, _stack_runs, project, shipped_runs  # noqa: F401  (project: a fixture)
from tests.jobs.test_resolve import stack

sys.path.insert(0, str(ROOT / "bench"))
import gen_stack  # bench/ is a folder of scripts, not a package

pytestmark = [pytest.mark.filterwarnings("ignore:::marshmallow"), pytest.mark.filterwarnings("ignore:::azure")]


@pytest.fixture(autouse=True)
def _fresh_shapes() -> Iterator[None]:
    render._shapes.clear()
    yield
    render._shapes.clear()


def _both_ways(monkeypatch: pytest.MonkeyPatch, make: Callable[[], str]) -> str:
    """``make()`` with the shape cache off, then on (twice: filling the cache, then reading it): all equal."""
    with monkeypatch.context() as off:
        off.setattr(render, "_SHAPES", 0)
        off.setattr(render, "_shapes", {})
        direct = make()
        assert not render._shapes
    cached, again = make(), make()
    assert cached.encode() == direct.encode() and again.encode() == direct.encode()
    return direct


def _job_files(monkeypatch: pytest.MonkeyPatch, specs: list[dict[str, Any]], root: Path) -> None:
    out = root / "build" / "jobs"
    for spec in specs:
        _both_ways(monkeypatch, functools.partial(render.job_yaml, spec, code_relative_to=out, root=root))


def test_shipped_and_example_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [run.spec for name in ("dev", "prod") for run in shipped_runs(name)]
    for team in sorted((ROOT / "examples" / "multi-team").glob("Pulumi.*.yaml")):
        specs += [run.spec for run in resolve_all(from_stackfile(stackfile.read(team), ROOT), ROOT)]
    _job_files(monkeypatch, specs, ROOT)
    assert len(render._shapes) < len(specs)  # some runs shared a shape: the cache was read, not only filled


def test_a_generated_stack_of_many_shapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generated = gen_stack.write_project(tmp_path / "p", gen_stack.stack_config(60))
    config = from_stackfile(stackfile.read(generated / "Pulumi.bench.yaml"), generated)
    _job_files(monkeypatch, [run.spec for run in resolve_all(config, generated)], generated)


def test_microsofts_examples_and_every_kind_of_setting(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    runs = _stack_runs(project, EXAMPLES["jobs"], EXAMPLES["clusters"])
    from tests.jobs.test_render import test_every_kind_of_setting_round_trips as settings

    (marks,) = [mark for mark in settings.pytestmark if mark.name == "parametrize"]
    base = {"name": "r", "code": "src", "command": "python train.py", "environment": "acpt-pytorch",
            "compute": "gpu-a100", "distribution": {"type": "pytorch"}}
    declared = [{**base, **fields, "name": f"r{i}"} for i, fields in enumerate(marks.args[1])]
    runs += _stack_runs(project, declared)
    _job_files(monkeypatch, [run.spec for run in runs], project)


TEXTS = [
    "amlgpuslot0", "python train.py amlgpuslot1", "", " ", "line one\nline two\n", "caf\u00e9 \U0001f680 \u0085",
    "${{inputs.data}}", "null", "true", "123", "- a list?", "key: value",
]
"""Free texts that could confuse the filling: the marker, YAML look-alikes, what the emitter quotes or escapes."""


def test_texts_that_could_confuse_the_filling(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    (run,) = _stack_runs(project, [{"name": "r", "code": "src", "command": "python train.py",
                                    "environment": "acpt-pytorch", "compute": "gpu-a100",
                                    "distribution": {"type": "pytorch"}}])
    specs = []
    for i, text in enumerate(TEXTS):
        for key in ("command", "display_name", "description", "experiment_name"):
            specs.append({**run.spec, key: text or run.spec.get(key, "")})
        specs.append({**run.spec, "tags": {"note": text, "other": TEXTS[i - 1]},
                      "environment_variables": {"A": text, "B": text}, "properties": {"p": text}})
    specs.append({**run.spec, "tags": {"amlgpuslot0": "x"}})  # the marker in a key: rendered run by run
    for compute in ("azureml:gpu-a100", "gpu-a100", "local", "azureml:local", "azureml:a:1", "azureml:amlgpuslot0"):
        specs.append({**run.spec, "compute": compute})
    for environment in ("azureml:acpt:1", "azureml:acpt", "acpt:1", "azureml:acpt@latest", "azureml:a.b:1.2-x",
                        "azureml://registries/azureml/environments/x/versions/3", "azureml:acpt:", "azureml:a:b:c",
                        {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:1"}):
        specs.append({**run.spec, "environment": environment})
    _job_files(monkeypatch, specs, project)
    assert render._shapes and all(key[0].count(render._SLOT) for key in render._shapes)


def test_pipelines_and_sweeps(pipeline_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    jobs = [pipeline(), sweep(), pipeline(name="other", inputs={"epochs": 5}), sweep(name="s2", compute="gpu-a100")]
    out = pipeline_root / "build" / "jobs"
    for job, _ in resolve_composites(stack(pipeline_root, jobs), pipeline_root):
        _both_ways(monkeypatch, functools.partial(composite_yaml, job.spec, code_relative_to=out, root=pipeline_root))


def test_a_shape_whose_slot_the_schema_changes_is_rendered_run_by_run() -> None:
    assert render._slots_whole({"a": ["amlgpuslot0", {"b": 1}], "c": "amlgpuslot1"}, {"amlgpuslot0", "amlgpuslot1"})
    assert not render._slots_whole({"a": "azureml:amlgpuslot0"}, {"amlgpuslot0"})
    assert not render._slots_whole({"amlgpuslot0": "x"}, {"amlgpuslot0"})
    assert not render._slots_whole(["amlgpuslot7"], {"amlgpuslot0"})
