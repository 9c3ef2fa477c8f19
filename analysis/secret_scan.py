"""Secrets in the folders that leave the machine: a run's code folder and an environment's build context.

Azure ML copies a run's ``code`` folder into the workspace's storage as the run's snapshot, and an
environment's build context into the storage the image is built from; everyone with access to the
workspace can read both (a public DeepSpeed example ships an SSH private key that way). This scan finds
credentials before they leave. It reports relative paths only, never content.

What it looks for, in every file, whatever the folder (``.git/``, ``venv/``, ``node_modules/`` included:
they are uploaded too unless an ignore file says otherwise, and the scan does not rely on one):

* files named like SSH private keys (``id_rsa``...) and key stores (``.pfx``, ``.p12``, ``.ppk``, ``.jks``);
* every known credential shape of :mod:`kernel.secrets` in the bytes, in any encoding that keeps ASCII
  readable (UTF-8, Latin-1) and in UTF-16/UTF-32 (read again with the NUL bytes left out), binary files
  included (a pickled config holds its strings as they are);
* in ``.env`` files, ``NAME=value`` lines, and in Dockerfiles the ``ENV`` and ``ARG`` values and ``RUN``
  commands (BuildKit's own parser, the ``dockerfile`` package), judged as the stack's own variables are:
  a credential name with a high-entropy literal is a secret.

**Bounded.** A file is read in chunks of :data:`CHUNK_BYTES`, each with the last :data:`OVERLAP_BYTES` of
the one before it, so a secret across a chunk boundary is still found whole and a file of any size takes
memory of one chunk. A folder is read up to :data:`BUDGET_BYTES` in all (in path order, so the same
folder gives the same answer on every machine); what is past the budget is named in
:attr:`FolderScan.unscanned`, which the gate reports as an advisory finding ("not fully scanned"),
never skipped silently. Symbolic links that lead outside the folder are never followed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernel.paths import files_inside
from kernel.secrets import command_secrets, judge, kind_in_bytes

CHUNK_BYTES = 1 << 20
OVERLAP_BYTES = 1 << 12
"""Longer than any credential the shapes match but a private key's body (whose header is what is found)."""
BUDGET_BYTES = 256 << 20
"""Bytes read from one folder at most (256 MiB: at the scan's speed, seconds; docs/performance.md)."""
PARSED_BYTES = 1 << 20
""".env files and Dockerfiles larger than this are scanned for known shapes only (no real one is that big)."""

KEY_FILE_NAMES = frozenset({"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"})
KEY_STORE_SUFFIXES = frozenset({".pfx", ".p12", ".ppk", ".jks", ".keystore"})


@dataclass(frozen=True)
class FolderScan:
    """What a folder holds that must not be uploaded, and what the scan could not read in full."""

    findings: tuple[str, ...] = ()
    """Relative POSIX paths of files holding a credential (sorted; never their content)."""
    unscanned: tuple[str, ...] = ()
    """Relative POSIX paths of files not read to the end (past :data:`BUDGET_BYTES`), sorted."""


def _is_dotenv(name: str) -> bool:
    return name == ".env" or name.endswith(".env") or name.startswith(".env.")


def _is_dockerfile(name: str, dockerfiles: frozenset[str]) -> bool:
    lower = name.lower()
    return (name in dockerfiles or lower in ("dockerfile", "containerfile") or lower.startswith("dockerfile.")
            or lower.endswith(".dockerfile"))


def _decode(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _dotenv_secret(text: str) -> bool:
    for line in text.splitlines():
        line = line.strip().removeprefix("export ").strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if judge(name.strip(), value):
            return True
    return False


def _dockerfile_secret(text: str) -> bool:
    import dockerfile

    try:
        instructions = dockerfile.parse_string(text)
    except dockerfile.GoParseError:
        return False  # not a Dockerfile BuildKit can read: the shapes were still looked for
    for instruction in instructions:
        if instruction.cmd == "ENV":
            values = instruction.value
            if any(judge(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)):
                return True
        elif instruction.cmd == "ARG":
            if any(judge(name, default) for name, _, default in (v.partition("=") for v in instruction.value)):
                return True
        elif instruction.cmd == "RUN" and not instruction.json and command_secrets(" ".join(instruction.value)):
            return True
    return False


def _read_secret(path: Path, allowance: int, keep: int = 0) -> tuple[bool, int, bool, bytes | None]:
    """(holds a known credential shape, bytes read, read to the end, the bytes read) for one file, reading at
    most ``allowance`` bytes. The bytes read come back only when they are at most ``keep``, else None."""
    read = 0
    carry = b""
    kept: list[bytes] | None = [] if keep else None
    with path.open("rb") as handle:
        while read < allowance:
            chunk = handle.read(min(CHUNK_BYTES, allowance - read))
            if not chunk:
                return False, read, True, None if kept is None else b"".join(kept)
            read += len(chunk)
            if kept is not None and read <= keep:
                kept.append(chunk)
            else:
                kept = None
            data = carry + chunk
            if kind_in_bytes(data) or (b"\0" in data and kind_in_bytes(data.replace(b"\0", b""))):
                return True, read, True, None
            carry = data[-OVERLAP_BYTES:]
        return False, read, not handle.read(1), None if kept is None else b"".join(kept)


def scan_folder(folder: Path, *, dockerfiles: frozenset[str] = frozenset(), budget: int = BUDGET_BYTES) -> FolderScan:
    """Scan every file under ``folder`` (see the module docstring). ``dockerfiles``: more file names to read
    as Dockerfiles (an environment's ``dockerfile_path``)."""
    findings: list[str] = []
    unscanned: list[str] = []
    left = budget
    for path in files_inside(folder):
        relative = path.relative_to(folder).as_posix()
        if path.name in KEY_FILE_NAMES or path.suffix.lower() in KEY_STORE_SUFFIXES:
            findings.append(relative)
            continue
        if _is_dotenv(path.name):
            parse: Callable[[str], bool] | None = _dotenv_secret
        elif _is_dockerfile(path.name, dockerfiles) or relative in dockerfiles:
            parse = _dockerfile_secret
        else:
            parse = None
        try:
            # A .env file or Dockerfile of at most PARSED_BYTES is parsed from the bytes the shape scan read.
            found, read, complete, content = _read_secret(path, left, PARSED_BYTES if parse else 0)
            left -= read
            if not found and complete and parse is not None and content is not None:
                found = parse(_decode(content))
        except OSError:
            unscanned.append(relative)  # unreadable here: Azure ML's upload would be the first to read it
            continue
        if found:
            findings.append(relative)
        elif not complete:
            unscanned.append(relative)
    return FolderScan(tuple(sorted(findings)), tuple(sorted(unscanned)))
