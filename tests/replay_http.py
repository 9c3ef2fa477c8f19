"""Recorded HTTP answers served under azure-core's real ``RequestsTransport``: only the socket is replaced.

A :class:`Replay` is a ``requests`` transport adapter. Mounted on the session azure-core uses (:func:`transport`),
or on every ``requests`` session the process opens (:meth:`Replay.install`: for clients that build their own
transport, such as the azure-storage-blob client azure-ai-ml opens for a code upload), every pipeline policy
(bearer token, retries, headers, long-running-operation polling) runs as it does against Azure. A request no
route answers fails the test: the set of routes is the exact set of calls the code may make.

Routes are keyed ``"METHOD URL"`` (the URL without its query). A key ending in ``*`` answers every URL that
starts with it (a blob upload's many files). A route answers with one :class:`Answer` (or ``(status, body)``),
or with a list of them, given in order, the last one repeated (a job polled until it ends).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import urllib3
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.pipeline.transport import RequestsTransport

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = FIXTURES / "arm-preflight"
BLOB_REST = FIXTURES / "blob-rest" / "responses.json"

Body = str | dict[str, Any] | list[Any] | bytes | Callable[[requests.PreparedRequest], Any] | None
"""A fixture file's name (under the replay's folder), JSON data, raw bytes, nothing, or a function of the request
giving JSON data (a service that echoes what it was sent: the id of a resource created under a name the client
chose)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: Body = None
    headers: Mapping[str, str] = field(default_factory=dict)
    echo_md5: bool = False
    """Answer ``Content-MD5`` with the MD5 of the request's body, as Blob Storage does for Put Blob (a client
    that validates content compares it with what it sent)."""


Route = Answer | tuple[int, Body] | Sequence[Answer | tuple[int, Body]]


def blob_answer(key: str, **headers: str) -> Answer:
    """A recorded Blob REST response (``tests/fixtures/blob-rest/responses.json``), headers as recorded plus
    ``headers``; the recorded ``x-ms-meta-*`` entries are dropped. Put Blob echoes the MD5 of what it received."""
    recorded = json.loads(BLOB_REST.read_text())[key]
    kept = {k: v for k, v in recorded["headers"].items() if not k.lower().startswith("x-ms-meta-")}
    return Answer(recorded["status"], recorded["body"].encode(), {**kept, **headers}, echo_md5=key == "put_blob_201")


NO_HOST = 0
"""A route's status for "nothing answers at this address" (a connection error, as for the instance metadata
service on a machine that is no Azure VM)."""


class Replay(requests.adapters.BaseAdapter):
    """Answers requests from ``routes``; keeps every request it was sent (thread-safe: uploads run in threads).
    A route answering status :data:`NO_HOST` makes the connection fail.

    A route's URL may carry a query (``...?comp=metadata``): it then answers only requests whose query holds
    those parameters, ahead of a route without one."""

    def __init__(self, routes: Mapping[str, Route], *, folder: Path = RECORDED) -> None:
        super().__init__()
        self.folder = folder
        self.routes: list[tuple[str, str, dict[str, list[str]], list[Answer]]] = []
        for key, route in routes.items():
            method, _, url = key.partition(" ")
            path, _, query = url.partition("?")
            answers = [route] if isinstance(route, (Answer, tuple)) else list(route)
            self.routes.append((method.upper(), path.lower(), parse_qs(query),
                                [a if isinstance(a, Answer) else Answer(*a) for a in answers]))  # type: ignore[misc]
        self.calls: list[requests.PreparedRequest] = []
        self._lock = threading.Lock()

    def _answer(self, request: requests.PreparedRequest) -> Answer:
        parts = urlsplit(str(request.url))
        path = f"{parts.scheme}://{parts.netloc}{parts.path}".lower()
        query = parse_qs(parts.query)

        def specificity(route: tuple[str, str, dict[str, list[str]], list[Answer]]) -> tuple[int, int, int] | None:
            method, url, wanted, _ = route
            if method != request.method or any(query.get(k) != v for k, v in wanted.items()):
                return None
            if url.endswith("*"):
                return (0, len(url), len(wanted)) if path.startswith(url[:-1]) else None
            return (1, len(url), len(wanted)) if path == url else None

        with self._lock:
            self.calls.append(request)
            ranked = [(rank, route) for route in self.routes if (rank := specificity(route)) is not None]
            if not ranked:
                raise AssertionError(f"unrecorded request: {request.method} {request.url}")
            answers = max(ranked, key=lambda pair: pair[0])[1][3]
            return answers.pop(0) if len(answers) > 1 else answers[0]

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        answer = self._answer(request)
        if answer.status == NO_HOST:
            raise requests.exceptions.ConnectionError(f"no host answers {urlsplit(str(request.url)).netloc}")
        body = answer.body(request) if callable(answer.body) else answer.body
        content_type = "application/json; charset=utf-8"
        if isinstance(body, str):
            payload = (self.folder / body).read_bytes()
        elif isinstance(body, bytes):
            payload, content_type = body, "application/octet-stream"
        elif body is None:
            payload = b""
        else:
            payload = json.dumps(body).encode()
        # The body is given whole: a recorded chunked framing (Transfer-Encoding) is the wire's, not the body's.
        recorded = {k: v for k, v in answer.headers.items() if k.lower() != "transfer-encoding"}
        headers = {"Content-Type": content_type, "Content-Length": str(len(payload)), **recorded}
        if answer.echo_md5:
            sent = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
            headers["Content-MD5"] = base64.b64encode(hashlib.md5(sent).digest()).decode()
        if request.method == "HEAD":  # the headers of a GET, no body
            payload = b""
        raw = urllib3.HTTPResponse(body=io.BytesIO(payload), status=answer.status, preload_content=False,
                                   headers=headers, request_method=request.method)
        return requests.adapters.HTTPAdapter().build_response(request, raw)

    def close(self) -> None:
        pass

    def query(self, call: requests.PreparedRequest) -> dict[str, list[str]]:
        return parse_qs(urlsplit(str(call.url)).query)

    def sent(self, method: str, url: str) -> list[requests.PreparedRequest]:
        """The requests sent with ``method`` to ``url`` (without query; a trailing ``*`` matches a prefix)."""
        def matches(call: requests.PreparedRequest) -> bool:
            parts = urlsplit(str(call.url))
            plain = f"{parts.scheme}://{parts.netloc}{parts.path}".lower()
            target = url.lower()
            wanted = plain.startswith(target[:-1]) if target.endswith("*") else plain == target
            return call.method == method and wanted

        with self._lock:
            return [c for c in self.calls if matches(c)]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Replay:
        """Answer every ``requests`` session of the process, and refuse any socket (see :func:`no_network`)."""
        no_network(monkeypatch)
        monkeypatch.setattr(requests.Session, "get_adapter", lambda session, url: self)
        return self


def arm_id(call: requests.PreparedRequest) -> str:
    """The ARM resource id a request addresses (its path, without host and query)."""
    return urlsplit(str(call.url)).path


def json_body(call: requests.PreparedRequest) -> Any:
    body = call.body
    return json.loads(body.decode() if isinstance(body, bytes) else str(body))


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection or name lookup fails the test: what is not replayed never leaves the process."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network access in a test: {args[:2]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def transport(replay: Replay) -> RequestsTransport:
    session = requests.Session()
    session.mount("https://", replay)
    session.mount("http://", replay)
    return RequestsTransport(session=session, session_owner=False)


TENANT = "72f988bf-0000-4000-8000-00000000a11c"


def _jwt(claims: dict[str, Any]) -> str:
    """A token shaped as Microsoft Entra issues them (a JWT; the signature is not checked by clients)."""
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.{part({'signature': 'recorded'})}"


def bearer_claims(call: requests.PreparedRequest) -> dict[str, Any]:
    """The claims of the bearer token a request carries (a :class:`RecordedToken` one)."""
    scheme, _, token = str(call.headers.get("Authorization", "")).partition(" ")
    assert scheme == "Bearer", call.headers.get("Authorization")
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


class RecordedToken:
    """A credential holding an already-issued token (what DefaultAzureCredential hands azure-core), for
    ``expected_scopes`` when given (any other scope fails the test). The token is a JSON Web Token, unsigned,
    carrying the tenant, the audience and ``claims`` (an access token's ``oid`` names who signed in)."""

    def __init__(self, *expected_scopes: str, claims: Mapping[str, Any] | None = None) -> None:
        self.expected_scopes = expected_scopes
        self.claims = dict(claims or {})
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        if self.expected_scopes:
            assert scopes == self.expected_scopes, scopes
        expires = int(time.time()) + 3600
        return AccessToken(_jwt({"tid": TENANT, "aud": scopes[0].removesuffix("/.default") if scopes else "",
                                 "exp": expires, **self.claims}), expires)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        token = self.get_token(*scopes)
        return AccessTokenInfo(token.token, token.expires_on)
