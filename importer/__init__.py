"""``amlgpu import``: existing Azure ML jobs as stack entries.

Reads CLI v2 command job files (:mod:`importer.cliv2`), pipeline and sweep job files
(:mod:`importer.pipeline`), SDK v1/v2 submission scripts and SDK v2 ``@pipeline`` functions
(:mod:`importer.sdk_pipeline`)
(:mod:`importer.sdk`, read with :mod:`ast`, never executed), maps what they name onto the stack
(:mod:`importer.mapping`) and returns :class:`Draft` entries: each with the file and line it came
from, the placeholders left where a value cannot be derived statically, and notes on what changed.
:mod:`importer.emit` writes them as YAML or appends them to the stack file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from importer import cliv2, pipeline, sdk, sdk_pipeline
from importer.base import Draft, ImportInputError, Placeholder, Source, contains_placeholder, slug
from importer.mapping import Context
from kernel import regex as linear
from kernel.errors import ConfigError
from stack.config import build
from stack.pipelines import JOB_ENTRY

__all__ = ["Context", "Draft", "ImportInputError", "Placeholder", "import_files"]


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


_JOB_KEYS = frozenset({"command", "jobs", "trial", "component"})
"""Top-level keys of a job file (command, pipeline, sweep); a folder's other YAML files (conda files,
environment and component specs, data assets) are not jobs."""


def _folder_jobs(folder: Path, skipped: list[str]) -> list[Path]:
    """The job files and scripts directly in ``folder``, sorted; YAML files that are not jobs are left out (and
    named in ``skipped``), as are other files."""
    found: list[Path] = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        if sdk.is_script(path):
            found.append(path)
        elif cliv2.is_job_file(path):
            try:
                document = cliv2.load_yaml(Source(path=path.resolve(), display=_display(path)))
            except ImportInputError:
                skipped.append(f"{_display(path)}: not readable YAML")
                continue
            kind = document.get("type") if isinstance(document, dict) else None
            if isinstance(document, dict) and (_JOB_KEYS & set(document) or kind in ("command", "pipeline", "sweep")):
                found.append(path)
            else:
                skipped.append(f"{_display(path)}: not a job (no command, jobs or trial)")
    return found


def import_files(paths: list[Path], ctx: Context, *, name: str | None = None,
                 skipped: list[str] | None = None) -> list[Draft]:
    """Drafts for every job in ``paths`` (a folder: the job files and scripts directly in it), named uniquely
    and checked against the stack model.

    Bad input (unreadable, not a job, a name the stack already uses, an entry the stack model refuses)
    raises :class:`ImportInputError` (exit 2). ``name`` renames the one run imported. A folder's scripts
    that hold no job, and its YAML files that are not jobs, are left out and named in ``skipped``.
    """
    drafts: list[Draft] = []
    skipped = [] if skipped is None else skipped
    expanded: list[tuple[Path, bool]] = []
    for path in paths:
        if path.is_dir():
            expanded += [(found, True) for found in _folder_jobs(path, skipped)]
            if not any(from_folder for _, from_folder in expanded):
                raise ImportInputError("the folder holds no job file (.yml/.yaml) or script (.py)",
                                       file=_display(path))
        else:
            expanded.append((path, False))
    for path, from_folder in expanded:
        source = Source(path=path.resolve(), display=_display(path))
        if not path.is_file():
            raise ImportInputError("no such file", file=source.display)
        if from_folder and sdk.is_script(path):
            try:
                text, tree = sdk.parse_script(source)
                found = (sdk_pipeline.read(source, ctx, tree) if sdk_pipeline.has_pipeline(source, tree)
                         else sdk.read(source, ctx, text, tree))
            except ImportInputError as err:  # a helper module beside the submission script
                skipped.append(f"{source.display}: {err.message}")
                continue
            drafts += found
        elif cliv2.is_job_file(path):
            document = cliv2.load_yaml(source)  # read and parsed once; bad YAML is exit 2 naming the line
            read = pipeline.read if pipeline.is_composite(document) else cliv2.read
            drafts += read(source, ctx, document)
        elif sdk.is_script(path):
            text, tree = sdk.parse_script(source)  # read and parsed once; text that is not Python is exit 2
            if sdk_pipeline.has_pipeline(source, tree):
                drafts += sdk_pipeline.read(source, ctx, tree)
            else:
                drafts += sdk.read(source, ctx, text, tree)
        else:
            raise ImportInputError("not a job file (.yml/.yaml) or a Python script (.py)", file=source.display)
    if name is not None:
        if len(drafts) != 1:
            raise ImportInputError(f"--name names one run; these files hold {len(drafts)}", file=drafts[0].file)
        drafts[0].run["name"] = name
    _unique_names(drafts, ctx)
    _validate(drafts, ctx)
    return drafts


def _distinct(drafts: list[Draft]) -> None:
    """Drafts imported together that share a derived name (``job.yml`` and ``sweep.yml`` of one folder both take
    the folder's) get the file's stem after it, then a number: ``iris``, ``iris-sweep``. A name the source
    itself gives is kept; two such names clash in :func:`_unique_names`."""
    taken: set[str] = set()
    for draft in drafts:
        run_name = str(draft.run.get("name"))
        first = next(d for d in drafts if str(d.run.get("name")).lower() == run_name.lower())
        if run_name.lower() not in taken or draft.named_in_source or first.origin == draft.origin:
            taken.add(run_name.lower())  # a file given twice is a collision, not two runs
            continue
        base = f"{run_name}-{slug(Path(draft.file).stem)}"
        candidate, n = base, 2
        while candidate.lower() in taken:
            candidate, n = f"{base}-{n}", n + 1
        draft.notes.append(f"named {candidate!r}: {run_name!r} is the name of the run imported from {first.origin}")
        draft.run["name"] = candidate
        taken.add(candidate.lower())


def _unique_names(drafts: list[Draft], ctx: Context) -> None:
    _distinct(drafts)
    existing = {run.name.lower(): run.name for run in ctx.stack.config.jobs} if ctx.stack else {}
    seen: dict[str, Draft] = {}
    for draft in drafts:
        run_name = str(draft.run.get("name"))
        if run_name.lower() in existing:
            assert ctx.stack is not None
            index = next(i for i, r in enumerate(ctx.stack.config.jobs) if r.name.lower() == run_name.lower())
            line = ctx.stack.file.line_of(("aml-gpu-training:jobs", index, "name"))
            raise ImportInputError(
                f"run name {run_name!r} is already declared in {ctx.stack.file.display} (line {line}): "
                "rename the imported run (--name, or its name in the source) or the declared one",
                file=draft.file, line=draft.line)
        if run_name.lower() in seen:
            other = seen[run_name.lower()]
            raise ImportInputError(
                f"run name {run_name!r} is also imported from {other.origin}: import them separately with --name, "
                "or give each job its own name", file=draft.file, line=draft.line)
        seen[run_name.lower()] = draft


def _validate(drafts: list[Draft], ctx: Context) -> None:
    """Each complete draft against the run model and, with a stack, the whole stack with the drafts added."""
    # A TODO held in a comment leaves the entry itself complete: it is checked like any other.
    complete = [d for d in drafts if not any(p.in_value for p in d.placeholders) and not contains_placeholder(d.run)]
    for draft in complete:
        try:
            JOB_ENTRY.validate_python(draft.run)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            # pydantic's loc holds union tags (model names, distribution types) the user never wrote
            tags = ("pytorch", "mpi", "tensorflow")
            path = [p for p in first["loc"] if not str(p)[:1].isupper() and p not in tags]
            where = ".".join(str(p) for p in path)
            message = first["msg"].removeprefix("Value error, ")
            raise ImportInputError(
                f"run {draft.run.get('name')!r}: {where + ': ' if where else ''}{message}"
                " (the stack model refuses this as written)", file=draft.file,
                line=draft.line_of(path[0] if path else "")) from None
    if ctx.stack is None or not complete:
        return
    values, added = stack_values(ctx, complete)
    try:
        build(values, location=ctx.stack.config.location, file=ctx.stack.file.display, root=ctx.root)
    except ConfigError as err:
        owners: dict[str, list[Draft | None]] = {
            "jobs": [None] * (len(values["jobs"]) - len(complete)) + complete,
            "environments": [None] * (len(values["environments"]) - len(added))
            + [d for d in complete for _ in d.environments],
        }
        match = linear.compile(r":(jobs|environments)\[(\d+)\]").search(err.key or "")
        owner = owners[match.group(1)][int(match.group(2))] if match else None
        if owner is None:
            raise
        field = linear.compile(r"\]\.([a-z_]+)").search(err.key or "")
        raise ImportInputError(f"{err.key}: {err.message}", file=owner.file,
                               line=owner.line_of(field.group(1) if field else "")) from None


def stack_values(ctx: Context, drafts: list[Draft]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The stack's namespace values with the drafts' runs and environments appended."""
    assert ctx.stack is not None
    prefix = "aml-gpu-training:"
    values = {k.removeprefix(prefix): v for k, v in ctx.stack.file.config.items() if k.startswith(prefix)}
    added = [env for d in drafts for env in d.environments]
    values["environments"] = [*(values.get("environments") or []), *added]
    values["jobs"] = [*(values.get("jobs") or []), *(d.run for d in drafts)]
    return values, added
