"""Where a stack's workspace is: the ``workspace`` stack output, for ``amlgpu submit`` and ``amlgpu job``.

The coordinates (``subscription_id``, ``resource_group``, ``name``) come from ``pulumi stack output --json``
when the Pulumi CLI is installed (the deployed stack), else from the offline plan's
``build/<stack>/outputs.json`` (or ``--plan-dir``). An offline plan cannot know the subscription (its id is
the mock's zeros): ``AZURE_SUBSCRIPTION_ID`` supplies it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kernel import bounded
from kernel.errors import UserError

OFFLINE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
"""The subscription id an offline plan reports (Pulumi mocks answer for Azure)."""
SUBSCRIPTION_VARIABLE = "AZURE_SUBSCRIPTION_ID"


@dataclass(frozen=True)
class WorkspaceRef:
    subscription_id: str
    resource_group: str
    name: str
    source: str
    """Where the coordinates came from, for messages: a file or ``pulumi stack output``."""

    def describe(self) -> str:
        return (f"workspace {self.name} (resource group {self.resource_group}, "
                f"subscription {self.subscription_id}) from {self.source}")


@dataclass(frozen=True)
class StackOutputs:
    values: dict[str, Any]
    source: str


Runner = Callable[..., subprocess.CompletedProcess[str]]


def shown(path: Path) -> str:
    """``path`` as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def plan_outputs(plan_dir: Path) -> StackOutputs | None:
    """The outputs an offline plan wrote to ``<plan_dir>/outputs.json``; None when there is no plan."""
    path = plan_dir / "outputs.json"
    try:
        return StackOutputs(bounded.load_json_file(path, "a plan's outputs"), shown(path))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError, bounded.BoundedInputError) as err:
        raise UserError(f"cannot read the plan's outputs: {err}", file=shown(path)) from None


def pulumi_outputs(stack: str, root: Path, *, run: Runner = subprocess.run) -> StackOutputs | None:
    """The deployed stack's outputs from ``pulumi stack output --json``; None without the Pulumi CLI.

    A CLI that fails (not logged in, stack not deployed) raises, naming the stack and Pulumi's reason.
    """
    executable = shutil.which("pulumi")
    if executable is None:
        return None
    try:
        done = run([executable, "stack", "output", "--json", "--stack", stack], cwd=root,
                   capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise UserError("pulumi stack output gave no answer in 120 s (offline, or a backend that does not "
                        "answer)", file=f"Pulumi.{stack}.yaml") from None
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"pulumi stack output failed: {reason[0]}", file=f"Pulumi.{stack}.yaml")
    try:
        return StackOutputs(json.loads(done.stdout), f"pulumi stack output --stack {stack}")
    except json.JSONDecodeError as err:
        raise UserError(f"pulumi stack output printed no JSON: {err}", file=f"Pulumi.{stack}.yaml") from None


def stack_outputs(stack: str, root: Path, plan_dir: Path | None, *, run: Runner = subprocess.run) -> StackOutputs:
    """Outputs from ``plan_dir`` when given, else the Pulumi CLI's, else the default plan folder's."""
    if plan_dir is not None:
        found = plan_outputs(plan_dir)
        if found is None:
            raise UserError(f"no outputs.json in {plan_dir}: run `amlgpu plan --stack {stack} --out {plan_dir}`",
                            file=shown(plan_dir / "outputs.json"))
        return found
    found = pulumi_outputs(stack, root, run=run) or plan_outputs(root / "build" / stack)
    if found is None:
        raise UserError(
            f"no workspace coordinates: run `amlgpu plan --stack {stack}` (writes build/{stack}/outputs.json) "
            "or install the Pulumi CLI for the deployed stack's outputs",
            file=f"build/{stack}/outputs.json",
        )
    return found


def dry_run_outputs(stack: str, root: Path, plan_dir: Path | None, *, run: Runner = subprocess.run,
                    err: TextIO | None = None) -> StackOutputs | None:
    """The outputs a dry run shows, offline included: as :func:`stack_outputs`, but a Pulumi CLI that fails
    (not logged in, no network) is a note, not an error, and with no outputs anywhere the workspace comes
    from the stack file (None)."""
    if plan_dir is not None:
        return stack_outputs(stack, root, plan_dir, run=run)
    try:
        found = pulumi_outputs(stack, root, run=run)
    except UserError as failure:
        print(f"note: {failure.message}; showing the offline plan's workspace instead", file=err or sys.stderr)
        found = None
    return found or plan_outputs(root / "build" / stack)


def workspace_of(outputs: StackOutputs, environ: Mapping[str, str] = os.environ) -> WorkspaceRef:
    """The ``workspace`` output as coordinates; an offline plan's subscription from ``AZURE_SUBSCRIPTION_ID``."""
    workspace = outputs.values.get("workspace")
    keys = ("subscription_id", "resource_group", "name")
    if not isinstance(workspace, dict) or not all(isinstance(workspace.get(k), str) for k in keys):
        raise UserError(f"expected {{{', '.join(keys)}}} (strings)", file=outputs.source, key="workspace")
    subscription = workspace["subscription_id"]
    source = outputs.source
    if subscription == OFFLINE_SUBSCRIPTION and environ.get(SUBSCRIPTION_VARIABLE):
        subscription = environ[SUBSCRIPTION_VARIABLE]
        source += f" and {SUBSCRIPTION_VARIABLE}"
    return WorkspaceRef(subscription, workspace["resource_group"], workspace["name"], source)


def require_subscription(workspace: WorkspaceRef) -> WorkspaceRef:
    """``workspace``, refused (exit 2) when its subscription is the offline plan's placeholder."""
    if workspace.subscription_id == OFFLINE_SUBSCRIPTION:
        raise UserError(
            f"an offline plan does not know the subscription; set {SUBSCRIPTION_VARIABLE} "
            "(or use the Pulumi CLI's outputs of the deployed stack)",
            file=workspace.source, key="workspace.subscription_id",
        )
    return workspace
