"""The offline plan: run the project's Pulumi program under Pulumi's mock engine and record what the
engine would be asked to create.

The program is run exactly as Pulumi's Python language host runs it: the stack's config handed over
as the CLI does (strings; structured values as JSON; secret keys listed), then
``runpy.run_path(<project dir>, run_name="__main__")`` inside ``pulumi.runtime.run_in_stack``. Only
the engine is replaced: a monitor that records every registration (type, logical name, parent,
inputs as the provider would receive them, resource options) and the stack's outputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import runpy
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import rpc, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import source_pb2

from planning.mocks import AzureMocks
from stack import NAMESPACE
from stack.stackfile import SECRET_PLACEHOLDER, StackFile

STACK_TYPE = "pulumi:pulumi:Stack"
DYNAMIC_PROVIDER_KEY = "__provider"


@dataclass
class PlannedResource:
    urn: str
    type: str
    name: str
    parent: str | None
    parent_urn: str | None
    custom: bool
    inputs: dict[str, Any]
    options: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            # Logical names are unique only per type: the parent's type makes the reference exact.
            **({"parentType": _type_of(self.parent_urn)} if self.parent_urn else {}),
            "inputs": self.inputs,
            **({"options": self.options} if self.options else {}),
        }


@dataclass
class ProgramRun:
    """What the Pulumi program registered under the mock engine: its resources and stack outputs (the plan
    service's :class:`planning.service.Plan` adds the runs, job files, verdict, cost and diff)."""

    resources: list[PlannedResource] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)

    def by_type(self, token: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == token]


def _plain(value: Any) -> Any:
    """Wire values as JSON: integral floats back to ints (the wire has only doubles), assets by path,
    secrets as a marker, unknowns as a marker."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return SECRET_PLACEHOLDER
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, pulumi.FileAsset):
        return {"asset": Path(str(value.path)).as_posix()}
    if isinstance(value, pulumi.Asset | pulumi.Archive):
        return {"asset": type(value).__name__}
    if value is rpc.UNKNOWN or isinstance(value, pulumi.output.Unknown):
        return "[unknown]"
    return value


def _name_of(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _type_of(urn: str) -> str:
    # urn:pulumi:<stack>::<project>::<parent types joined by $>$<type>::<name>
    return urn.split("::")[2].split("$")[-1]


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock engine's monitor, also keeping what each registration asked for."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.plan = ProgramRun()

    def RegisterResource(self, request: Any) -> Any:
        mock: Any = super()  # Pulumi's MockMonitor is untyped
        response = mock.RegisterResource(request)
        if request.type != STACK_TYPE:
            options: dict[str, Any] = {}
            if request.protect:
                options["protect"] = True
            if request.deleteBeforeReplace:
                options["deleteBeforeReplace"] = True
            if request.retainOnDelete:
                options["retainOnDelete"] = True
            if request.replaceOnChanges:
                options["replaceOnChanges"] = sorted(request.replaceOnChanges)
            if request.ignoreChanges:
                options["ignoreChanges"] = sorted(request.ignoreChanges)
            if request.dependencies:
                # What the engine waits for before creating this resource (explicit depends_on and every
                # resource an input's Output came from; components expanded to their resources), by type and
                # name: logical names are unique per type only.
                options["dependsOn"] = [{"type": t, "name": n} for t, n in
                                        sorted({(_type_of(u), _name_of(u)) for u in request.dependencies})]
            inputs = rpc.deserialize_properties(request.object, keep_unknowns=True, keep_internal=False)
            # A dynamic resource carries its provider's serialized code: not an input Azure receives.
            inputs.pop(DYNAMIC_PROVIDER_KEY, None)
            parent = _name_of(request.parent) if request.parent and _type_of(request.parent) != STACK_TYPE else None
            self.plan.resources.append(
                PlannedResource(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=parent,
                    parent_urn=request.parent if parent else None,
                    custom=bool(request.custom),
                    inputs=_plain(_keep_secret_markers(request.object, inputs)),
                    options=options,
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        if _type_of(request.urn) == STACK_TYPE:
            self.plan.outputs = _plain(_raw(request.outputs))
        mock: Any = super()  # Pulumi's MockMonitor is untyped
        return mock.RegisterResourceOutputs(request)


def _raw(struct: Any) -> Any:
    """A protobuf Struct as plain Python, secret wrappers kept (so they can be masked)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(struct)


_SECRET_SIG = rpc._special_secret_sig.encode()


def _keep_secret_markers(struct: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    # deserialize_properties unwraps secrets into plain values; resources.json must never show them.
    if _SECRET_SIG not in struct.SerializeToString():
        # No secret marker anywhere (its signature is a string value, which the wire form holds as it is): what
        # the struct read as plain data would give back is inputs itself, and most resources hold no secret.
        return inputs
    raw = _raw(struct)
    return {k: raw[k] if _has_secret(raw.get(k)) else v for k, v in inputs.items()}


def _has_secret(value: Any) -> bool:
    if isinstance(value, dict):
        return value.get(rpc._special_sig_key) == rpc._special_secret_sig or any(_has_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secret(v) for v in value)
    return False


def without_provider_type_aliases(
    args: pulumi.ResourceTransformationArgs,
) -> pulumi.ResourceTransformationResult | None:
    """A stack transformation: ``args``' options without the provider's API-version type aliases.

    pulumi-azure-native gives each resource an alias per earlier API version of its type (``Alias(type_=
    "azure-native:machinelearningservices/v20200101:Workspace")``, 50 for a workspace) so that the engine finds
    a resource that a stack's state holds under an older type token. An offline plan has no state to match, and
    records no alias; but the SDK turns each alias into a URN through a chain of Outputs, over two thirds of the
    time a stack took once its libraries were loaded. Any other alias (one the program declares: a rename, a
    new parent) is kept."""
    aliases = args.opts.aliases
    kept = [a for a in aliases or () if not _provider_type_alias(a)]
    if aliases is None or len(kept) == len(aliases):
        return None
    opts = args.opts._copy()
    opts.aliases = kept
    return pulumi.ResourceTransformationResult(args.props, opts)


def _provider_type_alias(alias: Any) -> bool:
    """An alias that only names another type token of azure-native (what pulumi-azure-native generates)."""
    if not (isinstance(alias, pulumi.Alias) and isinstance(alias.type_, str)):
        return False
    unset = all(isinstance(value, EllipsisType) for value in (alias.name, alias.parent, alias.stack, alias.project))
    return unset and alias.type_.startswith("azure-native:")


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


@contextlib.contextmanager
def without_source_positions() -> Iterator[None]:
    """While the program runs under the mock engine, registrations carry no stack trace or source position.

    The SDK walks the Python stack at every registration (``traceback.extract_stack``, each frame's file made a
    URI: ``pulumi.runtime.resource._get_stack_trace``) so that the engine can show where in the program a
    resource was declared; the result goes into the ``stackTrace`` and ``sourcePosition`` fields of the
    ``RegisterResourceRequest`` and nowhere else. Pulumi's ``MockMonitor`` reads neither, and neither does
    :class:`RecordingMonitor`: with one ``DistributedRun`` per run, the walk was a tenth of the program's time.
    An SDK without that function (renamed in a later release) is left as it is."""
    found = getattr(pulumi_resource, "_get_stack_trace", None)
    if found is None:
        yield
        return
    pulumi_resource._get_stack_trace = _no_stack_trace
    try:
        yield
    finally:
        pulumi_resource._get_stack_trace = found


def run_program(stack: str, stackfile: StackFile, root: Path) -> ProgramRun:
    """Run the project's Pulumi program for ``stack`` under the mock engine and return what it planned.

    Every run starts afresh, so that several stacks planned in one process share nothing: a new monitor and
    event loop, the runtime's settings (project, stack, engine, the set of pending outputs) configured anew by
    ``set_mocks``, no root stack resource until the program's own, and the stack's config and secret keys
    replacing the last run's. The program's modules stay imported: they hold no state of a stack. The only
    change to what the program asks for is :func:`without_provider_type_aliases`, which changes nothing recorded;
    and registrations carry no source positions (:func:`without_source_positions`), which nothing here reads.

    Errors raised by the program (a ``pulumi.RunError`` for bad config) propagate unchanged.
    """
    monitor = RecordingMonitor(AzureMocks())
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        settings.ROOT.set(None)
        pulumi_mocks.set_mocks(AzureMocks(), project=NAMESPACE, stack=stack, preview=True, monitor=monitor)
        # set_mocks makes a root stack of its own; the program's run_in_stack must make the real one,
        # as under the language host (and a second plan in the same process must not reuse the first).
        settings.ROOT.set(None)
        set_all_config(stackfile.cli_config(), sorted(stackfile.secret_keys))

        def program() -> None:
            pulumi.runtime.register_stack_transformation(without_provider_type_aliases)
            # Run from the folder, the program is imported as a module, and an import writes its bytecode beside
            # it (``__pycache__/__main__.*.pyc``): an offline plan writes nothing in the project but its output.
            writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
            try:
                runpy.run_path(str(root), run_name="__main__")
            finally:
                sys.dont_write_bytecode = writes_bytecode

        with without_source_positions():
            loop.run_until_complete(pulumi.runtime.stack.run_in_stack(program))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    monitor.plan.resources.sort(key=lambda r: r.urn)
    return monitor.plan
