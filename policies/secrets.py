"""Recognising secrets in plain configuration: variable names that hold credentials, and values that
look like credentials whatever their name. Findings report names only, never values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Name segments (split on '_') that mean "this holds a credential". Whole segments only, so
# TOKENIZERS_PARALLELISM or KEY_COLUMN are not mistaken for secrets.
_SECRET_WORDS = frozenset({
    "SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL", "CREDENTIALS", "APIKEY", "SAS",
})
_KEY_QUALIFIERS = frozenset({
    "API", "ACCESS", "ACCOUNT", "PRIVATE", "SECRET", "STORAGE", "SUBSCRIPTION", "AUTH", "SSH", "SIGNING",
    "ENCRYPTION", "MASTER", "SHARED",
})

_SECRET_VALUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a storage connection string with an account key", re.compile(r"AccountKey=[A-Za-z0-9+/=]{20,}")),
    ("a SAS token", re.compile(r"(^|[?&])sig=[A-Za-z0-9%+/=]{20,}")),
    ("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    ("an AWS access key id", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}")),
)

# Values that refer to a secret instead of containing it.
_REFERENCE = re.compile(r"^(\$\{\{.*\}\}|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|azureml://.*|@Microsoft\.KeyVault\(.*\)|\[secret\])$")


def _secret_name(name: str) -> bool:
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name.upper()) if p]
    if any(p in _SECRET_WORDS for p in parts):
        return True
    if any(p == "KEY" and i > 0 and parts[i - 1] in _KEY_QUALIFIERS for i, p in enumerate(parts)):
        return True
    return "CONNECTION" in parts and "STRING" in parts


def credential_kind(value: str) -> str | None:
    """What kind of credential ``value`` contains, or None."""
    for kind, pattern in _SECRET_VALUES:
        if pattern.search(value):
            return kind
    return None


def secret_variables(variables: Mapping[str, str]) -> list[str]:
    """Why each variable that carries a literal secret does, as ``NAME (reason)``, sorted by name."""
    found = []
    for name in sorted(variables):
        value = str(variables[name]).strip()
        if not value or _REFERENCE.match(value):
            continue
        kind = credential_kind(value)
        if kind is not None:
            found.append(f"{name} (holds {kind})")
        elif _secret_name(name):
            found.append(f"{name} (a credential name with a literal value)")
    return found
