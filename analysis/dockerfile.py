"""Dockerfiles read with BuildKit's own parser, and the image they build evaluated as Docker would.

The ``dockerfile`` package (MIT) wraps moby/buildkit's Go parser: instructions come back the way
``docker build`` sees them, with the escape directive (``# escape=```), line continuations with
comments inside, here-documents (``RUN <<EOF``, ``COPY <<EOF /etc/nccl.conf``) and JSON forms applied.
On top of it :func:`evaluate` follows the last stage of the build:

* ``ARG`` (with its default; Azure ML passes no build arguments) and ``ENV`` (both spellings,
  ``A=1 B=2`` and ``A 1``), their values processed as BuildKit's shell lexer does: quotes, the escape
  character, ``$VAR``, ``${VAR}``, ``${VAR:-x}``, ``${VAR-x}``, ``${VAR:+x}``, ``${VAR+x}``. A name the
  Dockerfile never sets may come from the base image: unknown, never guessed.
* ``RUN`` bodies (shell form, JSON form, here-documents) handed to :func:`analysis.shell.evaluate` with the
  stage's ``ENV`` and ``ARG`` values, ``HOME`` (``/root`` unless ``USER`` changes it) and ``WORKDIR``;
  the files they write are kept.
* ``COPY``/``ADD`` of a here-document (its text, expanded unless the delimiter is quoted), or of files of
  the build context, read only for the paths the caller asks about (``wanted``), never outside the
  context (links are resolved first), at most :data:`MAX_FILE` bytes each.
* ``WORKDIR``, ``USER``, ``SHELL``, ``FROM`` (a stage from an earlier stage inherits its ``ENV`` and files).

Bounded: at most :data:`MAX_BYTES` of Dockerfile, :data:`MAX_INSTRUCTIONS` instructions, values of at most
:data:`analysis.shell.MAX_VALUE` characters (``ENV A=$A$A`` doubling), :data:`MAX_TOTAL` characters of values
in all, ``${...}`` nested :data:`analysis.shell.MAX_DEPTH` deep, and one :class:`analysis.shell.Budget`
shared by all its ``RUN`` bodies. What cannot be followed, or is past a bound, is an
:class:`analysis.shell.Unknown` (its value unknown), never an exception.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import itertools
import lzma
import posixpath
import shlex
import tarfile
import zlib
from collections import ChainMap
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, cast

from analysis import shell
from analysis.shell import Unknown, UnknownKind, Variable, Where
from kernel import regex as linear

MAX_BYTES = 1 << 20
"""The largest Dockerfile read (1 MiB)."""
MAX_INSTRUCTIONS = 10_000
MAX_FILE = 1 << 16
"""The most read of one build-context file (64 KiB): configuration files are small."""
MAX_GLOB = 256
"""Build-context files one ``COPY`` source pattern may match before it is unknown."""
MAX_UNPACKED = 1 << 26
"""The most of a local tar archive ``ADD`` unpacks that is read (64 MiB, decompressed): a decompression bomb, or
an archive that size, is read that far and no further; what lies beyond is unknown."""
MAX_MEMBERS = 10_000
"""Members of one ``ADD`` archive read before the rest is unknown."""
MAX_TOTAL = 1 << 23
"""Characters of values (``ENV``, ``ARG``, ``WORKDIR``, here-documents...) one Dockerfile may produce in all (8 MiB);
past it, each further value is unknown."""

_DIRECTIVE = linear.compile(rf"#[{linear.SPACE}]*([A-Za-z][A-Za-z0-9_-]*)[{linear.SPACE}]*=[{linear.SPACE}]*"
                            rf"([^{linear.SPACE}]*)[{linear.SPACE}]*")
_URL = linear.compile(r"[a-z]+://")
_OFFICIAL_FRONTEND = linear.compile(r"(?:docker\.io/)?docker/dockerfile(?::1(?:\.[0-9]+){0,2})?"
                                    r"(?:@sha256:[0-9a-f]{64})?")
_HEREDOC_MARKER = linear.compile(rf"[{linear.DIGIT}]?<<-?[{linear.SPACE}]*(?:'[A-Za-z0-9_.-]+'|\"[A-Za-z0-9_.-]+\""
                                 r"|[A-Za-z0-9_.-]+)")
"""``<<EOF``, ``2<<-'EOF'``: a here-document's marker (its delimiter quoted with the same quote on both sides)."""
_SHELLS = ("sh", "bash", "dash", "ash", "zsh", "ksh")


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction as BuildKit's parser returns it."""

    cmd: str
    """The instruction, upper case: ``FROM``, ``RUN``, ``ENV``..."""
    line: int
    end_line: int
    original: str
    """The instruction as written, continuations joined and comments inside them removed."""
    flags: tuple[str, ...]
    value: tuple[str, ...]
    json: bool
    heredocs: tuple[tuple[str, str], ...] = ()
    """(delimiter, content) of each here-document."""


@dataclass(frozen=True)
class Parsed:
    """A Dockerfile's instructions, its escape character, and the parse error if it has one."""

    instructions: tuple[Instruction, ...]
    escape: str = "\\"
    error: str | None = None


def parse(text: str) -> Parsed:
    """Parse with BuildKit's parser; a parse error (or input over the bounds) is reported, not raised."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > MAX_BYTES:
        return Parsed((), error=f"the Dockerfile has {len(data):,} bytes (at most {MAX_BYTES:,} are read)")
    escape = _escape(text)
    # BuildKit's parser is Go: loading it starts the Go runtime, which reserves most of a GiB of address space.
    # It loads when a Dockerfile is first parsed, so a command that reads none (and a stack file refused as
    # bad input under a small address-space cap) never maps it.
    import dockerfile as buildkit

    try:
        commands: tuple[Any, ...] = tuple(buildkit.parse_string(text))
    except buildkit.GoParseError as err:
        return Parsed((), escape, f"BuildKit cannot parse it: {err}")
    if len(commands) > MAX_INSTRUCTIONS:
        return Parsed((), escape, f"more than {MAX_INSTRUCTIONS:,} instructions")
    return Parsed(tuple(
        Instruction(str(c.cmd).upper(), int(c.start_line), int(c.end_line), str(c.original), tuple(c.flags),
                    tuple(c.value), bool(c.json), tuple((str(h.name), str(h.content)) for h in c.heredocs))
        for c in commands), escape)


def _directives(text: str) -> dict[str, str]:
    """The parser directives: the leading ``# key=value`` comment lines, keys lower case, the first of each kept
    (BuildKit's ``directiveParser``: the first line that is not one ends them, a blank line or comment too)."""
    found: dict[str, str] = {}
    for line in text.splitlines()[:16]:
        m = _DIRECTIVE.fullmatch(line.strip())
        if not m:
            break
        found.setdefault(str(m.group(1)).lower(), str(m.group(2)))
    return found


def _escape(text: str) -> str:
    """The ``# escape=`` parser directive."""
    escape = _directives(text).get("escape")
    return escape if escape in ("`", "\\") else "\\"


def frontend(text: str) -> str | None:
    """The ``# syntax=`` directive's image when it names a frontend other than Docker's official Dockerfile one
    (``docker/dockerfile:1``, ``:1.x``, ``:1.x.y``, with or without ``docker.io/`` and a digest); None otherwise.

    The Dockerfile reference ("Parser directives", "syntax"): the directive "declares the Dockerfile syntax version
    to use for the build", the image BuildKit runs to read the file. Any other image is a program that may give the
    same text another meaning: what the standard parser reads there is not what the build does."""
    syntax = _directives(text).get("syntax")
    if syntax is None or _OFFICIAL_FRONTEND.fullmatch(syntax):
        return None
    return syntax


@dataclass(frozen=True)
class ImageFile:
    """A file the build writes into the image."""

    path: str
    """Its absolute path in the image (relative when ``WORKDIR`` is not known)."""
    content: str | None
    """What is written, when known."""
    where: str
    """How, for messages: ``RUN at line 5``, ``COPY conf/nccl.conf at line 7``."""
    append: bool = False
    maybe: bool = False


@dataclass(frozen=True)
class Image:
    """What the last stage of a Dockerfile bakes in."""

    env: tuple[Variable, ...]
    """``ENV`` of the last stage (and the stages it is built from), in name order; None for a value that
    is only known when the image builds."""
    files: tuple[ImageFile, ...]
    """Files written by ``RUN`` and ``COPY``/``ADD``, in build order (later ones replace earlier ones)."""
    runs: tuple[shell.Script, ...]
    unknowns: tuple[Unknown, ...]
    user: str | None
    """The last ``USER`` (None: root, the default)."""
    home: str | None
    """``HOME`` for the image's user: ``ENV HOME``, else ``/root`` for root, else None (not known)."""
    copied_to: tuple[str, ...] = ()
    """Where ``COPY``/``ADD`` of every stage put build-context files: the only image paths (each, or a path
    below it) that ``wanted`` can add a file at."""


@dataclass
class _Stage:
    env: dict[str, Variable] = field(default_factory=dict)
    args: dict[str, Variable] = field(default_factory=dict)
    files: list[ImageFile] = field(default_factory=list)
    runs: list[shell.Script] = field(default_factory=list)
    unknowns: list[Unknown] = field(default_factory=list)
    copied_to: list[str] = field(default_factory=list)
    workdir: str | None = "/"
    user: str | None = None
    shell: tuple[str, ...] = ("/bin/sh", "-c")
    name: str | None = None


def evaluate(text: str, *, context: Path | None = None, wanted: Collection[str] = (),
             build_args: Mapping[str, str] | None = None) -> Image:
    """Follow the build of ``text``'s last stage.

    ``context``: the build context folder, for ``COPY``/``ADD`` sources; ``wanted``: the image paths
    (absolute) whose content is read from the context when a ``COPY``/``ADD`` puts a file there (the
    context is never listed or read otherwise). ``build_args``: ``--build-arg`` values (Azure ML passes
    none).
    """
    wanted = frozenset(posixpath.normpath(p) for p in wanted)
    custom = frontend(text)
    if custom is not None:
        return Image((), (), (), (Unknown("parse error", f"# syntax={custom}: a custom BuildKit frontend reads this "
                                          "Dockerfile, which may not mean what Docker's own parser reads; its "
                                          "ENV, RUN and COPY are not judged as written", Where(1)),), None, None)
    parsed = parse(text)
    budget = shell.Budget()
    tally = _Tally()
    stages: list[_Stage] = []
    global_args: dict[str, Variable] = {}
    stage: _Stage | None = None
    problems: list[Unknown] = []
    if parsed.error is not None:
        problems.append(Unknown("parse error", parsed.error, Where(1)))
    for ins in parsed.instructions:
        where = Where(ins.line)
        if ins.cmd == "FROM":
            stage = _from(ins, stages, global_args, parsed.escape)
            stages.append(stage)
            continue
        if ins.cmd == "ARG":
            target = stage.args if stage is not None else global_args
            for declared in ins.value:
                name, eq, default = declared.partition("=")
                value: str | None
                if build_args is not None and name in build_args:
                    value = build_args[name]
                elif eq:
                    value = _word(default, _scope(stage, global_args), parsed.escape, where, problems
                                  if stage is None else stage.unknowns, f"ARG {declared}", tally=tally)
                elif stage is not None and name in global_args:
                    value = global_args[name].value
                else:
                    value = ""  # declared without a default and not passed: empty
                target[name] = Variable(name, value, "Dockerfile ARG", where)
            continue
        if stage is None:
            continue
        if ins.cmd == "ENV":
            scope = _scope(stage, global_args)
            pairs = list(zip(ins.value[0::2], ins.value[1::2], strict=False))
            values = [_word(raw, scope, parsed.escape, where, stage.unknowns, f"ENV {name}={raw}", tally=tally)
                      for name, raw in pairs]  # all before any is set: they see the values from before it
            for (name, _raw), value in zip(pairs, values, strict=True):
                stage.env[name] = Variable(name, value, "Dockerfile ENV", where)
        elif ins.cmd == "WORKDIR" and ins.value:
            workdir = _word(ins.value[0], _scope(stage, global_args), parsed.escape, where, stage.unknowns,
                            ins.original, tally=tally)
            stage.workdir = shell.join_path(stage.workdir, workdir)
        elif ins.cmd == "USER" and ins.value:
            stage.user = _word(ins.value[0], _scope(stage, global_args), parsed.escape, where, stage.unknowns,
                               ins.original, tally=tally)
            if stage.user is not None and stage.user.split(":")[0] in ("root", "0"):
                stage.user = None
        elif ins.cmd == "SHELL" and ins.json:
            stage.shell = ins.value
        elif ins.cmd == "RUN":
            _run(ins, stage, global_args, budget)
        elif ins.cmd in ("COPY", "ADD"):
            _copy(ins, stage, stages, global_args, parsed.escape, context, wanted, tally)
    last = stages[-1] if stages else _Stage()
    home = _home(last)
    return Image(tuple(last.env[n] for n in sorted(last.env)), tuple(last.files), tuple(last.runs),
                 (*problems, *last.unknowns), last.user, home, tuple(p for s in stages for p in s.copied_to))


def _from(ins: Instruction, stages: list[_Stage], global_args: dict[str, Variable], escape: str) -> _Stage:
    words = [v for v in ins.value]
    image = _word(words[0], global_args, escape, Where(ins.line), [], ins.original) if words else None
    name = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else None
    base = next((s for s in reversed(stages) if image is not None and s.name == image.lower()), None)
    if base is None:
        return _Stage(name=name)
    return _Stage(env=dict(base.env), files=list(base.files), workdir=base.workdir, user=base.user,
                  shell=base.shell, name=name)


def _scope(stage: _Stage | None, global_args: dict[str, Variable]) -> Mapping[str, Variable]:
    """The names an instruction's words see (``ENV`` before ``ARG``): a view, not a copy (a copy per instruction
    was quadratic in a Dockerfile of thousands of names)."""
    if stage is None:
        return global_args
    return ChainMap(stage.env, stage.args)


def _home(stage: _Stage) -> str | None:
    if "HOME" in stage.env:
        return stage.env["HOME"].value
    return "/root" if stage.user is None else None


def _run(ins: Instruction, stage: _Stage, global_args: dict[str, Variable], budget: shell.Budget) -> None:
    where = Where(ins.line)
    if ins.json:
        # exec form: no shell unless the program is one; quote each argument for the shell reader
        text = " ".join(shlex.quote(v) for v in ins.value)
    elif ins.heredocs and not _without_heredocs(ins.value[0] if ins.value else ""):
        # only here-documents: each one's text is the script, run by the default shell or its #! line
        for _delimiter, content in ins.heredocs:
            interpreter = content.split("\n", 1)[0][2:].strip() if content.startswith("#!") else ""
            if interpreter and posixpath.basename(interpreter.split()[-1] if interpreter.split()[0].endswith(
                    "env") and len(interpreter.split()) > 1 else interpreter.split()[0]) not in _SHELLS:
                stage.unknowns.append(Unknown("shell input", f"RUN <<{_delimiter} (a {interpreter} script)", where))
                continue
            _shell(content, stage, global_args, budget, ins.line + 1, f"Dockerfile RUN at line {ins.line}")
        return
    else:
        text = ins.value[0] if ins.value else ""
        if ins.heredocs:
            text += "\n" + "".join(content + delimiter + "\n" for delimiter, content in ins.heredocs)
        program = posixpath.basename(stage.shell[0]) if stage.shell else "sh"
        if program not in _SHELLS:
            stage.unknowns.append(Unknown("shell input", f"RUN under SHELL {list(stage.shell)}", where))
            return
    _shell(text, stage, global_args, budget, ins.line, f"Dockerfile RUN at line {ins.line}")


def _shell(text: str, stage: _Stage, global_args: dict[str, Variable], budget: shell.Budget, line: int,
           label: str) -> None:
    spent = budget.steps <= 0  # the shell stops at its start: no seed to copy (one per RUN was quadratic)
    seed = {} if spent else {**stage.args, **stage.env}
    home = _home(stage)
    if not spent and "HOME" not in seed and home is not None:
        seed["HOME"] = Variable("HOME", home, "Docker (the user's home)")
    script = shell.evaluate(text, environment=list(seed.values()), label=label, cwd=stage.workdir,
                            first_line=line, budget=budget)
    stage.runs.append(script)
    stage.unknowns.extend(script.unknowns)
    for write in script.writes:
        path = write.path.value
        if path is None:
            continue
        full = shell.join_path(stage.workdir, path)
        if full is None:
            continue
        if write.source is not None:
            stage.files.append(ImageFile(full, None, f"{write.raw} at line {write.where.line}", maybe=write.maybe))
        else:
            stage.files.append(ImageFile(full, write.content, f"RUN at line {write.where.line}", write.append,
                                         write.maybe))


def _copy(ins: Instruction, stage: _Stage, stages: list[_Stage], global_args: dict[str, Variable], escape: str,
          context: Path | None, wanted: frozenset[str], tally: _Tally) -> None:
    where = Where(ins.line)
    scope = _scope(stage, global_args)
    values = [_word(v, scope, escape, where, stage.unknowns, ins.original, tally=tally) for v in ins.value]
    if len(values) < 2:
        return
    dest = values[-1]
    if dest is None:
        stage.unknowns.append(Unknown("file", ins.original, where))
        return
    dest_dir = dest.endswith("/") or len(values) > 2
    dest_path = shell.join_path(stage.workdir, dest)
    if dest_path is None:
        return
    heredocs = dict(ins.heredocs)
    from_stage = next((f.split("=", 1)[1] for f in ins.flags if f.startswith("--from=")), None)
    for raw, source in zip(ins.value[:-1], values[:-1], strict=True):
        if raw.startswith("<<"):
            delimiter = raw[2:].lstrip("-")
            quoted = delimiter[:1] in ("'", '"')
            content = heredocs.get(delimiter.strip("'\""))
            if content is not None and not quoted:
                content = _word(content, scope, escape, where, stage.unknowns, ins.original, heredoc=True,
                                tally=tally)
            target = posixpath.join(dest_path, delimiter.strip("'\"")) if dest_dir else dest_path
            stage.files.append(ImageFile(target, content, f"{ins.cmd} <<{delimiter} at line {ins.line}"))
            continue
        if source is None:
            stage.unknowns.append(Unknown("file", ins.original, where))
            continue
        if from_stage is not None or (ins.cmd == "ADD" and _URL.match(source)):
            earlier = next((s for s in stages if from_stage is not None and s.name == from_stage.lower()), None)
            for f in earlier.files if earlier is not None else ():
                if f.path == posixpath.normpath("/" + source.lstrip("/")):
                    stage.files.append(replace(f, path=posixpath.join(dest_path, posixpath.basename(source))
                                               if dest_dir else dest_path))
            continue
        _copy_from_context(ins, source, dest_path, dest_dir, stage, context, wanted)


def _copy_from_context(ins: Instruction, source: str, dest: str, dest_dir: bool, stage: _Stage,
                       context: Path | None, wanted: frozenset[str]) -> None:
    """The wanted image paths a context source lands on, with their content (read inside the context)."""
    if context is None:
        return
    stage.copied_to.append(dest)
    base = context.resolve()
    pattern = source.lstrip("/")
    matches: list[Path]
    if any(c in pattern for c in "*?["):
        # Listed inside the context only (a `..` would list the folders above it), and no further than the bound.
        found = [] if ".." in pattern.split("/") else sorted(
            itertools.islice(glob.iglob(glob.escape(str(base)) + "/" + pattern), MAX_GLOB + 1))
        if len(found) > MAX_GLOB or ".." in pattern.split("/"):
            stage.unknowns.append(Unknown("file", ins.original, Where(ins.line)))
            return
        matches = [Path(f) for f in found]
        dest_dir = True
    else:
        matches = [base / pattern]
    label = f"{ins.cmd} {source} at line {ins.line}"
    unpack = ins.cmd == "ADD" and "--unpack=false" not in (f.lower() for f in ins.flags)
    for match in matches:
        path = match.resolve()  # links followed: a file outside the build context is never read
        if path != base and base not in path.parents:
            continue
        if unpack and path.is_file() and _unpacked(path, dest, wanted, label, stage, Where(ins.line)):
            continue
        if path.is_file():
            target = posixpath.join(dest, match.name) if dest_dir else dest
            if target in wanted:
                stage.files.append(ImageFile(target, _read(path), label))
        elif path.is_dir():
            # a folder's contents land under dest: read only the wanted paths that would come from it
            for candidate in sorted(p for p in wanted if p.startswith(dest.rstrip("/") + "/")):
                relative = posixpath.relpath(candidate, dest)
                inner = (path / relative).resolve()
                if base in inner.parents and inner.is_file():
                    stage.files.append(ImageFile(candidate, _read(inner), label))


_ZSTD = b"\x28\xb5\x2f\xfd"


class _Capped(io.RawIOBase):
    """A decompressed stream read no further than :data:`MAX_UNPACKED` bytes (a bomb stops there)."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.total >= MAX_UNPACKED:
            raise _ArchiveBound(f"more than {MAX_UNPACKED:,} bytes unpacked")
        view = memoryview(buffer)[:MAX_UNPACKED - self.total]
        data = self.inner.read(len(view))
        view[:len(data)] = data
        self.total += len(data)
        return len(data)


class _ArchiveBound(Exception):
    """An archive past a bound: the rest of it is unknown."""


def _decompressed(handle: BinaryIO) -> BinaryIO | None:
    """BuildKit's reading of an ``ADD`` source: gzip, bzip2 and xz are told by their first bytes, not the name
    (identity otherwise); None for zstd, which newer BuildKit unpacks too and this reader does not."""
    head = handle.read(6)
    handle.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return cast(BinaryIO, gzip.GzipFile(fileobj=handle, mode="rb"))
    if head.startswith(b"BZh"):
        return cast(BinaryIO, bz2.BZ2File(handle))
    if head.startswith(b"\xfd7zXZ\x00"):
        return cast(BinaryIO, lzma.LZMAFile(handle))
    if head.startswith(_ZSTD):
        return None
    return handle


def _unpacked(path: Path, dest: str, wanted: frozenset[str], label: str, stage: _Stage, where: Where) -> bool:
    """``ADD`` of a local tar archive: the Dockerfile reference ("ADD", "Adding local tar archives": "When using a
    local tar archive as the source for ADD, and if the archive is in a recognized compression format (gzip, bzip2
    or xz, or uncompressed), the archive is decompressed and extracted into the specified destination", told
    "solely based on the contents of the file, not the name"; ``--unpack=false`` turns it off). Each member lands
    at ``dest`` joined with its name cleaned inside ``dest`` (containerd's archive.Apply joins it with
    ``fs.RootPath``: ``..`` and a leading ``/`` cannot leave the destination); later members replace earlier ones.
    Read with :mod:`tarfile` as a stream, nothing written to disk: a member's text only for the ``wanted`` paths
    (at most :data:`MAX_FILE` bytes), a link or special file there unknown, at most :data:`MAX_MEMBERS` members
    and :data:`MAX_UNPACKED` bytes unpacked. False when the file is no tar archive (then ``ADD`` copies it)."""
    added: list[ImageFile] = []
    try:
        with path.open("rb") as raw:
            stream = _decompressed(raw)
            if stream is None:
                stage.unknowns.append(Unknown("file", f"{label}: a zstd-compressed file, which BuildKit may unpack",
                                              where))
                return True
            capped = io.BufferedReader(_Capped(stream), 1 << 16)
            try:
                archive = tarfile.open(fileobj=capped, mode="r|")  # noqa: SIM115 - closed by the with below
            except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, _ArchiveBound):
                return False  # not a tar archive (or not a compressed one): ADD copies the file as it is
            with archive:
                for count, member in enumerate(archive, 1):
                    if count > MAX_MEMBERS:
                        raise _ArchiveBound(f"more than {MAX_MEMBERS:,} members")
                    if archive.offset + member.size > MAX_UNPACKED:
                        raise _ArchiveBound(f"more than {MAX_UNPACKED:,} bytes unpacked")
                    inside = posixpath.normpath("/" + member.name.lstrip("/")).lstrip("/")  # ".." stops at the top
                    target = posixpath.normpath(posixpath.join(dest, inside))
                    if target not in wanted or member.isdir():
                        continue
                    how = f"{label}, member {member.name} of the archive"
                    content = None
                    if member.isreg():
                        extracted = archive.extractfile(member)
                        data = extracted.read(MAX_FILE) if extracted is not None else None
                        content = data.decode("utf-8", errors="replace") if data is not None else None
                    added.append(ImageFile(target, content, how))
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError, _ArchiveBound) as err:
        why = str(err) if isinstance(err, _ArchiveBound) else f"unreadable: {type(err).__name__}"
        stage.files.extend(added)  # what was read before the bound is what the archive holds first
        stage.unknowns.append(Unknown("too large" if isinstance(err, _ArchiveBound) else "file",
                                      f"{label} (the archive {why}; the rest of it unknown)", where))
        return True
    stage.files.extend(added)
    return True


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_FILE).decode("utf-8", errors="replace")
    except OSError:
        return None


def _without_heredocs(command: str) -> str:
    """A RUN command line with its here-document markers removed: empty when it is only those."""
    return _HEREDOC_MARKER.sub(" ", command).strip()


class _Bound(Exception):
    """A word past a bound: its value is unknown."""

    def __init__(self, kind: UnknownKind, why: str) -> None:
        super().__init__(why)
        self.kind: UnknownKind = kind
        self.why = why


@dataclass
class _Tally:
    """The characters of values one Dockerfile has produced (:data:`MAX_TOTAL`)."""

    chars: int = 0
    passed: bool = False
    """An Unknown already said so: each later value is unknown without one more."""


def _word(text: str, scope: Mapping[str, Variable], escape: str, where: Where, unknowns: list[Unknown],
          construct: str, *, heredoc: bool = False, tally: _Tally | None = None) -> str | None:
    """BuildKit's word processing: quotes (not in a here-document), the escape character and ``$``
    substitutions; None (and an Unknown) when a name it uses is not known, or a bound is met: a value longer
    than :data:`analysis.shell.MAX_VALUE`, ``${`` nested deeper than :data:`analysis.shell.MAX_DEPTH`, the
    Dockerfile's values past :data:`MAX_TOTAL` characters in all (``tally``)."""
    lexer = _Lexer(text, scope, escape, heredoc=heredoc)
    try:
        if tally is not None and tally.chars > MAX_TOTAL:
            if tally.passed:
                return None
            tally.passed = True
            raise _Bound("too large", f"the Dockerfile's values pass {MAX_TOTAL:,} characters: this and every "
                                      "later one unknown")
        value = lexer.word()
    except _Bound as bound:
        one_line = " ".join(construct.split())
        shown = one_line if len(one_line) <= 64 else one_line[:61] + "..."
        unknowns.append(Unknown(bound.kind, f"{shown} ({bound.why})", where, None))
        return None
    if value is None:
        unknowns.append(Unknown("variable", construct, where, None))
    elif tally is not None:
        tally.chars += len(value)
    return value


class _Lexer:
    """frontend/dockerfile/shell/lex.go's ``ProcessWord``, for one word."""

    def __init__(self, text: str, scope: Mapping[str, Variable], escape: str, *, heredoc: bool) -> None:
        self.text = text
        self.i = 0
        self.scope = scope
        self.escape = escape
        self.heredoc = heredoc
        self.unknown = False
        self.depth = 0

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def next(self) -> str:
        c = self.peek()
        self.i += 1
        return c

    def word(self, stop: str = "") -> str | None:
        out = _Pieces()
        while self.i < len(self.text):
            c = self.peek()
            if stop and c in stop:
                break
            if c == "'" and not self.heredoc:
                self.next()
                end = self.text.find("'", self.i)
                end = len(self.text) if end < 0 else end
                out.add(self.text[self.i:end])
                self.i = end + 1
            elif c == '"' and not self.heredoc:
                self.next()
                out.add(self.double_quoted())
            elif c == "$":
                out.add(self.dollar())
            elif c == self.escape and not self.heredoc:
                self.next()
                if self.i < len(self.text):
                    out.add(self.next())
            else:
                out.add(self.next())
        return None if self.unknown else out.text()

    def double_quoted(self) -> str:
        out = _Pieces()
        while self.i < len(self.text):
            c = self.next()
            if c == '"':
                break
            if c == "$":
                self.i -= 1
                out.add(self.dollar())
            elif c == self.escape and self.peek() in ('"', "$", self.escape):
                out.add(self.next())
            else:
                out.add(c)
        return out.text()

    def dollar(self) -> str:
        self.depth += 1
        try:
            if self.depth > shell.MAX_DEPTH:
                raise _Bound("too deep", f"${{...}} nested more than {shell.MAX_DEPTH} deep")
            return self._dollar()
        finally:
            self.depth -= 1

    def _dollar(self) -> str:
        self.next()  # $
        c = self.peek()
        if c == "{":
            self.next()
            name = self.name()
            op = ""
            if self.peek() == "}":
                self.next()
                return self.lookup(name)
            for candidate in (":-", ":+", ":?", "-", "+", "?"):
                if self.text.startswith(candidate, self.i):
                    op = candidate
                    self.i += len(candidate)
                    break
            if not op:  # a form this reader does not follow (##, %%, /...): skip to the brace
                end = self.text.find("}", self.i)
                self.i = len(self.text) if end < 0 else end + 1
                self.unknown = True
                return ""
            saved = self.unknown
            word = self.word(stop="}") or ""
            word_unknown = self.unknown and not saved
            self.unknown = saved
            if self.peek() == "}":
                self.next()
            variable = self.scope.get(name)
            if variable is None:  # the base image may set it
                self.unknown = True
                return ""
            value = variable.value
            if value is None:
                self.unknown = True
                return ""
            use_word = value == "" if op.startswith(":") else False
            if op in (":+", "+"):
                use_word = not use_word
            if op in (":?", "?"):
                return value
            if use_word:
                self.unknown = self.unknown or word_unknown
                return word
            return "" if op in (":+", "+") else value
        name = self.name()
        if not name:
            return "$"
        return self.lookup(name)

    def name(self) -> str:
        start = self.i
        while self.i < len(self.text) and (self.text[self.i].isalnum() or self.text[self.i] == "_"):
            self.i += 1
        return self.text[start:self.i]

    def lookup(self, name: str) -> str:
        variable = self.scope.get(name)
        if variable is None or variable.value is None:
            self.unknown = True
            return ""
        return variable.value


class _Pieces:
    """A word's pieces, their length bounded as they come: a value longer than :data:`analysis.shell.MAX_VALUE`
    is never built (47 doubling ``ENV`` lines reached 4.3 GB)."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.size = 0

    def add(self, piece: str) -> None:
        self.size += len(piece)
        if self.size > shell.MAX_VALUE:
            raise _Bound("too large", f"a value longer than {shell.MAX_VALUE:,} characters")
        self.pieces.append(piece)

    def text(self) -> str:
        return "".join(self.pieces)
