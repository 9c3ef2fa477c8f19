"""A deployed workspace's jobs, as users know them from ``az ml job show/stream/cancel``: the client, what
Azure refuses said in one line, and following a job to its end with the known failure signatures.

Everything goes through azure-ai-ml's ``MLClient`` (its REST clients, and the azure-storage-blob client it
opens for a code upload). Signing in is ``azurefacts.arm.default_credential``, what ``pulumi up`` uses: the
provider's ``ARM_*`` service principal, else ``DefaultAzureCredential`` (``az login``, a managed identity, or a
service principal's ``AZURE_*`` variables).

A job ends ``Completed`` (exit 0) or otherwise (``Failed``, ``Canceled``, ``NotResponding``: exit 1).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from azurefacts.ids import STORAGE_FIREWALL_CODES, firewall_refusal
from jobs.diagnose import Diagnosis
from kernel import regex as linear
from kernel.errors import EXIT_OK, UserError

if TYPE_CHECKING:
    from azure.ai.ml import MLClient

    from jobs.workspace import WorkspaceRef

EXIT_JOB_FAILED = 1
"""The job ended in any status but Completed (Failed, Canceled, NotResponding...)."""
COMPLETED = "Completed"


def ml_client(workspace: WorkspaceRef, *, credential: Any = None, **kwargs: Any) -> MLClient:
    """azure-ai-ml's ``MLClient`` for the workspace; ``azurefacts.arm.default_credential()`` unless ``credential`` is
    given.
    ``kwargs`` go to every REST client it builds (``transport``, retry settings)."""
    from azure.ai.ml import MLClient

    if credential is None:
        from azurefacts.arm import default_credential

        try:
            credential = default_credential()
        except ValueError as err:  # AZURE_TOKEN_CREDENTIALS naming no credential
            raise UserError(f"cannot sign in to Azure: {err}") from None
    return MLClient(credential, workspace.subscription_id, workspace.resource_group, workspace.name, **kwargs)


_ANSI = linear.compile(r"\x1b\[[0-9;]*m")


def _first_line(err: BaseException) -> str:
    """The error's message in one line: azure-ai-ml's validation errors are coloured, multi-line reports whose
    ``(x)`` lines say what is wrong."""
    text = _ANSI.sub("", str(getattr(err, "message", None) or err))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    details = [line.removeprefix("(x)").strip() for line in lines if line.startswith("(x)")]
    return "; ".join(details) if details else (lines or [type(err).__name__])[0]


def _causes(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


@contextlib.contextmanager
def azure_errors(workspace: WorkspaceRef, *, doing: str) -> Iterator[None]:
    """Azure's refusals while ``doing`` something, as one :class:`UserError` line (exit 2): sign-in, the network,
    the storage firewall, a missing job or workspace, anything else Azure answered."""
    from azure.ai.ml.exceptions import MlException
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

    try:
        yield
    except (MlException, ClientAuthenticationError, HttpResponseError, ServiceRequestError) as err:
        for cause in _causes(err):
            if isinstance(cause, HttpResponseError) and getattr(cause, "error_code", None) in STORAGE_FIREWALL_CODES:
                request = getattr(cause.response, "request", None)
                account = urlsplit(str(getattr(request, "url", ""))).netloc.split(".")[0] or "of the workspace"
                raise UserError(f"{doing}: {firewall_refusal(account, command='amlgpu submit')}",
                                file=workspace.source) from None
        if isinstance(err, ClientAuthenticationError):
            raise UserError(f"cannot sign in to Azure (az login, a managed identity, or AZURE_* variables of a "
                            f"service principal): {_first_line(err)}") from None
        if isinstance(err, ServiceRequestError):
            raise UserError(f"cannot reach Azure while {doing}: {_first_line(err)}") from None
        if isinstance(err, MlException):  # azure-ai-ml's own checks of the job
            raise UserError(f"azure-ai-ml refused {doing}: {_first_line(err)}", file=workspace.source) from None
        raise UserError(f"Azure refused {doing}: {_first_line(err)}", file=workspace.source) from None


class _Tee(io.TextIOBase):
    """What azure-ai-ml streams to ``sys.stdout``, passed on to ``out`` and shown to a :class:`Diagnosis`."""

    def __init__(self, out: TextIO, diagnosis: Diagnosis, label: str) -> None:
        self.out, self.diagnosis, self.label = out, diagnosis, label
        self._partial = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            self.diagnosis.see(self.label, line)
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.diagnosis.see(self.label, self._partial)
            self._partial = ""
        self.out.flush()


def _status(job: Any) -> str:
    """A job's status as Azure ML spells it (azure-ai-ml hands back an enum: ``JobStatus.COMPLETED``)."""
    status = job.status
    return str(getattr(status, "value", status))


def follow(client: MLClient, name: str, *, workspace: WorkspaceRef, out: TextIO | None = None,
           facts: frozenset[str] = frozenset()) -> int:
    """Stream the job's logs until it ends (azure-ai-ml's ``jobs.stream``), then its status and what a known
    signature in what was streamed says; 0 when it completed, 1 otherwise."""
    from azure.ai.ml.exceptions import JobException

    out = out or sys.stdout
    diagnosis = Diagnosis(facts)
    tee = _Tee(out, diagnosis, "log")
    with azure_errors(workspace, doing=f"following job {name}"):
        try:
            with contextlib.redirect_stdout(tee):
                client.jobs.stream(name)
        except JobException as err:  # raised when the job failed: its message is the job's error
            print(err.message, file=out)
            diagnosis.see("error", err.message)
        finally:
            tee.flush()
        status = _status(client.jobs.get(name))
    print(f"{name}: {status}", file=out)
    for note in diagnosis.notes(succeeded=status == COMPLETED):
        print(f"note: {note}", file=out)
    return EXIT_OK if status == COMPLETED else EXIT_JOB_FAILED


def show(client: MLClient, name: str, *, workspace: WorkspaceRef, out: TextIO | None = None) -> int:
    """The job's status, where it runs and its studio link (``az ml job show``); exit 0."""
    out = out or sys.stdout
    with azure_errors(workspace, doing=f"showing job {name}"):
        job = client.jobs.get(name)
    created = getattr(getattr(job, "creation_context", None), "created_at", None)
    rows = [("name", job.name), ("status", _status(job)), ("display name", job.display_name),
            ("experiment", job.experiment_name), ("compute", job.compute),
            ("created", created.isoformat() if created is not None else None), ("studio", job.studio_url)]
    for label, value in rows:
        if value:
            print(f"{label + ':':<14}{value}", file=out)
    return EXIT_OK


def cancel(client: MLClient, name: str, *, workspace: WorkspaceRef, out: TextIO | None = None) -> int:
    """Ask Azure ML to cancel the job (``az ml job cancel``) and print the status it then reports; exit 0.

    The cancel is a long-running operation; this does not wait for the job to reach ``Canceled`` (``amlgpu
    job stream NAME`` follows it there)."""
    out = out or sys.stdout
    with azure_errors(workspace, doing=f"canceling job {name}"):
        client.jobs.begin_cancel(name, polling=False)
        status = _status(client.jobs.get(name))
    print(f"cancel requested for {name}: {status}", file=out)
    return EXIT_OK
