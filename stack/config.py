"""The stack model: one validated object built from a stack's ``aml-gpu-training:*`` config.

Precedence and sources, explicitly:

1. ``aml-gpu-training:<key>`` values of the stack (``Pulumi.<stack>.yaml``), handed over by the
   Pulumi CLI (``pulumi up``) or by :mod:`planning.engine` (offline) the same way;
2. ``azure-native:location`` for the region when ``workspace.location`` is not set;
3. the model's defaults, which are the secure ones.

Cross-references (a run's cluster and environment, placeholders, the code folder) are checked here,
so a stack that validates can always be planned. Whether a run *fits* its cluster is policy.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from azurefacts import regions
from kernel import bounded, secrets
from kernel import regex as linear
from kernel.errors import ConfigError, Problem
from kernel.paths import resolve_inside
from stack import NAMESPACE
from stack.fabric_check import fabric_check_runs
from stack.infrastructure import Cluster, Environment, Network, Workspace
from stack.pipelines import Composite, JobEntry, PipelineJob, SweepJob, qualified
from stack.runs import FILE_PREFIX, MISSING_DISTRIBUTION, InlineEnvironment, Run
from stack.stackfile import SECRET_PLACEHOLDER, StackFile
from stack.waivers import Waiver

LOCATION_KEY = "azure-native:location"
SUBSCRIPTION_KEY = "azure-native:subscriptionId"

_GUID = linear.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

SAME_SUBSCRIPTION: Mapping[str, str] = {
    "workspace.customer_managed_key.key_vault": (
        "the key vault holding a customer-managed key must be in the workspace's subscription "
        "(Azure ML, \"Use customer-managed keys\")"
    ),
    "network.subnet_id": (
        "the training subnet's virtual network must be in the workspace's subscription "
        "(Azure ML, \"Secure a training environment with virtual networks\")"
    ),
    "workspace.primary_user_assigned_identity": (
        "the stack looks the workspace's user-assigned identity up in the deployment subscription to grant "
        "it the roles Azure ML documents (\"Set up authentication between Azure Machine Learning and other "
        "services\"); use an identity in that subscription"
    ),
}
"""Resource ids the workspace's own subscription must hold, and why (the rule Azure documents)."""


class _References:
    """The stack-level problems found by :class:`StackConfig`'s cross-reference check, all of them."""

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


class StackConfig(BaseModel):
    """Everything one stack declares."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    location: str = Field(min_length=1)
    subscription_id: str | None = None
    """``azure-native:subscriptionId``: the subscription ``pulumi up`` deploys to, when the stack pins it."""
    workspace: Workspace
    network: Network = Network()
    clusters: list[Cluster] = Field(min_length=1)
    environments: list[Environment] = []
    jobs: list[JobEntry] = []
    waivers: list[Waiver] = []

    @model_validator(mode="after")
    def _references(self, info: ValidationInfo) -> StackConfig:
        found = _References()
        self._unique_names(found)
        self._runs_reference_the_stack(found, Path((info.context or {}).get("root", ".")))
        found.raise_any()
        return self

    def _unique_names(self, found: _References) -> None:
        for section in ("clusters", "environments", "jobs"):
            seen: set[str] = set()
            for i, item in enumerate(getattr(self, section)):
                # Azure treats these names case-insensitively.
                if item.name.lower() in seen:
                    found.add((section, i, "name"), f"duplicate name {item.name!r}")
                seen.add(item.name.lower())
        for i, j in _repeated([(w.rule, w.resource) for w in self.waivers]):
            found.add(("waivers", i), _duplicate_waiver(j, self.waivers[i].rule, self.waivers[i].resource))
        builder = self.workspace.image_build_compute.name.lower()
        if self.workspace.public_network_access == "Disabled":
            for i, cluster in enumerate(self.clusters):
                if cluster.name.lower() == builder:
                    found.add(
                        ("clusters", i, "name"),
                        f"{cluster.name!r} is the image-build cluster's name; "
                        "rename the cluster or set workspace.image_build_compute.name",
                    )

    def _runs_reference_the_stack(self, found: _References, root: Path) -> None:
        if _paths_outside(self, root, found):
            return  # nothing outside the project is looked at, not even whether it exists
        for i, env in enumerate(self.environments):
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
        with contextlib.suppress(OSError):  # a file the version is derived from is missing: reported above
            # No version is derived from a file that is missing or refused (reported above).
            object.__setattr__(self, "environments", [e if i in refused else e.with_content_version(root)
                                                      for i, e in enumerate(self.environments)])
        clusters = {c.name: c for c in self.clusters}
        environments = {e.name: e for e in self.environments}
        jobs = list(self.jobs)
        for i, entry in enumerate(self.jobs):
            if isinstance(entry, Run):
                jobs[i] = _check_run(entry, _run_key(i), f"run {entry.name!r}", found, root, clusters, environments)
            else:
                jobs[i] = _check_composite(entry, ("jobs", i), found, root, clusters, environments)
        object.__setattr__(self, "jobs", jobs)

    @model_validator(mode="after")
    def _with_fabric_checks(self, info: ValidationInfo) -> StackConfig:
        # Generated after the reference checks: they only reference what the stack declares.
        root = Path((info.context or {}).get("root", "."))
        checks = fabric_check_runs(self.clusters, self.environments, {r.name for r in self.jobs}, root)
        if checks:
            object.__setattr__(self, "jobs", [*self.jobs, *checks])
        return self

    @model_validator(mode="after")
    def _one_subscription(self) -> StackConfig:
        mismatch = self.subscription_mismatch(self.subscription_id)
        if mismatch:
            found = _References()
            found.add(tuple(mismatch[0].split(".")), mismatch[1])
            found.raise_any()
        return self

    def subscription_references(self) -> list[tuple[str, str]]:
        """(key, subscription id) of every resource id that must be in the workspace's subscription."""
        ws = self.workspace
        ids = {
            "workspace.customer_managed_key.key_vault": ws.customer_managed_key.key_vault
            if ws.customer_managed_key else None,
            "network.subnet_id": self.network.subnet_id,
            "workspace.primary_user_assigned_identity": ws.primary_user_assigned_identity,
        }
        return [(key, value.split("/")[2]) for key, value in ids.items() if value]

    def subscription_mismatch(self, subscription: str | None) -> tuple[str, str] | None:
        """(key, message) of the first id outside ``subscription`` (or, without it, outside the first id's).

        GUIDs compare case-insensitively.
        """
        refs = self.subscription_references()
        if not refs:
            return None
        expected, source = (subscription, SUBSCRIPTION_KEY) if subscription else (refs[0][1], refs[0][0])
        for key, sub in refs:
            if sub.lower() != expected.lower():
                return key, (f"subscription {sub} differs from {expected} ({source}): {SAME_SUBSCRIPTION[key]}")
        return None

    @property
    def runs(self) -> list[Run]:
        """The runs the stack declares (command jobs, generated fabric checks included), in file order."""
        return [job for job in self.jobs if isinstance(job, Run)]

    @property
    def composites(self) -> list[Composite]:
        """The pipelines and sweeps the stack declares, in file order (each holds its steps as runs)."""
        return [job for job in self.jobs if not isinstance(job, Run)]

    def cluster(self, name: str) -> Cluster:
        return next(c for c in self.clusters if c.name == name)

    def environment(self, name: str) -> Environment | None:
        return next((e for e in self.environments if e.name == name), None)

    @property
    def workspace_location(self) -> str:
        return self.workspace.location or self.location


def _run_key(index: int) -> Callable[[str], KeyPath]:
    """Where a field of run ``index`` is written in the stack file."""
    return lambda key: ("jobs", index, key)


def _check_run(
    run: Run, where: Callable[[str], KeyPath], label: str, found: _References, root: Path,
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
        problem = _inline_files_missing(run_env, root)
        if problem:
            found.add(where("environment"), f"{label}: {problem}")
    missing = run.undeclared_placeholders()
    if missing:
        found.add(where("command"), f"{label}: {', '.join(missing)} has no declared input/output")
    if run.code is not None and not (root / run.code).is_dir():
        found.add(where("code"), f"{label}: folder {run.code!r} does not exist under the project root")
    return run


def _check_composite(
    entry: Composite, at: KeyPath, found: _References, root: Path, clusters: Mapping[str, Cluster],
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


def _inside(root: Path, relative: str) -> Path:
    """``root / relative``, symlinks followed, refused when it leaves the project root."""
    path = resolve_inside(root, relative)
    if path is None:
        raise ValueError(f"{relative!r} leads outside the project root (symbolic links followed)")
    return path


def _inline_files_missing(env: InlineEnvironment, root: Path) -> str | None:
    """What an inline environment names that is not there (None when everything is)."""
    try:
        if env.build is not None and not _inside(root, f"{env.build.path}/{env.build.dockerfile_path}").is_file():
            return f"no {env.build.dockerfile_path} in build folder {env.build.path!r}"
        if env.conda_file is not None and not _inside(root, env.conda_file).is_file():
            return f"conda file {env.conda_file!r} not found"
    except ValueError as err:
        return str(err)
    return conda_file_problem(root, env.conda_file) if env.conda_file is not None else None


def conda_file_problem(root: Path, conda_file: str) -> str | None:
    """What is wrong with the conda file at ``root / conda_file`` (None when it reads as YAML within
    :data:`kernel.bounded.CONDA_FILE`): azure-ai-ml loads and serialises it whole with every job, so an alias
    bomb or a file of gigabytes there would take the machine down at ``plan`` and ``submit``."""
    try:
        bounded.load_file(root / conda_file, bounded.CONDA_FILE)
    except OSError as err:
        return f"conda file {conda_file!r} cannot be read: {err.strerror or err}"
    except bounded.BoundedInputError as err:
        return f"conda file {conda_file!r}: {err}"
    return None


def environment_file(reference: str, root: Path) -> InlineEnvironment:
    """A ``file:`` environment (a CLI v2 environment YAML) as the inline environment it declares, its
    paths made relative to the project root. Raises ValueError naming what is wrong."""
    relative = reference[len(FILE_PREFIX):]
    path = _inside(root, relative)
    if not path.is_file():
        raise ValueError(f"environment file {relative!r} not found")
    try:
        data = bounded.load_file(path, bounded.ENVIRONMENT_FILE)
    except OSError as err:
        raise ValueError(f"environment file {relative!r} cannot be read: {err.strerror or err}") from None
    except bounded.BoundedInputError as err:
        raise ValueError(f"environment file {relative!r}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"environment file {relative!r}: expected a mapping")
    folder = path.parent.relative_to(root.resolve())
    fields = {k: v for k, v in data.items() if k not in ("$schema", "tags", "os_type", "inference_config")}
    if isinstance(fields.get("build"), dict) and "path" in fields["build"]:
        build = dict(fields["build"])
        build["path"] = _posix(folder / str(build["path"]))
        fields["build"] = build
    if isinstance(fields.get("conda_file"), str):
        fields["conda_file"] = _posix(folder / fields["conda_file"])
    fields["version"] = None if fields.get("version") is None else str(fields["version"])
    try:
        env = InlineEnvironment.model_validate(fields)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"environment file {relative!r}: {where}: {first['msg']}") from None
    problem = _inline_files_missing(env, root)
    if problem:
        raise ValueError(f"environment file {relative!r}: {problem}")
    return env


def _posix(path: Path) -> str:
    return os.path.normpath(path.as_posix()).replace(os.sep, "/")


def _paths_outside(config: StackConfig, root: Path, found: _References) -> bool:
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


def _repeated(keys: list[Any]) -> list[tuple[int, int]]:
    """``(i, j)`` for each key equal to an earlier one, ``j`` the first's index."""
    first: dict[Any, int] = {}
    return [(i, first[key]) for i, key in enumerate(keys) if first.setdefault(key, i) != i]


def _duplicate_waiver(first: int, rule: object, resource: object) -> str:
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
    found += [(("waivers", i), _duplicate_waiver(j, *pairs[i])) for i, j in _repeated(pairs)]
    return found


def _hint(value: str, known: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(value, list(known), n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(known) or 'none declared'}"


_FIELDS = tuple(name for name in StackConfig.model_fields if name not in ("location", "subscription_id"))

KeyPath = tuple[str | int, ...]
"""A path into the stack file: the config key (``aml-gpu-training:clusters``), then keys and list indexes."""
Locate = Callable[[KeyPath], tuple[int, int]]
"""``(line, column)`` of a path in the stack file, (0, 0) when unknown."""

# ------------------------------------------------------------------------------------------ secrets

RUN_SECRET_MESSAGE = (
    "an encrypted (secure:) value cannot go into a run: Azure ML keeps a job's command, inputs and "
    "environment variables in its definition, readable by everyone with access to the workspace, and the "
    "plan, the job files and `amlgpu submit` cannot carry a value they cannot decrypt. Keep the secret in "
    "the workspace key vault and read it at run time with the job's identity"
)
"""Why a run may hold no secret (the policy pack's run-secrets-in-environment-variables has the same reason)."""
RUN_SECRET_REASON = RUN_SECRET_MESSAGE.removeprefix("an encrypted (secure:) value cannot go into a run: ")

NOT_A_SECRET = {
    "workspace": "workspace settings end up as resource properties and tags, readable by anyone with Reader "
    "access to the resource group (tags also in cost exports), so a secret there is not secret",
    "clusters": "cluster settings and tags are readable by anyone with Reader access to the workspace, "
    "so a secret there is not secret",
}
"""Why the rest of the stack model holds no secret either. Names, ids, sizes and counts are not secrets;
credentials belong in the provider's own settings (e.g. azure-native:clientSecret) or in the key vault."""


def _secret_path(value: Any, path: KeyPath) -> KeyPath | None:
    """The path of the first encrypted value inside ``value`` (``jobs, 0, environment_variables, X``)."""
    if value == SECRET_PLACEHOLDER:
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        found = _secret_path(inner, (*path, key))
        if found:
            return found
    return None


_PRIVATE_KEYS = frozenset({"environment_variables", "inputs", "tags", "properties", "ssh_public_keys", "command"})
"""Keys whose values (at any depth) are never quoted back: they are where people paste tokens."""
_CREDENTIAL_LIKE = linear.compile(
    r"[A-Za-z0-9+=_-]{32,}|-----BEGIN|AccountKey=|(^|[?&])sig=|\b(gh[pousr]_|hf_|sk-|xox[bp]-|AKIA)[A-Za-z0-9]"
)


def _shown(value: Any, path: KeyPath) -> str:
    """``value`` as an error message may quote it: containers described, likely secrets withheld."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, str) and (
        any(part in _PRIVATE_KEYS for part in path if isinstance(part, str)) or _CREDENTIAL_LIKE.search(value)
        or secrets.judge(str(path[-1]) if path else "", value)
    ):
        return "a value not shown here: it may be a secret"
    return json.dumps(value, default=str)[:80]


# ------------------------------------------------------------------------------------------ pydantic's errors

_JOB_TAGS = frozenset({"Run", "PipelineJob", "SweepJob"})
"""The models of a ``jobs`` entry (see :data:`stack.pipelines.JobEntry`)."""
_UNION_TAGS = {"str", "int", "float", "bool", "pytorch", "mpi", "tensorflow"}


def _is_tag(part: object, previous: object) -> bool:
    """A union member's tag that pydantic puts in ``loc``, not a key the user wrote."""
    if not isinstance(part, str):
        return False
    # By name, not by case: upper-case keys are the user's own (environment variables, tags).
    if part in _model_names() or "[" in part or part in {"str", "int", "float", "bool"}:
        return True
    return previous == "distribution" and part in _UNION_TAGS


@functools.cache
def _model_names() -> frozenset[str]:
    """Class names of every model in the stack model: the tags pydantic gives a union's model members."""
    seen: dict[str, Any] = {}
    pending: list[Any] = [StackConfig]
    while pending:
        model = pending.pop()
        if model.__name__ not in seen:
            seen[model.__name__] = model
            pending += [m for field in model.model_fields.values() for m in _models_in(field.annotation)]
    return frozenset(seen)


def _clean(loc: tuple[Any, ...]) -> tuple[KeyPath, KeyPath | None]:
    """``loc`` without union tags, and the path at which the first union was (None: no union)."""
    out: list[str | int] = []
    union_at: KeyPath | None = None
    previous: object = None
    for part in loc:
        if _is_tag(part, previous):
            # A jobs entry is read with the one model its `type` names: that tag is no choice between members.
            if union_at is None and not (len(out) == 2 and out[0] == "jobs" and part in _JOB_TAGS):
                union_at = tuple(out)
        else:
            out.append(part)
        previous = part
    return tuple(out), union_at


def key_text(path: KeyPath) -> str:
    """``aml-gpu-training:jobs[0].limits.timeout`` for ``("aml-gpu-training:jobs", 0, "limits", "timeout")``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


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
    got = f" (got {_shown(error['input'], path)})" if "input" in error else ""
    if error.get("input") == SECRET_PLACEHOLDER:
        return ("the value is encrypted (secure:) and the offline plan cannot decrypt it to check it; "
                "it is not a secret: set it in plain text")
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
        return f"type must be one of {ctx.get('expected_tags')} (got {_shown(ctx.get('tag'), path)})"
    if kind == "job_type":
        given = error.get("input")
        kind_given = given.get("type") if isinstance(given, dict) else None
        return f"{error['msg']} (got type {_shown(kind_given, path)})"
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


def _model_at(loc: tuple[Any, ...]) -> Any:
    """The model class found at ``loc`` (None when it is not one model: a dict, or an untagged union)."""
    candidates: list[Any] = [StackConfig]
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
    got = f" (got {_shown(members[0]['input'], path)})" if "input" in members[0] else ""
    if all(nouns):
        return f"expected {' or '.join(dict.fromkeys(n for n in nouns if n))}{got}"
    return "; ".join(dict.fromkeys(_translate(e, path) for e in members))


def _problems_of(err: ValidationError, data: Mapping[str, Any]) -> list[tuple[KeyPath, str]]:
    """Every error pydantic found, in our words, each with its path (below the namespace)."""
    errors: list[Mapping[str, Any]] = list(err.errors(include_url=False))
    plain: list[tuple[KeyPath, tuple[Any, ...], Mapping[str, Any]]] = []
    unions: dict[KeyPath, list[tuple[KeyPath, tuple[Any, ...], Mapping[str, Any]]]] = {}
    for error in errors:
        loc = tuple(error["loc"])
        path, union_at = _clean(loc)
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
            model = _model_at(loc[:-1])
            fields = list(model.model_fields) if model is not None else []
            message, meant = _unknown_key(getattr(model, "__name__", None), str(path[-1]), error.get("input"),
                                          fields, missing.get(path[:-1], []))
            found.append((path, message))
            if meant:
                explained.add((*path[:-1], meant))
        else:
            found.append((path, _translate(error, path)))
    return [(path, message) for path, message in found if path not in explained or message != "required key is missing"]


def _in_file(path: KeyPath) -> KeyPath:
    """A path below the namespace as a path in the stack file (the region's and subscription's keys are their own)."""
    if path and path[0] in (LOCATION_KEY, SUBSCRIPTION_KEY):
        return path
    if path and path[0] == "subscription_id":
        return (SUBSCRIPTION_KEY, *path[1:])
    return (f"{NAMESPACE}:{path[0]}", *path[1:]) if path else (NAMESPACE,)


def _raise_all(found: list[tuple[KeyPath, str]], file: str, locate: Locate | None) -> None:
    """One :class:`ConfigError` with every problem, in file order (problems without a position last)."""
    problems: dict[tuple[str, str], Problem] = {}
    for path, message in found:
        line, column = locate(path) if locate else (0, 0)
        problem = Problem(key_text(path), message, line, column)
        problems.setdefault((problem.key, message), problem)
    ordered = sorted(problems.values(), key=lambda p: (p.line == 0, p.line, p.column))
    raise ConfigError(file=file, problems=ordered)


_REPORTED = "(reported above)"
"""The region given to the model when its problem is already reported (so it is not also "missing")."""

def build(
    values: Mapping[str, Any], *, location: str | None, file: str, root: Path, secret: frozenset[str] = frozenset(),
    subscription: str | None = None, locate: Locate | None = None,
) -> StackConfig:
    """Validate namespace values (key without namespace -> decoded value) into a :class:`StackConfig`.

    ``secret`` names the keys (without namespace) set with ``pulumi config set --secret``; ``locate``
    gives the position of a stack file path for messages. Every problem is reported at once: a
    :class:`ConfigError` carries them all, in file order.
    """
    found: list[tuple[KeyPath, str]] = []
    for key in sorted(secret & set(values)):
        where = _secret_path(values.get(key), (key,)) or (key,)
        reason = RUN_SECRET_REASON if key == "jobs" else NOT_A_SECRET.get(
            key, "the stack model holds names, ids, sizes and settings, none of them secret, and the offline "
            "plan cannot decrypt a value to check it"
        )
        found.append((_in_file(where), f"an encrypted (secure:) value is not accepted here: {reason}; set it in "
                                       "plain text or keep the secret out of the stack"))
    if location == SECRET_PLACEHOLDER:
        found.append(((LOCATION_KEY,), "the region is encrypted (secure:) and cannot be read offline; a region is "
                                       "not a secret: set it in plain text"))
        location = _REPORTED
    elif isinstance(location, str) and location and location != _REPORTED:
        try:
            regions.check(location)
        except ValueError as err:
            found.append(((LOCATION_KEY,), str(err)))
    if subscription == SECRET_PLACEHOLDER:
        subscription = None  # encrypted: unknown offline; `pulumi up` compares with the provider's own
    if subscription is not None and not (isinstance(subscription, str) and _GUID.fullmatch(subscription)):
        found.append(((SUBSCRIPTION_KEY,), f"expected a subscription id (a GUID) "
                                           f"(got {_shown(subscription, (SUBSCRIPTION_KEY,))})"))
        subscription = None
    data = {k: v for k, v in values.items() if k not in ("location", "subscription_id")}
    for internal in ("location", "subscription_id"):
        if internal in values:
            found.append(((f"{NAMESPACE}:{internal}",),
                          f"unknown key {internal!r}: {NO_PLACE['StackConfig', internal]}"))
    data["location"] = location or ""
    data["subscription_id"] = subscription
    if not data["location"] and isinstance(values.get("workspace"), dict):
        data["location"] = values["workspace"].get("location") or ""
    if not data["location"] and "location" in values:
        data["location"] = _REPORTED  # the region is there, under the wrong key: one problem, not two
    try:
        config = StackConfig.model_validate(data, context={"root": root})
    except ValidationError as err:
        problems = _problems_of(err, data)
        if not any(error["type"] == "stack_reference" for error in err.errors()):
            # The cross-reference check did not run: say what it would have said (not twice at one key).
            at = {path for path, _ in problems}
            problems += [(path, message) for path, message in raw_references(data) if path not in at]
        found += [(_in_file(path), message) for path, message in problems if not (path and path[0] in secret)]
    if found:
        _raise_all(found, file, locate)
    return config


_PROVIDER_NAMESPACES = frozenset({"azure-native", "azure", "azuread", "pulumi"})


def from_stackfile(stack: StackFile, root: Path) -> StackConfig:
    """The stack model of a parsed stack file."""
    prefix = f"{NAMESPACE}:"
    values = {k.removeprefix(prefix): v for k, v in stack.config.items() if k.startswith(prefix)}
    location = stack.config.get(LOCATION_KEY)
    wrong: list[tuple[KeyPath, str]] = []
    if location is not None and not isinstance(location, str):
        wrong.append(((LOCATION_KEY,), f"expected a region name such as westeurope "
                                       f"(got {_shown(location, (LOCATION_KEY,))})"))
        location = _REPORTED  # reported above; not again as missing
    for key in stack.config:
        namespace, _, name = key.partition(":")
        if namespace != NAMESPACE and name in _FIELDS:
            wrong.append(((key,), f"{key!r} is in namespace {namespace!r}, but this project reads its settings from "
                                  f"{NAMESPACE!r} (the project name in Pulumi.yaml): write '{NAMESPACE}:{name}'"))
        elif namespace != NAMESPACE and namespace not in _PROVIDER_NAMESPACES and key != LOCATION_KEY and \
                difflib.get_close_matches(namespace, [NAMESPACE], n=1, cutoff=0.6):
            wrong.append(((key,), f"namespace {namespace!r} is not this project's: did you mean '{NAMESPACE}:{name}'?"))
    secret = frozenset(k.removeprefix(prefix) for k in stack.secret_keys if k.startswith(prefix))
    try:
        config = build(values, location=location, file=stack.display, root=root, secret=secret,
                       subscription=stack.config.get(SUBSCRIPTION_KEY), locate=stack.position_of)
    except ConfigError as err:
        if not wrong:
            raise
        # A section under the wrong namespace is not also "missing": the fix above is the one to make.
        moved = {f"{NAMESPACE}:{key.partition(':')[2]}" for (key, *_), _ in wrong if isinstance(key, str)}
        kept = [p for p in err.problems if not (p.key in moved and p.message == "required key is missing")]
        raise ConfigError(file=stack.display, problems=sorted(
            [*kept, *(Problem(key_text(p), m, *stack.position_of(p)) for p, m in wrong)],
            key=lambda p: (p.line == 0, p.line, p.column),
        )) from None
    if wrong:
        _raise_all(wrong, stack.display, stack.position_of)
    return config


def from_pulumi_config(stack_name: str, root: Path) -> StackConfig:
    """The stack model of the running Pulumi program (a namespace key set with --secret is an error).

    Reads every ``aml-gpu-training:*`` key the engine handed over (unknown keys are errors, which
    ``pulumi.Config`` alone cannot detect), decoding structured values from their JSON strings.
    """
    from pulumi.runtime import config as runtime_config

    handed: dict[str, Any] = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{NAMESPACE}:"
    values: dict[str, Any] = {}
    for key, raw in handed.items():
        if not key.startswith(prefix):
            continue
        name = key.removeprefix(prefix)
        try:
            values[name] = json.loads(raw) if isinstance(raw, str) and raw[:1] in "[{" else raw
        except json.JSONDecodeError as err:
            raise ConfigError(f"not valid JSON: {err}", file=f"Pulumi.{stack_name}.yaml", key=key) from None
        except RecursionError:  # [[[[...]]]] deeper than Python's JSON reader follows
            raise ConfigError("nested too deeply to be read", file=f"Pulumi.{stack_name}.yaml", key=key) from None
    secret = frozenset(
        k.removeprefix(prefix) for k in handed if k.startswith(prefix) and runtime_config.is_config_secret(k)
    )
    location = handed.get(LOCATION_KEY)
    return build(values, location=location, file=f"Pulumi.{stack_name}.yaml", root=root, secret=secret,
                 subscription=handed.get(SUBSCRIPTION_KEY))
