"""A read-only Azure Resource Manager client: GET a resource or a (paged) list, nothing else.

Built on azure-core's pipeline (bearer-token policy, retries, the ``requests`` transport), so the same
code runs against Azure and, in tests, against recorded responses handed in as a ``transport``. The
credential is any azure-core ``TokenCredential``; nothing here looks one up.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from typing import Any

from azure.core import PipelineClient
from azure.core.credentials import TokenCredential
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.policies import (
    BearerTokenCredentialPolicy,
    HeadersPolicy,
    RetryPolicy,
    UserAgentPolicy,
)
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest import HttpRequest

MANAGEMENT = "https://management.azure.com"
SCOPE = "https://management.azure.com/.default"
MAX_PAGES = 50
"""A list longer than this many pages is cut short rather than followed forever (a ``nextLink`` loop)."""


class ArmError(Exception):
    """A non-2xx answer: the HTTP status and ARM's own error code and message."""

    def __init__(self, status: int, code: str, message: str, url: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.url = url
        super().__init__(f"{status} {code}: {message}")


class ArmReader:
    """GETs against ARM with one credential (read-only by construction: there is no other verb)."""

    def __init__(self, credential: TokenCredential, *, transport: HttpTransport[Any, Any] | None = None,
                 endpoint: str = MANAGEMENT, retries: int = 2) -> None:
        self.endpoint = endpoint
        policies = [
            HeadersPolicy({"Accept": "application/json"}),
            UserAgentPolicy(user_agent="aml-gpu-training-preflight"),
            RetryPolicy(retry_total=retries),
            BearerTokenCredentialPolicy(credential, SCOPE),
        ]
        self._client: PipelineClient[HttpRequest, Any] = PipelineClient(
            endpoint, policies=policies, transport=transport)

    def get(self, path: str, api_version: str, **params: str) -> dict[str, Any]:
        """The JSON body of ``GET {endpoint}{path}?api-version=...``; :class:`ArmError` on a non-2xx status."""
        return self._send(HttpRequest("GET", self.endpoint + path, params={"api-version": api_version, **params}))

    def list(self, path: str, api_version: str, **params: str) -> list[dict[str, Any]]:
        """Every ``value`` item of a list operation, following ``nextLink`` (at most :data:`MAX_PAGES` pages)."""
        return list(self._items(path, api_version, params))

    def _items(self, path: str, api_version: str, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        page = self.get(path, api_version, **params)
        for _ in range(MAX_PAGES):
            yield from page.get("value") or []
            link = page.get("nextLink")
            if not link:
                return
            page = self._send(HttpRequest("GET", link))

    def _send(self, request: HttpRequest) -> dict[str, Any]:
        response = self._client.send_request(request)
        text = response.text()
        if response.status_code >= 400:
            code, message = str(response.status_code), text[:300]
            try:
                error = json.loads(text).get("error") or {}
                code, message = error.get("code") or code, error.get("message") or message
            except (ValueError, AttributeError):
                pass
            raise ArmError(response.status_code, code, message, request.url)
        return json.loads(text) if text else {}


def default_credential() -> TokenCredential:
    """The credential ``pulumi up`` itself uses, read from the environment, for every Azure call of ours (the
    build-context upload inside ``pulumi up``, preflight, submit and ``amlgpu job``).

    A service principal given to the Azure provider as ``ARM_CLIENT_ID``/``ARM_CLIENT_SECRET``/``ARM_TENANT_ID``
    (Terraform's names, which pulumi-azure-native also reads) is used as such; otherwise azure-identity's
    ``DefaultAzureCredential`` (``AZURE_*`` variables, workload or managed identity, ``az login``), quiet:
    azure-identity logs every credential it tried (a dozen lines on stderr, through logging's last-resort
    handler) before it raises, and the caller says why sign-in failed in one line."""
    import logging
    import os

    from azure.identity import ClientSecretCredential, DefaultAzureCredential

    arm = {k: os.environ.get(f"ARM_{k}") for k in ("CLIENT_ID", "CLIENT_SECRET", "TENANT_ID")}
    if all(arm.values()) and not os.environ.get("AZURE_CLIENT_ID"):
        return ClientSecretCredential(arm["TENANT_ID"], arm["CLIENT_ID"], arm["CLIENT_SECRET"])  # type: ignore[arg-type]
    logging.getLogger("azure").addHandler(logging.NullHandler())
    return DefaultAzureCredential()


def public_ip(
    *, transport: HttpTransport[Any, Any] | None = None, url: str = "https://api.ipify.org?format=json"
) -> str:
    """This machine's public address as a web service sees it (what a storage firewall sees)."""
    client: PipelineClient[HttpRequest, Any] = PipelineClient(url, policies=[RetryPolicy(retry_total=1)],
                                                              transport=transport)
    response = client.send_request(HttpRequest("GET", url))
    if response.status_code >= 400:
        raise ArmError(response.status_code, str(response.status_code), response.text()[:200], url)
    return str(json.loads(response.text())["ip"])


IMDS = "http://169.254.169.254/metadata/instance"
IMDS_API = "2021-02-01"
"""Azure's Instance Metadata Service: a link-local endpoint only an Azure VM answers (REST spec
specification/imds/data-plane, ``GET /metadata/instance`` with the ``Metadata: true`` header)."""


def instance_metadata(*, transport: HttpTransport[Any, Any] | None = None) -> dict[str, Any] | None:
    """This machine's instance metadata when it is an Azure VM (its ``compute.location`` among others), else None.

    One attempt with short timeouts and no proxy: a machine outside Azure has nothing at that address.
    """
    client: PipelineClient[HttpRequest, Any] = PipelineClient(
        IMDS, policies=[HeadersPolicy({"Metadata": "true"})], transport=transport)
    try:
        response = client.send_request(HttpRequest("GET", IMDS, params={"api-version": IMDS_API}),
                                       connection_timeout=2, read_timeout=2, proxies={"http": None})
    except (ServiceRequestError, ServiceResponseError):
        return None
    if response.status_code >= 400:
        return None
    try:
        found = json.loads(response.text())
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def token_object_id(token: str) -> str | None:
    """The ``oid`` claim of a Microsoft Entra access token (who signed in), read without verifying it: the token
    is the caller's own, only used to ask Azure about the caller's role assignments."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    oid = claims.get("oid") if isinstance(claims, dict) else None
    return oid if isinstance(oid, str) else None
