"""Build contexts go up with Microsoft Entra ID: the plan has no key-based storage:Blob, the deployer gets its
data role first, and the upload speaks to recorded Blob REST responses (tests/fixtures/blob-rest)."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpTransport, RequestsTransportResponse
from pulumi.dynamic.dynamic import serialize_provider
from requests.structures import CaseInsensitiveDict

from azurefacts.ids import STORAGE_BLOB_DATA_CONTRIBUTOR
from infra.build_context import (
    PROPAGATION_WAIT_S,
    BuildContextProvider,
    UploadError,
    blob_prefix,
    context_digest,
    context_files,
    upload_context,
)
from planning.engine import ProgramRun, run_program
from stack.stackfile import read
from tests.conftest import ROOT, only, waits

RECORDED = json.loads((ROOT / "tests/fixtures/blob-rest/responses.json").read_text())
UPLOAD = "pulumi-python:dynamic/amlgpu:BuildContextUpload"
ACCOUNT = "stmlwgpudevfe21d2"


class RecordedToken:
    """A TokenCredential holding a token already issued: no identity endpoint is ever called."""

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        assert scopes == ("https://storage.azure.com/.default",)
        return AccessToken("recorded-entra-token", 4102444800)

    def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo(self.get_token(*scopes).token, 4102444800)


class Replay(HttpTransport):
    """Answers each request with the next recorded Blob REST response and keeps the requests."""

    def __init__(self, *answers: tuple[str, str, dict[str, str]]) -> None:
        self.answers = list(answers)
        self.requests: list[Any] = []

    def send(self, request: Any, **_: Any) -> Any:
        method, key, extra = self.answers.pop(0)
        assert request.method == method, f"expected {method}, the client sent {request.method} {request.url}"
        self.requests.append(request)
        recorded = RECORDED[key]
        headers = {k: v for k, v in recorded["headers"].items() if not k.startswith("x-ms-meta-")} | extra
        response = requests.Response()
        response.status_code = recorded["status"]
        response.headers = CaseInsensitiveDict(headers)
        response._content = recorded["body"].encode()
        response.url = request.url
        return RequestsTransportResponse(request, response)

    def open(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Replay:
        return self
    def __exit__(self, *_: Any) -> None: ...


@pytest.fixture
def context(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "ctx"
    (folder / "scripts").mkdir(parents=True)
    (folder / "Dockerfile").write_text("FROM mcr.microsoft.com/azureml/openmpi5.0-cuda12.4-ubuntu22.04\n")
    (folder / "scripts" / "setup.sh").write_text("#!/bin/sh\necho ok\n")
    return folder, context_files(folder)


def _sha(files: dict[str, str], name: str) -> dict[str, str]:
    return {"x-ms-meta-sha256": files[name]}


def _upload(folder: Path, files: dict[str, str], transport: Replay, **kw: Any):
    return upload_context(ACCOUNT, "environment-builds", "tf-gpu/1/abc/", folder, files, RecordedToken(),
                          transport=transport, **kw)


def test_new_context_is_put_with_a_bearer_token_never_a_shared_key(context) -> None:
    folder, files = context
    transport = Replay(("HEAD", "head_blob_404", {}), ("PUT", "put_blob_201", {}),
                       ("HEAD", "head_blob_404", {}), ("PUT", "put_blob_201", {}))
    result = _upload(folder, files, transport)
    assert result.uploaded == ("Dockerfile", "scripts/setup.sh") and result.skipped == ()
    puts = [r for r in transport.requests if r.method == "PUT"]
    assert [r.url.split("?")[0] for r in puts] == [
        f"https://{ACCOUNT}.blob.core.windows.net/environment-builds/tf-gpu/1/abc/Dockerfile",
        f"https://{ACCOUNT}.blob.core.windows.net/environment-builds/tf-gpu/1/abc/scripts/setup.sh",
    ]
    for request, name in zip(puts, ("Dockerfile", "scripts/setup.sh"), strict=True):
        assert request.headers["Authorization"] == "Bearer recorded-entra-token"
        assert request.headers["x-ms-blob-type"] == "BlockBlob"
        assert request.headers["x-ms-meta-sha256"] == files[name]
        assert hashlib.sha256(request.body).hexdigest() == files[name]
    assert all("SharedKey" not in r.headers.get("Authorization", "") for r in transport.requests)


@pytest.mark.parametrize(
    ("stored", "expect_put"),
    [("same", False), ("other", True)],
    ids=["unchanged-blob-is-skipped", "different-blob-is-replaced"],
)
def test_a_blob_already_holding_the_content_is_not_uploaded_again(context, stored: str, expect_put: bool) -> None:
    folder, files = context
    one = {"Dockerfile": files["Dockerfile"]}
    meta = _sha(files, "Dockerfile") if stored == "same" else {"x-ms-meta-sha256": "0" * 64}
    answers = [("HEAD", "head_blob_200_with_metadata", meta)] + ([("PUT", "put_blob_201", {})] if expect_put else [])
    transport = Replay(*answers)
    result = _upload(folder, one, transport)
    assert (result.uploaded, result.skipped) == ((("Dockerfile",), ()) if expect_put else ((), ("Dockerfile",)))
    assert not transport.answers


def test_upload_waits_for_a_fresh_role_assignment_to_propagate(context) -> None:
    folder, files = context
    one = {"Dockerfile": files["Dockerfile"]}
    slept: list[float] = []
    denied = ("HEAD", "forbidden_403_permission_mismatch", {})
    transport = Replay(denied, denied, ("HEAD", "head_blob_404", {}), ("PUT", "put_blob_201", {}))
    result = _upload(folder, one, transport, sleep=slept.append, clock=lambda: 0.0)
    assert result.uploaded == ("Dockerfile",)
    assert slept == [15.0, 15.0]


def test_upload_waits_for_a_fresh_network_path_with_the_same_bounded_wait(context) -> None:
    """A private endpoint or firewall rule created just before the upload: the account's firewall refuses
    (403 AuthorizationFailure) until it takes effect; the upload retries it like a fresh role."""
    folder, files = context
    one = {"Dockerfile": files["Dockerfile"]}
    slept: list[float] = []
    refused = ("HEAD", "forbidden_403_authorization_failure", {})
    transport = Replay(refused, refused, ("HEAD", "head_blob_404", {}), ("PUT", "put_blob_201", {}))
    result = _upload(folder, one, transport, sleep=slept.append, clock=lambda: 0.0)
    assert result.uploaded == ("Dockerfile",)
    assert slept == [15.0, 15.0]


def test_a_firewall_refusal_past_the_wait_fails_with_one_line_naming_the_path(context) -> None:
    folder, files = context
    one = {"Dockerfile": files["Dockerfile"]}
    times = iter([0.0, PROPAGATION_WAIT_S])
    transport = Replay(("HEAD", "forbidden_403_authorization_failure", {}))
    with pytest.raises(UploadError) as err:
        _upload(folder, one, transport, sleep=lambda _: None, clock=lambda: next(times))
    message = str(err.value)
    assert "refused the request at its firewall" in message and "operator_ip_ranges" in message
    assert "\n" not in message


def test_a_missing_data_role_fails_with_one_line_naming_the_role(context) -> None:
    folder, files = context
    one = {"Dockerfile": files["Dockerfile"]}
    times = iter([0.0, 700.0])
    transport = Replay(("HEAD", "forbidden_403_permission_mismatch", {}))
    with pytest.raises(UploadError) as err:
        _upload(folder, one, transport, sleep=lambda _: None, clock=lambda: next(times))
    message = str(err.value)
    assert "Storage Blob Data Contributor" in message and "\n" not in message
    assert message.startswith("uploading tf-gpu/1/abc/Dockerfile:")


class NoCredential:
    """What azure-identity raises when no sign-in is available (CredentialUnavailableError)."""

    def get_token(self, *scopes: str, **_: Any) -> AccessToken:
        from azure.identity import CredentialUnavailableError

        raise CredentialUnavailableError("DefaultAzureCredential failed to retrieve a token from the included "
                                         "credentials.\nAttempted credentials: ...")


def test_no_credential_fails_with_one_line_saying_how_to_sign_in(context) -> None:
    folder, files = context
    with pytest.raises(UploadError) as err:
        upload_context(ACCOUNT, "environment-builds", "p/", folder, files, NoCredential(), transport=Replay())
    message = str(err.value)
    assert "\n" not in message and "az login" in message and "DefaultAzureCredential failed" in message


@pytest.mark.parametrize(
    ("client_id", "declared", "expected"),
    [("04b07795-8ddb-461a-bbee-02f9e1bf7b46", None, "User"), ("1950a258-227b-4e31-a9cf-717495945fc2", None, "User"),
     ("5b1e9bd1-0000-4000-8000-000000000000", None, "ServicePrincipal"),
     ("04b07795-8ddb-461a-bbee-02f9e1bf7b46", "ServicePrincipal", "ServicePrincipal")],
    ids=["azure-cli", "azure-powershell", "service-principal", "declared-wins"],
)
def test_deployer_principal_type(client_id: str, declared: str | None, expected: str) -> None:
    from azurefacts.ids import principal_type

    assert principal_type(client_id, declared) == expected


def test_a_file_changed_after_the_plan_is_not_uploaded(context) -> None:
    folder, files = context
    (folder / "Dockerfile").write_text("FROM something-else\n")
    with pytest.raises(UploadError, match="changed or disappeared"):
        _upload(folder, files, Replay())


def test_digest_is_content_addressed(context) -> None:
    folder, files = context
    assert context_digest(files) == context_digest(dict(reversed(list(files.items()))))
    before = blob_prefix("tf-gpu", "1", files)
    (folder / "scripts" / "setup.sh").write_text("#!/bin/sh\necho changed\n")
    after = blob_prefix("tf-gpu", "1", context_files(folder))
    assert before != after and before.startswith("tf-gpu/1/") and after.startswith("tf-gpu/1/")


@pytest.mark.parametrize(
    ("change", "replaces"),
    [({}, []), ({"files": {"Dockerfile": "1" * 64}}, ["files"]), ({"prefix": "tf-gpu/2/x/"}, ["prefix"])],
    ids=["unchanged", "new-content", "new-prefix"],
)
def test_provider_diff_replaces_only_on_a_new_context(change: dict[str, Any], replaces: list[str]) -> None:
    olds = {"accountName": ACCOUNT, "containerName": "environment-builds", "prefix": "tf-gpu/1/x/",
            "source": "environments/tensorflow", "files": {"Dockerfile": "0" * 64}}
    diff = BuildContextProvider().diff("id", olds, {**olds, **change})
    assert diff.changes is bool(replaces) and list(diff.replaces or []) == replaces


def test_provider_deserializes_in_a_fresh_process_from_the_project_root() -> None:
    """Pulumi runs dynamic providers in their own process, started in the project directory."""
    blob = serialize_provider(BuildContextProvider())
    code = ("import base64, sys, dill; p = dill.loads(base64.b64decode(sys.stdin.read())); "
            "print(type(p).__module__, type(p).__name__)")
    out = subprocess.run([sys.executable, "-c", code], input=blob, cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["infra.build_context", "BuildContextProvider"]
    assert base64.b64decode(blob)  # valid base64, as the engine stores it


@pytest.fixture(scope="module")
def prod_plan() -> ProgramRun:
    return run_program("prod", read(ROOT / "Pulumi.prod.yaml"), ROOT)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_no_key_based_blob_and_every_context_uploads_after_the_deployer_role(
    stack: str, dev_plan: ProgramRun, prod_plan: ProgramRun
) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    assert not plan.by_type("azure-native:storage:Blob")
    role = only(plan, "azure-native:authorization:RoleAssignment", "build-contexts-uploader")
    assert role["inputs"]["roleDefinitionId"].endswith(STORAGE_BLOB_DATA_CONTRIBUTOR)
    assert role["inputs"]["scope"].endswith("/blobServices/default/containers/environment-builds")
    assert role["inputs"]["principalType"] == "ServicePrincipal"  # the mock client is no Azure CLI sign-in
    uploads = plan.by_type(UPLOAD)
    assert uploads and all(("azure-native:authorization:RoleAssignment", "build-contexts-uploader") in waits(u)
                           for u in uploads)
    versions = {v.name: v for v in plan.by_type("azure-native:machinelearningservices:EnvironmentVersion")}
    for upload in uploads:
        version = versions[upload.name.removesuffix("-context")]
        assert (UPLOAD, upload.name) in waits(version)
        uri = version.inputs["properties"]["build"]["contextUri"]
        assert uri.endswith(f"/environment-builds/{upload.inputs['prefix']}")
        assert upload.inputs["files"] == context_files(ROOT / upload.inputs["source"])
        assert "__provider" not in upload.inputs
