"""Which stacks a change touches (``amlgpu plan --changed-since GIT_REF``).

A stack's plan reads three kinds of files, and a change to any of them can change what it plans:

* **its own inputs**, taken from the parsed stack model (:func:`stack_inputs`): the stack file; each
  environment's build context, Dockerfile and conda file; each ``file:`` environment and what it names;
  each run's code folder (the generated fabric checks' and the steps of pipelines and sweeps included);
  each pipeline step's component file; its pack config ``policies/config.<stack>.json``;
* **the program** (:data:`PROGRAM`): ``__main__.py``, the project files, ``pyproject.toml`` and the
  project's packages (:data:`PACKAGES`): a change there plans every stack. Inside a package, a folder
  that is not itself a Python package (no ``__init__.py``, e.g. ``jobs/workloads``) and that a run names
  as its code folder is that run's workload, uploaded with it: a change there plans the stacks whose runs
  name it. Package code is program whatever a stack declares (``code: jobs/emulate`` does not make the
  emulator one stack's input);
* nothing else (docs, tests, examples, workflows, folders no stack names): no stack.

What changed is what ``git diff`` reports between the merge base of the ref and ``HEAD`` and the working
tree (committed, staged and unstaged changes), plus untracked files that are not ignored: a stack file
written but not yet added is planned. Renames count as a deletion and an addition. Stack files that no
longer exist are reported as deleted. A stack whose file cannot be read or validated is always planned:
its inputs are unknown, and planning it reports what is wrong.
"""

from __future__ import annotations

import posixpath
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernel.errors import UserError
from kernel.paths import resolve_inside
from planning.base import resolve_ref
from stack import NAMESPACE
from stack.pipelines import named_files
from stack.project import LoadedStack, load_stack
from stack.runs import FILE_PREFIX, InlineEnvironment

KEY = "--changed-since"
PACKAGES = ("amlgpu", "planning", "policies", "infra", "jobs", "importer", "preflight", "stack", "analysis",
            "azurefacts", "kernel")
"""The project's Python packages, top floor first (pyproject.toml packages them; a test keeps the two equal)."""
PROGRAM = ("__main__.py", "Pulumi.yaml", "Pulumi.yml", "Pulumi.json", "pyproject.toml", *PACKAGES)
"""What every plan runs: a change under any of these plans every stack (see :func:`affected` for workloads)."""


def stack_file_names(name: str) -> tuple[str, ...]:
    """The files Pulumi may read stack ``name``'s settings from (``Pulumi.<name>.yaml``, and the
    ``.yml``/``.json`` spellings it reads when the project file has that extension)."""
    return tuple(f"Pulumi.{name}{ext}" for ext in (".yaml", ".yml", ".json"))


def stack_inputs(stack: LoadedStack) -> frozenset[str]:
    """The project paths (POSIX, relative to the project root; a folder stands for everything in it) that
    ``stack``'s plan reads besides the program, as the parsed stack model names them.

    Each path is given as written and, when a symbolic link makes it lead elsewhere in the project, as
    where it leads too: a change to either is a change to the stack's inputs."""
    config = stack.config
    named: list[str] = [*stack_file_names(stack.name), f"policies/config.{stack.name}.json"]
    for env in config.environments:
        if env.build is not None:
            named += [env.build.path, f"{env.build.path}/{env.build.dockerfile_path}"]
        if env.conda_file is not None:
            named.append(env.conda_file)
    runs = [*config.runs, *(run for job in config.composites for run in job.runs.values())]
    for job in config.composites:  # component files, and file: environments in the stack or a component
        named += named_files(job, stack.root)
    for run in runs:
        if run.code is not None:
            named.append(run.code)
        inline = run.environment
        if isinstance(inline, InlineEnvironment):
            # A file: environment is read in by now: these are the folder and file it names.
            if inline.build is not None:
                named += [inline.build.path, f"{inline.build.path}/{inline.build.dockerfile_path}"]
            if inline.conda_file is not None:
                named.append(inline.conda_file)
    # The file: environment files themselves: the model holds what they declare, the stack file their names.
    declared = stack.file.config.get(f"{NAMESPACE}:jobs")
    for entry in declared if isinstance(declared, list) else []:
        environment = entry.get("environment") if isinstance(entry, dict) else None
        if isinstance(environment, str) and environment.startswith(FILE_PREFIX):
            named.append(environment[len(FILE_PREFIX):])
    return frozenset(form for path in named for form in _forms(stack.root, path))


def _normal(path: str) -> str:
    """``path`` as git spells it relative to the project root: POSIX, no ``./``, no trailing slash
    (``"."`` for the root itself)."""
    return posixpath.normpath(path.replace("\\", "/"))


def _forms(root: Path, path: str) -> tuple[str, ...]:
    """``path`` as written and, symbolic links followed, where it leads inside the project."""
    written = _normal(path)
    resolved = resolve_inside(root, written)
    if resolved is None:
        return (written,)
    real = resolved.relative_to(root.resolve()).as_posix() or "."
    return (written,) if real == written else (written, real)


def _under(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or inside it (``"."``, the project root, holds everything)."""
    return folder == "." or path == folder or path.startswith(folder + "/")


@dataclass(frozen=True)
class Impact:
    """What a set of changed paths touches."""

    program: tuple[str, ...]
    """Changed paths of the program: every stack is planned."""
    stacks: Mapping[str, tuple[str, ...]]
    """Stack name -> the changed paths among its own inputs (stacks with none left out)."""


def package_folders(root: Path, packages: Iterable[str] = PACKAGES) -> frozenset[str]:
    """The folders below ``root`` that are Python package code: each of ``packages`` and every folder
    below it reached through folders that all hold an ``__init__.py`` (POSIX, relative to ``root``)."""
    found: set[str] = set()
    pending = [root / name for name in packages if (root / name / "__init__.py").is_file()]
    while pending:
        folder = pending.pop()
        found.add(folder.relative_to(root).as_posix())
        pending += [child for child in folder.iterdir()
                    if child.is_dir() and not child.is_symlink() and (child / "__init__.py").is_file()]
    return frozenset(found)


def affected(changed: Iterable[str], inputs: Mapping[str, frozenset[str]],
             program: Iterable[str] = PROGRAM, packages: frozenset[str] = frozenset()) -> Impact:
    """Sort ``changed`` paths (as git reports them: POSIX, relative to the project root, used verbatim, so
    a backslash in a file's name is part of that name) into program changes and each stack's input changes.

    ``inputs``: stack name -> :func:`stack_inputs`. ``program``: the program's paths (:data:`PROGRAM`,
    plus files given on the command line that every plan reads). ``packages``: :func:`package_folders`.
    A path inside a program folder that is not package code, and inside a code folder a stack names below
    that program folder, is that stack's workload, not program code; package code is always program."""
    program = tuple(_normal(p) for p in program)
    workloads = {path for paths in inputs.values() for path in paths
                 if any(path.startswith(p + "/") for p in program)}
    pack_configs = {f"policies/config.{name}.json": name for name in inputs}
    touched: dict[str, list[str]] = {}
    program_changes: list[str] = []
    for path in sorted(set(changed)):
        for name, paths in inputs.items():
            if any(_under(path, named) for named in paths):
                touched.setdefault(name, []).append(path)
        if path in pack_configs:
            continue  # one stack's pack config: that stack's input, found above
        in_program = any(_under(path, p) for p in program)
        if in_program and posixpath.dirname(path) not in packages and any(_under(path, w) for w in workloads):
            in_program = False
        if in_program:
            program_changes.append(path)
    return Impact(tuple(program_changes), {name: tuple(paths) for name, paths in sorted(touched.items())})


@dataclass(frozen=True)
class Changes:
    """What changed in the project since a git ref."""

    ref: str
    commit: str
    """The commit the ref names."""
    merge_base: str
    paths: tuple[str, ...]
    """Every path added, changed or deleted since the merge base (relative to the project root, sorted)."""
    deleted: tuple[str, ...] = field(default=())
    """The paths among them that no longer exist."""

    @property
    def label(self) -> str:
        """The ref as shown: its name and commit (the commit alone when the ref is one)."""
        return self.commit[:12] if self.commit.startswith(self.ref) else f"{self.ref} ({self.commit[:12]})"

    def deleted_stacks(self) -> list[str]:
        """Stacks whose ``Pulumi.<stack>.yaml`` existed at the merge base and is gone now."""
        return sorted(path.removeprefix("Pulumi.").removesuffix(".yaml") for path in self.deleted
                      if "/" not in path and path.startswith("Pulumi.") and path.endswith(".yaml")
                      and path.count(".") >= 2)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -z everywhere below: paths come back verbatim (no quoting), NUL-separated.
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def _fail(message: str) -> UserError:
    return UserError(message, key=KEY)


def changed_since(root: Path, ref: str) -> Changes:
    """What changed in the project at ``root`` since ``ref``: bad input (exit 2) when ``root`` is not in a
    git repository, ``ref`` names no commit, or the ref and ``HEAD`` share no history."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise _fail(f"{root} is not in a git work tree: --changed-since compares with a git ref")
    try:
        commit = resolve_ref(root, ref)
    except UserError:
        raise _fail(f"{ref!r} names no commit of the repository at {root} (a shallow clone lacks the history: "
                    "fetch it, e.g. actions/checkout with fetch-depth: 0)") from None
    base = _git(root, "merge-base", commit, "HEAD")
    if base.returncode != 0:
        raise _fail(f"{ref!r} and HEAD share no history (a shallow clone lacks it: fetch it, e.g. "
                    "actions/checkout with fetch-depth: 0)")
    merge_base = base.stdout.strip()
    diff = _git(root, "diff", "--name-status", "-z", "--no-renames", "--relative", merge_base, "--")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", "-z", "--", ".")
    for done in (diff, untracked):
        if done.returncode != 0:
            raise _fail(f"git could not compare with {ref!r}: {done.stderr.strip()}")
    fields = diff.stdout.split("\0")
    statuses = dict(zip(fields[1::2], fields[0::2], strict=False))  # path -> A, M, D, T...
    paths = sorted({*statuses, *(p for p in untracked.stdout.split("\0") if p)} - {""})
    deleted = tuple(p for p in paths if statuses.get(p) == "D" and not (root / p).exists())
    return Changes(ref, commit, merge_base, tuple(paths), deleted)


@dataclass(frozen=True)
class Selection:
    """The stacks ``--changed-since`` plans, and why."""

    changes: Changes
    impact: Impact
    planned: tuple[str, ...]
    """The candidates to plan, in their order."""
    unreadable: tuple[str, ...]
    """Candidates whose stack file could not be read or validated: planned, so that the plan says why."""
    deleted: tuple[str, ...]
    """Stacks deleted since the ref (only when the candidates are every stack of the project)."""

    def reasons(self) -> dict[str, str]:
        """Each planned stack -> why, in a few words."""
        out = {}
        for name in self.planned:
            if name in self.unreadable:
                out[name] = "its stack file cannot be read"
            elif self.impact.program:
                out[name] = "the program changed"
            else:
                paths = self.impact.stacks[name]
                out[name] = ", ".join(paths[:2]) + (f" and {len(paths) - 2} more" if len(paths) > 2 else "")
        return out

    def notes(self, candidates: int) -> list[str]:
        """What was selected of ``candidates`` stacks and why, and the stacks deleted, as lines for the terminal."""
        label = self.changes.label
        if self.impact.program:
            program = self.impact.program
            shown = ", ".join(program[:3]) + (f" and {len(program) - 3} more" if len(program) > 3 else "")
            lines = [f"Changed since {label}: the program ({shown}): every stack is planned."]
        else:
            why = "; ".join(f"{name} ({reason})" for name, reason in self.reasons().items())
            lines = [f"Changed since {label}: {len(self.planned)} of {candidates} stack(s) to plan"
                     + (f": {why}" if why else "") + "."]
        return lines + [f"Deleted since {label}: stack {name!r} (Pulumi.{name}.yaml): nothing to plan."
                        for name in self.deleted]


def select(root: Path, ref: str, candidates: Iterable[str], *, every_stack: bool,
           read_by_every_plan: Iterable[Path] = ()) -> Selection:
    """The ``candidates`` whose inputs changed since ``ref`` (see the module's docstring).

    ``every_stack``: the candidates are every stack of the project, so stack files deleted since the ref are
    reported. ``read_by_every_plan``: files given on the command line (``--policy-config``, ``--prices``)
    that are program inputs when they are in the project."""
    changes = changed_since(root, ref)
    candidates = list(candidates)
    inputs: dict[str, frozenset[str]] = {}
    unreadable: list[str] = []
    for name in candidates:
        try:
            inputs[name] = stack_inputs(load_stack(name, root))
        except UserError:
            unreadable.append(name)
    top = root.resolve()
    extra = [p.resolve().relative_to(top).as_posix() for p in read_by_every_plan if p.resolve().is_relative_to(top)]
    impact = affected(changes.paths, inputs, program=(*PROGRAM, *extra), packages=package_folders(root))
    planned = [n for n in candidates if n in unreadable or impact.program or n in impact.stacks]
    deleted = [n for n in changes.deleted_stacks() if n not in candidates] if every_stack else []
    return Selection(changes, impact, tuple(planned), tuple(unreadable), tuple(deleted))
