"""One secret detector, by value: what a string *is*, not what its key is called.

``AZUREML_SSH_KEY: generated-key`` names a file and is no secret; ``--hf-token hf_...`` in a command is
one whatever the flag. A value is a secret when it contains a known credential shape (private-key
blocks, storage account keys and connection strings, SAS signatures, GitHub / Hugging Face / AWS /
OpenAI / Slack / GitLab tokens, JSON web tokens), or when a key that names a credential (``*_TOKEN``,
``--password``...) holds a high-entropy literal: long, no spaces, mixed character classes, no path
or placeholder. The same detector reads environment variables, ``command`` arguments, literal inputs
and tags. Findings name where the value sits and what kind it is, never the value.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

# Name segments (split on non-alphanumerics) that mean "this key holds a credential". Whole segments only,
# so TOKENIZERS_PARALLELISM or KEY_COLUMN are not mistaken for secrets.
_SECRET_WORDS = frozenset({
    "SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL", "CREDENTIALS", "APIKEY", "SAS",
})
_PASSWORD_WORDS = frozenset({"PASSWORD", "PASSWD", "PWD"})
_KEY_QUALIFIERS = frozenset({
    "API", "ACCESS", "ACCOUNT", "PRIVATE", "SECRET", "STORAGE", "SUBSCRIPTION", "AUTH", "SSH", "SIGNING",
    "ENCRYPTION", "MASTER", "SHARED", "HF", "WANDB",
})

_SECRET_VALUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")),
    ("a storage connection string with an account key", re.compile(r"AccountKey=[A-Za-z0-9+/=]{20,}")),
    ("a SAS token", re.compile(r"(^|[?&])sig=[A-Za-z0-9%+/=]{20,}")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("an OpenAI-style API key", re.compile(r"\bsk-(proj-)?[A-Za-z0-9_-]{20,}\b")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
)

# Values that refer to a secret instead of containing it.
_REFERENCE = re.compile(
    r"^(\$\{\{.*\}\}|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|azureml://.*|@Microsoft\.KeyVault\(.*\)|\[secret\])$"
)
_MIN_SECRET_LENGTH = 16
_MIN_ENTROPY_BITS = 3.5
"""Per character: random base64/hex material of 16+ characters is above 3.5 bits (hex alone reaches ~4),
words, file names and paths are below or are excluded by shape."""


def credential_name(name: str) -> bool:
    """``name`` (a variable, tag key or command flag) says its value is a credential."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name.upper()) if p]
    if any(p in _SECRET_WORDS for p in parts):
        return True
    if any(p == "KEY" and i > 0 and parts[i - 1] in _KEY_QUALIFIERS for i, p in enumerate(parts)):
        return True
    return "CONNECTION" in parts and "STRING" in parts


def credential_kind(value: str) -> str | None:
    """What known kind of credential ``value`` contains, or None."""
    for kind, pattern in _SECRET_VALUES:
        if pattern.search(value):
            return kind
    return None


def _entropy(value: str) -> float:
    counts = {c: value.count(c) for c in set(value)}
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def high_entropy(value: str) -> bool:
    """A literal that looks like generated key material: long, no spaces, not a path, a URL or a
    placeholder, letters and digits mixed, and high Shannon entropy."""
    value = value.strip()
    if len(value) < _MIN_SECRET_LENGTH or any(c.isspace() for c in value) or _REFERENCE.match(value):
        return False
    if "/" in value.strip("=") and not re.fullmatch(r"[A-Za-z0-9+/]+=*", value):  # a path or URL
        return False
    if "${{" in value or value.startswith(("azureml:", "http://", "https://")):
        return False
    if not (re.search(r"[0-9]", value) and re.search(r"[A-Za-z]", value)):
        return False
    return _entropy(value) >= _MIN_ENTROPY_BITS


def judge(key: str, value: Any) -> str | None:
    """Why the value at ``key`` is a secret (``holds a Hugging Face token``), or None."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or _REFERENCE.match(text):
        return None
    kind = credential_kind(text)
    if kind is not None:
        return f"holds {kind}"
    if credential_name(key) and high_entropy(text):
        return "a credential name with a high-entropy literal value"
    if _password_name(key) and re.fullmatch(r"[^\s/.\\-]{6,}", text):
        # A password is chosen by a person, so its entropy says little; a file or path has a separator.
        return "a password name with a literal value"
    return None


def _password_name(name: str) -> bool:
    return any(p in _PASSWORD_WORDS for p in re.split(r"[^A-Za-z0-9]+", name.upper()))


def secret_variables(variables: Mapping[str, str]) -> list[str]:
    """Each variable that carries a literal secret, as ``NAME (reason)``, sorted by name."""
    return [f"{name} ({why})" for name in sorted(variables) if (why := judge(name, variables[name]))]


def _command_pairs(command: str) -> Iterator[tuple[str, str]]:
    """(key, value) for every word of a command: ``--flag value``, ``--flag=value``, ``NAME=value``
    assignments; a bare word's key is empty (only known shapes count for it)."""
    try:
        words = shlex.split(command.replace("\\\n", " "), posix=True)
    except ValueError:
        words = command.split()
    previous = ""
    for word in words:
        if word.startswith("-") and "=" in word:
            flag, _, value = word.partition("=")
            yield flag, value
            previous = ""
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
            name, _, value = word.partition("=")
            yield name, value
            previous = ""
        elif word.startswith("-"):
            previous = word
        else:
            yield previous, word
            previous = ""


def secrets_in_definition(spec: Mapping[str, Any]) -> list[str]:
    """Secrets in a job's ``command`` arguments, literal ``inputs``, ``tags`` and ``properties``, as
    ``where (reason)``."""
    found: list[str] = []
    for key, value in _command_pairs(str(spec.get("command", ""))):
        why = judge(key, value)
        if why:
            found.append(f"command argument{f' {key}' if key else ''} ({why})")
    for name, value in sorted((spec.get("inputs") or {}).items()):
        why = judge(name, value if isinstance(value, str) else (value or {}).get("path") if isinstance(value, dict)
                    else None)
        if why:
            found.append(f"input {name} ({why})")
    for name, value in sorted((spec.get("tags") or {}).items()):
        why = judge(name, value)
        if why:
            found.append(f"tag {name} ({why})")
    for name, value in sorted((spec.get("properties") or {}).items()):  # as readable as tags
        why = judge(name, value)
        if why:
            found.append(f"property {name} ({why})")
    return list(dict.fromkeys(found))
