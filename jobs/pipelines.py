"""Pipelines and sweeps resolved against their stack: the Azure ML job each becomes, and the runs inside it.

Each command step of a pipeline, and a sweep's trial, is resolved exactly as a run
(:func:`jobs.resolve.resolve_run`: the stack's cluster and environment, the GPU-aware defaults, the launcher,
the code scan) and named ``<job>/<step>``; the policy pack judges it as it judges every run. The job's own
spec is then built from those resolved runs:

* a pipeline: ``type: pipeline`` with its ``settings`` (``default_compute`` as ``azureml:<cluster>``),
  ``inputs``, ``outputs`` and ``jobs``, each step the resolved run's spec (without the run's ``name`` and
  ``experiment_name``, which belong to the pipeline) with its bindings as written
  (``${{parent.jobs.<step>.outputs.<x>}}``, ``${{parent.outputs.<x>}}``);
  a sweep step is azure-ai-ml's sweep node: its trial run split into the node's keys (compute, input values,
  outputs, resources) and the trial component (command with each sampled input as ``${{inputs.<x>}}``, code,
  environment, distribution, the inputs and outputs the component declares), with the sweep's own keys;
* a sweep: ``type: sweep`` with ``compute``, ``inputs`` and ``outputs`` from the resolved trial, ``trial``
  holding its ``command``, ``code``, ``environment``, ``environment_variables``, ``resources`` and
  ``distribution``, and ``search_space``, ``sampling_algorithm``, ``objective``, ``limits`` and
  ``early_termination`` as declared.

The spec is what the ``jobs`` stack output holds and what :mod:`jobs.pipeline_render` writes as a job file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.resolve import Contents, Scans, _tidy, resolve_run, scanned
from stack.components import CommandComponent
from stack.config import StackConfig
from stack.inputs import Folded, of_defaults, of_pipeline, of_search_space
from stack.pipelines import (
    Composite,
    PipelineJob,
    SweepStep,
    output_bindings,
    qualified,
    step_component,
    trial_component,
)
from stack.registered import is_registered
from stack.resolved import ResolvedRun, _restore_ints
from stack.sweeps import TRIAL, SweepJob

PIPELINE_TYPE = "aml-gpu-training:jobs:PipelineJob"
SWEEP_TYPE = "aml-gpu-training:jobs:SweepJob"
"""The Pulumi type tokens of the components that carry a resolved pipeline and sweep."""

TRIAL_KEYS = ("command", "code", "environment", "environment_variables", "resources", "distribution")
"""What a sweep's ``trial`` holds of the trial's resolved run; the rest is the sweep's."""
_STEP_DROPPED = ("name", "experiment_name")


@dataclass(frozen=True)
class ResolvedComposite:
    """A pipeline or sweep as the Azure ML job it becomes, and the names of the runs inside it."""

    name: str
    kind: str
    """``pipeline`` or ``sweep``."""
    spec: dict[str, Any]
    """The Azure ML CLI v2 pipeline or sweep job, exactly as exported and written to ``jobs/<name>.yml``."""
    runs: tuple[str, ...]
    """The qualified names of its steps (``<pipeline>/<step>``) or trial (``<sweep>/trial``), in order."""

    @property
    def type_token(self) -> str:
        return PIPELINE_TYPE if self.kind == "pipeline" else SWEEP_TYPE

    def to_props(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "spec": self.spec, "runs": list(self.runs)}

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> ResolvedComposite:
        """Props as the engine hands them back (integers as floats: restored)."""
        return cls(name=props["name"], kind=props["kind"], spec=_restore_ints(props["spec"]),
                   runs=tuple(props.get("runs") or ()))


def is_composite(spec: Mapping[str, Any]) -> bool:
    """A pipeline's or sweep's spec (a run's is ``type: command``)."""
    return spec.get("type") in ("pipeline", "sweep")


def code_folders(spec: Mapping[str, Any]) -> list[str]:
    """The code folders a pipeline's steps (a sweep step's trial component, a sweep's trial) upload, each once, in
    order."""
    parts = [node["trial"] if node.get("type") == "sweep" and isinstance(node.get("trial"), dict) else node
             for node in spec.get("jobs", {}).values()] if spec.get("type") == "pipeline" else [spec.get("trial") or {}]
    return list(dict.fromkeys(part["code"] for part in parts if part.get("code") is not None))


def _given(pipeline: PipelineJob, part: str, inputs: Mapping[str, Any]) -> list[Folded]:
    """What a pipeline gives a step's placeholders: its component's defaults the step leaves out, its inputs bound
    to a literal pipeline input, and, for a sweep step, the choices of its search space (whose names the trial
    reads as ``${{search_space.<name>}}``, never as the component default)."""
    step = pipeline.jobs[part]
    if isinstance(step, SweepStep):
        return [*of_defaults(inputs, {**step.inputs, **step.search_space}), *of_pipeline(step.inputs, pipeline.inputs),
                *of_search_space(step.search_space)]
    return [*of_defaults(inputs, step.inputs), *of_pipeline(step.inputs, pipeline.inputs)]


def resolve_composite(
    entry: Composite, config: StackConfig, root: Path, *, scans: Scans | None = None,
    contents: Contents | None = None,
) -> tuple[ResolvedComposite, list[ResolvedRun]]:
    """``entry`` resolved, with its runs (named ``<job>/<part>``, :attr:`ResolvedRun.part_of` set).

    ``scans``: code folder scans already made, shared between calls; filled in here. ``contents``: the
    environments' files read so far in this plan (:func:`jobs.resolve.resolve_run`), likewise."""
    scans = scans if scans is not None else {}
    contents = contents if contents is not None else {}
    runs: dict[str, ResolvedRun] = {}
    for part, run in entry.runs.items():
        # what the pipeline or sweep gives the part's placeholders (stack.inputs): folded once, here
        given = of_search_space(entry.search_space) if isinstance(entry, SweepJob) else _given(entry, part, run.inputs)
        resolved = resolve_run(run, config, root, facts=scanned(scans, root, run.code), contents=contents,
                               given=tuple(given))
        runs[part] = dataclasses.replace(resolved, name=qualified(entry.name, part), part_of=entry.name)
    spec = _pipeline_spec(entry, runs, root) if isinstance(entry, PipelineJob) else _sweep_spec(entry, runs[TRIAL])
    return ResolvedComposite(entry.name, entry.type, spec, tuple(r.name for r in runs.values())), list(runs.values())


def resolve_composites(
    config: StackConfig, root: Path, *, scans: Scans | None = None
) -> list[tuple[ResolvedComposite, list[ResolvedRun]]]:
    """Every pipeline and sweep the stack declares, resolved, sorted by name."""
    scans = scans if scans is not None else {}
    contents: Contents = {}  # per call, as in resolve_all: never kept from one plan to the next
    return [resolve_composite(entry, config, root, scans=scans, contents=contents)
            for entry in sorted(config.composites, key=lambda e: e.name)]


def _common(entry: Composite) -> dict[str, Any]:
    return {
        "type": entry.type, "name": entry.name, "display_name": entry.display_name,
        "experiment_name": entry.experiment_name, "description": entry.description, "tags": dict(entry.tags),
    }


def _io(values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value
            for name, value in values.items()}


def _unpulled_step(pipeline: PipelineJob, name: str) -> dict[str, Any]:
    """A step whose registered component was not pulled: the node as written (the gate sees no command)."""
    step = pipeline.jobs[name]
    compute = step.compute or pipeline.settings.default_compute
    node: dict[str, Any] = _tidy({"type": step.type, "compute": f"azureml:{compute}" if compute else None,
                                  "inputs": _io(step.inputs), "outputs": _io(step.outputs)})
    if isinstance(step, SweepStep):
        node.update(_tidy(step.sweep_keys()), trial=step.trial)
    else:
        node["component"] = step.component
    return node


def _sweep_node(step: SweepStep, run: Mapping[str, Any], component: CommandComponent | None,
                registered: str | None) -> dict[str, Any]:
    """A pipeline's sweep step as azure-ai-ml's node ``SweepSchema`` takes it: the trial's run spec split into
    what the node holds (compute, input values, outputs, resources, identity, queue settings) and the trial
    component (its command with each sampled input as ``${{inputs.<name>}}`` again, code, environment,
    distribution, and the inputs and outputs the component declares), or the registered component's reference."""
    command = str(run["command"])
    for key in step.search_space:
        command = command.replace("${{search_space." + key + "}}", "${{inputs." + key + "}}")
    trial: str | dict[str, Any] = registered or _tidy({
        "type": "command", "command": command, "code": run.get("code"), "environment": run.get("environment"),
        "distribution": run.get("distribution"),
        "inputs": {k: v.model_dump(exclude_none=True, exclude_defaults=True) | {"type": v.type}
                   for k, v in component.inputs.items()} if component else None,
        "outputs": {k: v.model_dump(exclude_none=True) for k, v in component.outputs.items()} if component else None,
    })
    node: dict[str, Any] = _tidy({
        "type": "sweep", "display_name": step.display_name, "description": step.description, "tags": dict(step.tags),
        "compute": run.get("compute"), "inputs": run.get("inputs"), "outputs": run.get("outputs"),
        "resources": run.get("resources"), "identity": run.get("identity"),
        "queue_settings": run.get("queue_settings"), **step.sweep_keys(),
    })
    return dict(sorted({**node, "trial": trial}.items()))


def _pipeline_spec(pipeline: PipelineJob, runs: Mapping[str, ResolvedRun], root: Path) -> dict[str, Any]:
    bound = output_bindings(pipeline)
    steps: dict[str, Any] = {}
    for name, declared in pipeline.jobs.items():
        component = step_component(declared)
        registered = component if isinstance(component, str) and is_registered(component) else None
        run = runs.get(name)
        if run is None:
            if registered:
                steps[name] = _unpulled_step(pipeline, name)
            continue
        step = {key: value for key, value in run.spec.items() if key not in _STEP_DROPPED}
        if isinstance(declared, SweepStep):
            step = _sweep_node(declared, step, trial_component(declared, root), registered)
        elif registered:
            step["component"] = registered  # judged against its pulled spec, sent as the reference
        if name in bound:
            step["outputs"] = {**step.get("outputs", {}), **bound[name]}
        steps[name] = step
    settings = pipeline.settings.model_dump(exclude_none=True)
    if "default_compute" in settings:
        settings["default_compute"] = f"azureml:{settings['default_compute']}"
    identity = None
    if pipeline.identity is not None:
        kind = "managed_identity" if pipeline.identity.type == "managed" else pipeline.identity.type
        identity = pipeline.identity.model_dump(exclude_none=True) | {"type": kind}
    spec: dict[str, Any] = _tidy({
        **_common(pipeline), "settings": settings, "inputs": _io(pipeline.inputs),
        "outputs": _io(pipeline.outputs), "identity": identity,
    })
    spec["jobs"] = steps  # already tidy, in the pipeline's order
    return spec


def _sweep_spec(sweep: SweepJob, trial: ResolvedRun) -> dict[str, Any]:
    run = trial.spec
    spec: dict[str, Any] = _tidy({
        **_common(sweep),
        "compute": run["compute"],
        "inputs": run.get("inputs"),
        "outputs": run.get("outputs"),
        "trial": {key: run[key] for key in TRIAL_KEYS if key in run},
        **sweep.sweep_keys(),
        "identity": run.get("identity"),
        "queue_settings": run.get("queue_settings"),
    })
    return spec
