"""Submitting a declared run to its stack's workspace, and following it to the end.

What is sent is the job file ``amlgpu plan`` writes for the run (``<plan folder>/jobs/<run>.yml``), read by
azure-ai-ml's own ``load_job``, as ``az ml job create -f`` reads it: the file a reviewer saw, with only this
submission's name added (and the run's name as ``display_name`` when it declares none). When the plan folder
holds the file it must be byte-for-byte what the run renders now; the file need not exist (the workspace may
come from the deployed stack's outputs), and the text is the same either way.

Where the workspace is: :mod:`jobs.workspace`. The run resolved from the stack file now must equal the
``jobs`` output the workspace coordinates came from: a run edited since the last plan or ``pulumi up`` is
refused, so what is submitted is what the policy pack checked. A code folder holding private keys or tokens
is refused too: Azure ML would upload it into the workspace's storage. Symbolic links in the code folder that
lead outside it are not uploaded (azure-ai-ml would follow them): the folder is sent as a copy without them.

Each submission gets a fresh job name, ``<run>-<UTC yyyymmdd-hhmmss>``, because Azure ML job names are unique
per workspace forever; ``display_name`` defaults to the run's name so the studio groups them.

A pipeline or sweep (:mod:`jobs.pipelines`) is submitted the same way, from its planned file: every step's
(the trial's) code folder is checked for keys, and one holding symbolic links that lead outside it is refused
(a pipeline's folders are uploaded where the file names them, so there is no copy to leave the links out of).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from analysis import code_scan
from azurefacts.ids import storage_public_network_access
from jobs import remote
from jobs.diagnose import INFINIBAND
from jobs.pipeline_render import composite_yaml
from jobs.pipelines import ResolvedComposite, code_folders, resolve_composite
from jobs.render import job_yaml, quiet_azure_ai_ml
from jobs.resolve import resolve_run
from jobs.workspace import (
    OFFLINE_SUBSCRIPTION,
    SUBSCRIPTION_VARIABLE,
    StackOutputs,
    WorkspaceRef,
    require_subscription,
    shown,
    workspace_of,
)
from kernel import secrets
from kernel.errors import EXIT_OK, UserError
from kernel.paths import files_inside
from stack import NAMESPACE
from stack.config import StackConfig
from stack.pipelines import job_parts
from stack.resolved import ResolvedRun
from stack.runs import Run

if TYPE_CHECKING:
    from azure.ai.ml import MLClient


@dataclass(frozen=True)
class Submission:
    run: ResolvedRun | ResolvedComposite
    """The run, or the pipeline or sweep, as resolved now."""
    name: str
    """This submission's job name: ``<run>-<UTC timestamp>``."""
    workspace: WorkspaceRef
    parts: tuple[ResolvedRun, ...] = ()
    """What runs on the clusters: the run itself, or a pipeline's steps (a sweep's trial)."""

    @property
    def code(self) -> str | None:
        """A run's code folder, relative to the project root; None for a run without code, and for a pipeline
        or sweep (:attr:`code_folders`)."""
        code = self.run.spec.get("code") if isinstance(self.run, ResolvedRun) else None
        return code if isinstance(code, str) else None

    @property
    def code_folders(self) -> list[str]:
        """Every code folder the submission uploads, each once."""
        if isinstance(self.run, ResolvedRun):
            return [self.code] if self.code is not None else []
        return code_folders(self.run.spec)

    @property
    def overrides(self) -> list[dict[str, str]]:
        """What the submission adds to the job file: its name, and the run's name as display name when the
        run declares none."""
        added = [{"name": self.name}]
        if not self.run.spec.get("display_name"):
            added.append({"display_name": self.run.name})
        return added


@dataclass(frozen=True)
class JobFile:
    text: str
    """The file's text, as ``amlgpu plan`` writes it."""
    path: Path
    """Where the plan writes it: ``code`` and other local paths are relative to its folder."""
    planned: bool
    """Whether the plan folder holds it (else it was rendered for this submission, identically)."""


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
    entry = declared[job]
    key = f"{NAMESPACE}:jobs[{config.jobs.index(entry)}]"
    run: ResolvedRun | ResolvedComposite
    if isinstance(entry, Run):
        run = resolve_run(entry, config, root)
        parts = [run]
        where = [f"{key}.code"]
    else:  # a pipeline or sweep: each step's (the trial's) code folder is uploaded
        run, parts = resolve_composite(entry, config, root)
        where = [f"{key}.{'.'.join(map(str, below))}.code" for _, below in job_parts(entry)]
    for part, at in zip(parts, where, strict=True):
        if part.code_findings:
            raise UserError(
                f"run {part.name!r}: the code folder {part.spec.get('code')!r} holds private keys or tokens "
                f"({', '.join(part.code_findings)}); Azure ML would upload them to the workspace. Remove them.",
                file=stack_file, key=at,
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
    elif not dry_run:
        require_subscription(workspace)
    return Submission(run=run, name=unique_job_name(job, now), workspace=workspace, parts=tuple(parts))


def job_file(submission: Submission, *, root: Path, plan_dir: Path) -> JobFile:
    """The run's job file as ``amlgpu plan`` writes it into ``plan_dir``; refused (exit 2) when the plan folder
    holds a different one (a plan by other code, or edited by hand)."""
    folder = plan_dir.absolute() / "jobs"
    render = job_yaml if isinstance(submission.run, ResolvedRun) else composite_yaml
    text = render(submission.run.spec, code_relative_to=folder.resolve(), root=root)
    path = folder / f"{submission.run.name}.yml"
    try:
        planned = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return JobFile(text, path, planned=False)
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the planned job file: {err}", file=shown(path)) from None
    if planned != text:
        raise UserError(f"the planned job file differs from what run {submission.run.name!r} renders now: plan "
                        "the stack again so what is submitted is what was reviewed", file=shown(path))
    return JobFile(text, path, planned=True)


@contextlib.contextmanager
def uploadable(root: Path, code: str | None) -> Iterator[Path | None]:
    """None when the ``code`` folder may be uploaded as it is (or there is none); else, when it holds symbolic
    links that lead outside it, a temporary copy of it without them (removed afterwards).

    azure-ai-ml follows every link when it uploads a code folder; a link to ``/etc`` would send the
    machine's files to the workspace's storage."""
    if code is None or not code_scan.outside_links(root / code):
        yield None
        return
    folder = root / code
    with tempfile.TemporaryDirectory(prefix="amlgpu-submit-") as scratch:
        staged = Path(scratch) / Path(code).name
        staged.mkdir(parents=True)
        for file in files_inside(folder):
            target = staged / file.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
        yield staged


def refuse_outside_links(submission: Submission, root: Path) -> None:
    """A pipeline's or sweep's code folder holding symbolic links that lead outside it is refused (exit 2): its
    folders are uploaded where its file names them, so there is no copy to leave them out of."""
    if isinstance(submission.run, ResolvedRun):
        return  # a run's folder is staged without them (:func:`uploadable`)
    for folder in submission.code_folders:
        links = code_scan.outside_links(root / folder)
        if links:
            raise UserError(f"code folder {folder!r} holds symbolic links leading outside it ({', '.join(links)}); "
                            "Azure ML would upload what they lead to: remove them", key=f"{NAMESPACE}:jobs")


def load(submission: Submission, job: JobFile, *, staged_code: Path | None = None) -> Any:
    """The job azure-ai-ml's ``load_job`` reads from the file (a ``Command``, what ``jobs.create_or_update``
    takes), with the submission's overrides; ``code`` replaced by ``staged_code`` when given."""
    from azure.ai.ml import load_job

    overrides: list[dict[str, Any]] = list(submission.overrides)
    if staged_code is not None:
        overrides.append({"code": str(staged_code)})
    with quiet_azure_ai_ml():
        return load_job(io.StringIO(job.text), relative_origin=str(job.path), params_override=overrides)


def dry_run(submission: Submission, job: JobFile, *, root: Path, out: TextIO | None = None) -> int:
    """Print the workspace, the submission's overrides and the job file that would be sent."""
    out = out or sys.stdout
    refuse_outside_links(submission, root)
    print(f"# would submit to {submission.workspace.describe()}", file=out)
    added = ", ".join(f"{key}: {value}" for item in submission.overrides for key, value in item.items())
    origin = "as planned" if job.planned else "as `amlgpu plan` writes it; not planned yet"
    print(f"# job file {shown(job.path)} ({origin}), with {added}", file=out)
    if submission.code is not None:
        links = code_scan.outside_links(root / submission.code)
        if links:
            print(f"# not uploaded (symbolic links leading outside the code folder): {', '.join(links)}", file=out)
    print(job.text, end="", file=out)
    return EXIT_OK


def upload_notice(config: StackConfig) -> str:
    """What a code upload from this machine meets at the workspace storage's firewall, as the stack sets it."""
    ranges = config.network.operator_ip_ranges
    if storage_public_network_access(ranges) == "Disabled":
        return ("the workspace's storage account takes no public traffic (network.operator_ip_ranges is empty): "
                "the code upload works only from inside the network")
    return (f"the workspace's storage account takes public traffic only from network.operator_ip_ranges "
            f"({', '.join(ranges)}): the code upload works from those addresses or from inside the network")


def facts(parts: tuple[ResolvedRun, ...]) -> frozenset[str]:
    """What :mod:`jobs.diagnose` needs to know of the clusters the submission runs on."""
    return frozenset({INFINIBAND}) if any(part.cluster.infiniband for part in parts) else frozenset()


def submit(submission: Submission, job: JobFile, *, root: Path, client: MLClient, notice: str | None = None,
           out: TextIO | None = None) -> int:
    """Create the job (uploading the code folder), print its name and studio link, and follow it to the end:
    0 when it completed, 1 otherwise. ``notice``: printed before a code upload (:func:`upload_notice`).

    Azure refusing the job (sign-in, permissions, the storage firewall, an unknown workspace or compute) is a
    :class:`UserError` (exit 2) of one line (:func:`jobs.remote.azure_errors`).
    """
    out = out or sys.stdout
    refuse_outside_links(submission, root)
    with uploadable(root, submission.code) as staged:
        loaded = load(submission, job, staged_code=staged)
        if submission.code_folders and notice:
            print(f"note: {notice}", file=out, flush=True)
        with remote.azure_errors(submission.workspace, doing=f"submitting run {submission.run.name!r}"):
            created = client.jobs.create_or_update(loaded)
    print(f"submitted {created.name} to {submission.workspace.describe()}", file=out)
    print(f"studio: {created.studio_url or 'no link returned (find the job by its name)'}", file=out, flush=True)
    return remote.follow(client, str(created.name), workspace=submission.workspace, out=out,
                         facts=facts(submission.parts))
