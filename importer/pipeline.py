"""CLI v2 pipeline and sweep job files (``type: pipeline`` / ``type: sweep``) as stack ``jobs`` entries.

Keys keep their shape, as for a command job (:mod:`importer.cliv2`); what names something outside the
file is mapped the same way, for every step:

* ``compute`` (each step's, ``settings.default_compute``, a pipeline's top-level ``compute``, a sweep's):
  the stack's cluster of that name; ``--compute`` replaces every one of them;
* ``environment``: a stack environment, an inline or ``file:`` definition as a stack ``environments`` entry,
  a reference as written; ``--environment`` is given to every step (a component's step too, which Azure
  ML lets override its component's environment);
* ``code`` and ``component: <file>`` become paths relative to the project root (they are relative to the job
  file in the original); a component file stays where it is and is read when the stack is;
* local data (``path: ./data``) is left as a placeholder, as for a run.

A step or trial without ``distribution`` runs once per node in Azure ML: it is written out as
``{type: pytorch, process_count_per_instance: 1}``, as for a command job (a sweep step's trial component, which
has no node-level distribution, gets it written into the component, inline). Parallel and spark steps and
registered components (``azureml:``) are not imported: the stack declares command and sweep steps whose command
the gate can read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from importer.base import Draft, ImportInputError, Source, slug
from importer.cliv2 import (
    NO_DISTRIBUTION_NOTE,
    _inputs,
    _line_of,
    _plain,
    copied_fields,
    distribution,
    environment,
    load_yaml,
)
from importer.mapping import Context, map_compute, project_path
from stack.pipelines import PIPELINE
from stack.sweeps import SWEEP

KIND = {PIPELINE: "CLI v2 pipeline job", SWEEP: "CLI v2 sweep job"}
_COMMON = ("display_name", "experiment_name", "description", "tags")
_GENERIC_STEMS = frozenset({"job", "pipeline", "job-sweep", "sweep"})


PREVIEW_TYPES = {"sweep_job": SWEEP}
"""The preview CLI's spellings of a job ``type`` that azure-ai-ml refuses today, with today's."""


def is_composite(document: Any) -> bool:
    """Whether a job file's document (:func:`importer.cliv2.load_yaml`) is a pipeline or sweep job (its
    top-level ``type``, in today's spelling or the preview's)."""
    return isinstance(document, dict) and (document.get("type") in KIND or document.get("type") in PREVIEW_TYPES)


def read(source: Source, ctx: Context, document: Any) -> list[Draft]:
    """The pipeline or sweep job in ``source`` (its ``document``, as :func:`importer.cliv2.load_yaml` reads
    it) as a draft (exit 2 when it cannot be one)."""
    if not is_composite(document):
        raise ImportInputError("not a pipeline or sweep job file", file=source.display)
    job = _plain(document)
    kind = PREVIEW_TYPES.get(str(job["type"]), str(job["type"]))
    draft = Draft(file=source.display, line=1, kind=KIND[kind], run={},
                  key_lines={str(key): _line_of(document, str(key), 1) for key in document})
    if job["type"] != kind:
        draft.notes.append(f"type: {job['type']} (the preview CLI's spelling, which azure-ai-ml refuses today) is "
                           f"now written type: {kind}")
    stem = source.path.stem
    draft.run["name"] = job.get("name") or slug(source.path.parent.name if stem in _GENERIC_STEMS else stem)
    draft.named_in_source = bool(job.get("name"))
    draft.run["type"] = kind
    for key in _COMMON:
        if key in job:
            draft.run[key] = job[key]
    if kind == PIPELINE:
        _pipeline(ctx, draft, source, job, document)
    else:
        _sweep(ctx, draft, source, job, document)
    return [draft]


def _pipeline(ctx: Context, draft: Draft, source: Source, job: dict[str, Any], document: Any) -> None:
    run = draft.run
    settings = dict(job.get("settings") or {})
    default = settings.get("default_compute", job.get("compute"))
    if default is not None or ctx.compute:
        settings["default_compute"] = map_compute(ctx, draft, default, _line_of(document, "settings", draft.line))
    if settings:
        run["settings"] = settings
    for key in ("inputs", "outputs"):
        if key in job:
            run[key] = _inputs(draft, job[key], document.get(key)) if key == "inputs" else job[key]
    steps = job.get("jobs")
    if not isinstance(steps, dict) or not steps:
        raise ImportInputError("a pipeline job without steps: expected a mapping under 'jobs'", file=draft.file,
                               line=_line_of(document, "jobs", draft.line))
    nodes = document.get("jobs")
    run["jobs"] = {}
    for name, step in steps.items():
        notes, placeholders = len(draft.notes), len(draft.placeholders)
        run["jobs"][str(name)] = _step(ctx, draft, source, str(name), step, _line_of(nodes, str(name), draft.line),
                                       nodes.get(name) if isinstance(nodes, dict) else None,
                                       has_default=bool(settings.get("default_compute")))
        # What the shared mappings say of "compute" or "environment" is said of this step.
        draft.notes[notes:] = [n if n.startswith("step ") else f"step {name!r}: {n}" for n in draft.notes[notes:]]
        draft.placeholders[placeholders:] = [
            dataclasses.replace(p, key=p.key if p.key.startswith("jobs.") else f"jobs.{name}.{p.key}")
            for p in draft.placeholders[placeholders:]]
    for key in job:
        if key not in run and key not in ("$schema", "compute"):
            run[key] = job[key]  # identity... and anything the model refuses


def _step(ctx: Context, draft: Draft, source: Source, name: str, step: Any, line: int, node: Any, *,
          has_default: bool) -> Any:
    if not isinstance(step, dict):
        raise ImportInputError(f"step {name!r}: expected a mapping", file=draft.file, line=line)
    kind = step.get("type", "command")
    if kind == SWEEP:
        return _sweep_step(ctx, draft, source, name, step, line, node, has_default=has_default)
    if kind != "command":
        raise ImportInputError(
            f"step {name!r} is a {kind} step: the stack declares pipelines of command and sweep steps",
            file=draft.file, line=line)
    out: dict[str, Any] = {}
    component = step.get("component")
    component_document: dict[str, Any] = {}
    if isinstance(component, str) and component.startswith("azureml:"):
        out["component"] = _registered(draft, name, "component", component, line)
    elif isinstance(component, str):
        path = source.folder / component.removeprefix("file:")
        out["component"] = "file:" + project_path(ctx, path, draft, f"jobs.{name}.component", line)
        component_document = _plain(_component_file(draft, name, "component", component, path, line))
    elif isinstance(component, dict):
        out["component"] = _inline_component(ctx, draft, source, name, component, line)
        component_document = component
    for key in ("display_name", "description", "tags"):
        if key in step:
            out[key] = step[key]
    if "code" in step:
        out["code"] = project_path(ctx, source.folder / str(step["code"]), draft, f"jobs.{name}.code", line)
    if "command" in step:
        out["command"] = step["command"]
    if "environment" in step or ctx.environment or "component" not in step:
        out["environment"] = environment(ctx, draft, source, step.get("environment"), line, f"{draft.run['name']}-"
                                         f"{name}")
    if "compute" in step or not has_default:
        out["compute"] = map_compute(ctx, draft, step.get("compute"), line)
    if "inputs" in step:
        out["inputs"] = _inputs(draft, step["inputs"], node.get("inputs") if isinstance(node, dict) else None)
    out.update(copied_fields(step))
    if "distribution" in step or "distribution" not in component_document:
        out["distribution"] = distribution(draft, step.get("distribution"), step.get("resources"))
    for key in step:
        if key not in out and key not in ("type", "component", "code", "environment", "compute", "distribution"):
            out[key] = step[key]  # limits, identity, services, queue_settings... and anything the model refuses
    return out


def _sweep_step(ctx: Context, draft: Draft, source: Source, name: str, step: dict[str, Any], line: int, node: Any, *,
                has_default: bool) -> dict[str, Any]:
    """A sweep step (azure-ai-ml's node ``SweepSchema``): its keys as written, its trial component mapped as a
    command step's ``component`` is. A trial component without ``distribution`` gets the one a run without it
    gets, written into it (a sweep step has no distribution of its own): a component file is then written inline,
    its paths relative to the project root, with a note saying so."""
    out: dict[str, Any] = {"type": SWEEP}
    trial = step.get("trial")
    if isinstance(trial, str) and trial.startswith("azureml:"):
        out["trial"] = _registered(draft, name, "trial", trial, line)
    elif isinstance(trial, str):
        path = source.folder / trial.removeprefix("file:")
        loaded = _component_file(draft, name, "trial", trial, path, line)
        reference = "file:" + project_path(ctx, path, draft, f"jobs.{name}.trial", line)
        if "distribution" in loaded:
            out["trial"] = reference
        else:
            component = {k: v for k, v in _plain(loaded).items() if k != "$schema"}
            out["trial"] = _inline_component(ctx, draft, Source(path=path, display=draft.file), name, component, line,
                                             key="trial")
            out["trial"]["distribution"] = distribution(draft, None, step.get("resources"))
            draft.notes[-1] = (f"step {name!r}: trial {reference.removeprefix('file:')} declares no distribution: "
                               f"written inline with one; {NO_DISTRIBUTION_NOTE}")
    elif isinstance(trial, dict):
        out["trial"] = _inline_component(ctx, draft, source, name, trial, line, key="trial")
        if "distribution" not in trial:
            out["trial"]["distribution"] = distribution(draft, None, step.get("resources"))
            draft.notes[-1] = f"step {name!r}: trial: {NO_DISTRIBUTION_NOTE}"
    else:
        raise ImportInputError(f"step {name!r}: a sweep step without a trial: expected a component under 'trial'",
                               file=draft.file, line=line)
    if "compute" in step or not has_default:
        out["compute"] = map_compute(ctx, draft, step.get("compute"), line)
    if "inputs" in step:
        out["inputs"] = _inputs(draft, step["inputs"], node.get("inputs") if isinstance(node, dict) else None)
    for key in step:
        if key not in out and key not in ("type", "trial", "compute"):
            out[key] = step[key]  # search_space, objective, limits, outputs... and anything the model refuses
    return out


_WHAT = {"component": "component", "trial": "trial component"}
"""What a step's component is called under each key (a command step's ``component``, a sweep step's ``trial``)."""


def _registered(draft: Draft, name: str, key: str, reference: str, line: int) -> Any:
    """A step's component registered in a workspace (``azureml:...``): left for the user, with what to write."""
    return draft.leave(f"jobs.{name}.{key}", line, f"{_WHAT[key]} {reference!r} is registered in a workspace and its "
                       "command cannot be read here", f"copy its YAML into the project and write {key}: file:<path>")


def _component_file(draft: Draft, name: str, key: str, written: str, path: Path, line: int) -> dict[str, Any]:
    """The component file a step names (``written``, found at ``path``), refused when there is none."""
    loaded = load_yaml(Source(path=path, display=f"{draft.file} -> {written}")) if path.is_file() else None
    if not isinstance(loaded, dict):
        raise ImportInputError(f"step {name!r}: no {_WHAT[key]} file at {path}", file=draft.file, line=line)
    return loaded


def _inline_component(ctx: Context, draft: Draft, source: Source, name: str, component: dict[str, Any],
                      line: int, *, key: str = "component") -> dict[str, Any]:
    out = dict(component)
    if isinstance(out.get("code"), str):
        out["code"] = project_path(ctx, source.folder / out["code"], draft, f"jobs.{name}.{key}.code", line)
    if "environment" in out:
        out["environment"] = environment(ctx, draft, source, out["environment"], line, f"{draft.run['name']}-{name}")
    return out


def _sweep(ctx: Context, draft: Draft, source: Source, job: dict[str, Any], document: Any) -> None:
    run = draft.run
    run["compute"] = map_compute(ctx, draft, job.get("compute"), _line_of(document, "compute", 1))
    if "inputs" in job:
        run["inputs"] = _inputs(draft, job["inputs"], document.get("inputs"))
    if "outputs" in job:
        run["outputs"] = job["outputs"]
    trial = job.get("trial")
    line = _line_of(document, "trial", 1)
    if isinstance(trial, str):
        raise ImportInputError(f"trial {trial!r} names a component file: write its command, code and environment "
                               "under trial", file=draft.file, line=line)
    if not isinstance(trial, dict):
        raise ImportInputError("a sweep job without a trial: expected a mapping under 'trial'", file=draft.file,
                               line=line)
    top = job.get("resources")
    if isinstance(top, dict):  # azure-ai-ml's sweep takes resources for its trials at the top level too
        trial = {**trial, "resources": {**top, **(trial.get("resources") or {})}}
        draft.notes.append("resources at the top of the sweep (azure-ai-ml sends them as the sweep's resources, "
                           "the trials' nodes, and fills them from the trial's when absent) is written under "
                           "trial.resources" + (", the trial's own values kept" if "resources" in job.get(
                               "trial", {}) else ""))
    out: dict[str, Any] = {}
    if "code" in trial:
        out["code"] = project_path(ctx, source.folder / str(trial["code"]), draft, "trial.code", line)
    if "command" in trial:
        out["command"] = trial["command"]
    out["environment"] = environment(ctx, draft, source, trial.get("environment"), line, f"{run['name']}-trial")
    for key in ("environment_variables", "resources"):
        if key in trial:
            out[key] = trial[key]
    before = len(draft.notes)
    out["distribution"] = distribution(draft, trial.get("distribution"), trial.get("resources"))
    if len(draft.notes) > before and draft.notes[-1] == NO_DISTRIBUTION_NOTE:
        draft.notes[-1] = f"trial: {NO_DISTRIBUTION_NOTE}"
    for key in trial:
        if key not in out and key not in ("code", "environment", "distribution"):
            out[key] = trial[key]
    run["trial"] = out
    for key in ("search_space", "sampling_algorithm", "objective", "limits", "early_termination", "identity",
                "queue_settings"):
        if key in job:
            run[key] = job[key]
    for key in job:
        if key not in run and key not in ("$schema",) and not (key == "resources" and isinstance(top, dict)):
            run[key] = job[key]  # anything the model refuses
