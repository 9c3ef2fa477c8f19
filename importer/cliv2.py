"""CLI v2 command job files (``az ml job create -f job.yml``) as stack ``jobs`` entries.

Every key keeps its shape; only what names something outside the file changes: ``compute`` and
``environment`` are mapped to the stack (:mod:`importer.mapping`), an inline or ``file:``
environment becomes a stack environment entry, and ``code`` and build paths are rewritten relative to
the project root (they are relative to the job file's folder in the original).

Where the stack would otherwise choose something else than Azure ML runs, Azure ML's default is
written out: ``process_count_per_instance: 1`` when a ``pytorch``/``mpi`` distribution leaves it out,
``worker_count`` = ``instance_count`` for ``tensorflow``. A job without ``distribution`` (Azure ML
runs the command once on each node) becomes ``distribution: {type: pytorch,
process_count_per_instance: 1}``: the same processes, plus PyTorch's rendezvous variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedBase
from ruamel.yaml.error import YAMLError

from importer.base import Draft, ImportInputError, Source, slug
from importer.mapping import (
    Context,
    add_environment,
    map_compute,
    map_environment_reference,
    pinned_version,
    project_path,
)
from kernel import bounded
from stack.runs import WITHOUT_DISTRIBUTION, is_remote_path

KIND = "CLI v2 job"

NO_DISTRIBUTION_NOTE = (
    f"no distribution: {WITHOUT_DISTRIBUTION}; imported as distribution: {{type: pytorch, "
    "process_count_per_instance: 1}: the same processes, with those variables set (for one process per GPU, "
    "process_count_per_instance: <GPUs per node>)"
)
"""The words a run's missing distribution gets in the stack file (stack.runs.WITHOUT_DISTRIBUTION), and what import
wrote instead."""


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _line_of(node: Any, key: str, default: int) -> int:
    if isinstance(node, CommentedBase) and isinstance(node, dict) and key in node:
        return int(node.lc.key(key)[0]) + 1
    return default


def load_yaml(source: Source) -> Any:
    """The document, with ruamel's line information; unreadable YAML is exit 2 with its line.

    The text first goes through the project's bounded YAML reader (:data:`kernel.bounded.JOB_FILE`: size,
    alias expansion, depth), so ruamel (pure Python, recursive) and the walk that copies the document never
    see a bomb or a document nested deeper than they can follow."""
    try:
        text = bounded.read_text(source.path, bounded.JOB_FILE)
        bounded.check(text, bounded.JOB_FILE)
    except OSError as err:
        raise ImportInputError(f"cannot read the file: {err.strerror or err}", file=source.display) from None
    except bounded.BoundedInputError as err:
        raise ImportInputError(err.message, file=source.display, line=err.line) from None
    try:
        return YAML(typ="rt", pure=True).load(text)
    except YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise ImportInputError(f"invalid YAML: {getattr(err, 'problem', None) or err}", file=source.display,
                               line=mark.line + 1 if mark else None) from None


def read(source: Source, ctx: Context, document: Any) -> list[Draft]:
    """The command job in ``source`` (its ``document``, as :func:`load_yaml` reads it) as a draft (exit 2 when it
    is not one)."""
    if not isinstance(document, dict):
        raise ImportInputError("not a job file: expected a mapping with 'command' (an Azure ML CLI v2 command job)",
                               file=source.display)
    schema = str(document.get("$schema", ""))
    kind = document.get("type", "command")
    if "Component" in schema or "component" in schema:
        raise ImportInputError(f"a component ({schema}), not a job: import the job that uses it",
                               file=source.display, line=_line_of(document, "$schema", 1))
    if kind != "command":
        raise ImportInputError(f"a {kind} job: amlgpu imports command, pipeline and sweep jobs",
                               file=source.display, line=_line_of(document, "type", 1))
    if "command" not in document:
        raise ImportInputError("not a command job: no 'command' key (an Azure ML CLI v2 command job has one)",
                               file=source.display)
    job = _plain(document)
    line = 1
    draft = Draft(file=source.display, line=line, kind=KIND, run={},
                  key_lines={str(key): _line_of(document, str(key), line) for key in document})
    job = _current_schema(draft, job)
    run = draft.run
    stem = source.path.stem
    run["name"] = job.get("name") or slug(source.path.parent.name if stem in ("job", "pipeline") else stem)
    draft.named_in_source = bool(job.get("name"))
    for key in ("display_name", "experiment_name", "description", "tags", "properties"):
        if key in job:
            run[key] = job[key]
    if "code" in job:
        run["code"] = _code(ctx, draft, source, job["code"], _line_of(document, "code", line))
    run["command"] = job["command"]
    run["environment"] = environment(ctx, draft, source, job.get("environment"),
                                     _line_of(document, "environment", line), run["name"])
    run["compute"] = map_compute(ctx, draft, job.get("compute"), _line_of(document, "compute", line))
    if "inputs" in job:
        run["inputs"] = _inputs(draft, job["inputs"], document.get("inputs"))
    run.update(copied_fields(job))
    run["distribution"] = distribution(draft, job.get("distribution"), job.get("resources"))
    for key in job:
        if key not in run and key not in ("$schema", "type", "name", "code", "environment", "compute", "distribution"):
            run[key] = job[key]  # limits, identity, services, queue_settings... and anything the model refuses
    return [draft]


def copied_fields(job: dict[str, Any]) -> dict[str, Any]:
    """A job's (or a step's) ``outputs``, ``environment_variables`` and ``resources``, as the stack file takes
    them: environment variable values as text, as Azure ML sets them."""
    out: dict[str, Any] = {key: job[key] for key in ("outputs", "environment_variables", "resources") if key in job}
    if isinstance(out.get("environment_variables"), dict):
        out["environment_variables"] = {k: v if isinstance(v, str) else str(v)
                                        for k, v in out["environment_variables"].items()}
    return out


def _current_schema(draft: Draft, job: dict[str, Any]) -> dict[str, Any]:
    """``job`` with the preview CLI's spellings in today's, each change noted in the entry: ``code.local_path``
    (now ``code``), ``compute.target`` (now ``compute``; its ``instance_count`` now ``resources``), a service's
    ``job_service_type`` (now ``type``); and an input's ``description``, which job inputs do not take. azure-ai-ml
    (the CLI v2) refuses each of them today."""
    job = dict(job)
    code = job.get("code")
    if isinstance(code, dict) and set(code) == {"local_path"}:
        job["code"] = code["local_path"]
        draft.notes.append(f"code.local_path (the preview CLI's spelling) is now written code: {code['local_path']}")
    compute = job.get("compute")
    if isinstance(compute, dict) and "target" in compute and set(compute) <= {"target", "instance_count"}:
        job["compute"] = compute["target"]
        draft.notes.append(f"compute.target (the preview CLI's spelling) is now written compute: {compute['target']}")
        if "instance_count" in compute:
            job["resources"] = {**(job.get("resources") or {}), "instance_count": compute["instance_count"]}
            draft.notes.append("compute.instance_count (the preview CLI's spelling) is now resources.instance_count")
    services = job.get("services")
    if isinstance(services, dict):
        renamed = {}
        for name, service in services.items():
            if isinstance(service, dict) and "job_service_type" in service and "type" not in service:
                service = {("type" if k == "job_service_type" else k): v for k, v in service.items()}
                draft.notes.append(f"services.{name}.job_service_type (the preview CLI's spelling) is now written "
                                   f"type: {service['type']}")
            renamed[name] = service
        job["services"] = renamed
    inputs = job.get("inputs")
    if isinstance(inputs, dict):
        kept = {}
        for name, value in inputs.items():
            if isinstance(value, dict) and "description" in value:
                value = {k: v for k, v in value.items() if k != "description"}
                draft.notes.append(f"inputs.{name}.description dropped: a job's inputs take none (azure-ai-ml refuses "
                                   "it); say it in the run's description instead")
            kept[name] = value
        job["inputs"] = kept
    return job


def distribution(draft: Draft, given: Any, resources: Any) -> Any:
    """The distribution with Azure ML's defaults written out (the stack's own defaults differ)."""
    if given is None:
        draft.notes.append(NO_DISTRIBUTION_NOTE)
        return {"type": "pytorch", "process_count_per_instance": 1}
    if not isinstance(given, dict) or not isinstance(given.get("type"), str):
        return given  # the model says what is wrong with it
    out = dict(given)
    out["type"] = given["type"].lower()
    if out["type"] in ("pytorch", "mpi") and out.get("process_count_per_instance") is None:
        out["process_count_per_instance"] = 1
    if out["type"] == "tensorflow" and out.get("worker_count") is None:
        count = resources.get("instance_count", 1) if isinstance(resources, dict) else 1
        out["worker_count"] = count
    return out


def _code(ctx: Context, draft: Draft, source: Source, code: Any, line: int) -> Any:
    if not isinstance(code, str):
        return code
    if code.startswith(("azureml:", "http://", "https://", "git+")):
        return draft.leave("code", line, f"code {code!r} is a remote asset or repository",
                           "put the code folder under the project and name it here")
    return project_path(ctx, source.folder / code, draft, "code", line)


def environment(ctx: Context, draft: Draft, source: Source, given: Any, line: int, run_name: str) -> Any:
    """A job's ``environment`` (reference, inline mapping or ``file:``) as the stack names it."""
    if isinstance(given, str) and given.startswith("file:"):
        path = source.folder / given.removeprefix("file:")
        env_source = Source(path=path, display=f"{draft.file} -> {given}")
        document = load_yaml(env_source) if path.is_file() else None
        if not isinstance(document, dict):
            raise ImportInputError(f"environment {given!r}: no environment file at {path}", file=draft.file, line=line)
        return inline_environment(ctx, draft, env_source, _plain(document), line, run_name, was=given)
    if isinstance(given, str):
        return map_environment_reference(ctx, draft, given, line)
    if isinstance(given, dict):
        return inline_environment(ctx, draft, source, given, line, run_name, was="inline environment")
    if ctx.environment:
        return map_environment_reference(ctx, draft, "")
    return draft.leave("environment", line, "no environment named", "pass --environment ENV")


def inline_environment(ctx: Context, draft: Draft, source: Source, env: dict[str, Any], line: int,
                       run_name: str, *, was: str) -> str:
    """An inline/``file:`` environment definition as a stack environment entry (paths to the project root)."""
    entry: dict[str, Any] = {"name": env.get("name") or f"{run_name}-env",
                             "version": pinned_version(env.get("version"))}
    for key in ("image", "description", "tags"):
        if key in env:
            entry[key] = env[key]
    if isinstance(env.get("build"), dict):
        build = dict(env["build"])
        if isinstance(build.get("path"), str):
            build["path"] = project_path(ctx, source.folder / build["path"], draft, "build.path", line)
        entry["build"] = build
    if isinstance(env.get("conda_file"), str):
        entry["conda_file"] = project_path(ctx, source.folder / env["conda_file"], draft, "conda_file", line)
    unknown = sorted(set(env) - {"$schema", "name", "version", "image", "build", "conda_file", "description", "tags",
                                 "os_type", "inference_config"})
    if unknown:
        raise ImportInputError(f"environment keys {unknown} have no place in a stack environment", file=draft.file,
                               line=line)
    return add_environment(ctx, draft, entry, was=was, line=line)


def _inputs(draft: Draft, inputs: Any, node: Any) -> Any:
    if not isinstance(inputs, dict):
        return inputs
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        line = _line_of(node, name, draft.line)
        if isinstance(value, dict) and isinstance(value.get("path"), str) and not is_remote_path(value["path"]):
            value = dict(value)
            value["path"] = local_data(draft, name, value["path"], line)
        out[name] = value
    return out


def local_data(draft: Draft, name: str, path: str, line: int) -> str:
    """A placeholder for a local data path: Azure ML uploads it from whichever machine submits."""
    return draft.leave(
        f"inputs.{name}.path", line, f"local data {path!r} is uploaded from the submitting machine",
        f"register it (az ml data create --name {slug(name, 'data')} --path {path} --type uri_folder) and write "
        f"azureml:{slug(name, 'data')}:1",
    )


def is_job_file(path: Path) -> bool:
    return path.suffix.lower() in (".yml", ".yaml")
