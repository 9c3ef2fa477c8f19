"""Pydantic's errors as problems in our words: each with its path in the stack file, misplaced and renamed keys
explained, union members' tags left out, every problem of a file reported at once."""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError

from kernel.errors import ConfigError, Problem
from stack import NAMESPACE
from stack.keys import LOCATION_KEY, SUBSCRIPTION_KEY, KeyPath, Locate, key_text
from stack.runs import MISSING_DISTRIBUTION
from stack.secrecy import ENCRYPTED_VALUE, shown
from stack.stackfile import SECRET_PLACEHOLDER

_JOB_TAGS = frozenset({"Run", "PipelineJob", "SweepJob"})
"""The models of a ``jobs`` entry (see :data:`stack.pipelines.JobEntry`)."""
_STEP_TAGS = frozenset({"PipelineStep", "SweepStep"})
"""The models of a pipeline step (see :data:`stack.pipelines.Step`)."""
_UNION_TAGS = {"str", "int", "float", "bool", "pytorch", "mpi", "tensorflow"}


def _is_tag(part: object, previous: object, models: frozenset[str]) -> bool:
    """A union member's tag that pydantic puts in ``loc``, not a key the user wrote."""
    if not isinstance(part, str):
        return False
    # By name, not by case: upper-case keys are the user's own (environment variables, tags).
    if part in models or "[" in part or part in {"str", "int", "float", "bool"}:
        return True
    return previous == "distribution" and part in _UNION_TAGS


@functools.cache
def _model_names(root: type[BaseModel]) -> frozenset[str]:
    """Class names of every model below ``root``: the tags pydantic gives a union's model members."""
    seen: dict[str, Any] = {}
    pending: list[Any] = [root]
    while pending:
        model = pending.pop()
        if model.__name__ not in seen:
            seen[model.__name__] = model
            pending += [m for field in model.model_fields.values() for m in _models_in(field.annotation)]
    return frozenset(seen)


def _clean(loc: tuple[Any, ...], models: frozenset[str]) -> tuple[KeyPath, KeyPath | None]:
    """``loc`` without union tags, and the path at which the first union was (None: no union)."""
    out: list[str | int] = []
    union_at: KeyPath | None = None
    previous: object = None
    for part in loc:
        if _is_tag(part, previous, models):
            # A jobs entry is read with the one model its `type` names: that tag is no choice between members.
            # So is a pipeline step's, by its `type`.
            if union_at is None and not (len(out) == 2 and out[0] == "jobs" and part in _JOB_TAGS) \
                    and not (len(out) == 4 and out[2] == "jobs" and part in _STEP_TAGS):
                union_at = tuple(out)
        else:
            out.append(part)
        previous = part
    return tuple(out), union_at


_NOUNS = {
    "int_type": "a whole number", "int_parsing": "a whole number", "int_from_float": "a whole number",
    "float_type": "a number", "float_parsing": "a number", "string_type": "a string",
    "bool_type": "true or false", "bool_parsing": "true or false", "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)", "model_attributes_type": "a mapping (key: value)",
    "list_type": "a list (- item)", "date_type": "a date (YYYY-MM-DD)", "date_parsing": "a date (YYYY-MM-DD)",
    "date_from_datetime_parsing": "a date (YYYY-MM-DD)", "date_from_datetime_inexact": "a date (YYYY-MM-DD)",
}
"""What a value of the wrong type should have been, by pydantic error type."""

_BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"), "greater_than": ("gt", "must be more than {}"),
    "less_than_equal": ("le", "must be at most {}"), "less_than": ("lt", "must be less than {}"),
    "too_short": ("min_length", "needs at least {} item(s)"), "too_long": ("max_length", "takes at most {} item(s)"),
    "string_too_short": ("min_length", "needs at least {} character(s)"),
    "string_too_long": ("max_length", "takes at most {} character(s)"),
}


def _translate(error: Mapping[str, Any], path: KeyPath) -> str:
    """Our words for one pydantic error: what is wrong, what is allowed, and the value given (when it may be shown)."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = f" (got {shown(error['input'], path)})" if "input" in error else ""
    if error.get("input") == SECRET_PLACEHOLDER:
        return ENCRYPTED_VALUE
    if kind == "missing":
        return MISSING_DISTRIBUTION if path and path[-1] == "distribution" else "required key is missing"
    if kind in ("value_error", "assertion_error"):
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in _NOUNS:
        return f"expected {_NOUNS[kind]}{got}"
    if kind in _BOUNDS:
        name, text = _BOUNDS[kind]
        return text.format(ctx.get(name)) + got
    if kind == "string_pattern_mismatch":
        return f"does not have the expected form (pattern {ctx.get('pattern')}){got}"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected')}{got}"
    if kind == "union_tag_invalid":
        return f"type must be one of {ctx.get('expected_tags')} (got {shown(ctx.get('tag'), path)})"
    if kind == "job_type":
        given = error.get("input")
        kind_given = given.get("type") if isinstance(given, dict) else None
        return f"{error['msg']} (got type {shown(kind_given, path)})"
    if kind == "union_tag_not_found":
        return f"needs a {ctx.get('discriminator')} key"
    return f"{error['msg']}{got}"


# ------------------------------------------------------------------------------------------ misplaced keys

_RUN_SECTIONS = {"Run": "", "PipelineStep": "", "Resources": "resources", "Limits": "limits",
                 "QueueSettings": "queue_settings",
                 "PyTorchDistribution": "distribution", "MpiDistribution": "distribution",
                 "TensorFlowDistribution": "distribution"}
"""The run model's sections by model name, as the stack file names them ("" for the run itself)."""

RUN_KEYS: dict[str, str] = {
    "timeout": "limits", "instance_count": "resources", "shm_size": "resources", "docker_args": "resources",
    "process_count_per_instance": "distribution", "worker_count": "distribution",
    "parameter_server_count": "distribution", "job_tier": "queue_settings", "priority": "queue_settings",
}
"""Azure ML CLI v2 command-job keys and the section of the run they belong in (a key written one level
off, a common paste from another file, is told where it goes)."""

RENAMED: dict[tuple[str, str], str] = {
    ("StackConfig", "runs"): "jobs", ("StackConfig", "compute"): "clusters", ("StackConfig", "computes"): "clusters",
    ("Cluster", "vm_size"): "size", ("Cluster", "instance_type"): "size", ("Cluster", "min_nodes"): "min_instances",
    ("Cluster", "max_nodes"): "max_instances", ("Cluster", "min_node_count"): "min_instances",
    ("Cluster", "max_node_count"): "max_instances", ("Cluster", "vm_priority"): "tier",
    ("Resources", "node_count"): "instance_count", ("Run", "environment_vars"): "environment_variables",
    ("Run", "env"): "environment_variables",
}
"""Names from other vocabularies (ARM, az ml compute flags, SDK arguments) and this file's name for them."""

NO_PLACE: dict[tuple[str, str], str] = {
    ("Run", "type"): "every declared run is an Azure ML command job (`type: command` is implied): remove it",
    ("Run", "$schema"): "stack files are checked against schema/stack.schema.json, not a job schema: remove it",
    ("PipelineJob", "$schema"): "stack files are checked against schema/stack.schema.json, not a job schema: "
                                "remove it",
    ("SweepJob", "$schema"): "stack files are checked against schema/stack.schema.json, not a job schema: remove it",
    ("PipelineJob", "compute"): "a pipeline's default cluster is settings.default_compute (or each step's compute)",
    ("PipelineStep", "name"): "a step's name is its key under the pipeline's jobs",
    ("SweepStep", "name"): "a step's name is its key under the pipeline's jobs",
    ("SweepStep", "command"): "a sweep step runs its trial component: write the command under trial",
    ("PipelineSettings", "default_environment"): "Azure ML pipelines have no default environment (settings are "
                                                 "default_compute, default_datastore, continue_on_step_failure and "
                                                 "force_rerun): give each step, or its component, an environment",
    ("Trial", "compute"): "every trial runs on the sweep's compute",
    ("Trial", "limits"): "a trial's timeout is the sweep's limits.trial_timeout",
    ("Trial", "inputs"): "a trial's inputs are the sweep's inputs",
    ("Trial", "outputs"): "a trial's outputs are the sweep's outputs",
    ("Cluster", "type"): "every cluster is an AmlCompute cluster (`type: amlcompute` is implied): remove it",
    ("StackConfig", "location"): f"the region is set with {LOCATION_KEY} (or workspace.location), "
                                 f"not {NAMESPACE}:location",
    ("StackConfig", "subscription_id"): f"the subscription is set with {SUBSCRIPTION_KEY} (pulumi config set "
                                        f"{SUBSCRIPTION_KEY} <id>)",
}
"""Keys that have no place in the stack model, and why."""


def _flow(section: str, key: str, value: Any) -> str:
    shown = json.dumps(value) if isinstance(value, (int, float, str, bool)) and len(json.dumps(value)) < 40 else "..."
    return f"{section}: {{{key}: {shown}}}"


def _unknown_key(model: str | None, key: str, value: Any, fields: list[str], missing: list[str]) -> tuple[str, str]:
    """The message for an unknown key, and the known key it stands for ("" when none)."""
    model = model or ""
    if (model, key) in NO_PLACE:
        return f"unknown key {key!r}: {NO_PLACE[model, key]}", ""
    if (model, key) in RENAMED:
        name = RENAMED[model, key]
        return f"unknown key {key!r}: this stack file calls it {name!r}", name
    section = RUN_KEYS.get(key)
    if model in _RUN_SECTIONS and section and section != _RUN_SECTIONS[model]:
        return (f"{key!r} belongs in the run's {section!r}, not here: write {_flow(section, key, value)} "
                "(at the level of command and compute)"), ""
    close = difflib.get_close_matches(key, missing, n=1, cutoff=0.5) or difflib.get_close_matches(key, fields, n=1)
    if close:
        return f"unknown key {key!r}; did you mean {close[0]!r}?", close[0]
    return f"unknown key {key!r}; known keys here: {', '.join(fields)}" if fields else f"unknown key {key!r}", ""


def _model_at(loc: tuple[Any, ...], root: type[BaseModel]) -> Any:
    """The model class found at ``loc`` (None when it is not one model: a dict, or an untagged union)."""
    candidates: list[Any] = [root]
    for part in loc:
        if isinstance(part, int) or not candidates:
            continue
        by_tag = [m for m in candidates if _tag_of(m) == part or m.__name__ == part]
        if by_tag:  # a union's member, by discriminator or by class name
            candidates = by_tag
            continue
        field = next((m.model_fields[part] for m in candidates if part in m.model_fields), None)
        if field is None:
            continue  # a dict key (inputs.x) or a union tag pydantic added
        candidates = _models_in(field.annotation)
    return candidates[0] if len(candidates) == 1 else None


def _tag_of(model: Any) -> object:
    field = model.model_fields.get("type")
    args: tuple[Any, ...] = getattr(field.annotation, "__args__", ()) if field else ()
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None


def _models_in(annotation: Any) -> list[Any]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def _union_message(members: list[Mapping[str, Any]], path: KeyPath) -> str:
    """Every member of a union refused the value: say what the value may be."""
    nouns = [_NOUNS.get(e["type"]) for e in members]
    got = f" (got {shown(members[0]['input'], path)})" if "input" in members[0] else ""
    if all(nouns):
        return f"expected {' or '.join(dict.fromkeys(n for n in nouns if n))}{got}"
    return "; ".join(dict.fromkeys(_translate(e, path) for e in members))


def problems_of(err: ValidationError, root: type[BaseModel]) -> list[tuple[KeyPath, str]]:
    """Every error pydantic found validating ``root``, in our words, each with its path (below the namespace)."""
    errors: list[Mapping[str, Any]] = list(err.errors(include_url=False))
    plain: list[tuple[KeyPath, tuple[Any, ...], Mapping[str, Any]]] = []
    unions: dict[KeyPath, list[tuple[KeyPath, tuple[Any, ...], Mapping[str, Any]]]] = {}
    for error in errors:
        loc = tuple(error["loc"])
        path, union_at = _clean(loc, _model_names(root))
        if union_at is None:
            plain.append((path, loc, error))
        else:
            unions.setdefault(union_at, []).append((path, loc, error))
    found: list[tuple[KeyPath, str]] = []
    for at, members in unions.items():
        deeper = [m for m in members if len(m[0]) > len(at)]
        if deeper:  # a structured member got further: its errors are the ones the user needs
            plain += deeper
        else:
            found.append((at, _union_message([m[2] for m in members], at)))
    missing: dict[KeyPath, list[str]] = {}
    for path, _, error in plain:
        if error["type"] == "missing" and path and isinstance(path[-1], str):
            missing.setdefault(path[:-1], []).append(path[-1])
    explained: set[KeyPath] = set()
    for path, loc, error in plain:
        if error["type"] == "stack_reference":
            found += [(tuple(p), m) for p, m in (error.get("ctx") or {}).get("problems", ())]
        elif path and path[0] == "location":
            found.append(((LOCATION_KEY,), f"no region: set {LOCATION_KEY} or workspace.location"))
        elif error["type"] == "extra_forbidden" and path:
            model = _model_at(loc[:-1], root)
            fields = list(model.model_fields) if model is not None else []
            message, meant = _unknown_key(getattr(model, "__name__", None), str(path[-1]), error.get("input"),
                                          fields, missing.get(path[:-1], []))
            found.append((path, message))
            if meant:
                explained.add((*path[:-1], meant))
        else:
            found.append((path, _translate(error, path)))
    return [(path, message) for path, message in found if path not in explained or message != "required key is missing"]


def raise_all(found: list[tuple[KeyPath, str]], file: str, locate: Locate | None) -> NoReturn:
    """One :class:`ConfigError` with every problem, in file order (problems without a position last)."""
    problems: dict[tuple[str, str], Problem] = {}
    for path, message in found:
        line, column = locate(path) if locate else (0, 0)
        problem = Problem(key_text(path), message, line, column)
        problems.setdefault((problem.key, message), problem)
    ordered = sorted(problems.values(), key=lambda p: (p.line == 0, p.line, p.column))
    raise ConfigError(file=file, problems=ordered)




def first_problem(err: ValidationError) -> tuple[KeyPath, str]:
    """A model's first validation error: its path below the model (the union members' class names pydantic puts
    in it left out) and its message."""
    first = err.errors(include_url=False)[0]
    where = tuple(p for p in first["loc"] if isinstance(p, int) or not str(p)[:1].isupper())
    return where, first["msg"].removeprefix("Value error, ")
