"""What an environment is known to contain, known to lack, and cannot be seen: a tri-state, from evidence.

The evidence table is data (``environment-capabilities.yaml`` beside this module, with its sources):
an image or curated/registry reference matching a row has that row's ``present`` capabilities and is
known to lack its ``absent`` ones; everything else is *unknown*. A Docker build context adds what its
``RUN pip/conda/apt-get install`` lines and conda file install, on top of its ``FROM`` image's row;
an install the reader cannot follow (``pip install -r`` of a file outside the context, a git URL, a
script) makes every absence unknown, because anything may have been installed.

Declared ``provides`` add to what is inferred and never hide it (see :class:`stack.infrastructure.Environment`).
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from pathlib import Path

from kernel import bounded
from kernel import regex as linear

TABLE = Path(__file__).with_name("environment-capabilities.yaml")


@dataclass(frozen=True)
class Capabilities:
    """Known present, known absent; a capability in neither is unknown."""

    present: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()

    def state(self, capability: str) -> str:
        """``present``, ``absent`` or ``unknown``."""
        if capability in self.present:
            return "present"
        return "absent" if capability in self.absent else "unknown"

    def plus(self, present: frozenset[str] | set[str], *, opaque: bool = False) -> Capabilities:
        """These capabilities with ``present`` added (removed from absent); ``opaque``: absences become unknown."""
        added = frozenset(present)
        return Capabilities(self.present | added, frozenset() if opaque else self.absent - added)


@functools.cache
def _rows() -> tuple[tuple[linear.Pattern, Capabilities], ...]:
    return tuple(
        (linear.compile("(?i)" + row["match"]), Capabilities(frozenset(row["present"]), frozenset(row["absent"])))
        for row in bounded.data_table(TABLE)["images"]
    )


def table_version() -> int:
    return int(bounded.data_table(TABLE)["table_version"])


def of_reference(reference: str) -> Capabilities:
    """What the table knows of an image or an environment reference (every matching row combined)."""
    present: set[str] = set()
    absent: set[str] = set()
    for pattern, caps in _rows():
        if pattern.search(reference):
            present |= caps.present
            absent |= caps.absent
    return Capabilities(frozenset(present), frozenset(absent - present))


def _package(spec: str) -> str | None:
    """The capability a package spec (``deepspeed==0.12.6``, ``torch>=2``, ``horovod[pytorch]``) gives."""
    name = _SPEC_END.split(spec.strip(), maxsplit=1)[0].lower().replace("_", "-")
    packages: dict[str, str] = bounded.data_table(TABLE)["packages"]
    return packages.get(name)


_INSTALLERS = {("pip", "install"), ("pip3", "install"), ("conda", "install"), ("mamba", "install"),
               ("apt-get", "install"), ("apt", "install")}
_SPEC_END = linear.compile(r"[\s<>=!~\[;@]")
_OPAQUE_ARGS = linear.compile(r"^(-r|--requirement|-e|--editable|-c|--constraint|-f)$|^(git\+|https?://|\.|/)")


def _installs(words: list[str], context: Path | None) -> tuple[set[str], bool]:
    """Capabilities one simple command installs, and whether it installs something we cannot see."""
    found: set[str] = set()
    for i in range(len(words) - 1):
        if (words[i].rsplit("/", 1)[-1], words[i + 1]) not in _INSTALLERS and not (
            words[i] in ("-m",) and words[i + 1] == "pip"
        ):
            continue
        start = i + 2 if words[i] != "-m" else i + 3
        args = words[start:]
        j = 0
        while j < len(args):
            arg = args[j]
            if arg in ("-r", "--requirement") and j + 1 < len(args) and context is not None:
                req = context / args[j + 1]
                if req.is_file():
                    found |= _requirements(req.read_text(encoding="utf-8", errors="replace"))
                    j += 2
                    continue
                return found, True
            if _OPAQUE_ARGS.match(arg):
                return found, True
            if not arg.startswith("-"):
                cap = _package(arg)
                if cap:
                    found.add(cap)
            j += 1
    return found, False


def _requirements(text: str) -> set[str]:
    return {cap for line in text.splitlines() if (cap := _package(line.split("#", 1)[0])) and line.strip()}


def of_conda_file(text: str) -> set[str]:
    """Capabilities a conda environment file installs (conda and pip dependencies)."""
    try:
        data = bounded.load(text, bounded.CONDA_FILE)
    except bounded.BoundedInputError:
        return set()
    found: set[str] = set()
    deps = data.get("dependencies", []) if isinstance(data, dict) else []
    for dep in deps if isinstance(deps, list) else []:
        if isinstance(dep, str) and (cap := _package(dep.split("::")[-1])):
            found.add(cap)
        elif isinstance(dep, dict):
            found |= {cap for p in dep.get("pip", []) or [] if isinstance(p, str) and (cap := _package(p))}
    return found


@dataclass(frozen=True)
class Dockerfile:
    """What a build context's Dockerfile says: its base images and what it installs."""

    bases: tuple[str, ...]
    capabilities: Capabilities


_CONTINUATION = linear.compile(r"\\\r?\n")


def _logical_lines(text: str) -> list[str]:
    return [line.strip() for line in _CONTINUATION.sub(" ", text).splitlines()
            if line.strip() and not line.strip().startswith("#")]


def read_dockerfile(text: str, context: Path | None = None) -> Dockerfile:
    """Base images (``FROM``, build stages excluded) and the capabilities of the final image."""
    bases: list[str] = []
    stages: set[str] = set()
    caps = Capabilities()
    for line in _logical_lines(text):
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            if not words:
                continue
            image = words[0]
            if len(words) >= 3 and words[1].lower() == "as":
                stages.add(words[2].lower())
            if image.lower() in stages:
                continue
            bases.append(image)
            caps = of_reference(image)  # a new stage starts from its own base
        elif instruction == "RUN":
            if not bounded.shlex_can_read(rest):
                caps = caps.plus(set(), opaque=True)
                continue
            try:
                lexer = shlex.shlex(rest, posix=True, punctuation_chars=";&|()")
                lexer.whitespace_split = True
                words = list(lexer)
            except ValueError:
                caps = caps.plus(set(), opaque=True)
                continue
            commands: list[list[str]] = [[]]
            for word in words:
                if set(word) <= set(";&|()"):
                    commands.append([])
                else:
                    commands[-1].append(word)
            for command in commands:
                installed, opaque = _installs(command, context)
                caps = caps.plus(installed, opaque=opaque)
                if (command and command[0] in ("bash", "sh", "make", "cmake")) or "install.sh" in " ".join(command):
                    caps = caps.plus(set(), opaque=True)
    return Dockerfile(tuple(bases), caps)
