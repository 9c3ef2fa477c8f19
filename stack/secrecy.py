"""The secret wording: why no value of the stack model may be encrypted, and what a message may quote back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kernel import regex as linear
from kernel import secrets
from stack.keys import KeyPath
from stack.stackfile import SECRET_PLACEHOLDER

RUN_SECRET_MESSAGE = (
    "an encrypted (secure:) value cannot go into a run: Azure ML keeps a job's command, inputs and "
    "environment variables in its definition, readable by everyone with access to the workspace, and the "
    "plan, the job files and `amlgpu submit` cannot carry a value they cannot decrypt. Keep the secret in "
    "the workspace key vault and read it at run time with the job's identity"
)
"""Why a run may hold no secret (the policy pack's run-secrets-in-environment-variables has the same reason)."""
RUN_SECRET_REASON = RUN_SECRET_MESSAGE.removeprefix("an encrypted (secure:) value cannot go into a run: ")

NOT_A_SECRET = {
    "workspace": "workspace settings end up as resource properties and tags, readable by anyone with Reader "
    "access to the resource group (tags also in cost exports), so a secret there is not secret",
    "clusters": "cluster settings and tags are readable by anyone with Reader access to the workspace, "
    "so a secret there is not secret",
}
"""Why the rest of the stack model holds no secret either. Names, ids, sizes and counts are not secrets;
credentials belong in the provider's own settings (e.g. azure-native:clientSecret) or in the key vault."""

_ANY_SECTION = ("the stack model holds names, ids, sizes and settings, none of them secret, and the offline "
                "plan cannot decrypt a value to check it")

ENCRYPTED_VALUE = ("the value is encrypted (secure:) and the offline plan cannot decrypt it to check it; "
                   "it is not a secret: set it in plain text")
"""An encrypted value met while validating (a key pydantic reads, inside a section not itself marked secret)."""
ENCRYPTED_REGION = ("the region is encrypted (secure:) and cannot be read offline; a region is "
                    "not a secret: set it in plain text")


def secret_problems(values: Mapping[str, Any], secret: frozenset[str]) -> list[tuple[KeyPath, str]]:
    """One problem per namespace key set with ``--secret`` (at its first encrypted value), saying why not."""
    found: list[tuple[KeyPath, str]] = []
    for key in sorted(secret & set(values)):
        where = secret_path(values.get(key), (key,)) or (key,)
        reason = RUN_SECRET_REASON if key == "jobs" else NOT_A_SECRET.get(key, _ANY_SECTION)
        found.append((where, f"an encrypted (secure:) value is not accepted here: {reason}; set it in "
                             "plain text or keep the secret out of the stack"))
    return found


def secret_path(value: Any, path: KeyPath) -> KeyPath | None:
    """The path of the first encrypted value inside ``value`` (``jobs, 0, environment_variables, X``)."""
    if value == SECRET_PLACEHOLDER:
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        found = secret_path(inner, (*path, key))
        if found:
            return found
    return None


_PRIVATE_KEYS = frozenset({"environment_variables", "inputs", "tags", "properties", "ssh_public_keys", "command"})
"""Keys whose values (at any depth) are never quoted back: they are where people paste tokens."""
_CREDENTIAL_LIKE = linear.compile(
    r"[A-Za-z0-9+=_-]{32,}|-----BEGIN|AccountKey=|(^|[?&])sig=|\b(gh[pousr]_|hf_|sk-|xox[bp]-|AKIA)[A-Za-z0-9]"
)


def shown(value: Any, path: KeyPath) -> str:
    """``value`` as an error message may quote it: containers described, likely secrets withheld."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, str) and (
        any(part in _PRIVATE_KEYS for part in path if isinstance(part, str)) or _CREDENTIAL_LIKE.search(value)
        or secrets.judge(str(path[-1]) if path else "", value)
    ):
        return "a value not shown here: it may be a secret"
    return json.dumps(value, default=str)[:80]
