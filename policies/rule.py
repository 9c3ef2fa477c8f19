"""What a policy rule is: a plain check function plus the metadata a reviewer needs.

Three kinds of rule, by what the check is given:

* ``resource``: one resource as the provider receives it (wire shape: ``{"type", "name", "parent",
  "inputs", "options"}``, camelCase input names, integers as ints); returns violation messages;
* ``run``: one :class:`~stack.resolved.ResolvedRun` (a declared run with the facts of its cluster and
  environment); returns violation messages;
* ``stack``: the whole planned stack (:class:`policies.stack.Stack`); returns :class:`Violation`\\ s,
  each naming the resource or run at fault. Cross-resource checks live here.

A check's keyword-only parameters are the rule's *parameters* (a tuple of strings or an int): their
defaults are the rule's defaults and a pack config may override them (``{"rule-id": {"param": value}}``). The keyword
``today`` is not a parameter: the engine passes the evaluation date to checks that declare it.

A message that shortens its evidence (eight ranges shown, a count) is a :class:`Message` carrying every
fact: what a waiver's fingerprint covers. :func:`rule` is the one decorator (``resource_rule``, ``run_rule`` and
``stack_rule`` name its kind). Rule ids are stable kebab-case names, never reused for a different check.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, Unpack

if TYPE_CHECKING:
    from policies.stack import Stack
    from stack.resolved import ResolvedRun

Severity = Literal["critical", "high", "medium", "low"]
Enforcement = Literal["mandatory", "advisory", "disabled"]
Kind = Literal["resource", "run", "stack"]

SEVERITIES: tuple[Severity, ...] = ("critical", "high", "medium", "low")
ENFORCEMENTS: tuple[Enforcement, ...] = ("mandatory", "advisory", "disabled")
RULE_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
CONTEXT_ARGUMENTS = frozenset({"today"})
"""Keyword arguments the engine supplies itself; they are not configurable parameters."""

Resource = Mapping[str, Any]
"""One planned resource in wire shape (see the module docstring)."""


class Message(str):
    """A violation message that abbreviates its evidence (``operator ranges a, b, ... and 2 more``), with the
    complete facts it stands for: every range, address and count, as the rule read them. A waiver's fingerprint
    covers these facts, not the text (:func:`evidence`), so a change the text does not show still changes the
    finding. A check returns one wherever its message leaves a fact out; a plain ``str`` states all of its own."""

    facts: tuple[str, ...]

    def __new__(cls, text: str, facts: Iterable[object]) -> Message:
        message = super().__new__(cls, text)
        message.facts = tuple(str(fact) for fact in facts)
        return message


def evidence(message: str) -> tuple[str, ...]:
    """What a finding with ``message`` states: a :class:`Message`'s complete facts, else the message itself."""
    return message.facts if isinstance(message, Message) else (message,)


@dataclass(frozen=True)
class Violation:
    """A stack rule's finding: the resource (wire dict) or run it is about, and what is wrong."""

    subject: Resource | ResolvedRun
    message: str


@dataclass(frozen=True)
class Rule:
    """One policy rule. ``check`` is the plain function; everything else is what reviewers read."""

    id: str
    title: str
    kind: Kind
    severity: Severity
    enforcement: Enforcement
    """Default enforcement (mandatory or advisory); a pack config may change it."""
    rationale: str
    remediation: str
    reference: str
    """A public document explaining the requirement (Microsoft Learn, Checkov, PSRule, azureml-examples)."""
    check: Callable[..., Sequence[Any]] = field(repr=False)
    family: str = ""
    resource_types: tuple[str, ...] = ()
    """Type tokens a resource rule applies to (empty for run and stack rules)."""
    config_key: tuple[str, ...] = ()
    """Where the fix usually goes, below the subject's entry in the stack file (for locations)."""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    """Configurable parameters and their defaults, read from the check's keyword-only arguments."""
    hygiene: bool = False
    """Good practice rather than a promise that the run fails, wastes GPUs or is insecure: advisory by
    default, mandatory under the ``strict`` profile (see :mod:`policies.packconfig`)."""

    def __post_init__(self) -> None:
        if not RULE_ID.match(self.id):
            raise ValueError(f"rule id {self.id!r} is not kebab-case")
        if self.enforcement == "disabled":
            raise ValueError(f"rule {self.id}: a rule's default enforcement is mandatory or advisory")
        if self.hygiene and self.enforcement != "advisory":
            raise ValueError(f"rule {self.id}: a hygiene rule is advisory by default (strict makes it mandatory)")
        if self.kind == "resource" and not self.resource_types:
            raise ValueError(f"resource rule {self.id} names no resource type")

    @property
    def applies_to(self) -> str:
        """What the rule is evaluated on, in words (for listings and docs)."""
        if self.kind == "run":
            return "distributed runs"
        if self.kind == "stack":
            return "the whole stack"
        return ", ".join(t.rsplit(":", 1)[-1] for t in self.resource_types)

    def evaluate(
        self, subject: Resource | ResolvedRun | Stack, params: Mapping[str, Any], today: dt.date
    ) -> list[Any]:
        """Run the check on one subject with the given parameters (defaults filled in)."""
        kwargs = {**self.parameters, **params}
        if _takes_today(self.check):
            kwargs["today"] = today
        return list(self.check(subject, **kwargs))


@functools.cache
def _takes_today(check: Callable[..., Any]) -> bool:
    # inspect.signature is slow, and a rule is evaluated once per run and resource: ask once per check.
    return "today" in inspect.signature(check).parameters


def _parameters(check: Callable[..., Any]) -> Mapping[str, Any]:
    params = {}
    for name, param in inspect.signature(check).parameters.items():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY or name in CONTEXT_ARGUMENTS:
            continue
        if param.default is inspect.Parameter.empty:
            raise TypeError(f"{check.__name__}: parameter {name!r} needs a default")
        default = param.default
        if not (isinstance(default, tuple) or (isinstance(default, int) and not isinstance(default, bool))):
            # Pack config (JSON) can carry these two kinds; anything else could not be configured.
            raise TypeError(f"{check.__name__}: parameter {name!r} must default to a tuple of strings or an int")
        params[name] = param.default
    return MappingProxyType(params)


def _family(check: Callable[..., Any]) -> str:
    """The module directly under ``policies.rules`` (a family split by subject is a package: its name)."""
    parts = check.__module__.split(".")
    return parts[2] if parts[:2] == ["policies", "rules"] and len(parts) > 2 else parts[-1]


class RuleMeta(TypedDict):
    """The metadata every rule declaration gives (see :class:`Rule` for what each means)."""

    id: str
    title: str
    severity: Severity
    enforcement: Enforcement
    rationale: str
    remediation: str
    reference: str
    config_key: NotRequired[tuple[str, ...]]
    hygiene: NotRequired[bool]


def rule(kind: Kind, *, types: Sequence[str] = (), **meta: Unpack[RuleMeta]) -> Callable[[Callable[..., Any]], Rule]:
    """The one rule decorator: declare ``check`` as a rule of ``kind`` (over resources of ``types``, for a
    resource rule); its parameters are read from the check's keyword-only arguments."""

    def wrap(check: Callable[..., Any]) -> Rule:
        return Rule(**meta, kind=kind, check=check, family=_family(check), resource_types=tuple(types),
                    parameters=_parameters(check))

    return wrap


def resource_rule(*, types: Sequence[str], **meta: Unpack[RuleMeta]) -> Callable[[Callable[..., list[str]]], Rule]:
    """Declare ``check(resource, **params) -> list[str]`` as a rule over resources of ``types``."""
    return rule("resource", types=types, **meta)


def run_rule(**meta: Unpack[RuleMeta]) -> Callable[[Callable[..., list[str]]], Rule]:
    """Declare ``check(run: ResolvedRun, **params) -> list[str]`` as a rule over declared runs."""
    return rule("run", **meta)


def stack_rule(**meta: Unpack[RuleMeta]) -> Callable[[Callable[..., list[Violation]]], Rule]:
    """Declare ``check(stack: Stack, **params) -> list[Violation]`` as a cross-resource rule."""
    return rule("stack", **meta)
