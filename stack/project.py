"""Finding the project and loading one of its stacks: the first step of every command."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from kernel import bounded
from kernel import regex as linear
from kernel.errors import ConfigError, UserError
from kernel.paths import resolve_inside
from stack import stackfile
from stack.config import StackConfig, from_stackfile


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


STACK_NAME = linear.compile(r"[A-Za-z0-9_.-]{1,100}")
"""What Pulumi accepts as a stack name (pulumi/pulumi, ``ValidateStackName``: letters, digits, ``-``, ``_``,
``.``, at most 100): a name with a newline or ``::`` never reaches a log line, a path or ``policy.md``."""

OTHER_PROJECT_FILES = ("Pulumi.json", "Pulumi.yml")
"""Project files Pulumi also reads. It looks for ``Pulumi.json``, then ``Pulumi.yaml``, then ``Pulumi.yml``
(``findProjectInDir`` over ``encoding.Exts`` = .json, .yaml, .yml, in pulumi/pulumi's
sdk/go/common/workspace/paths.go and sdk/go/common/encoding/marshal.go), and reads each stack's settings from
``Pulumi.<stack>`` with the project file's extension (``ProjectStackPath``): a ``Pulumi.json`` beside
``Pulumi.yaml`` makes ``pulumi up`` read ``Pulumi.<stack>.json``, a file the gate never sees."""


def check_project(root: Path) -> None:
    """Refuse a project whose ``pulumi up`` would read other stack settings than the gate judges: a
    ``Pulumi.yaml`` whose ``stackConfigDir`` moves the stack files, or a ``Pulumi.json``/``Pulumi.yml``
    project file beside it (see :data:`OTHER_PROJECT_FILES`). ``Pulumi.yaml`` is read within
    :data:`kernel.bounded.PROJECT_FILE`."""
    for other in OTHER_PROJECT_FILES:
        if (root / other).exists() or (root / other).is_symlink():
            raise ConfigError(
                f"a second project file beside Pulumi.yaml: Pulumi looks for Pulumi.json first, then Pulumi.yaml, "
                f"then Pulumi.yml, and reads each stack's settings from Pulumi.<stack> with that file's extension, "
                f"so `pulumi up` could read stack settings the gate never judges: remove {other} and keep the "
                "project in Pulumi.yaml", file=other)
    path = resolve_inside(root, "Pulumi.yaml")
    if path is None:
        raise ConfigError("leads outside the project root (symbolic links followed)", file="Pulumi.yaml")
    try:
        project = bounded.load_file(path, bounded.PROJECT_FILE)
    except OSError as err:
        raise ConfigError(f"cannot read the project file: {err.strerror or err}", file="Pulumi.yaml") from None
    except bounded.BoundedInputError as err:
        raise ConfigError(f"cannot read the project file: {err}", file="Pulumi.yaml") from None
    if isinstance(project, dict) and project.get("stackConfigDir") not in (None, "", "."):
        raise ConfigError(
            f"stackConfigDir {project['stackConfigDir']!r} makes `pulumi up` read the stack files from there, "
            "while the gate, the pull-request workflow and CODEOWNERS judge Pulumi.<stack>.yaml at the project "
            "root: remove stackConfigDir and keep the stack files at the root",
            file="Pulumi.yaml", key="stackConfigDir",
        )


def other_stack_files(root: Path, name: str) -> list[str]:
    """Files holding stack ``name``'s settings in another format than ``Pulumi.<name>.yaml``
    (``Pulumi.<name>.json``, ``Pulumi.<name>.yml``): Pulumi reads them when the project file has that
    extension, and a reviewer reading the YAML one would approve settings that are not deployed."""
    return [f"Pulumi.{name}{ext}" for ext in (".json", ".yml")
            if (root / f"Pulumi.{name}{ext}").exists() or (root / f"Pulumi.{name}{ext}").is_symlink()]


def stack_names(root: Path) -> list[str]:
    """Every stack of the project: the ``<stack>`` of each ``Pulumi.<stack>.yaml`` at its root, sorted."""
    return sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in root.glob("Pulumi.*.yaml"))


def load_stack(name: str, root: Path | None = None) -> LoadedStack:
    """Read and validate ``Pulumi.<name>.yaml``; bad input raises a ConfigError naming the file and key
    (a project whose ``Pulumi.yaml`` moves the stack files elsewhere included: :func:`check_project`)."""
    root = root or find_root()
    if not STACK_NAME.fullmatch(name):
        raise UserError(f"{name!r} is not a stack name (Pulumi.<stack>.yaml in the project root; a stack name is "
                        "1 to 100 letters, digits, '-', '_' and '.', as Pulumi requires)", key="--stack")
    check_project(root)
    for other in other_stack_files(root, name):
        raise ConfigError(
            f"stack {name!r} also has settings in {other}: Pulumi reads that file instead of Pulumi.{name}.yaml when "
            "the project file is Pulumi.json or Pulumi.yml, and the gate judges only the YAML one: keep the stack's "
            f"settings in Pulumi.{name}.yaml alone and remove {other}", file=other)
    path = root / f"Pulumi.{name}.yaml"
    if path.exists() and resolve_inside(root, path.name) is None:
        # A fork pull request could link the stack file to any file of the machine (/proc/self/environ).
        raise UserError(
            f"{path.name} leads outside the project root (symbolic links followed): a stack file must be "
            "a file of the project", key="--stack",
        )
    if not path.is_file():
        known = stack_names(root)
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UserError(f"no stack file {path.name} in {root}; {hint}stacks here: {', '.join(known) or 'none'}",
                        key="--stack")
    parsed = stackfile.read(path)
    return LoadedStack(name=name, root=root, file=parsed, config=from_stackfile(parsed, root))
