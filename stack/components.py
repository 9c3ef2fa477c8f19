"""Command components (CLI v2 ``commandComponent``): what a pipeline step runs, inline or from the file its
``component: file:<path>`` names, with the file's paths rebased onto the project root."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from azurefacts.enums import AnyCase
from kernel import bounded
from stack.files import read_reference, validated
from stack.infrastructure import Model
from stack.runs import FILE_PREFIX, Distribution, InlineEnvironment, Resources

ComponentIOType = Annotated[
    Literal["string", "integer", "number", "boolean", "uri_file", "uri_folder", "mltable", "custom_model",
            "mlflow_model", "triton_model"], AnyCase,
]


class ComponentInput(Model):
    """An input a command component declares (CLI v2 ``commandComponent`` ``inputs.<name>``)."""

    type: ComponentIOType
    """Literal (string, integer, number, boolean) or data (uri_file, uri_folder, mltable, models)."""
    default: StrictBool | StrictInt | StrictFloat | StrictStr | None = None
    """The value a step that gives none gets."""
    optional: StrictBool = False
    """A step may leave it out (the command's ``$[[...]]`` segment using it is dropped)."""
    description: str | None = None
    """Free text."""
    min: StrictInt | StrictFloat | None = None
    """Smallest value of a number or integer input."""
    max: StrictInt | StrictFloat | None = None
    """Largest value of a number or integer input."""
    enum: list[StrictStr] | None = None
    """Allowed values of a string input."""
    mode: str | None = None
    """How a data input reaches the nodes (ro_mount, download...)."""


class ComponentOutput(Model):
    """An output a command component declares."""

    type: ComponentIOType = "uri_folder"
    """Kind of data."""
    mode: str | None = None
    """How the step writes it (rw_mount, upload)."""
    description: str | None = None
    """Free text."""


class CommandComponent(Model):
    """A command component (CLI v2 ``commandComponent``): inline under a step's ``component``, or the file it
    names. Paths in a file are relative to the file's folder; inline, to the project root."""

    type: Literal["command"] = "command"
    """command: the only kind of component a step of this stack runs."""
    name: str | None = None
    """The component's name (an inline component is anonymous in Azure ML; kept for reference)."""
    version: StrictStr | StrictInt | None = None
    """The component's version (ignored for an anonymous component)."""
    display_name: str | None = None
    """Name shown in Azure ML studio."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = {}
    """Tags on the component."""
    is_deterministic: StrictBool | None = None
    """Whether Azure ML may reuse an earlier step's outputs for the same inputs (ignored)."""
    code: str | None = None
    """The folder uploaded as the step's snapshot."""
    command: Annotated[str, Field(min_length=1)]
    """The command each process runs; ``${{inputs.x}}`` and ``${{outputs.x}}`` name the component's inputs and
    outputs."""
    environment: str | InlineEnvironment
    """The step's environment, in any form a run's ``environment`` takes."""
    environment_variables: dict[str, str] = {}
    """Variables set for every process."""
    inputs: dict[str, ComponentInput] = {}
    """The inputs the component declares; the step gives their values."""
    outputs: dict[str, ComponentOutput] = {}
    """The outputs the component writes."""
    resources: Resources | None = None
    """Nodes and container settings (a step's own resources replace them)."""
    distribution: Distribution | None = None
    """How Azure ML starts the processes (a step's own distribution replaces it)."""


def rebase(path: str, folder: PurePosixPath) -> str:
    """A path relative to a component file's folder, as one relative to the project root."""
    joined = PurePosixPath(*(folder / path.replace("\\", "/")).parts)
    parts: list[str] = []
    for part in joined.parts:
        if part == "..":
            if not parts:
                raise ValueError(f"{path!r} leads outside the project")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts) or "."


def component_file(reference: str, root: Path) -> tuple[CommandComponent, PurePosixPath]:
    """The command component a ``component: file:<path>`` names, and its folder relative to the project root.
    Raises ValueError naming what is wrong (missing, unreadable, not YAML, outside the project, not a command
    component)."""
    data, folder = read_reference(reference, root, "component file", bounded.COMPONENT_FILE)
    relative = reference.removeprefix(FILE_PREFIX)
    if data.get("type", "command") != "command":
        raise ValueError(f"component file {relative!r}: a {data.get('type')!r} component; a step here runs a "
                         "command component")
    if "additional_includes" in data:
        raise ValueError(f"component file {relative!r}: additional_includes copies files into the snapshot at "
                         "submission, which the gate cannot see; put them in the code folder")
    data.pop("$schema", None)  # the editor's schema of a component file, nothing Azure ML runs
    component = validated(CommandComponent, data, reference, "component file")
    return component, PurePosixPath(folder.as_posix())


def rebased_environment(env: str | InlineEnvironment, folder: PurePosixPath) -> str | InlineEnvironment:
    if isinstance(env, str):
        return FILE_PREFIX + rebase(env.removeprefix(FILE_PREFIX), folder) if env.startswith(FILE_PREFIX) else env
    update: dict[str, Any] = {}
    if env.build is not None:
        update["build"] = env.build.model_copy(update={"path": rebase(env.build.path, folder)})
    if env.conda_file is not None:
        update["conda_file"] = rebase(env.conda_file, folder)
    return env.model_copy(update=update)
