"""The project files a stack names: the one reader of ``file:`` references (environment and component YAML)
and the checks on the files an environment names (build context, conda file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kernel import bounded
from kernel.paths import resolve_inside
from stack.diagnostics import first_problem
from stack.runs import FILE_PREFIX, InlineEnvironment

M = TypeVar("M", bound=BaseModel)


def _inside(root: Path, relative: str) -> Path:
    """``root / relative``, symlinks followed, refused when it leaves the project root."""
    path = resolve_inside(root, relative)
    if path is None:
        raise ValueError(f"{relative!r} leads outside the project root (symbolic links followed)")
    return path


def read_reference(reference: str, root: Path, noun: str, limits: bounded.Limits) -> tuple[dict[Any, Any], Path]:
    """The mapping in the project file a ``file:<path>`` reference names (read within ``limits``), and the
    file's folder relative to the project root. Raises ValueError naming the ``noun`` ("environment file")
    and what is wrong: outside the project, missing, unreadable, not bounded YAML, not a mapping."""
    relative = reference.removeprefix(FILE_PREFIX)
    path = resolve_inside(root, relative)
    if path is None:
        raise ValueError(f"{noun} {relative!r} leads outside the project root (symbolic links followed)")
    if not path.is_file():
        raise ValueError(f"{noun} {relative!r} not found")
    try:
        data = bounded.load_file(path, limits)
    except OSError as err:
        raise ValueError(f"{noun} {relative!r} cannot be read: {err.strerror or err}") from None
    except bounded.BoundedInputError as err:
        raise ValueError(f"{noun} {relative!r}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{noun} {relative!r}: expected a mapping")
    return data, path.parent.relative_to(root.resolve())


def validated(model: type[M], fields: dict[Any, Any], reference: str, noun: str) -> M:
    """``fields`` (read from ``reference``) as ``model``; ValueError naming the file and the first problem."""
    try:
        return model.model_validate(fields)
    except ValidationError as err:
        where, message = first_problem(err)
        raise ValueError(f"{noun} {reference.removeprefix(FILE_PREFIX)!r}: {'.'.join(map(str, where))}: "
                         f"{message}") from None


def environment_file(reference: str, root: Path) -> InlineEnvironment:
    """A ``file:`` environment (a CLI v2 environment YAML) as the inline environment it declares, its
    paths made relative to the project root. Raises ValueError naming what is wrong."""
    data, folder = read_reference(reference, root, "environment file", bounded.ENVIRONMENT_FILE)
    fields = {k: v for k, v in data.items() if k not in ("$schema", "os_type", "inference_config")}
    if isinstance(fields.get("build"), dict) and "path" in fields["build"]:
        build = dict(fields["build"])
        build["path"] = _posix(folder / str(build["path"]))
        fields["build"] = build
    if isinstance(fields.get("conda_file"), str):
        fields["conda_file"] = _posix(folder / fields["conda_file"])
    fields["version"] = None if fields.get("version") is None else str(fields["version"])
    env = validated(InlineEnvironment, fields, reference, "environment file")
    problem = inline_files_missing(env, root)
    if problem:
        raise ValueError(f"environment file {reference.removeprefix(FILE_PREFIX)!r}: {problem}")
    return env


def _posix(path: Path) -> str:
    return os.path.normpath(path.as_posix()).replace(os.sep, "/")


def inline_files_missing(env: InlineEnvironment, root: Path) -> str | None:
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
