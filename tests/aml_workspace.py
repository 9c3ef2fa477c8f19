"""A recorded Azure ML workspace: the HTTP answers azure-ai-ml gets when it submits, follows and cancels a job.

Bodies are the Azure REST API specification's examples (``tests/fixtures/aml-jobs-rest/examples``, see the
README there) with this workspace's ids, names and statuses; blob answers are recorded Blob REST responses
(``tests/fixtures/blob-rest``). Served by :class:`tests.replay_http.Replay` under azure-core's real
transport, so every request azure-ai-ml makes, and only those, is answered.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import requests

from tests.replay_http import Answer, Route, arm_id, blob_answer, json_body

FIXTURES = Path(__file__).parent / "fixtures" / "aml-jobs-rest"
EXAMPLES = FIXTURES / "examples"
SPEC = FIXTURES / "mfe-2025-12-01-command-job.json"

SUBSCRIPTION = "5e1f0c9a-1111-4222-8333-944455556666"
GROUP = "rg-aml-gpu-dev"
WORKSPACE = "mlw-gpu-dev"
REGION = "westeurope"
ACCOUNT = "stmlwgpudevfe21d2"
WORKSPACE_ID = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.MachineLearningServices/" \
               f"workspaces/{WORKSPACE}"
ARM = f"https://management.azure.com{WORKSPACE_ID}"
API = f"https://{REGION}.api.azureml.ms"
DISCOVERY = f"{API}/discovery"
UPLOAD = f"https://{ACCOUNT}.blob.core.windows.net/0a7c9e2e-4b1d-4c39-9f0b-5f7e3c1d2a6b"
"""The container a code upload's pending-upload SAS grants (startPendingUpload's ``blobReferenceForConsumption``)."""
LOGS = f"https://{ACCOUNT}.blob.core.windows.net/azureml/ExperimentRun"


def example(path: str, status: str = "200") -> Any:
    """A response body of a specification example (a fresh copy)."""
    return copy.deepcopy(json.loads((EXAMPLES / path).read_text())["responses"][status]["body"])


def studio_url(job: str) -> str:
    return f"https://ml.azure.com/runs/{job}?wsid={WORKSPACE_ID}"


def job_resource(job: str, status: str, properties: dict[str, Any] | None = None) -> dict[str, Any]:
    """A command job as ``GET jobs/{id}`` answers (example ``Job/CommandJob/get.json``): ``properties`` as the
    job was created (the request's), else the example's, with ``status`` and the studio service Azure ML adds."""
    body = example("Job/CommandJob/get.json")
    body |= {"id": f"{WORKSPACE_ID}/jobs/{job}", "name": job,
             "type": "Microsoft.MachineLearningServices/workspaces/jobs"}
    props = body["properties"] if properties is None else copy.deepcopy(properties)
    if properties is None:
        props |= {"computeId": f"{WORKSPACE_ID}/computes/gpu-a100", "displayName": job, "experimentName": "ddp",
                  "environmentId": f"{WORKSPACE_ID}/environments/acpt-pytorch/versions/1", "command": "python train.py",
                  "codeId": None, "identity": None, "inputs": {}, "outputs": {},
                  "distribution": {"distributionType": "PyTorch", "processCountPerInstance": 8},
                  "resources": {"instanceCount": 2, "properties": {}}}
    props["status"] = status
    props["services"] = {"Studio": {"jobServiceType": "Studio", "endpoint": studio_url(job), "status": None}}
    body["properties"] = props
    return body


def created(call: requests.PreparedRequest) -> dict[str, Any]:
    """``PUT jobs/{id}``'s answer (example ``Job/CommandJob/createOrUpdate.json``, 201): the job as sent, not
    started yet."""
    job = arm_id(call).rsplit("/", 1)[-1]
    body = example("Job/CommandJob/createOrUpdate.json", "201")
    return {**job_resource(job, "NotStarted", json_body(call)["properties"]), "systemData": body["systemData"]}


def run_details(job: str, status: str, *, logs: bool = True, error: str | None = None) -> dict[str, Any]:
    """Run history's ``runs/{id}/details`` (the RunHistory service's RunDetails): the status, the log files'
    read links and, for a failed job, its error."""
    body: dict[str, Any] = {"runId": job, "status": status, "target": "gpu-a100", "warnings": [],
                            "logFiles": {"user_logs/std_log.txt": f"{LOGS}/dcid.{job}/user_logs/std_log.txt?sv=x&sig=y"}
                            if logs else {}}
    if error is not None:
        body["error"] = {"error": {"code": "UserError", "message": error}}
    return body


def workspace_routes() -> dict[str, Route]:
    """What reading the workspace takes: its ARM resource (for the discovery URL) and the discovery document."""
    workspace = example("Workspace/get.json")
    workspace |= {"id": WORKSPACE_ID, "name": WORKSPACE, "location": REGION}
    workspace["properties"] |= {"discoveryUrl": DISCOVERY}
    urls = {key: API for key in ("api", "catalog", "experimentation", "gallery", "history", "hyperdrive",
                                 "labeling", "modelmanagement", "pipelines")}
    return {f"GET {ARM}": (200, workspace), f"GET {DISCOVERY}": (200, urls | {"studio": "https://ml.azure.com"})}


def code_upload_routes(*, blob: Answer | None = None) -> dict[str, Route]:
    """A code snapshot not in the workspace yet: no version holds its hash, a pending upload's SAS, the blobs
    (``blob``: the storage's answer to each, by default none there yet then written), the code version."""
    pending = example("Workspace/CodeVersion/createOrGetStartPendingUpload.json")
    pending["blobReferenceForConsumption"] |= {"blobUri": UPLOAD,
                                               "storageAccountArmId": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/"
                                               f"{GROUP}/providers/Microsoft.Storage/storageAccounts/{ACCOUNT}"}
    pending["blobReferenceForConsumption"]["credential"]["sasUri"] = f"{UPLOAD}?sv=2022-11-02&sr=c&sig=recorded"
    pending |= {"pendingUploadId": "3d0d5f3c-5a51-4c57-a3c4-3b1d7e2c6f10",
                "pendingUploadType": "TemporaryBlobReference"}

    def version(call: requests.PreparedRequest) -> dict[str, Any]:
        body = example("Workspace/CodeVersion/createOrUpdate.json", "201")
        path = arm_id(call)
        body |= {"id": path, "name": path.rsplit("/", 1)[-1],
                 "type": "Microsoft.MachineLearningServices/workspaces/codes/versions"}
        body["properties"] = json_body(call)["properties"]
        return body

    empty = example("Workspace/CodeVersion/list.json") | {"value": [], "nextLink": None}
    return {
        f"GET {ARM}/codes/*": (200, empty),
        f"POST {ARM}/codes/*": (200, pending),
        f"HEAD {UPLOAD}/*": blob or blob_answer("head_blob_404"),
        f"PUT {UPLOAD}/*": blob or blob_answer("put_blob_201"),
        f"PUT {UPLOAD}/*?comp=metadata": blob or blob_answer("set_metadata_200"),
        f"PUT {ARM}/codes/*": Answer(201, version),
    }


def job_of(call: requests.PreparedRequest) -> str:
    """The job a request is about: the path segment after ``jobs/`` or ``runs/`` (or ``dcid.``)."""
    parts = arm_id(call).split("/")
    for marker in ("jobs", "runs"):
        if marker in parts:
            return parts[parts.index(marker) + 1]
    return next(p.removeprefix("dcid.") for p in parts if p.startswith("dcid."))


def following_routes(statuses: Sequence[str], *, log: str = "", error: str | None = None) -> dict[str, Route]:
    """Any job followed to its end: run history reports ``statuses`` in turn, the log file holds ``log``, the
    job's ARM resource reports the last status."""
    final = statuses[-1]

    def details(status: str) -> Answer:
        return Answer(200, lambda call: run_details(job_of(call), status, error=error if status == "Failed" else None))

    return {
        **workspace_routes(),
        f"GET {API}/history/v1.0{WORKSPACE_ID}/runs/*": [details(status) for status in statuses],
        f"GET {LOGS}/*": Answer(200, log.encode(), {"Content-Type": "text/plain"}),
        f"GET {ARM}/jobs/*": Answer(200, lambda call: job_resource(job_of(call), final)),
    }
