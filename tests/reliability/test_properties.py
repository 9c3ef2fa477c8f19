"""Property-based: whatever stack a user writes, ``amlgpu plan`` either plans it, with outputs that keep the
model's invariants, or exits 2 naming a key that is in the file; never anything else. The same holds for
``amlgpu run-local``'s flags.

Three layers, from cheap to dear:

* the stack model (:func:`stack.config.build`) on many generated stacks: valid ones, valid ones with one
  value replaced, removed or added anywhere in the tree, and wild ones broken at every level;
* the whole ``amlgpu plan`` (program under the mock engine, policy pack, every output file) on a bounded
  number of stacks, about half of them broken on purpose;
* ``amlgpu run-local`` with fuzzed flags, on a run whose processes exit at once.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import string
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amlgpu.cli import main
from azurefacts import skus
from kernel.errors import ConfigError
from stack import NAMESPACE
from stack.config import LOCATION_KEY, StackConfig, build, from_stackfile
from stack.infrastructure import INT32_MAX
from stack.stackfile import read
from tests.conftest import ROOT, make_project
from tests.reliability.test_corpus import snapshot

FILE = "Pulumi.prop.yaml"
IMAGES = (
    "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
    "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20240701.v1",
    "nvcr.io/nvidia/pytorch:24.01-py3",
)

# ------------------------------------------------------------------------------------------------ valid stacks

cluster_names = st.from_regex(r"[a-z][a-z0-9]{2,8}(-[a-z][a-z0-9]{0,6})?", fullmatch=True).filter(
    lambda name: name != "image-builder"
)


@st.composite
def valid_clusters(draw: st.DrawFn) -> dict[str, Any]:
    maximum = draw(st.integers(1, 8) | st.just(INT32_MAX))
    cluster = {"name": draw(cluster_names), "size": draw(st.sampled_from(sorted(skus.CATALOGUE))),
               "max_instances": maximum}
    if draw(st.booleans()):
        cluster["min_instances"] = draw(st.integers(0, min(maximum, 8)))
    if draw(st.booleans()):
        cluster["tier"] = draw(st.sampled_from(["dedicated", "low_priority"]))
    if draw(st.booleans()):
        cluster["enable_node_public_ip"] = draw(st.booleans())
    return cluster


@st.composite
def valid_runs(draw: st.DrawFn, clusters: list[str]) -> dict[str, Any]:
    kind = draw(st.sampled_from(["pytorch", "mpi", "tensorflow"]))
    distribution: dict[str, Any] = {"type": kind}
    if draw(st.booleans()):
        distribution["worker_count" if kind == "tensorflow" else "process_count_per_instance"] = draw(
            st.integers(1, 8))
    return {
        "name": draw(st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True)),
        "code": "jobs/workloads",
        "command": draw(st.sampled_from(["python train_ddp.py --epochs 1", "torchrun train_ddp.py"])),
        "environment": draw(st.sampled_from(["acpt", "azureml:acpt-pytorch-2.2-cuda12.1:18"])),
        "compute": draw(st.sampled_from(clusters)),
        "resources": {"instance_count": draw(st.integers(1, 4))},
        "distribution": distribution,
        "limits": {"timeout": 600},
    }


@st.composite
def valid_stacks(draw: st.DrawFn) -> dict[str, Any]:
    """A stack file's config mapping that validates: generated clusters and runs in a small workspace."""
    clusters = draw(st.lists(valid_clusters(), min_size=1, max_size=2, unique_by=lambda c: c["name"].lower()))
    names = [c["name"] for c in clusters]
    return {
        "azure-native:location": "westeurope",
        f"{NAMESPACE}:workspace": {"name": "mlw-prop", "public_network_access": draw(
            st.sampled_from(["Disabled", "Enabled"]))},
        f"{NAMESPACE}:clusters": clusters,
        f"{NAMESPACE}:environments": [{"name": "acpt", "version": "1", "image": IMAGES[0]}],
        f"{NAMESPACE}:jobs": draw(st.lists(valid_runs(names), max_size=2, unique_by=lambda r: r["name"].lower())),
    }


# ------------------------------------------------------------------------------------------------ broken stacks

nasty_values = st.one_of(
    st.integers(-3, 3), st.integers(INT32_MAX - 1, INT32_MAX + 1), st.integers(10**15, 10**30),
    st.sampled_from([True, False, 1.5, 2.0, -0.0, "2", "", None, [], {}, [{}], {"a": None}, "[secret]"]),
    st.sampled_from(["gpu-1", "1gpu", "g" * 25, "-x", "GPU-A100", "image-builder", "azureml:", "${{inputs.x}}"]),
    st.text(max_size=12),
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [path, *(p for key, item in inner for p in _paths(item, (*path, key)))]


@st.composite
def perturbed_stacks(draw: st.DrawFn) -> dict[str, Any]:
    """A valid stack with one node anywhere replaced, removed, given an unknown key or duplicated."""
    config = draw(valid_stacks())
    path = draw(st.sampled_from([p for p in _paths(config) if len(p) >= 1]))
    parent: Any = config
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["replace", "remove", "unknown key", "duplicate"]))
    target = parent[path[-1]]
    if action == "replace":
        parent[path[-1]] = draw(nasty_values)
    elif action == "remove":
        del parent[path[-1]]
    elif action == "unknown key" and isinstance(target, dict):
        target[draw(st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12))] = 1
    elif isinstance(target, list) and target:
        target.append(copy.deepcopy(target[0]))
    else:
        parent[path[-1]] = [target, target]
    return config


names = st.one_of(
    cluster_names,
    st.text(alphabet=string.ascii_letters + string.digits + "-_. ", max_size=30),
    st.sampled_from(["gpu-1", "1gpu", "g" * 25, "-gpu", "GPU-A100", "gpu-a100", "image-builder", ""]),
)
counts = st.one_of(st.integers(-3, 8), st.integers(INT32_MAX - 1, INT32_MAX + 1), st.integers(10**15, 10**30),
                   st.sampled_from([True, False, 1.5, 2.0, "2", None, [], {}]))


@st.composite
def wild_stacks(draw: st.DrawFn) -> dict[str, Any]:
    """Broken at every level at once: names, sizes, counts, references."""
    clusters = draw(st.lists(st.fixed_dictionaries(
        {"name": names, "size": st.sampled_from(sorted(skus.CATALOGUE)) | st.sampled_from(["Standard_X", "", 96]),
         "max_instances": counts},
        optional={"min_instances": counts, "tier": st.sampled_from(["dedicated", "low_priority", "spot"]),
                  "enable_node_public_ip": st.sampled_from([True, False, "no"])},
    ), max_size=3))
    known = [c["name"] for c in clusters if isinstance(c["name"], str)]
    runs = draw(st.lists(st.fixed_dictionaries({
        "name": names, "code": st.sampled_from(["jobs/workloads", "src/missing", "/abs", "../up"]),
        "command": st.just("python train.py"), "environment": st.sampled_from(["acpt", "azureml:x:1"]) | names,
        "compute": (st.sampled_from(known) | names) if known else names,
        "resources": st.fixed_dictionaries({"instance_count": counts}),
        "distribution": st.fixed_dictionaries({"type": st.sampled_from(["pytorch", "mpi", "tensorflow", "ray"])}),
    }), max_size=2))
    return {
        "azure-native:location": "westeurope",
        f"{NAMESPACE}:workspace": {"name": draw(names)},
        f"{NAMESPACE}:clusters": clusters,
        f"{NAMESPACE}:environments": [{"name": draw(names), "version": "1", "image": IMAGES[0]}],
        f"{NAMESPACE}:jobs": runs,
    }


# ------------------------------------------------------------------------------------------------ the model


def _key_is_in(config: dict[str, Any], key: str) -> None:
    """Every part of the key an error names is in the stack, but perhaps the last (a missing key)."""
    if key == LOCATION_KEY:
        return
    head, _, path = key.partition(":")
    assert head == NAMESPACE, key
    parts = [p for p in re.split(r"\.|\[(\d+)\]", path) if p]
    node: Any = config[f"{NAMESPACE}:{parts[0]}"] if len(parts) > 1 else config
    for part in parts[1:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]


def _model_invariants(config: StackConfig) -> None:
    for section in (config.clusters, config.environments, config.jobs):
        lowered = [item.name.lower() for item in section]
        assert len(lowered) == len(set(lowered))
    for cluster in config.clusters:
        assert 0 <= cluster.min_instances <= cluster.max_instances <= INT32_MAX
        assert cluster.size in skus.CATALOGUE
    for run in config.jobs:
        assert run.compute in {c.name for c in config.clusters}
        assert run.environment in {e.name for e in config.environments} or run.environment.startswith("azureml:")
        assert run.resources.instance_count >= 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.one_of(valid_stacks(), perturbed_stacks(), wild_stacks()))
def test_the_stack_model_accepts_with_invariants_or_refuses_naming_a_key(config: dict[str, Any]) -> None:
    prefix = f"{NAMESPACE}:"
    values = {k.removeprefix(prefix): copy.deepcopy(v) for k, v in config.items() if k.startswith(prefix)}
    location = config.get("azure-native:location")
    try:
        model = build(values, location=location if isinstance(location, str) else None, file=FILE, root=ROOT)
    except ConfigError as err:
        assert err.file == FILE
        assert err.key is not None and err.key.startswith((prefix, LOCATION_KEY)), err
        assert err.message and "\n" not in err.message
        _key_is_in(config, err.key)
        return
    _model_invariants(model)


def test_the_generators_reach_both_outcomes() -> None:
    """The property above means little if every generated stack fails (or passes) the same way."""
    outcomes: set[str] = set()

    @settings(max_examples=60, deadline=None, database=None)
    @given(config=st.one_of(valid_stacks(), perturbed_stacks(), wild_stacks()))
    def collect(config: dict[str, Any]) -> None:
        values = {k.removeprefix(f"{NAMESPACE}:"): v for k, v in config.items() if k.startswith(NAMESPACE)}
        try:
            build(values, location="westeurope", file=FILE, root=ROOT)
            outcomes.add("accepted")
        except ConfigError:
            outcomes.add("refused")

    collect()
    assert outcomes == {"accepted", "refused"}


# ------------------------------------------------------------------------------------------------ whole plans


def _break(config: dict[str, Any], how: str) -> None:
    cluster = config[f"{NAMESPACE}:clusters"][0]
    jobs = config[f"{NAMESPACE}:jobs"]
    run = {"name": "extra", "code": "jobs/workloads", "command": "python x.py", "environment": "acpt",
           "compute": cluster["name"], "distribution": {"type": "pytorch"}}
    if how == "min above max":
        cluster["min_instances"] = min(cluster["max_instances"], INT32_MAX - 1) + 1
        cluster["max_instances"] = cluster["min_instances"] - 1
    elif how == "max beyond int32":
        cluster["max_instances"] = INT32_MAX + 1
    elif how == "max a boolean":
        cluster["max_instances"] = True
    elif how == "name ending in hyphen-digits":
        cluster["name"] = "gpu-1"
    elif how == "duplicate name in another case":
        config[f"{NAMESPACE}:clusters"].append({**cluster, "name": cluster["name"].upper()})
    elif how == "unknown key":
        cluster["max_instance"] = 2
    elif how == "run on a missing cluster":
        jobs.append({**run, "compute": "nowhere"})
    elif how == "zero instances":
        jobs.append({**run, "resources": {"instance_count": 0}})


BREAKS = ("min above max", "max beyond int32", "max a boolean", "name ending in hyphen-digits",
          "duplicate name in another case", "unknown key", "run on a missing cluster", "zero instances")


@pytest.fixture(scope="module")
def plan_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("prop"), {}, stack="prop")


def _plan(project: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.chdir(project)
        code = main(["plan", "--stack", "prop", "--format", "json"])
    return code, out.getvalue(), err.getvalue()


def _plan_invariants(project: Path) -> None:
    """What was written agrees with the stack model of the same file."""
    model = from_stackfile(read(project / FILE), project)
    folder = project / "build" / "prop"
    resources = json.loads((folder / "resources.json").read_text(encoding="utf-8"))
    outputs = json.loads((folder / "outputs.json").read_text(encoding="utf-8"))
    computes = {r["inputs"]["computeName"]: r["inputs"]["properties"]["properties"]
                for r in resources if r["type"] == "azure-native:machinelearningservices:Compute"}
    for compute in computes.values():
        assert compute["scaleSettings"]["minNodeCount"] <= compute["scaleSettings"]["maxNodeCount"]
    for cluster in model.clusters:
        inner = computes[cluster.name]
        assert inner["vmSize"] == cluster.size
        assert inner["scaleSettings"]["minNodeCount"] == cluster.min_instances
        assert inner["scaleSettings"]["maxNodeCount"] == cluster.max_instances
        assert inner["enableNodePublicIp"] is cluster.enable_node_public_ip
        assert outputs["clusters"][cluster.name]["max_instances"] == cluster.max_instances
    assert set(outputs["clusters"]) == {c.name for c in model.clusters}
    private = model.workspace.public_network_access == "Disabled"
    assert set(computes) == {c.name for c in model.clusters} | ({"image-builder"} if private else set())
    declared = {r.name for r in model.jobs}
    assert set(outputs["jobs"]) == declared
    for spec in outputs["jobs"].values():
        assert spec["compute"].removeprefix("azureml:") in computes
    written = {p.stem for p in (folder / "jobs").glob("*.yml")}
    assert written == declared


@pytest.mark.slow  # 15 whole plans: about 6 CPU s
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=valid_stacks(), breakage=st.none() | st.sampled_from(BREAKS))
def test_amlgpu_plan_plans_with_invariants_or_exits_2(
    plan_project: Path, config: dict[str, Any], breakage: str | None
) -> None:
    if breakage is not None:
        _break(config, breakage)
    (plan_project / FILE).write_text(yaml.safe_dump({"config": config}, sort_keys=False), encoding="utf-8")
    folder = plan_project / "build" / "prop"
    before = snapshot(folder) if folder.exists() else None

    code, out, err = _plan(plan_project)

    assert "Traceback" not in out + err
    if breakage is None:
        assert code in (0, 1), err  # 1: a mandatory policy failed; every file is still written
        _plan_invariants(plan_project)
    else:
        assert code == 2, (breakage, err)
        # Each problem as `FILE:LINE:COL  KEY  MESSAGE` (a key of the namespace), then the count.
        diagnostic = re.compile(rf"{re.escape(FILE)}(:\d+:\d+)?  {NAMESPACE}:")
        assert [line for line in err.splitlines() if diagnostic.match(line)], err
        assert err.splitlines()[-1].startswith("error: ") and FILE in err.splitlines()[-1], err
        assert (snapshot(folder) if folder.exists() else None) == before


# ------------------------------------------------------------------------------------------------ run-local

NOOP_RUN = {
    "name": "noop", "code": "jobs/workloads", "command": 'python -c "import os; assert os.environ[\'RANK\']"',
    "environment": "acpt", "compute": "gpu", "resources": {"instance_count": 2},
    "distribution": {"type": "pytorch", "process_count_per_instance": 2}, "limits": {"timeout": 60},
}
"""A run whose four processes check their launch contract and exit at once."""


@pytest.fixture(scope="module")
def local_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = {
        "azure-native:location": "westeurope",
        f"{NAMESPACE}:workspace": {"name": "mlw-local"},
        f"{NAMESPACE}:clusters": [{"name": "gpu", "size": "Standard_ND96asr_v4", "max_instances": 2}],
        f"{NAMESPACE}:environments": [{"name": "acpt", "version": "1", "image": IMAGES[0]}],
        f"{NAMESPACE}:jobs": [NOOP_RUN],
    }
    return make_project(tmp_path_factory.mktemp("local"), config, stack="local")


flag_values = st.one_of(
    st.integers(-3, 4).map(str),
    st.integers(10**18, 10**30).map(str),
    st.sampled_from(["", "x", "1.5", "2.0", "nan", "inf", "-inf", "1e-300", "1e300", " 2", "0x1", "1_0", "٢"]),
    st.text(max_size=6),
)


def _number(text: str | None, kind: type[int] | type[float], default: float) -> float | None:
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        return None


def _acceptable(job: str, nodes: str | None, procs: str | None, timeout: str | None) -> bool:
    """The documented contract: a declared run; whole numbers from 1 up to the declared topology (emulation
    only scales down); a timeout above 0 seconds."""
    counts = [_number(nodes, int, 1), _number(procs, int, 1)]
    seconds = _number(timeout, float, 1.0)
    return (job == "noop" and all(c is not None and 1 <= c <= 2 for c in counts)
            and seconds is not None and seconds > 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=st.sampled_from(["noop", "noop", "nope", ""]), nodes=st.none() | flag_values,
       procs=st.none() | flag_values, timeout=st.none() | flag_values)
@example(job="noop", nodes=None, procs=None, timeout=None)  # the declared topology: 2 nodes x 2 processes
@example(job="noop", nodes="1", procs="2", timeout="30")
@example(job="noop", nodes="3", procs=None, timeout=None)  # more than declared
def test_run_local_flags_exit_2_when_bad_and_never_a_traceback(
    local_project: Path, job: str, nodes: str | None, procs: str | None, timeout: str | None
) -> None:
    argv = ["run-local", job, "--stack", "local"]
    for flag, value in (("--nodes", nodes), ("--procs-per-node", procs), ("--timeout", timeout)):
        if value is not None:
            argv.append(f"{flag}={value}")  # '=' keeps values such as '-1' attached to their flag
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        patch.chdir(local_project)
        patch.setattr(tempfile, "tempdir", scratch)  # run-local's work folders land here, not in /tmp
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exited:  # argparse refusing a flag value
                code = int(exited.code or 0)

    assert "Traceback" not in out.getvalue() + err.getvalue()
    if _acceptable(job, nodes, procs, timeout):
        # 124: a timeout too short for the processes to finish is the run's outcome, not bad input.
        assert code in (0, 124), (argv, err.getvalue()[-2000:])
    else:
        assert code == 2, (argv, err.getvalue()[-2000:])
        assert "error:" in err.getvalue()
