"""Resolved pipelines and sweeps as Azure ML CLI v2 job files that ``az ml job create -f`` and azure-ai-ml's
``load_job`` accept.

Each step (a sweep's trial) is written as :mod:`jobs.render` writes a run: built by azure-ai-ml
(``command(...)._to_job()``) and serialised by its own schema, with the same corrections (``code`` relative
to the file's folder, URL data paths as declared, no empty mappings). The step keeps what a pipeline node
takes (azure-ai-ml's ``CommandSchema`` for nodes: no job ``name`` or ``experiment_name``), its bindings as
written; the trial keeps ``command``, ``code``, ``environment``, ``environment_variables``, ``resources``
and ``distribution``. The job's own keys (settings, search space, objective, limits...) are written as the
spec holds them.

A file names no job: Azure ML gives each creation its own (see :mod:`jobs.render`). A submission sends
azure-ai-ml's ``load_job`` of the very file the plan writes (:func:`jobs.submit.load`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobs.pipelines import TRIAL_KEYS
from jobs.render import dump, job_document

SCHEMA_COMMENTS = {
    "pipeline": "# yaml-language-server: $schema=https://azuremlschemas.azureedge.net/latest/pipelineJob.schema.json\n",
    "sweep": "# yaml-language-server: $schema=https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json\n",
}
_STEP_KEYS = frozenset({
    "type", "display_name", "description", "tags", "code", "command", "environment", "compute", "inputs", "outputs",
    "environment_variables", "resources", "distribution", "limits", "identity", "services", "queue_settings",
})
"""What a pipeline's command step is written with (azure-ai-ml's node ``CommandSchema``)."""


def _step_document(step: dict[str, Any], name: str, *, code_relative_to: Path, root: Path) -> dict[str, Any]:
    """A step (or trial) spec as azure-ai-ml serialises it, bindings as written."""
    as_run = {**step, "name": name}
    outputs = step.get("outputs") or {}
    # A step output bound to the pipeline's is an ordinary output to azure-ai-ml's command builder.
    as_run["outputs"] = {key: value if isinstance(value, dict) else {} for key, value in outputs.items()}
    document = job_document(as_run, code_relative_to=code_relative_to, root=root)
    for key, value in outputs.items():
        if isinstance(value, str):
            document["outputs"][key] = value
    for key, value in (step.get("inputs") or {}).items():
        if isinstance(value, str):
            document["inputs"][key] = value  # a binding or a literal string, as written
    return document


_SWEEP_NODE_KEYS = frozenset({
    "type", "display_name", "description", "tags", "compute", "inputs", "outputs", "resources", "identity",
    "queue_settings", "search_space", "sampling_algorithm", "objective", "limits", "early_termination", "trial",
})
"""What a pipeline's sweep step is written with (azure-ai-ml's node ``SweepSchema``: ``BaseNodeSchema`` and
``ParameterizedSweepSchema``)."""
_TRIAL_COMPONENT_KEYS = ("command", "code", "environment", "distribution")
"""What a sweep step's inline trial component takes of the trial's written run, beside its declared inputs and
outputs (azure-ai-ml's ``CommandComponentSchema``, which has no ``environment_variables``)."""


def _sweep_node(node: dict[str, Any], name: str, *, code_relative_to: Path, root: Path) -> dict[str, Any]:
    """A sweep step as azure-ai-ml's ``load_job`` reads it: the trial an inline command component (its code
    relative to the file's folder, its environment as a run's is written), or a registered one's reference."""
    trial = node["trial"]
    written = {key: value for key, value in node.items() if key in _SWEEP_NODE_KEYS and key != "trial"}
    if isinstance(trial, str):
        return {**written, "trial": trial}
    as_run = {key: value for key, value in trial.items() if key in _TRIAL_COMPONENT_KEYS}
    as_run.update(type="command", compute=node.get("compute"), inputs=node.get("inputs") or {},
                  outputs=node.get("outputs") or {}, resources=node.get("resources") or {})
    document = _step_document(as_run, name, code_relative_to=code_relative_to, root=root)
    component = {key: document[key] for key in _TRIAL_COMPONENT_KEYS if key in document}
    component["command"] = trial["command"]  # the sampled inputs as ${{inputs.<name>}}, as the component declares
    for key in ("inputs", "outputs"):
        if trial.get(key):
            component[key] = trial[key]
    written["trial"] = {"type": "command", **component}
    for key in ("inputs", "outputs"):
        if document.get(key):
            written[key] = document[key]
    return dict(sorted(written.items()))


def composite_document(spec: dict[str, Any], *, code_relative_to: Path, root: Path) -> dict[str, Any]:
    """What :func:`composite_yaml` writes, as data."""
    document = {key: value for key, value in spec.items() if key not in ("name", "jobs", "trial")}
    if spec["type"] == "pipeline":
        document["jobs"] = {}
        for name, step in spec["jobs"].items():
            if step.get("type") == "sweep":
                document["jobs"][name] = _sweep_node(step, name, code_relative_to=code_relative_to, root=root)
                continue
            own = {key: value for key, value in step.items() if key != "component"}
            written = _step_document(own, name, code_relative_to=code_relative_to, root=root) \
                if "command" in step else dict(step)  # a registered component not pulled: as written
            document["jobs"][name] = {key: value for key, value in written.items() if key in _STEP_KEYS}
            if "component" in step:  # registered: Azure ML runs the reference; command, code, environment are its
                document["jobs"][name] = {key: value for key, value in document["jobs"][name].items()
                                          if key not in ("command", "code", "environment")}
                document["jobs"][name]["component"] = step["component"]
        return document
    trial = {**spec["trial"], "type": "command", "compute": spec["compute"], "inputs": spec.get("inputs") or {},
             "outputs": spec.get("outputs") or {}}
    written = _step_document(trial, spec["name"], code_relative_to=code_relative_to, root=root)
    document["trial"] = {key: written[key] for key in TRIAL_KEYS if key in written}
    for key in ("inputs", "outputs"):
        if written.get(key):
            document[key] = written[key]
    return document


def composite_yaml(spec: dict[str, Any], *, code_relative_to: Path, root: Path) -> str:
    """The CLI v2 pipeline or sweep job file for ``spec``, to be written in the folder ``code_relative_to``.

    Byte-identical for the same input: keys sorted (steps too), no timestamps, no machine-specific paths."""
    document = composite_document(spec, code_relative_to=code_relative_to, root=root)
    return SCHEMA_COMMENTS[spec["type"]] + dump(document)

