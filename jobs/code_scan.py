"""Private keys and tokens in a run's code folder, which Azure ML uploads as the run's snapshot.

Azure ML copies the whole ``code`` folder into the workspace's storage, where everyone with access
to the workspace can read it. A public DeepSpeed example ships an SSH private key that way; this
scan finds such files before they leave the machine. It reports relative paths only, never content.

What it looks for: files named like SSH private keys (``id_rsa``...), key stores (``.pfx``,
``.p12``, ``.ppk``, ``.jks``), and in text files PEM/OpenSSH/PGP private-key headers and
well-known token formats (GitHub, AWS access keys and secret-key assignments, Slack, Hugging Face,
GitLab, OpenAI, Azure storage account keys and SAS signatures).

What it skips, to stay fast on big folders: files over :data:`MAX_BYTES`, binary files (a NUL byte
in the first block), and tool folders that are never training code (:data:`SKIPPED_DIRS`). It does
not read ``.amlignore``/``.gitignore``: a key that is ignored is still reported, because removing it
is safer than relying on an ignore rule. Symbolic links that lead outside the folder are never
followed: the folder is untrusted input, and a link to ``/etc`` is not the run's code.
"""

from __future__ import annotations

import re
from pathlib import Path

from infra.paths import files_inside, links_outside

MAX_BYTES = 1 << 20
"""Files larger than this (1 MiB) are not read: keys and tokens live in small files."""

SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "node_modules",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
})

_KEY_FILE_NAMES = frozenset({"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"})
_KEY_STORE_SUFFIXES = frozenset({".pfx", ".p12", ".ppk", ".jks", ".keystore"})

_SECRET = re.compile(
    rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"  # PEM, OpenSSH, encrypted, PGP
    rb"|PuTTY-User-Key-File-\d"
    rb"|\bgh[pousr]_[A-Za-z0-9]{36,}"  # GitHub tokens
    rb"|\bgithub_pat_[A-Za-z0-9_]{22,}"
    rb"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key ids
    rb"|aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}"
    rb"|\bxox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    rb"|\bhf_[A-Za-z0-9]{30,}"  # Hugging Face
    rb"|\bglpat-[A-Za-z0-9_-]{20,}"  # GitLab
    rb"|\bsk-(?:proj-)?[A-Za-z0-9_-]{32,}"  # OpenAI
    rb"|AccountKey=[A-Za-z0-9+/]{86}=="  # Azure storage connection strings
    rb"|[?&]sig=[A-Za-z0-9%+/=]{40,}"  # Azure SAS signatures
)


def _holds_secret(path: Path) -> bool:
    try:
        if path.stat().st_size > MAX_BYTES:
            return False
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES)
    except OSError:
        return False
    if b"\0" in data[:8192]:
        return False
    return _SECRET.search(data) is not None


def scan(folder: Path) -> tuple[str, ...]:
    """Paths, relative to ``folder`` and POSIX-style, of files holding private keys or tokens (sorted).

    Symbolic links that lead outside ``folder`` are not read (:func:`outside_links` names them)."""
    found: list[str] = []
    for path in files_inside(folder, skip_dirs=SKIPPED_DIRS):
        if path.name in _KEY_FILE_NAMES or path.suffix.lower() in _KEY_STORE_SUFFIXES or _holds_secret(path):
            found.append(path.relative_to(folder).as_posix())
    return tuple(sorted(found))


def outside_links(folder: Path) -> tuple[str, ...]:
    """Symbolic links in ``folder`` that lead outside it: neither scanned nor uploaded (relative, sorted)."""
    return links_outside(folder)
