"""Mapping what a job names to what the stack declares: clusters, environments, project paths, run names.

Shared by the three readers (CLI v2 YAML, SDK v1 and SDK v2 scripts), so the same reference maps the
same way whichever form it came in:

* ``compute``: ``--compute`` when given, else the stack's cluster of the same name (``azureml:`` prefix
  dropped); a cluster the stack does not have is left as a placeholder naming the clusters it has.
* ``environment``: ``--environment`` when given; a reference (``azureml:<name>:<version>``,
  ``azureml:<name>@<label>``, ``azureml://registries/...``) becomes the stack environment with that asset
  id or that name and version, else stays as written; an inline definition (image, build context,
  conda file) becomes a stack ``environments`` entry, or reuses the stack's entry with the same content.
* paths (``code``, ``build.path``, ``conda_file``) are rewritten relative to the project root; a path
  outside the project is bad input, because the stack's job files must name the same folder on every
  checkout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ValidationError

from importer.base import Draft, ImportInputError, slug
from kernel import regex as linear
from stack.infrastructure import Environment
from stack.project import LoadedStack

_ASSET_REF = linear.compile(r"^azureml:(?P<name>[^:@/]+)(?::(?P<version>[^:@/]+)|@(?P<label>[^:@/]+))?$")


@dataclass
class Context:
    """The project and stack an import maps into, and the user's overrides."""

    root: Path
    stack: LoadedStack | None = None
    compute: str | None = None
    environment: str | None = None
    new_environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Environments created by this import so far (name -> entry), shared by every draft."""

    @property
    def clusters(self) -> list[str]:
        return [c.name for c in self.stack.config.clusters] if self.stack else []

    def stack_environments(self) -> list[dict[str, Any]]:
        if not self.stack:
            return []
        return [e.model_dump(exclude_none=True, exclude_defaults=True) | {"name": e.name}  # as _environment_entry
                for e in self.stack.config.environments]


def project_path(ctx: Context, path: Path, draft: Draft, key: str, line: int) -> str:
    """``path`` (absolute) relative to the project root, POSIX style; outside the project is exit 2."""
    resolved = Path(os.path.normpath(path))
    try:
        relative = resolved.relative_to(ctx.root)
    except ValueError:
        raise ImportInputError(
            f"{key} {str(path)!r} is outside the project {str(ctx.root)!r}: the stack can only name folders "
            "inside the project; copy it into the project and import the copy", file=draft.file, line=line,
        ) from None
    return PurePosixPath(relative.as_posix()).as_posix() or "."


def map_compute(ctx: Context, draft: Draft, raw: Any, line: int) -> str:
    """The stack cluster a job's ``compute`` names (see the module docstring)."""
    if ctx.compute:
        if ctx.stack and ctx.compute not in ctx.clusters:
            raise ImportInputError(f"--compute {ctx.compute!r} is not a cluster of stack {ctx.stack.name!r} "
                                   f"(clusters: {', '.join(ctx.clusters)})", file=draft.file)
        if isinstance(raw, str) and raw.removeprefix("azureml:") != ctx.compute:
            draft.notes.append(f"compute {raw!r} mapped to cluster {ctx.compute!r} (--compute)")
        return ctx.compute
    if not isinstance(raw, str) or not raw.strip():
        return draft.leave("compute", line, "no cluster named (a serverless or local run)",
                           "pass --compute CLUSTER")
    name = raw.removeprefix("azureml:")
    if ctx.stack is None or name in ctx.clusters:
        return name
    return draft.leave("compute", line, f"cluster {name!r} is not in stack {ctx.stack.name!r}",
                       f"pass --compute with one of {', '.join(ctx.clusters)} or add {name!r} to the stack")


def map_environment_reference(ctx: Context, draft: Draft, reference: str, line: int | None = None) -> str:
    """A stack environment's name for an Azure ML reference, when the stack has it; else the reference. A bare
    name the stack does not declare (``< your environment name >`` in a template) is left as a placeholder."""
    if ctx.environment:
        return _override_environment(ctx, draft, reference)
    known = [e.name for e in ctx.stack.config.environments] if ctx.stack else []
    if ctx.stack and not reference.startswith(("azureml:", "file:")) and reference not in known:
        return draft.leave("environment", line or draft.line, f"environment {reference!r} is not in stack "
                           f"{ctx.stack.name!r}", f"pass --environment with one of {', '.join(known) or 'none'} "
                           "or an azureml: reference")
    for env in ctx.stack.config.environments if ctx.stack else []:
        if env.asset_id == reference:
            return env.name
        match = _ASSET_REF.match(reference)
        version = match.group("version") if match else None
        if match and match.group("name") == env.name and version is not None and version == env.version:
            return env.name
    return reference


def _override_environment(ctx: Context, draft: Draft, was: str) -> str:
    assert ctx.environment is not None
    known = [e.name for e in ctx.stack.config.environments] if ctx.stack else []
    if ctx.stack and ctx.environment not in known and not ctx.environment.startswith("azureml:"):
        raise ImportInputError(f"--environment {ctx.environment!r} is not an environment of stack {ctx.stack.name!r} "
                               f"(environments: {', '.join(known) or 'none'}) nor an azureml: reference",
                               file=draft.file)
    draft.notes.append(f"environment {was!r} mapped to {ctx.environment!r} (--environment)")
    return ctx.environment


def _environment_entry(entry: dict[str, Any], draft: Draft, line: int) -> dict[str, Any]:
    """The entry as the stack model reads it (defaults dropped), or exit 2 with the model's reason."""
    try:
        env = Environment.model_validate(entry)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ImportInputError(f"environment {entry.get('name')!r}{f' {where}' if where else ''}: "
                               f"{first['msg'].removeprefix('Value error, ')}", file=draft.file, line=line) from None
    return env.model_dump(exclude_none=True, exclude_defaults=True) | {"name": env.name}


def add_environment(ctx: Context, draft: Draft, entry: dict[str, Any], *, was: str, line: int) -> str:
    """Declare an inline environment as a stack entry (or reuse an equal one) and return its name."""
    if ctx.environment:
        return _override_environment(ctx, draft, was)
    content = {k: v for k, v in _environment_entry(entry, draft, line).items() if k != "name"}
    for existing in [*ctx.stack_environments(), *ctx.new_environments.values()]:
        if {k: v for k, v in existing.items() if k not in ("name", "description", "tags")} == content:
            return str(existing["name"])
    base = slug(str(entry["name"]), "env")
    name, n = base, 2
    taken = {e["name"].lower() for e in ctx.stack_environments()} | {k.lower() for k in ctx.new_environments}
    while name.lower() in taken:
        name, n = f"{base}-{n}", n + 1
    if name != base:
        draft.notes.append(f"environment {base!r} exists with another definition: imported as {name!r}")
    declared = {"name": name, **content}
    ctx.new_environments[name] = declared
    draft.environments.append(declared)
    return name


def pinned_version(value: Any) -> str:
    """An environment version as the stack writes it (a string), ``"1"`` when the source gives none."""
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) and str(value) else "1"
