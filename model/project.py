"""Finding the project and loading one of its stacks: the first step of every command."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.paths import resolve_inside
from model import stackfile
from model.config import StackConfig, from_stackfile
from model.errors import ConfigError, UserError


def find_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` (default: the working directory) holding Pulumi.yaml."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return folder
    raise UserError(f"no Pulumi.yaml in {here} or any folder above it: run amlgpu inside the project")


@dataclass(frozen=True)
class LoadedStack:
    name: str
    root: Path
    file: stackfile.StackFile
    config: StackConfig


PROJECT_FILE_LIMIT = 1 << 20
"""Pulumi.yaml is a few lines; a megabyte is already not one."""


def check_project(root: Path) -> None:
    """Refuse a ``Pulumi.yaml`` whose ``stackConfigDir`` moves the stack files: ``pulumi up`` would read
    ``Pulumi.<stack>.yaml`` there while the gate, the workflows and CODEOWNERS look at the project root."""
    path = resolve_inside(root, "Pulumi.yaml")
    if path is None:
        raise ConfigError("leads outside the project root (symbolic links followed)", file="Pulumi.yaml")
    try:
        with path.open("rb") as handle:
            data = handle.read(PROJECT_FILE_LIMIT + 1)
        if len(data) > PROJECT_FILE_LIMIT:
            raise ConfigError(f"larger than {PROJECT_FILE_LIMIT} bytes: not a Pulumi project file", file="Pulumi.yaml")
        project = yaml.safe_load(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read the project file: {err}", file="Pulumi.yaml") from None
    if isinstance(project, dict) and project.get("stackConfigDir") not in (None, "", "."):
        raise ConfigError(
            f"stackConfigDir {project['stackConfigDir']!r} makes `pulumi up` read the stack files from there, "
            "while the gate, the pull-request workflow and CODEOWNERS judge Pulumi.<stack>.yaml at the project "
            "root: remove stackConfigDir and keep the stack files at the root",
            file="Pulumi.yaml", key="stackConfigDir",
        )


def load_stack(name: str, root: Path | None = None) -> LoadedStack:
    """Read and validate ``Pulumi.<name>.yaml``; bad input raises a ConfigError naming the file and key
    (a project whose ``Pulumi.yaml`` moves the stack files elsewhere included: :func:`check_project`)."""
    root = root or find_root()
    if not name or any(part in name for part in ("/", "\\", "\0")):
        raise UserError(f"{name!r} is not a stack name (Pulumi.<stack>.yaml in the project root)", key="--stack")
    check_project(root)
    path = root / f"Pulumi.{name}.yaml"
    if path.exists() and resolve_inside(root, path.name) is None:
        # A fork pull request could link the stack file to any file of the machine (/proc/self/environ).
        raise UserError(
            f"{path.name} leads outside the project root (symbolic links followed): a stack file must be "
            "a file of the project", key="--stack",
        )
    if not path.is_file():
        known = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UserError(f"no stack file {path.name} in {root}; {hint}stacks here: {', '.join(known) or 'none'}",
                        key="--stack")
    parsed = stackfile.read(path)
    return LoadedStack(name=name, root=root, file=parsed, config=from_stackfile(parsed, root))
