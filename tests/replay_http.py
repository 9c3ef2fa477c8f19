"""Recorded HTTP answers served through azure-core's real ``RequestsTransport``: only the socket is replaced.

A :class:`Replay` is a ``requests`` transport adapter mounted on the session azure-core uses, so every
pipeline policy (bearer token, retries, headers) runs as it does against Azure. A request no route answers
fails the test: the set of routes is the exact set of calls the code may make.
"""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
import urllib3
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import RequestsTransport

RECORDED = Path(__file__).parent / "fixtures" / "arm-preflight"


NO_HOST = 0
"""A route's status for "nothing answers at this address" (a connection error, as for the instance metadata
service on a machine that is no Azure VM)."""


class Replay(requests.adapters.BaseAdapter):
    """Answers ``GET <url without query>`` from ``routes``: (status, fixture file name or a body); status
    :data:`NO_HOST` makes the connection fail."""

    def __init__(self, routes: dict[str, tuple[int, str | dict[str, Any]]]) -> None:
        super().__init__()
        self.routes = {key.lower(): value for key, value in routes.items()}
        self.calls: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        self.calls.append(request)
        url = urlsplit(str(request.url))
        key = f"{request.method} {url.scheme}://{url.netloc}{url.path}".lower()
        if key not in self.routes:
            raise AssertionError(f"unrecorded request: {request.method} {request.url}")
        status, body = self.routes[key]
        if status == NO_HOST:
            raise requests.exceptions.ConnectionError(f"no host answers {url.netloc}: {body}")
        payload = (RECORDED / body).read_bytes() if isinstance(body, str) else json.dumps(body).encode()
        raw = urllib3.HTTPResponse(body=io.BytesIO(payload), status=status, preload_content=False,
                                   headers={"Content-Type": "application/json; charset=utf-8",
                                            "Content-Length": str(len(payload))})
        response = requests.adapters.HTTPAdapter().build_response(request, raw)
        return response

    def close(self) -> None:
        pass

    def query(self, call: requests.PreparedRequest) -> dict[str, list[str]]:
        return parse_qs(urlsplit(str(call.url)).query)


def transport(replay: Replay) -> RequestsTransport:
    session = requests.Session()
    session.mount("https://", replay)
    session.mount("http://", replay)
    return RequestsTransport(session=session, session_owner=False)


class RecordedToken:
    """A credential holding an already-issued token (what DefaultAzureCredential hands azure-core); ``claims``
    make it a JSON Web Token carrying them (an access token's ``oid`` names who signed in), unsigned."""

    def __init__(self, claims: dict[str, Any] | None = None) -> None:
        self.token = "recorded-token" if claims is None else ".".join(
            base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")
            for part in ({"typ": "JWT", "alg": "none"}, claims, {}))

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)
