"""The base a plan is compared with (``amlgpu plan --base``): an earlier plan folder, or a git ref.

A **folder** is read as it is: its ``resources.json`` (written by ``amlgpu plan``). A **git ref**
(``main``, ``origin/main``, a commit) is checked out into a temporary ``git worktree`` and planned
there **with the ref's own code** (``python -m amlgpu plan`` run inside that worktree, offline, with
this interpreter): what the base branch deploys is what its own program registers, and a change to the
program is part of what the pull request changes. The worktree is removed afterwards, whatever
happens. A ref whose tree has no ``Pulumi.<stack>.yaml`` has an empty base (the stack is new).

The ref is the trusted side (the base branch of a pull request), so running its code is no more than
``make plan`` on it; the ref name itself is checked before it reaches git (no options, no
whitespace).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel import bounded
from kernel import regex as linear
from kernel.errors import ConfigError, UserError
from kernel.interrupts import cleanup_on_interrupt, shielded, terminate_as_interrupt
from policies.waivers import from_records
from stack.waivers import Waiver

KEY = "--base"
_REF = linear.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@{}~^-]*$")  # $: the end, not a final newline
PLAN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Base:
    """A base plan: where it came from (for the report) and its resources in wire shape."""

    label: str
    resources: list[dict[str, Any]]
    waivers: list[Waiver] | None = None
    """The waivers the base plan applied (its ``waivers.json``); None when it recorded none (older code)."""


def read_plan_folder(folder: Path, label: str | None = None) -> Base:
    path = folder / "resources.json"
    try:
        data = bounded.load_json_file(path, "a plan's resources.json")
    except FileNotFoundError:
        raise UserError(f"{folder} holds no plan (no resources.json): plan the base first", key=KEY) from None
    except (OSError, bounded.BoundedInputError) as err:
        raise UserError(f"cannot read {path}: {err}", key=KEY) from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not valid JSON ({err.msg}, line {err.lineno})", key=KEY) from None
    if not isinstance(data, list) or not all(isinstance(r, dict) and "type" in r and "name" in r for r in data):
        raise UserError(f"{path} is not a plan's resources.json (a list of {{type, name, inputs}})", key=KEY)
    return Base(label or str(folder), data, read_waivers(folder))


def read_waivers(folder: Path) -> list[Waiver] | None:
    """The waivers recorded in an earlier plan folder (None when it has no ``waivers.json``: a plan
    from before waivers were recorded, whose waivers are then unknown rather than none)."""
    path = folder / "waivers.json"
    if not path.is_file():
        return None
    try:
        records = bounded.load_json_file(path, "a plan's waivers")
    except (OSError, bounded.BoundedInputError, json.JSONDecodeError) as err:
        raise ConfigError(f"cannot read the base plan's waivers: {err}", file=str(path)) from None
    return from_records(records, source=str(path))


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def resolve_ref(root: Path, ref: str) -> str:
    """The commit ``ref`` names in the repository at ``root``; bad input (exit 2) when it names none."""
    if not _REF.match(ref) or ".." in ref:
        raise UserError(f"{ref!r} is neither a plan folder nor a git ref", key=KEY)
    found = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if found.returncode != 0:
        raise UserError(f"{ref!r} is neither a plan folder nor a git ref of {root}", key=KEY)
    return found.stdout.strip()


def plan_git_ref(root: Path, ref: str, stack: str) -> Base:
    """Plan ``stack`` as the commit ``ref`` names would, in a temporary worktree, with that commit's code.

    Nothing is left behind, whatever stops it: an error, the plan's timeout, Ctrl-C or SIGTERM. The work
    runs as a :func:`~kernel.interrupts.cleanup_on_interrupt` section, and the cleanup (worktree removed,
    scratch folder deleted, git's worktree list pruned) is shielded from a Ctrl-C landing inside it and runs
    its git commands in a session of their own, out of reach of the terminal's Ctrl-C."""
    commit = resolve_ref(root, ref)
    with cleanup_on_interrupt(), terminate_as_interrupt():
        scratch = Path(tempfile.mkdtemp(prefix="amlgpu-base-"))
        try:
            return _plan_in_worktree(root, ref, commit, stack, scratch)
        finally:
            with shielded():
                _remove_worktree(root, scratch)


def _plan_in_worktree(root: Path, ref: str, commit: str, stack: str, scratch: Path) -> Base:
    label = f"{ref} ({commit[:12]})"
    tree = scratch / "tree"
    added = _git(root, "worktree", "add", "--detach", "--quiet", str(tree), commit)
    if added.returncode != 0:
        raise UserError(f"cannot check out {ref!r}: {added.stderr.strip()}", key=KEY)
    prefix = _git(root, "rev-parse", "--show-prefix").stdout.strip()
    project = tree / prefix
    if not (project / f"Pulumi.{stack}.yaml").is_file():
        return Base(f"{label}, where stack {stack!r} does not exist", [], [])
    out = scratch / "plan"
    env = {**os.environ, "PYTHONPATH": str(project)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "amlgpu", "plan", "--stack", stack, "--out", str(out)],
            cwd=project, env=env, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"planning {ref!r} took over {PLAN_TIMEOUT_S}s", key=KEY) from None
    if done.returncode not in (0, 1):
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise UserError(f"planning stack {stack!r} at {ref!r} failed (exit {done.returncode}):\n{tail}", key=KEY)
    return read_plan_folder(out, label)


def _remove_worktree(root: Path, scratch: Path) -> None:
    """Remove the worktree under ``scratch`` and ``scratch`` itself, and forget the worktree in git, even
    when ``git worktree add`` was cut short (its worktree then stays locked as "initializing")."""
    tree = str(scratch / "tree")
    for args in (("worktree", "unlock", tree), ("worktree", "remove", "--force", "--force", tree)):
        subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False, start_new_session=True)
    shutil.rmtree(scratch, ignore_errors=True)
    subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True, check=False,
                   start_new_session=True)


def load_base(spec: str, root: Path, stack: str) -> Base:
    """``--base``: a plan folder when ``spec`` is one, else a git ref of the repository holding ``root``."""
    folder = Path(spec)
    if folder.is_dir():
        return read_plan_folder(folder)
    return plan_git_ref(root, spec, stack)
