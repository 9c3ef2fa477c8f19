"""Pipelines and sweeps on this machine: what Azure ML would run, one run after another.

* A pipeline's steps run in the order their bindings give (a step after every step whose output it binds;
  otherwise as declared). Each step is a run of its own (:func:`jobs.emulate.prepare.prepare`), in
  ``<work folder>/<step>/``; an input bound to ``${{parent.jobs.<step>.outputs.<x>}}`` is that step's local
  output folder, one bound to ``${{parent.inputs.<x>}}`` the pipeline input's value (a data input: the
  local path given with ``--input <x>=PATH``). Every step is prepared before the first starts, so bad
  input stops the pipeline before anything runs.
* A sweep runs ``trials`` trials of its trial run, each with parameters drawn from ``search_space`` as
  Azure ML draws them (``loguniform``: ``exp(uniform(min_value, max_value))``, ``q`` families rounded to a
  multiple of ``q``; grid sampling walks the choices in order; random and Bayesian sampling draw at random
  with the sweep's seed, 0 by default), substituted into ``${{search_space.<name>}}``, in
  ``<work folder>/trial-<n>/``. A pipeline's sweep step runs the same way, in ``<work folder>/<step>/trial-<n>/``;
  Azure ML gives later steps the best trial's outputs, by a metric run-local does not read: they bind trial 1's.

``--nodes`` and ``--procs-per-node`` cap every step (trial): a step declaring fewer keeps its own.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.emulate.errors import EmulationError
from jobs.emulate.prepare import Prepared, Request, prepare
from jobs.pipelines import ResolvedComposite
from kernel import regex as linear
from stack.pipelines import binding
from stack.resolved import ResolvedRun
from stack.sweeps import SEARCH_SPACE


@dataclass(frozen=True)
class LocalStep:
    """One run of a pipeline or sweep, ready to start."""

    name: str
    """The step's name, or ``trial-<n>``."""
    run: ResolvedRun
    """The run as emulated (bindings and sampled parameters filled in)."""
    prepared: Prepared
    parameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """A trial's sampled values, by parameter."""


def step_order(spec: Mapping[str, Any]) -> list[str]:
    """A pipeline's steps in an order that runs each after the steps whose outputs it binds (declared order
    otherwise); refuses bindings to steps that do not exist and steps that wait on each other."""
    steps: Mapping[str, Any] = spec["jobs"]
    needs: dict[str, list[str]] = {}
    for name, step in steps.items():
        needs[name] = []
        for key, value in (step.get("inputs") or {}).items():
            bound = binding(value)
            if bound is not None and bound.kind == "jobs":
                if bound.name not in steps or bound.output not in (steps[bound.name].get("outputs") or {}):
                    raise EmulationError(f"step {name!r} input {key!r} binds {value}, which no step produces",
                                         key=f"jobs.{name}.inputs.{key}")
                needs[name].append(bound.name)
    order: list[str] = []
    while len(order) < len(steps):
        ready = [name for name in steps if name not in order and all(n in order for n in needs[name])]
        if not ready:
            waiting = ", ".join(name for name in steps if name not in order)
            raise EmulationError(f"steps {waiting} wait on each other's outputs: none can start", key="jobs")
        order.append(ready[0])
    return order


def _capped(request: Request, build: Callable[[Request], Prepared]) -> Prepared:
    """``build(request)``, where ``--nodes``/``--procs-per-node`` above what the run declares mean the run's own."""
    while True:
        try:
            return build(request)
        except EmulationError as err:
            if err.key == "--nodes" and request.nodes is not None:
                request = dataclasses.replace(request, nodes=None)
            elif err.key == "--procs-per-node" and request.procs_per_node is not None:
                request = dataclasses.replace(request, procs_per_node=None)
            else:
                raise


def _prepared(run: ResolvedRun, request: Request, *, key: str, root: Path, workdir: Path,
              environ: Mapping[str, str]) -> Prepared:
    """``run`` prepared under ``workdir`` (:func:`_capped`); an error about one of its keys names it under ``key``
    (``jobs.<step>``, ``trial``), an error about a flag stays as it is."""
    def build(capped: Request) -> Prepared:
        return prepare(run, capped, root=root, workdir=workdir, environ=environ)

    try:
        return _capped(request, build)
    except EmulationError as err:
        if err.is_flag:
            raise
        raise EmulationError(err.message, key=f"{key}.{err.key}") from None


def _local_io(folder: Path, spec: Mapping[str, Any], name: str) -> Path:
    """Where ``prepare`` puts a step's output ``name`` under its work folder."""
    output = (spec.get("outputs") or {}).get(name) or {}
    base = folder / "outputs" / name
    return base / name if isinstance(output, dict) and output.get("type") == "uri_file" else base


def prepare_pipeline(job: ResolvedComposite, runs: Mapping[str, ResolvedRun], request: Request, *, root: Path,
                     workdir: Path, environ: Mapping[str, str], trials: int = 1) -> list[LocalStep]:
    """Every step of pipeline ``job`` prepared under ``workdir``, in the order they run; a sweep step as
    ``trials`` trials (``<step>/trial-<n>``), sampled as a sweep job's are.

    ``request.inputs``: values of the pipeline's inputs (``NAME=VALUE``, a local path for a data input), and of
    a step's own data inputs as ``STEP.NAME=PATH``."""
    spec = job.spec
    declared = spec.get("inputs") or {}
    unknown = sorted(k for k in request.inputs if "." not in k and k not in declared)
    if unknown:
        raise EmulationError(f"pipeline {job.name!r} has no input {unknown[0]!r} (its inputs: "
                             f"{', '.join(declared) or 'none'}); a step's own input is STEP.NAME", key="--input")
    steps: list[LocalStep] = []
    folders: dict[str, Path] = {}
    for name in step_order(spec):
        run = runs[f"{job.name}/{name}"]
        folders[name] = workdir / name
        inputs = dict(run.spec.get("inputs") or {})
        given = {k.split(".", 1)[1]: v for k, v in request.inputs.items() if k.split(".", 1)[0] == name and "." in k}
        for key, value in (spec["jobs"][name].get("inputs") or {}).items():
            bound = binding(value)
            if bound is None:
                continue
            if bound.kind == "jobs":
                path = _local_io(folders[bound.name], runs[f"{job.name}/{bound.name}"].spec, bound.output)
                inputs[key] = {"type": "uri_folder", "path": str(path)}
                given[key] = str(path)
            elif bound.kind == "inputs":
                if bound.name not in declared:
                    raise EmulationError(f"step {name!r} input {key!r} binds {value}, which the pipeline does not "
                                         "declare", key=f"jobs.{name}.inputs.{key}")
                source = declared[bound.name]
                inputs[key] = source
                if bound.name in request.inputs:
                    given[key] = request.inputs[bound.name]
            else:
                inputs[key] = {"type": "uri_folder", "path": str(workdir / "pipeline-outputs" / bound.name)}
                given[key] = str(workdir / "pipeline-outputs" / bound.name)
                (workdir / "pipeline-outputs" / bound.name).mkdir(parents=True, exist_ok=True)
        local = dataclasses.replace(run, spec={**run.spec, "inputs": inputs})
        step_request = dataclasses.replace(request, inputs=given)
        if spec["jobs"][name].get("type") == "sweep":
            steps += _trials(spec["jobs"][name], local, step_request, count=trials, key=f"jobs.{name}", root=root,
                             workdir=folders[name], environ=environ, prefix=f"{name}/")
            folders[name] = folders[name] / "trial-1"  # what later steps bind: the first trial's outputs
            continue
        prepared = _prepared(local, step_request, key=f"jobs.{name}", root=root, workdir=folders[name],
                             environ=environ)
        steps.append(LocalStep(name, local, prepared))
    return steps


# ------------------------------------------------------------------------------------------ sweeps


def _round(value: float, q: float) -> float | int:
    rounded = round(value / q) * q
    return int(rounded) if isinstance(q, int) and float(rounded).is_integer() else rounded


def _draw(parameter: Mapping[str, Any], rng: random.Random) -> Any:
    kind = parameter["type"]
    if kind == "choice":
        return rng.choice(list(parameter["values"]))
    if kind == "randint":
        return rng.randrange(int(parameter["upper"]))
    if kind in ("uniform", "loguniform", "quniform", "qloguniform"):
        value = rng.uniform(parameter["min_value"], parameter["max_value"])
    else:
        value = rng.gauss(parameter["mu"], parameter["sigma"])
    if kind.startswith(("log", "qlog")):
        value = math.exp(value)
    return _round(value, parameter["q"]) if kind.startswith("q") else value


def sample(spec: Mapping[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` sets of parameter values for a sweep, as Azure ML's sampling would draw them (see the module
    docstring); grid sampling gives at most the number of combinations."""
    space: Mapping[str, Mapping[str, Any]] = spec["search_space"]
    algorithm = spec["sampling_algorithm"]
    kind = algorithm if isinstance(algorithm, str) else algorithm["type"]
    if kind == "grid":
        names = list(space)
        grid = itertools.product(*(space[n]["values"] for n in names))
        return [dict(zip(names, values, strict=True)) for values in itertools.islice(grid, count)]
    seed = algorithm.get("seed", 0) if isinstance(algorithm, dict) else 0
    rng = random.Random(seed)
    return [{name: _draw(parameter, rng) for name, parameter in space.items()} for _ in range(count)]


def shown(value: Any) -> str:
    """A sampled value as the command receives it."""
    if isinstance(value, float):
        return format(value, ".6g")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _substitute(parameters: Mapping[str, Any]) -> Callable[[linear.Match], str]:
    def value(match: linear.Match) -> str:
        return shlex.quote(shown(parameters[match.group(1)]))

    return value


def prepare_sweep(job: ResolvedComposite, trial: ResolvedRun, request: Request, *, trials: int, root: Path,
                  workdir: Path, environ: Mapping[str, str]) -> list[LocalStep]:
    """``trials`` trials of sweep ``job`` prepared under ``workdir``, each with its sampled parameters."""
    return _trials(job.spec, trial, request, count=trials, key="trial", root=root, workdir=workdir, environ=environ)


def _trials(spec: Mapping[str, Any], trial: ResolvedRun, request: Request, *, count: int, key: str, root: Path,
            workdir: Path, environ: Mapping[str, str], prefix: str = "") -> list[LocalStep]:
    """``count`` trials of a sweep (a sweep job's ``spec``, a sweep step's node) prepared in
    ``workdir/trial-<n>``, each with its sampled parameters; an error about a key names it under ``key``."""
    steps = []
    for number, parameters in enumerate(sample(spec, count), 1):
        command = SEARCH_SPACE.sub(_substitute(parameters), trial.spec["command"])
        local = dataclasses.replace(trial, spec={**trial.spec, "command": command})
        folder = workdir / f"trial-{number}"
        prepared = _prepared(local, request, key=key, root=root, workdir=folder, environ=environ)
        steps.append(LocalStep(f"{prefix}trial-{number}", local, prepared, parameters))
    return steps
