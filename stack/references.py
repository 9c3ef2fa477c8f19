"""Cross-references of the stack: names unique, runs naming declared clusters and environments, placeholders
declared, every path the stack names inside the project and there. A stack that validates can be planned."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticCustomError

from kernel.paths import resolve_inside
from stack.files import conda_file_problem, environment_file, inline_files_missing
from stack.infrastructure import Cluster, Environment
from stack.keys import KeyPath
from stack.pipelines import Composite, JobEntry, PipelineJob, SweepStep, qualified
from stack.runs import FILE_PREFIX, InlineEnvironment, Run
from stack.sweeps import SweepJob

if TYPE_CHECKING:
    from stack.config import StackConfig

class CrossReferenceProblems:
    """The stack-level problems found by the cross-reference check, all of them (pydantic stops at the first
    error a validator raises: these are raised as one)."""

    def __init__(self) -> None:
        self.found: list[tuple[tuple[str | int, ...], str]] = []

    def add(self, path: tuple[str | int, ...], message: str) -> None:
        self.found.append((path, message))

    def raise_any(self) -> None:
        if self.found:
            # One error carrying every problem (pydantic would stop at the first raised).
            raise PydanticCustomError("stack_reference", "{summary}", {
                "summary": "; ".join(message for _, message in self.found), "problems": tuple(self.found)
            })


def unique_names(config: StackConfig, found: CrossReferenceProblems) -> None:
    """Names Azure would confuse (it compares them case-insensitively), waivers given twice, and a cluster
    named as the image-build cluster of a private workspace."""
    for section in ("clusters", "environments", "jobs"):
        seen: set[str] = set()
        for i, item in enumerate(getattr(config, section)):
            # Azure treats these names case-insensitively.
            if item.name.lower() in seen:
                found.add((section, i, "name"), f"duplicate name {item.name!r}")
            seen.add(item.name.lower())
    for i, j in repeated([(w.rule, w.resource) for w in config.waivers]):
        found.add(("waivers", i), duplicate_waiver(j, config.waivers[i].rule, config.waivers[i].resource))
    builder = config.workspace.image_build_compute.name.lower()
    if config.workspace.public_network_access == "Disabled":
        for i, cluster in enumerate(config.clusters):
            if cluster.name.lower() == builder:
                found.add(
                    ("clusters", i, "name"),
                    f"{cluster.name!r} is the image-build cluster's name; "
                    "rename the cluster or set workspace.image_build_compute.name",
                )


def resolved(
    config: StackConfig, found: CrossReferenceProblems, root: Path
) -> tuple[list[Environment], list[JobEntry]]:
    """The environments with their content versions and the jobs with their references read in (``file:``
    environments, a pipeline's steps and a sweep's trial as runs); what is wrong is added to ``found``.
    Call it only when :func:`paths_outside` found nothing: nothing outside the project is looked at."""
    for i, env in enumerate(config.environments):
        if env.build is not None and not (root / env.build.path / env.build.dockerfile_path).is_file():
            found.add(
                ("environments", i, "build"),
                f"environment {env.name!r}: no {env.build.dockerfile_path} in build folder {env.build.path!r}",
            )
        if env.conda_file is not None and not (root / env.conda_file).is_file():
            found.add(
                ("environments", i, "conda_file"), f"environment {env.name!r}: file {env.conda_file!r} not found"
            )
        elif env.conda_file is not None and (problem := conda_file_problem(root, env.conda_file)):
            found.add(("environments", i, "conda_file"), f"environment {env.name!r}: {problem}")
    refused = {path[1] for path, _ in found.found if path[0] == "environments"}
    versioned = list(config.environments)
    with contextlib.suppress(OSError):  # a file the version is derived from is missing: reported above
        # No version is derived from a file that is missing or refused (reported above).
        versioned = [e if i in refused else e.with_content_version(root) for i, e in enumerate(config.environments)]
    clusters = {c.name: c for c in config.clusters}
    environments = {e.name: e for e in versioned}
    jobs = list(config.jobs)
    for i, entry in enumerate(config.jobs):
        if isinstance(entry, Run):
            jobs[i] = _check_run(entry, _run_key(i), f"run {entry.name!r}", found, root, clusters, environments)
        else:
            jobs[i] = _check_composite(entry, ("jobs", i), found, root, clusters, environments)
    return versioned, jobs


def _run_key(index: int) -> Callable[[str], KeyPath]:
    """Where a field of run ``index`` is written in the stack file."""
    return lambda key: ("jobs", index, key)


def _check_run(
    run: Run, where: Callable[[str], KeyPath], label: str, found: CrossReferenceProblems, root: Path,
    clusters: Mapping[str, Cluster], environments: Mapping[str, Environment],
) -> Run:
    """``run``'s references to the stack checked (problems added at ``where(<field>)``, named ``label``), and
    the run with a ``file:`` environment read in."""
    if run.compute not in clusters:
        found.add(where("compute"), _unknown_cluster(label, run.compute, clusters))
    run_env = run.environment
    if isinstance(run_env, str) and run_env.startswith(FILE_PREFIX):
        try:
            run = run.model_copy(update={"environment": environment_file(run_env, root)})
        except ValueError as err:
            found.add(where("environment"), f"{label}: {err}")
    elif isinstance(run_env, str) and not run_env.startswith("azureml:") and run_env not in environments:
        found.add(where("environment"), _unknown_environment(label, run_env, environments))
    elif isinstance(run_env, InlineEnvironment):
        problem = inline_files_missing(run_env, root)
        if problem:
            found.add(where("environment"), f"{label}: {problem}")
    missing = run.undeclared_placeholders()
    if missing:
        found.add(where("command"), f"{label}: {', '.join(missing)} has no declared input/output")
    if run.code is not None and not (root / run.code).is_dir():
        found.add(where("code"), f"{label}: folder {run.code!r} does not exist under the project root")
    return run


def _check_composite(
    entry: Composite, at: KeyPath, found: CrossReferenceProblems, root: Path, clusters: Mapping[str, Cluster],
    environments: Mapping[str, Environment],
) -> Composite:
    """A pipeline's steps (a sweep's trial) checked as runs, problems at their keys; the entry holding them."""
    runs: dict[str, Run] = {}
    kind = "step" if isinstance(entry, PipelineJob) else "trial"
    for part, run, problems in entry.step_runs(root):
        where = _composite_key(entry, at, part)
        for path, message in problems:
            found.add((*where(str(path[0])), *path[1:]) if path else where(""), f"{kind} "
                      f"{qualified(entry.name, part)!r}: {message}")
        if run is None:
            continue
        outside = [key for key, path in _run_paths(run) if resolve_inside(root, path) is None]
        for key in outside:
            found.add(where(key), f"{kind} {qualified(entry.name, part)!r}: {key} leads outside the project root "
                                  "(symbolic links followed); name a file or folder inside the project")
        if not outside:
            runs[part] = _check_run(run, where, f"{kind} {qualified(entry.name, part)!r}", found, root, clusters,
                                    environments)
    return entry.with_runs(runs)


def _composite_key(entry: Composite, at: KeyPath, part: str) -> Callable[[str], KeyPath]:
    """Where a field of a composite's run is written in the stack file."""
    if isinstance(entry, SweepJob):
        top = {"compute": ("compute",), "inputs": ("inputs",), "outputs": ("outputs",), "identity": ("identity",),
               "limits": ("limits", "trial_timeout"), "queue_settings": ("queue_settings",)}
        return lambda key: (*at, *top.get(key, ("trial", key) if key else ("trial",)))
    step = entry.jobs[part]
    if isinstance(step, SweepStep):
        own = {"compute", "inputs", "outputs", "resources", "identity", "queue_settings", "display_name",
               "description", "tags", "search_space"}

        def in_sweep_step(key: str) -> KeyPath:
            if key == "compute" and step.compute is None and entry.settings.default_compute is not None:
                return (*at, "settings", "default_compute")
            if key == "limits":
                return (*at, "jobs", part, "limits", "trial_timeout")
            return (*at, "jobs", part, *((key,) if key in own or not key else ("trial",)))

        return in_sweep_step
    from_component = step.component is not None

    def where(key: str) -> KeyPath:
        if key == "compute" and step.compute is None and isinstance(entry, PipelineJob) \
                and entry.settings.default_compute is not None:
            return (*at, "settings", "default_compute")
        if (from_component and key in ("command", "code")) or (key == "environment" and step.environment is None \
                and from_component):
            return (*at, "jobs", part, "component")
        return (*at, "jobs", part, *((key,) if key else ()))

    return where


def _run_paths(run: Run) -> list[tuple[str, str]]:
    """(field, path) of every project path a run names."""
    paths = [("code", run.code)] if run.code is not None else []
    env = run.environment
    if isinstance(env, InlineEnvironment) and env.build is not None:
        paths.append(("environment", env.build.path))
    if isinstance(env, InlineEnvironment) and env.conda_file is not None:
        paths.append(("environment", env.conda_file))
    if isinstance(env, str) and env.startswith(FILE_PREFIX):
        paths.append(("environment", env.removeprefix(FILE_PREFIX)))
    return paths


def paths_outside(config: StackConfig, root: Path, found: CrossReferenceProblems) -> bool:
    """Every path the stack names leads, symbolic links followed, inside the project root: the stack file
    is untrusted input (fork pull requests are planned), and what these paths name is read and uploaded.
    Adds a problem for each path that does not; True when there was one."""
    named: list[tuple[tuple[str | int, ...], str]] = []
    for i, env in enumerate(config.environments):
        if env.build is not None:
            named.append((("environments", i, "build", "path"), env.build.path))
            named.append((("environments", i, "build", "dockerfile_path"),
                          f"{env.build.path}/{env.build.dockerfile_path}"))
        if env.conda_file is not None:
            named.append((("environments", i, "conda_file"), env.conda_file))
    runs = [(i, run) for i, run in enumerate(config.jobs) if isinstance(run, Run)]
    named += [(("jobs", i, "code"), run.code) for i, run in runs if run.code is not None]
    for i, run in runs:
        inline = run.environment
        if isinstance(inline, InlineEnvironment) and inline.build is not None:
            named.append((("jobs", i, "environment", "build", "path"), inline.build.path))
        if isinstance(inline, InlineEnvironment) and inline.conda_file is not None:
            named.append((("jobs", i, "environment", "conda_file"), inline.conda_file))
    outside = [(key, path) for key, path in named if resolve_inside(root, path) is None]
    for key, path in outside:
        found.add(key, f"{path!r} leads outside the project root (symbolic links followed); "
                       "name a file or folder inside the project")
    return bool(outside)


def _unknown_cluster(label: str, compute: str, clusters: Mapping[str, object]) -> str:
    """``label`` (``run 'x'``, ``step 'p/train'``) names a cluster the stack does not declare."""
    return f"{label}: unknown cluster {compute!r}{_hint(compute, clusters)}"


def _unknown_environment(label: str, environment: str, environments: Mapping[str, object]) -> str:
    return (f"{label}: unknown environment {environment!r}{_hint(environment, environments)} "
            "(or give a full azureml: reference, file: or an inline environment)")


def _raw_names(items: Any) -> dict[str, None] | None:
    """The ``name`` of every entry of a section as written, or None when one has no name (or it is no list)."""
    if items is None:
        return {}
    if not isinstance(items, list):
        return None
    names = [item.get("name") if isinstance(item, dict) else None for item in items]
    return dict.fromkeys(n for n in names if isinstance(n, str)) if all(isinstance(n, str) for n in names) else None


def repeated(keys: list[Any]) -> list[tuple[int, int]]:
    """``(i, j)`` for each key equal to an earlier one, ``j`` the first's index."""
    first: dict[Any, int] = {}
    return [(i, first[key]) for i, key in enumerate(keys) if first.setdefault(key, i) != i]


def duplicate_waiver(first: int, rule: object, resource: object) -> str:
    # The engine would apply the first and report this one as unused: one decision, one entry.
    return (f"duplicate waiver: waivers[{first}] already waives {rule} for {resource!r}; keep one (with the reason "
            "and expiry you mean)")


def raw_references(data: Mapping[str, Any]) -> list[tuple[KeyPath, str]]:
    """What :class:`StackConfig`'s cross-reference check would say of the runs' clusters and environments,
    read from the values as written. Pydantic runs that check only once every field is valid, so without
    this a mistake elsewhere in the file would hide an unknown cluster until the next run. Only what the
    values say for certain is reported: nothing when a section cannot be read. Duplicate waivers too."""
    found: list[tuple[KeyPath, str]] = []
    # No clusters at all is its own problem (the section is required), not one per run naming one.
    clusters = _raw_names(data.get("clusters")) or None
    environments = _raw_names(data.get("environments"))
    jobs = data.get("jobs")
    for i, job in enumerate(jobs if isinstance(jobs, list) else []):
        if not isinstance(job, dict):
            continue
        if job.get("type", "command") != "command":  # a pipeline's steps, a sweep's trial: checked with the model
            continue
        label, compute, environment = f"run {job.get('name')!r}", job.get("compute"), job.get("environment")
        if clusters is not None and isinstance(compute, str) and compute.removeprefix("azureml:") not in clusters:
            found.append((("jobs", i, "compute"), _unknown_cluster(label, compute.removeprefix("azureml:"), clusters)))
        if environments is not None and isinstance(environment, str) and environment \
                and not environment.startswith(("azureml:", FILE_PREFIX)) and environment not in environments:
            found.append((("jobs", i, "environment"), _unknown_environment(label, environment, environments)))
    waivers = data.get("waivers")
    # (rule, resource) of each waiver that names both; an entry that does not is its own (i, None), never repeated.
    pairs: list[tuple[object, object]] = [
        (w["rule"], w["resource"]) if isinstance(w, dict) and isinstance(w.get("rule"), str)
        and isinstance(w.get("resource"), str) else (i, None)
        for i, w in enumerate(waivers if isinstance(waivers, list) else [])]
    found += [(("waivers", i), duplicate_waiver(j, *pairs[i])) for i, j in repeated(pairs)]
    return found


def _hint(value: str, known: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(value, list(known), n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(known) or 'none declared'}"
