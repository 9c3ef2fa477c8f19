"""The stack model: one validated object built from a stack's ``aml-gpu-training:*`` config.

Precedence and sources, explicitly:

1. ``aml-gpu-training:<key>`` values of the stack (``Pulumi.<stack>.yaml``), handed over by the
   Pulumi CLI (``pulumi up``) or by :mod:`planning.engine` (offline) the same way;
2. ``azure-native:location`` for the region when ``workspace.location`` is not set;
3. the model's defaults, which are the secure ones.

Cross-references (a run's cluster and environment, placeholders, the code folder) are checked while
validating (:mod:`stack.references`), so a stack that validates can always be planned; every problem is
reported at once, in our words (:mod:`stack.diagnostics`). Whether a run *fits* its cluster is policy.
"""


from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from azurefacts import regions
from kernel import regex as linear
from kernel.errors import ConfigError, Problem
from stack import NAMESPACE, references
from stack.diagnostics import NO_PLACE, problems_of, raise_all
from stack.fabric_check import fabric_check_runs
from stack.infrastructure import Cluster, Environment, Network, Workspace
from stack.keys import LOCATION_KEY, SUBSCRIPTION_KEY, KeyPath, Locate, in_file, key_text
from stack.pipelines import Composite, JobEntry
from stack.runs import Run
from stack.secrecy import ENCRYPTED_REGION, secret_problems, shown
from stack.stackfile import SECRET_PLACEHOLDER, StackFile
from stack.waivers import Waiver

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


class StackConfig(BaseModel):
    """Everything one stack declares."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

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
        found = references.CrossReferenceProblems()
        references.unique_names(self, found)
        root = Path((info.context or {}).get("root", "."))
        # Nothing outside the project is looked at, not even whether it exists.
        if not references.paths_outside(self, root, found):
            environments, jobs = references.resolved(self, found, root)
            object.__setattr__(self, "environments", environments)
            object.__setattr__(self, "jobs", jobs)
        found.raise_any()
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
            found = references.CrossReferenceProblems()
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


_FIELDS = tuple(name for name in StackConfig.model_fields if name not in ("location", "subscription_id"))

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
    found: list[tuple[KeyPath, str]] = [(in_file(path), message) for path, message in secret_problems(values, secret)]
    if location == SECRET_PLACEHOLDER:
        found.append(((LOCATION_KEY,), ENCRYPTED_REGION))
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
                                           f"(got {shown(subscription, (SUBSCRIPTION_KEY,))})"))
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
        problems = problems_of(err, StackConfig)
        if not any(error["type"] == "stack_reference" for error in err.errors()):
            # The cross-reference check did not run: say what it would have said (not twice at one key).
            at = {path for path, _ in problems}
            problems += [(path, message) for path, message in references.raw_references(data) if path not in at]
        found += [(in_file(path), message) for path, message in problems if not (path and path[0] in secret)]
    if found:
        raise_all(found, file, locate)
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
                                       f"(got {shown(location, (LOCATION_KEY,))})"))
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
        raise_all(wrong, stack.display, stack.position_of)
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
