"""Registered components pulled into the project, and checked again before a submission.

:func:`pull` fetches, through azure-ai-ml (``MLClient.components.get``: the workspace's client for
``azureml:<name>:<version>``, a registry's for ``azureml://registries/<registry>/...``), the spec of every
registered component the stack's pipelines name, and writes each as component YAML under
:data:`stack.registered.FOLDER`, with the lock (:data:`stack.registered.LOCK`): where it came from, the asset
id, its version, the hash of the spec as registered and of the file written. The spec is azure-ai-ml's own
serialisation of the component (what ``az ml component show`` prints) without what the service adds
(``id``, ``creation_context``) and without ``code``, an uploaded snapshot the gate cannot read (kept in the
lock and in the file's header).

:func:`verify` is what ``amlgpu submit`` runs before sending a pipeline: each registered component it names
must be in the lock, its file unedited, and the spec registered now must hash as the lock says; otherwise
the submission is refused (the plan judged another spec than the one Azure ML would run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.render import dump
from kernel.errors import UserError
from stack import registered
from stack.components import CommandComponent
from stack.config import StackConfig
from stack.pipelines import PipelineJob, step_component
from stack.registered import Registered

if TYPE_CHECKING:
    from azure.ai.ml import MLClient

ClientFor = Callable[[str | None], "MLClient"]
"""The client for a registry (None: the workspace's)."""
_SERVICE_KEYS = ("id", "creation_context", "code")


def references(config: StackConfig, only: Iterable[str] | None = None) -> list[tuple[str, str, Registered]]:
    """``(pipeline, step, component)`` for every step naming a registered component (of the pipelines in
    ``only``, when given), in file order."""
    wanted = set(only) if only is not None else None
    found = []
    for job in config.composites:
        if not isinstance(job, PipelineJob) or (wanted is not None and job.name not in wanted):
            continue
        for step, declared in job.jobs.items():
            component = step_component(declared)
            if isinstance(component, str) and registered.is_registered(component):
                found.append((job.name, step, registered.parse(component)))
    return found


def registered_spec(component: Any) -> tuple[dict[str, Any], str | None, str]:
    """(the spec the project keeps, its code asset, its asset id) of an azure-ai-ml component entity."""
    data: dict[str, Any] = dict(component._to_dict())
    spec = {key: value for key, value in data.items() if key not in _SERVICE_KEYS}
    code = data.get("code")
    return spec, str(code) if code is not None else None, str(data.get("id") or "")


def _fetch(client_for: ClientFor, ref: Registered) -> Any:
    from jobs.remote import azure_errors
    from jobs.workspace import WorkspaceRef

    client = client_for(ref.registry)
    where = WorkspaceRef("", "", ref.registry or "workspace", registered.LOCK)
    with azure_errors(where, doing=f"reading component {ref.reference}"):
        return client.components.get(name=ref.name, version=ref.version)


def _file_text(ref: Registered, spec: dict[str, Any], code: str | None, asset: str) -> str:
    header = (f"# Pulled by `amlgpu components pull` from the {ref.source}: {ref.reference}\n"
              f"# asset: {asset or 'not returned'}\n"
              f"# code: {code or 'none'} (an uploaded snapshot: not in the project, not read by the gate)\n"
              "# Review it as any component; do not edit it (submit refuses an edited file): pull again.\n")
    return header + dump(spec)


def pull(config: StackConfig, root: Path, client_for: ClientFor) -> list[dict[str, Any]]:
    """Fetch and write every registered component the stack's pipelines name; the lock's entries, written."""
    entries = {entry["reference"]: entry for entry in registered.read_lock(root).values()}
    seen: set[str] = set()
    for pipeline, step, ref in references(config):
        if ref.reference in seen:
            continue
        seen.add(ref.reference)
        spec, code, asset = registered_spec(_fetch(client_for, ref))
        if spec.get("type", "command") != "command":
            raise UserError(f"step '{pipeline}/{step}': {ref.reference} is a {spec.get('type')!r} component; a "
                            "step here runs a command component")
        try:
            CommandComponent.model_validate({k: v for k, v in spec.items() if k != "$schema"})
        except ValueError as err:
            raise UserError(f"step '{pipeline}/{step}': {ref.reference} is not a command component this stack "
                            f"reads: {str(err).splitlines()[0]}") from None
        text = _file_text(ref, spec, code, asset)
        path = root / ref.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        entries[ref.reference] = {
            "reference": ref.reference, "source": ref.source, "asset_id": asset, "name": ref.name,
            "version": ref.version, "file": ref.file, "code": code, "spec_sha256": registered.spec_hash(spec),
            "file_sha256": registered.file_hash(text.encode("utf-8")),
        }
    lock = root / registered.LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(registered.lock_text(list(entries.values())), encoding="utf-8")
    return [entries[reference] for reference in sorted(seen)]


def verify(config: StackConfig, root: Path, job: str, client_for: ClientFor, *, stack: str) -> list[str]:
    """What stands between pipeline ``job`` and a submission, as far as its registered components go: each
    must be pulled, its file as pulled, and registered still as locked. Empty when all match."""
    found = references(config, [job])
    if not found:
        return []
    try:
        lock = registered.read_lock(root)
    except ValueError as err:
        return [str(err)]
    pull_again = f"run `amlgpu components pull --stack {stack}`, review the change and plan again"
    problems = []
    for pipeline, step, ref in found:
        entry = lock.get(ref.reference)
        label = f"step '{pipeline}/{step}': {ref.reference}"
        if entry is None:
            problems.append(f"{label} is not in {registered.LOCK}: {pull_again}")
            continue
        path = root / ref.file
        if not path.is_file() or registered.file_hash(path.read_bytes()) != entry.get("file_sha256"):
            problems.append(f"{label}: {ref.file} is not the file pulled (edited or removed): {pull_again}")
            continue
        spec, _, _ = registered_spec(_fetch(client_for, ref))
        now = registered.spec_hash(spec)
        if now != entry.get("spec_sha256"):
            problems.append(f"{label} registered in the {ref.source} is not what was pulled (lock "
                            f"{entry.get('spec_sha256')}, registered now {now}): the plan judged another spec; "
                            f"{pull_again}")
    return problems


def client_factory(workspace_client: MLClient, **options: Any) -> ClientFor:
    """The workspace's client for workspace components, one client per registry for the others, signed in as
    the workspace's (``options``: what every client is built with, the tests' ``transport``)."""
    registries: dict[str, MLClient] = {}
    credential = workspace_client._credential

    def client_for(registry: str | None) -> MLClient:
        if registry is None:
            return workspace_client
        if registry not in registries:
            from azure.ai.ml import MLClient

            registries[registry] = MLClient(credential, registry_name=registry, **options)
        return registries[registry]

    return client_for
