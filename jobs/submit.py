"""Submitting a declared run to its stack's workspace, and following it to the end.

Where the workspace is: the stack's ``workspace`` output (``subscription_id``, ``resource_group``,
``name``), read from ``pulumi stack output --json`` when the Pulumi CLI is installed (the deployed
stack), else from the offline plan's ``build/<stack>/outputs.json``. An offline plan cannot know the
subscription (its id is the mock's zeros): ``AZURE_SUBSCRIPTION_ID`` supplies it.

What is sent: the run resolved from the stack file now, which must equal the ``jobs`` output the
workspace coordinates came from. A run edited since the last plan or ``pulumi up`` is refused, so
what is submitted is what the policy pack checked. A code folder holding private keys or tokens is
refused too: Azure ML would upload it into the workspace's storage. Symbolic links in the code folder
that lead outside it are not uploaded (azure-ai-ml would follow them): the folder is sent as a copy
without them.

Each submission gets a fresh job name, ``<run>-<UTC yyyymmdd-hhmmss>``, because Azure ML job names
are unique per workspace forever; ``display_name`` defaults to the run's name so the studio groups
them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO

from infra import secrets
from infra.paths import files_inside
from jobs import code_scan
from jobs.render import build_job, job_yaml
from jobs.resolve import resolve_run
from jobs.resolved import ResolvedRun
from model import NAMESPACE
from model.config import StackConfig
from model.errors import EXIT_OK, UserError

OFFLINE_SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
"""The subscription id an offline plan reports (Pulumi mocks answer for Azure)."""
SUBSCRIPTION_VARIABLE = "AZURE_SUBSCRIPTION_ID"
EXIT_JOB_FAILED = 1
"""The job ended in any status but Completed (Failed, Canceled, NotResponding...)."""


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


@dataclass(frozen=True)
class Submission:
    run: ResolvedRun
    spec: dict[str, Any]
    """The spec as sent: the resolved one with this submission's job name."""
    workspace: WorkspaceRef


Runner = Callable[..., subprocess.CompletedProcess[str]]


def _shown(path: Path) -> str:
    """``path`` as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def plan_outputs(plan_dir: Path) -> StackOutputs | None:
    """The outputs an offline plan wrote to ``<plan_dir>/outputs.json``; None when there is no plan."""
    path = plan_dir / "outputs.json"
    try:
        return StackOutputs(json.loads(path.read_text(encoding="utf-8")), _shown(path))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        raise UserError(f"cannot read the plan's outputs: {err}", file=_shown(path)) from None


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
                            file=_shown(plan_dir / "outputs.json"))
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


def _ints(value: Any) -> Any:
    # Stack outputs travel as JSON numbers through the engine: 8 may come back as 8.0.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def unique_job_name(run_name: str, now: datetime | None = None) -> str:
    """``<run>-<UTC yyyymmdd-hhmmss>``: Azure ML never reuses a job name within a workspace."""
    return f"{run_name}-{(now or datetime.now(UTC)).strftime('%Y%m%d-%H%M%S')}"


def prepare(job: str, *, config: StackConfig, stack_file: str, outputs: StackOutputs | None, root: Path,
            environ: Mapping[str, str] = os.environ, now: datetime | None = None, dry_run: bool = False) -> Submission:
    """Everything a submission needs, checked; raises :class:`UserError` (exit 2) for what would go wrong.

    ``outputs`` None (a dry run before any plan): the workspace's names come from the stack file. A dry run
    without a subscription id shows :data:`OFFLINE_SUBSCRIPTION` as a placeholder instead of refusing.
    """
    declared = {r.name: r for r in config.jobs}
    if job not in declared:
        names = ", ".join(sorted(declared)) or "none declared"
        raise UserError(f"no run named {job!r}; declared runs: {names}", file=stack_file, key=f"{NAMESPACE}:jobs")
    run = resolve_run(declared[job], config, root)
    key = f"{NAMESPACE}:jobs[{config.jobs.index(declared[job])}]"
    if run.code_findings:
        raise UserError(
            f"run {job!r}: the code folder {run.spec['code']!r} holds private keys or tokens "
            f"({', '.join(run.code_findings)}); Azure ML would upload them to the workspace. Remove them.",
            file=stack_file, key=f"{key}.code",
        )
    exported = outputs.values.get("jobs") if outputs is not None else None
    if outputs is not None and isinstance(exported, dict) and _ints(exported.get(job)) not in (
            run.spec, secrets.mask_data(run.spec)):  # an offline plan's outputs.json has its secrets masked
        state = "is not in" if job not in exported else "changed since"
        raise UserError(
            f"run {job!r} {state} {outputs.source}: plan (or `pulumi up`) the stack again so the policy "
            "pack checks what is submitted", file=stack_file, key=key,
        )
    if outputs is not None:
        workspace = workspace_of(outputs, environ)
    else:
        workspace = WorkspaceRef(environ.get(SUBSCRIPTION_VARIABLE) or OFFLINE_SUBSCRIPTION,
                                 config.workspace.resource_group_name, config.workspace.name, stack_file)
    if workspace.subscription_id == OFFLINE_SUBSCRIPTION and dry_run:
        workspace = WorkspaceRef(
            workspace.subscription_id, workspace.resource_group, workspace.name,
            f"{workspace.source} (a placeholder subscription: set {SUBSCRIPTION_VARIABLE} to submit)",
        )
    elif workspace.subscription_id == OFFLINE_SUBSCRIPTION:
        raise UserError(
            f"an offline plan does not know the subscription; set {SUBSCRIPTION_VARIABLE} "
            "(or use the Pulumi CLI's outputs of the deployed stack)",
            file=workspace.source, key="workspace.subscription_id",
        )
    spec = {**run.spec, "name": unique_job_name(job, now), "display_name": run.spec.get("display_name", job)}
    return Submission(run=run, spec=dict(sorted(spec.items())), workspace=workspace)


@contextlib.contextmanager
def uploadable(root: Path, code: str) -> Iterator[Path]:
    """A project root whose ``code`` folder may be uploaded as it is: ``root`` itself, or, when the folder
    holds symbolic links that lead outside it, a temporary copy without them (removed afterwards).

    azure-ai-ml follows every link when it uploads a code folder; a link to ``/etc`` would send the
    machine's files to the workspace's storage."""
    folder = root / code
    if not code_scan.outside_links(folder):
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="amlgpu-submit-") as scratch:
        staged = Path(scratch) / code
        staged.mkdir(parents=True)
        for file in files_inside(folder):
            target = staged / file.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
        yield Path(scratch)


def dry_run(submission: Submission, *, root: Path, out: TextIO | None = None) -> int:
    """Print the workspace and the job file that would be sent (``code`` relative to the current folder)."""
    out = out or sys.stdout
    print(f"# would submit to {submission.workspace.describe()}", file=out)
    links = code_scan.outside_links(root / submission.spec["code"])
    if links:
        print(f"# not uploaded (symbolic links leading outside the code folder): {', '.join(links)}", file=out)
    print(job_yaml(submission.spec, code_relative_to=Path.cwd(), root=root, with_name=True), end="", file=out)
    return EXIT_OK


class JobOperations(Protocol):
    def create_or_update(self, job: Any) -> Any: ...
    def stream(self, name: str) -> None: ...
    def get(self, name: str) -> Any: ...


class Client(Protocol):
    @property
    def jobs(self) -> JobOperations: ...


def ml_client(workspace: WorkspaceRef) -> Client:
    """azure-ai-ml's ``MLClient`` for the workspace, signed in with ``DefaultAzureCredential``."""
    from azure.ai.ml import MLClient
    from azure.identity import DefaultAzureCredential

    return MLClient(DefaultAzureCredential(), workspace.subscription_id, workspace.resource_group, workspace.name)


def submit(submission: Submission, *, root: Path, client: Client, out: TextIO | None = None) -> int:
    """Create the job, stream its logs until it ends; 0 when it completed, 1 otherwise.

    Azure refusing the job (sign-in, permissions, an unknown workspace or compute) is a
    :class:`UserError` carrying Azure's own message.
    """
    from azure.ai.ml.exceptions import JobException
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

    out = out or sys.stdout
    try:
        with uploadable(root, submission.spec["code"]) as upload_root:
            created = client.jobs.create_or_update(build_job(submission.spec, root=upload_root))
    except ClientAuthenticationError as err:
        raise UserError(f"cannot sign in to Azure (az login, or a managed identity): {_first_line(err)}") from None
    except HttpResponseError as err:
        raise UserError(f"Azure refused the job: {_first_line(err)}", file=submission.workspace.source) from None
    print(f"submitted {created.name} to {submission.workspace.describe()}", file=out)
    print(f"studio: {getattr(created, 'studio_url', None) or 'no link returned (find the job by its name)'}",
          file=out, flush=True)
    try:
        client.jobs.stream(created.name)
    except JobException as err:  # azure-ai-ml raises when the job fails; its status says how
        print(err.message, file=out)
    status = client.jobs.get(created.name).status
    print(f"{created.name}: {status}", file=out)
    return EXIT_OK if status == "Completed" else EXIT_JOB_FAILED


def _first_line(err: Exception) -> str:
    return (str(getattr(err, "message", None) or err).strip().splitlines() or ["no message"])[0]
