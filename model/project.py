"""Finding the project and loading one of its stacks: the first step of every command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.paths import resolve_inside
from model import stackfile
from model.config import StackConfig, from_stackfile
from model.errors import UserError


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


def load_stack(name: str, root: Path | None = None) -> LoadedStack:
    """Read and validate ``Pulumi.<name>.yaml``; bad input raises a ConfigError naming the file and key."""
    root = root or find_root()
    if not name or any(part in name for part in ("/", "\\", "\0")):
        raise UserError(f"{name!r} is not a stack name (Pulumi.<stack>.yaml in the project root)", key="--stack")
    path = root / f"Pulumi.{name}.yaml"
    if path.exists() and resolve_inside(root, path.name) is None:
        # A fork pull request could link the stack file to any file of the machine (/proc/self/environ).
        raise UserError(
            f"{path.name} leads outside the project root (symbolic links followed): a stack file must be "
            "a file of the project", key="--stack",
        )
    if not path.is_file():
        known = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))
        raise UserError(f"no stack file {path.name} in {root}; stacks here: {', '.join(known) or 'none'}")
    parsed = stackfile.read(path)
    return LoadedStack(name=name, root=root, file=parsed, config=from_stackfile(parsed, root))
