"""The stack model: one validated object built from a stack's ``aml-gpu-training:*`` config.

Precedence and sources, explicitly:

1. ``aml-gpu-training:<key>`` values of the stack (``Pulumi.<stack>.yaml``), handed over by the
   Pulumi CLI (``pulumi up``) or by :mod:`amlgpu.plan` (offline) the same way;
2. ``azure-native:location`` for the region when ``workspace.location`` is not set;
3. the model's defaults, which are the secure ones.

Cross-references (a run's cluster and environment, placeholders, the code folder) are checked here,
so a stack that validates can always be planned. Whether a run *fits* its cluster is policy.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from infra.model import Cluster, Environment, Network, Workspace
from infra.paths import resolve_inside
from model import NAMESPACE
from model.errors import ConfigError
from model.fabric_check import fabric_check_runs
from model.runs import FILE_PREFIX, InlineEnvironment, Run
from model.stackfile import SECRET_PLACEHOLDER, StackFile
from model.waivers import Waiver

LOCATION_KEY = "azure-native:location"
SUBSCRIPTION_KEY = "azure-native:subscriptionId"

_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

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


def _reference_error(key: str, message: str) -> PydanticCustomError:
    """A stack-level error that names the exact key (pydantic's loc would only name the stack)."""
    return PydanticCustomError("stack_reference", "{key}: {message}", {"key": key, "message": message})


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
    jobs: list[Run] = []
    waivers: list[Waiver] = []

    @model_validator(mode="after")
    def _unique_names(self) -> StackConfig:
        for section in ("clusters", "environments", "jobs"):
            seen: set[str] = set()
            for i, item in enumerate(getattr(self, section)):
                # Azure treats these names case-insensitively.
                if item.name.lower() in seen:
                    raise _reference_error(f"{section}[{i}].name", f"duplicate name {item.name!r}")
                seen.add(item.name.lower())
        builder = self.workspace.image_build_compute.name.lower()
        if self.workspace.public_network_access == "Disabled":
            for i, cluster in enumerate(self.clusters):
                if cluster.name.lower() == builder:
                    raise _reference_error(
                        f"clusters[{i}].name",
                        f"{cluster.name!r} is the image-build cluster's name; "
                        "rename the cluster or set workspace.image_build_compute.name",
                    )
        return self

    @model_validator(mode="after")
    def _runs_reference_the_stack(self, info: ValidationInfo) -> StackConfig:
        root = Path((info.context or {}).get("root", "."))
        _paths_stay_inside(self, root)
        for i, env in enumerate(self.environments):
            if env.build is not None and not (root / env.build.path / env.build.dockerfile_path).is_file():
                raise _reference_error(
                    f"environments[{i}].build",
                    f"environment {env.name!r}: no {env.build.dockerfile_path} in build folder {env.build.path!r}",
                )
            if env.conda_file is not None and not (root / env.conda_file).is_file():
                raise _reference_error(
                    f"environments[{i}].conda_file", f"environment {env.name!r}: file {env.conda_file!r} not found"
                )
        object.__setattr__(self, "environments", [e.with_content_version(root) for e in self.environments])
        clusters = {c.name: c for c in self.clusters}
        environments = {e.name: e for e in self.environments}
        jobs = list(self.jobs)
        for i, run in enumerate(self.jobs):
            where = f"jobs[{i}]"
            if run.compute not in clusters:
                raise _reference_error(
                    f"{where}.compute",
                    f"run {run.name!r}: unknown cluster {run.compute!r}{_hint(run.compute, clusters)}",
                )
            env = run.environment
            if isinstance(env, str) and env.startswith(FILE_PREFIX):
                try:
                    jobs[i] = run.model_copy(update={"environment": environment_file(env, root)})
                except ValueError as err:
                    raise _reference_error(f"{where}.environment", f"run {run.name!r}: {err}") from None
            elif isinstance(env, str) and not env.startswith("azureml:") and env not in environments:
                raise _reference_error(
                    f"{where}.environment",
                    f"run {run.name!r}: unknown environment {env!r}"
                    f"{_hint(env, environments)} (or give a full azureml: reference, file: or an inline environment)",
                )
            elif isinstance(env, InlineEnvironment):
                problem = _inline_files_missing(env, root)
                if problem:
                    raise _reference_error(f"{where}.environment", f"run {run.name!r}: {problem}")
            missing = run.undeclared_placeholders()
            if missing:
                raise _reference_error(
                    f"{where}.command", f"run {run.name!r}: {', '.join(missing)} has no declared input/output"
                )
            if run.code is not None and not (root / run.code).is_dir():
                raise _reference_error(
                    f"{where}.code", f"run {run.name!r}: folder {run.code!r} does not exist under the project root"
                )
        object.__setattr__(self, "jobs", jobs)
        return self

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
            raise _reference_error(*mismatch)
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

    def cluster(self, name: str) -> Cluster:
        return next(c for c in self.clusters if c.name == name)

    def environment(self, name: str) -> Environment | None:
        return next((e for e in self.environments if e.name == name), None)

    @property
    def workspace_location(self) -> str:
        return self.workspace.location or self.location


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
    return None


def environment_file(reference: str, root: Path) -> InlineEnvironment:
    """A ``file:`` environment (a CLI v2 environment YAML) as the inline environment it declares, its
    paths made relative to the project root. Raises ValueError naming what is wrong."""
    relative = reference[len(FILE_PREFIX):]
    path = _inside(root, relative)
    if not path.is_file():
        raise ValueError(f"environment file {relative!r} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(f"environment file {relative!r} is not YAML: {str(err).splitlines()[0]}") from None
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


def _paths_stay_inside(config: StackConfig, root: Path) -> None:
    """Every path the stack names leads, symbolic links followed, inside the project root: the stack file
    is untrusted input (fork pull requests are planned), and what these paths name is read and uploaded."""
    named: list[tuple[str, str]] = []
    for i, env in enumerate(config.environments):
        if env.build is not None:
            named.append((f"environments[{i}].build.path", env.build.path))
            named.append((f"environments[{i}].build.dockerfile_path", f"{env.build.path}/{env.build.dockerfile_path}"))
        if env.conda_file is not None:
            named.append((f"environments[{i}].conda_file", env.conda_file))
    named += [(f"jobs[{i}].code", run.code) for i, run in enumerate(config.jobs) if run.code is not None]
    for i, run in enumerate(config.jobs):
        env = run.environment
        if isinstance(env, InlineEnvironment) and env.build is not None:
            named.append((f"jobs[{i}].environment.build.path", env.build.path))
        if isinstance(env, InlineEnvironment) and env.conda_file is not None:
            named.append((f"jobs[{i}].environment.conda_file", env.conda_file))
    for key, path in named:
        if resolve_inside(root, path) is None:
            raise _reference_error(
                key, f"{path!r} leads outside the project root (symbolic links followed); "
                "name a file or folder inside the project"
            )


def _hint(value: str, known: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(value, list(known), n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(known) or 'none declared'}"


_FIELDS = tuple(name for name in StackConfig.model_fields if name not in ("location", "subscription_id"))


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


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    previous: object = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _is_tag(part, previous):
            out += f".{part}" if out else part
        previous = part
    return out


def _raise_first(err: ValidationError, file: str, data: Mapping[str, Any]) -> None:
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = tuple(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    key_loc = _format_loc(loc)
    deeper = [e for e in errors if _format_loc(tuple(e["loc"])).startswith(key_loc + ".")]
    if deeper and any(_is_tag(p, None) for p in loc):
        # A union where the structured member got further: its error is the one the user needs.
        return _raise_first(ValidationError.from_exception_data(err.title, [_line(deeper[0])]), file, data)
    union = [e for e in errors if _format_loc(tuple(e["loc"])) == key_loc and e is not first]
    if union and any(_is_tag(p, None) for p in loc):
        # Every member of a union failed: say what the value may be, not why the first member failed.
        message = f"invalid value {json.dumps(first.get('input'), default=str)[:80]}: " + "; ".join(
            dict.fromkeys(e["msg"] for e in [first, *union])
        )
    elif first["type"] == "extra_forbidden" and loc:
        parent_fields = _fields_at(loc[:-1])
        message = f"unknown key {loc[-1]!r}{_hint(str(loc[-1]), dict.fromkeys(parent_fields)) if parent_fields else ''}"
    elif first["type"] == "missing":
        message = "required key is missing"
    elif "input" in first and first["type"] not in ("value_error", "assertion_error"):
        message = f"{message} (got {json.dumps(first['input'], default=str)[:80]})"
    if first.get("input") == SECRET_PLACEHOLDER:
        message = ("the value is encrypted (secure:) and the offline plan cannot decrypt it to check it; "
                   "it is not a secret: set it in plain text")
    if loc and loc[0] == "location":
        raise ConfigError(f"no region: set {LOCATION_KEY} or workspace.location", file=file, key=LOCATION_KEY)
    if first["type"] == "stack_reference":
        ctx = first.get("ctx", {})
        raise ConfigError(ctx["message"], file=file, key=f"{NAMESPACE}:{ctx['key']}")
    key = f"{NAMESPACE}:{key_loc}" if loc else NAMESPACE
    raise ConfigError(message, file=file, key=key)


RUN_SECRET_MESSAGE = (
    "an encrypted (secure:) value cannot go into a run: Azure ML keeps a job's command, inputs and "
    "environment variables in its definition, readable by everyone with access to the workspace, and the "
    "plan, the job files and `amlgpu submit` cannot carry a value they cannot decrypt. Keep the secret in "
    "the workspace key vault and read it at run time with the job's identity"
)
"""Why a run may hold no secret (the policy pack's run-secrets-in-environment-variables has the same reason)."""

NOT_A_SECRET = {
    "workspace": "workspace settings end up as resource properties and tags, readable by anyone with Reader "
    "access to the resource group (tags also in cost exports), so a secret there is not secret",
    "clusters": "cluster settings and tags are readable by anyone with Reader access to the workspace, "
    "so a secret there is not secret",
}
"""Why the rest of the stack model holds no secret either. Names, ids, sizes and counts are not secrets;
credentials belong in the provider's own settings (e.g. azure-native:clientSecret) or in the key vault."""



def _secret_path(value: Any, path: str) -> str | None:
    """The config path of the first encrypted value inside ``value`` (``jobs[0].environment_variables.X``)."""
    if value == SECRET_PLACEHOLDER:
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        found = _secret_path(inner, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found:
            return found
    return None


def _line(error: Any) -> Any:
    return {k: error[k] for k in ("type", "loc", "input", "ctx") if k in error}


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the model found at ``loc`` (for did-you-mean hints on unknown keys)."""
    candidates: list[Any] = [StackConfig]
    for part in loc:
        if isinstance(part, int) or not candidates:
            continue
        by_tag = [m for m in candidates if _tag_of(m) == part]
        if by_tag:  # a discriminated union's member
            candidates = by_tag
            continue
        field = next((m.model_fields[part] for m in candidates if part in m.model_fields), None)
        if field is None:
            continue  # a dict key (inputs.x) or a union tag pydantic added
        candidates = _models_in(field.annotation)
    return list(candidates[0].model_fields) if len(candidates) == 1 else []


def _tag_of(model: Any) -> object:
    field = model.model_fields.get("type")
    args: tuple[Any, ...] = getattr(field.annotation, "__args__", ()) if field else ()
    return args[0] if len(args) == 1 else None


def _models_in(annotation: Any) -> list[Any]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def build(
    values: Mapping[str, Any], *, location: str | None, file: str, root: Path, secret: frozenset[str] = frozenset(),
    subscription: str | None = None,
) -> StackConfig:
    """Validate namespace values (key without namespace -> decoded value) into a :class:`StackConfig`.

    ``secret`` names the keys (without namespace) set with ``pulumi config set --secret``.
    """
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        key = unknown[0]
        raise ConfigError(
            f"unknown key{_hint(key, dict.fromkeys(_FIELDS))}", file=file, key=f"{NAMESPACE}:{key}"
        )
    for key in sorted(secret & set(values)):
        where = _secret_path(values.get(key), key) or key
        reason = RUN_SECRET_MESSAGE if key == "jobs" else NOT_A_SECRET.get(
            key, "the stack model holds names, ids, sizes and settings, none of them secret, and the offline "
            "plan cannot decrypt a value to check it"
        )
        raise ConfigError(f"an encrypted (secure:) value is not accepted here: {reason}; set it in plain text "
                          "or keep the secret out of the stack", file=file, key=f"{NAMESPACE}:{where}")
    if location == SECRET_PLACEHOLDER:
        raise ConfigError("the region is encrypted (secure:) and cannot be read offline; a region is not a "
                          "secret: set it in plain text", file=file, key=LOCATION_KEY)
    if subscription == SECRET_PLACEHOLDER:
        subscription = None  # encrypted: unknown offline; `pulumi up` compares with the provider's own
    if subscription is not None and not (isinstance(subscription, str) and _GUID.fullmatch(subscription)):
        raise ConfigError(f"expected a subscription id (a GUID), got {json.dumps(subscription, default=str)[:60]}",
                          file=file, key=SUBSCRIPTION_KEY)
    data = {"location": location or "", "subscription_id": subscription, **values}
    if not data["location"] and isinstance(values.get("workspace"), dict):
        data["location"] = values["workspace"].get("location") or ""
    try:
        return StackConfig.model_validate(data, context={"root": root})
    except ValidationError as err:
        _raise_first(err, file, data)
        raise  # unreachable: _raise_first always raises


def from_stackfile(stack: StackFile, root: Path) -> StackConfig:
    """The stack model of a parsed stack file."""
    prefix = f"{NAMESPACE}:"
    values = {k.removeprefix(prefix): v for k, v in stack.config.items() if k.startswith(prefix)}
    location = stack.config.get(LOCATION_KEY)
    if location is not None and not isinstance(location, str):
        raise ConfigError(f"expected a region name such as westeurope (got {json.dumps(location, default=str)[:40]})",
                          file=stack.display, key=LOCATION_KEY)
    secret = frozenset(k.removeprefix(prefix) for k in stack.secret_keys if k.startswith(prefix))
    return build(values, location=location, file=stack.display, root=root, secret=secret,
                 subscription=stack.config.get(SUBSCRIPTION_KEY))


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
    secret = frozenset(
        k.removeprefix(prefix) for k in handed if k.startswith(prefix) and runtime_config.is_config_secret(k)
    )
    location = handed.get(LOCATION_KEY)
    return build(values, location=location, file=f"Pulumi.{stack_name}.yaml", root=root, secret=secret,
                 subscription=handed.get(SUBSCRIPTION_KEY))
