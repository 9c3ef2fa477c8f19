"""analysis/dockerfile.py: Dockerfiles through BuildKit's parser, and what the last stage bakes in."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from analysis import dockerfile
from analysis.dockerfile import evaluate

BASE = "FROM mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20240701.v1\n"


def _env(text: str) -> dict[str, str | None]:
    return {v.name: v.value for v in evaluate(text).env}


@pytest.mark.parametrize(
    ("text", "env"),
    [
        (BASE + "ENV NCCL_IB_DISABLE=1 OTHER=x\n", {"NCCL_IB_DISABLE": "1", "OTHER": "x"}),
        (BASE + "ENV NCCL_NET Socket\n", {"NCCL_NET": "Socket"}),
        (BASE + 'ENV A="a b" B=\'$X\' C=c\\ d\n', {"A": "a b", "B": "$X", "C": "c d"}),
        (BASE + "ARG IB=1\nENV NCCL_IB_DISABLE=${IB:-0}\n", {"NCCL_IB_DISABLE": "1"}),
        (BASE + "ARG IB\nENV NCCL_IB_DISABLE=${IB:-1}\n", {"NCCL_IB_DISABLE": "1"}),  # no build args: empty
        (BASE + "ARG IB\nENV NCCL_IB_DISABLE=${IB:+1}\n", {"NCCL_IB_DISABLE": ""}),
        ("ARG IB=1\n" + BASE + "ARG IB\nENV NCCL_IB_DISABLE=$IB\n", {"NCCL_IB_DISABLE": "1"}),  # a global ARG
        ("ARG IB=1\n" + BASE + "ENV NCCL_IB_DISABLE=$IB\n", {"NCCL_IB_DISABLE": None}),  # not redeclared
        (BASE + "ENV NCCL_IB_DISABLE=$FROM_BASE\n", {"NCCL_IB_DISABLE": None}),  # the base image may set it
        (BASE + "ENV A=1\nENV A=2 B=$A\n", {"A": "2", "B": "1"}),  # substitutions see the values before
        ("# escape=`\n" + BASE + "ENV NCCL_IB_DISABLE=1 `\n    # a comment inside\n    B=C:\\x\n",
         {"NCCL_IB_DISABLE": "1", "B": "C:\\x"}),  # with ` as the escape character, \ is a plain character
        (BASE + "ENV NCCL_IB_DISABLE=0 \\\n    # a comment inside\n    NCCL_NET=Socket\n",
         {"NCCL_IB_DISABLE": "0", "NCCL_NET": "Socket"}),
        (BASE + "ENV NCCL_IB_DISABLE=1\nFROM ubuntu:22.04\n", {}),  # the last stage is the image
        ("FROM ubuntu:22.04 AS base\nENV X=1\nFROM base\nENV Y=2\n", {"X": "1", "Y": "2"}),
    ],
)
def test_env_of_the_last_stage(text: str, env: dict[str, str | None]) -> None:
    assert _env(text) == env


@pytest.mark.parametrize(
    ("text", "path", "content"),
    [
        (BASE + "RUN echo NCCL_IB_DISABLE=1 >> /etc/nccl.conf\n", "/etc/nccl.conf", "NCCL_IB_DISABLE=1\n"),
        (BASE + "RUN cat <<EOF > /etc/nccl.conf\nNCCL_IB_DISABLE=1\nEOF\n", "/etc/nccl.conf", "NCCL_IB_DISABLE=1\n"),
        (BASE + "RUN <<EOF\nset -e\necho NCCL_NET=Socket > /etc/nccl.conf\nEOF\n", "/etc/nccl.conf",
         "NCCL_NET=Socket\n"),
        (BASE + "RUN <<EOF bash\necho NCCL_NET=Socket > /etc/nccl.conf\nEOF\n", "/etc/nccl.conf", "NCCL_NET=Socket\n"),
        (BASE + "ARG V=1\nCOPY <<EOF /etc/nccl.conf\nNCCL_IB_DISABLE=$V\nEOF\n", "/etc/nccl.conf",
         "NCCL_IB_DISABLE=1\n"),
        (BASE + "COPY <<'EOF' /etc/nccl.conf\nNCCL_IB_DISABLE=$V\nEOF\n", "/etc/nccl.conf", "NCCL_IB_DISABLE=$V\n"),
        (BASE + "WORKDIR /etc\nRUN echo NCCL_IB_DISABLE=1 > nccl.conf\n", "/etc/nccl.conf", "NCCL_IB_DISABLE=1\n"),
        (BASE + "RUN echo NCCL_IB_DISABLE=1 > ~/.nccl.conf\n", "/root/.nccl.conf", "NCCL_IB_DISABLE=1\n"),
        (BASE + 'RUN ["bash", "-c", "echo pml=ob1 > /etc/openmpi-mca-params.conf"]\n',
         "/etc/openmpi-mca-params.conf", "pml=ob1\n"),
        (BASE + "RUN --mount=type=cache,target=/root/.cache echo A=1 \\\n  # comment\n  > /etc/nccl.conf\n",
         "/etc/nccl.conf", "A=1\n"),
    ],
)
def test_files_the_build_writes(text: str, path: str, content: str) -> None:
    image = evaluate(text)
    assert [(f.path, f.content) for f in image.files] == [(path, content)]


def test_run_bodies_see_env_and_args_and_report_what_they_cannot_follow() -> None:
    image = evaluate(BASE + "ARG LEVEL=1\nENV N=x\nRUN echo $N$LEVEL > /etc/a.conf && eval \"$SOMETHING\"\n")
    assert [(f.path, f.content) for f in image.files] == [("/etc/a.conf", "x1\n")]
    (unknown,) = image.unknowns
    assert (unknown.kind, unknown.where.line) == ("eval", 4)


def test_copy_reads_only_wanted_paths_and_never_outside_the_context(tmp_path: Path) -> None:
    context = tmp_path / "ctx"
    (context / "conf").mkdir(parents=True)
    (context / "conf" / "nccl.conf").write_text("NCCL_IB_HCA=^mlx5\n")
    (context / "conf" / "other.txt").write_text("x\n")
    (tmp_path / "outside.conf").write_text("NCCL_IB_DISABLE=1\n")
    (context / "link.conf").symlink_to(tmp_path / "outside.conf")
    text = BASE + (
        "COPY conf/nccl.conf /etc/nccl.conf\n"
        "COPY conf/ /etc/\n"
        "COPY conf/*.conf /opt/\n"
        "COPY ../outside.conf /etc/nccl.conf\n"
        "COPY link.conf /etc/nccl.conf\n"
        "COPY conf/other.txt /etc/other.txt\n"
    )
    image = evaluate(text, context=context, wanted={"/etc/nccl.conf", "/opt/nccl.conf"})
    assert [(f.path, f.content, f.where) for f in image.files] == [
        ("/etc/nccl.conf", "NCCL_IB_HCA=^mlx5\n", "COPY conf/nccl.conf at line 2"),
        ("/etc/nccl.conf", "NCCL_IB_HCA=^mlx5\n", "COPY conf/ at line 3"),
        ("/opt/nccl.conf", "NCCL_IB_HCA=^mlx5\n", "COPY conf/*.conf at line 4"),
    ]


def test_a_stage_copied_from_keeps_its_files() -> None:
    text = ("FROM ubuntu:22.04 AS conf\nRUN echo NCCL_NET=Socket > /nccl.conf\n" + BASE +
            "COPY --from=conf /nccl.conf /etc/nccl.conf\n")
    assert [(f.path, f.content) for f in evaluate(text).files] == [("/etc/nccl.conf", "NCCL_NET=Socket\n")]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("FROM x\nRUN <<EOF\n#!/usr/bin/env python3\nopen('/etc/nccl.conf', 'w')\nEOF\n", "shell input"),
        ('FROM x\nSHELL ["pwsh", "-c"]\nRUN Set-Content x\n', "shell input"),
        ("FROM x\nCOPY $SRC /etc/nccl.conf\n", "variable"),
        ("FROM x\nRUN echo \"unterminated\n", "parse error"),
    ],
)
def test_what_a_build_does_that_cannot_be_followed_is_reported(text: str, kind: str) -> None:
    assert kind in {u.kind for u in evaluate(text).unknowns}


def test_parse_errors_and_oversized_files_are_reported_not_raised() -> None:
    assert "can't find = in" in (dockerfile.parse("FROM x\nENV A=1 \\\n 2\n").error or "")
    big = dockerfile.parse("FROM x\n" + "RUN true\n" * 200_000)
    assert big.instructions == () and big.error is not None and "bytes" in big.error
    image = evaluate("FROM x\n" + "RUN true\n" * 200_000)
    assert [u.kind for u in image.unknowns] == ["parse error"]


def test_run_bodies_share_one_budget() -> None:
    loop = "for a in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do for b in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; " \
           "do echo $a$b; done; done"
    image = evaluate("FROM x\n" + f"RUN {loop}\n" * 400)
    assert any(u.kind in ("too large", "timeout") for u in image.unknowns)
    assert len(image.runs) == 400


def _peak(text: str) -> tuple[dockerfile.Image, int]:
    """The image, and the most memory evaluating it held (bytes)."""
    import tracemalloc

    tracemalloc.start()
    try:
        image = evaluate(text)
        return image, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_value_doubling_without_end_becomes_unknown_not_a_memory_error() -> None:
    """Issue 36: 47 doubling ``ENV`` lines reached 4.3 GB and a MemoryError. A value longer than the shell
    evaluator's bound is never built: it is unknown, said once, and what follows is read as usual."""
    image, peak = _peak(BASE + "ENV A=x\n" + "ENV A=$A$A\n" * 47 + "ENV NCCL_IB_DISABLE=1\n")
    env = {v.name: v.value for v in image.env}
    assert env["A"] is None and env["NCCL_IB_DISABLE"] == "1"
    (too_long,) = [u for u in image.unknowns if u.kind == "too large"]
    assert too_long.where.line == 2 + 17 and "(a value longer than 65,536 characters)" in str(too_long)
    assert peak < 8 << 20


def test_expansions_nested_thousands_deep_are_unknown_not_a_recursion_error() -> None:
    """Issue 36: 3,000 nested ``${U:-...}`` raised RecursionError; past the shell's nesting bound it is unknown."""
    for value in ("${U:-" * 3000 + "x" + "}" * 3000, '"' + "${U:-" * 3000 + "x" + "}" * 3000 + '"'):
        image, peak = _peak(BASE + f"ENV U=1\nENV A={value}\nENV NCCL_IB_DISABLE=1\n")
        env = {v.name: v.value for v in image.env}
        assert env["A"] is None and env["NCCL_IB_DISABLE"] == "1"
        assert [(u.kind, u.where.line) for u in image.unknowns] == [("too deep", 3)]
        assert "(${...} nested more than 48 deep)" in str(image.unknowns[0]) and len(str(image.unknowns[0])) < 150
        assert peak < 8 << 20
    assert _env(BASE + "ENV U=1\nENV A=" + "${U:-" * 40 + "x" + "}" * 40 + "\n")["A"] == "1"  # within the bound


def test_the_values_of_a_dockerfile_are_bounded_in_all() -> None:
    """Values under the bound each, but many: past 8 MiB in all, each further value is unknown, said once."""
    lines = "".join("ENV " + " ".join(f"C{k}_{i}=$A" for i in range(200)) + "\n" for k in range(100))
    image, peak = _peak(BASE + "ENV A=" + "y" * 60_000 + "\n" + lines + "ENV NCCL_IB_DISABLE=1\n")
    env = {v.name: v.value for v in image.env}
    assert env["C0_0"] == "y" * 60_000 and env["C99_199"] is None and env["NCCL_IB_DISABLE"] is None
    assert [u.kind for u in image.unknowns] == ["too large"] and "8,388,608 characters" in str(image.unknowns[0])
    assert peak < 32 << 20


def test_a_dockerfile_of_thousands_of_names_is_read_in_linear_time() -> None:
    """Each instruction's words used to see a copy of every name set so far: quadratic in a 1 MiB Dockerfile."""
    import time

    text = BASE + "".join("ENV " + " ".join(f"V{i}_{j}=1" for j in range(12)) + "\n" for i in range(8_000))
    start = time.perf_counter()
    image = evaluate(text + "ENV A=$V7999_11 B=x C=$B\n")
    assert time.perf_counter() - start < 10
    env = {v.name: v.value for v in image.env}
    assert (env["A"], env["C"]) == ("1", None)  # the pairs of one ENV see the values from before it


def tar_archive(files: dict[str, bytes], mode: str = "w", *, link: str | None = None) -> bytes:
    """A tar archive of ``files`` (member name -> content) as ``tarfile`` writes it in ``mode`` (``w:gz``...), with
    ``etc/nccl.conf`` a symbolic link to ``link`` when given: a build context's archive for ``ADD``."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        if link is not None:
            info = tarfile.TarInfo("etc/nccl.conf")
            info.type, info.linkname = tarfile.SYMTYPE, link
            archive.addfile(info)
    return buffer.getvalue()


CONF = b"NCCL_IB_DISABLE=1\n"


@pytest.mark.parametrize(
    ("add", "archive", "files"),
    [
        ("ADD a.tar /", tar_archive({"etc/nccl.conf": CONF}), {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        ("ADD a.tar.gz /", tar_archive({"./etc/nccl.conf": CONF}, "w:gz"), {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        ("ADD a.tbz /", tar_archive({"etc/nccl.conf": CONF}, "w:bz2"), {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        ("ADD a.tar.xz /root", tar_archive({".nccl.conf": CONF}, "w:xz"), {"/root/.nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        # told by content, not by name: a gzip'd tar named .txt is unpacked
        ("ADD a.txt /", tar_archive({"etc/nccl.conf": CONF}, "w:gz"), {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        # a member cannot leave the destination (containerd's fs.RootPath): ../ and / stay inside it
        ("ADD a.tar /etc/", tar_archive({"../../nccl.conf": CONF}), {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        ("ADD a.tar /etc/", tar_archive({"/nccl.conf": CONF}), {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),
        ("ADD a.tar /opt/", tar_archive({"../etc/nccl.conf": CONF}), {}),  # /opt/etc/nccl.conf: not read
        ("ADD a.tar /", tar_archive({"etc/nccl.conf": CONF, "etc/x": b"", "./etc/nccl.conf": b"NCCL_IB_DISABLE=0\n"}),
         {"/etc/nccl.conf": "NCCL_IB_DISABLE=0\n"}),  # the later member replaces the earlier
        ("ADD a.tar /", tar_archive({}, link="/elsewhere"), {"/etc/nccl.conf": None}),  # a link: its text unknown
        ("COPY a.tar /", tar_archive({"etc/nccl.conf": CONF}), {}),  # COPY never unpacks
        ("ADD --unpack=false a.tar /", tar_archive({"etc/nccl.conf": CONF}), {}),
        ("ADD a.tar /etc/nccl.conf", b"NCCL_IB_DISABLE=1\n", {"/etc/nccl.conf": "NCCL_IB_DISABLE=1\n"}),  # no tar
    ],
)
def test_add_unpacks_a_local_tar_archive_as_buildkit_does(tmp_path: Path, add: str, archive: bytes,
                                                          files: dict[str, str | None]) -> None:
    source = add.split()[-2]
    (tmp_path / source).write_bytes(archive)
    image = evaluate(f"{BASE}{add}\n", context=tmp_path, wanted=["/etc/nccl.conf", "/root/.nccl.conf"])
    last = {f.path: f.content for f in image.files}
    assert last == files
    assert not [u for u in image.unknowns if u.kind in ("too large", "file")]


def _bomb(path: Path, members: int = 1, size: int = 1 << 30) -> None:
    """A gzip'd tar of ``members`` members of ``size`` zero bytes each (a GiB compresses to about 1 MiB), then
    /etc/nccl.conf."""
    import gzip
    import io
    import tarfile

    class Zeros(io.RawIOBase):
        def __init__(self, n: int) -> None:
            self.n = n

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            k = min(len(buffer), self.n)
            buffer[:k] = bytes(k)
            self.n -= k
            return k

    with gzip.open(path, "wb", compresslevel=1) as packed, tarfile.open(fileobj=packed, mode="w|") as archive:
        for i in range(members):
            info = tarfile.TarInfo(f"zeros{i}")
            info.size = size
            archive.addfile(info, io.BufferedReader(Zeros(size)))
        info = tarfile.TarInfo("etc/nccl.conf")
        info.size = len(CONF)
        archive.addfile(info, io.BytesIO(CONF))


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: _bomb(p), "more than 67,108,864 bytes unpacked"),  # one member past the bound
        (lambda p: _bomb(p, members=20, size=4 << 20), "more than 67,108,864 bytes unpacked"),  # in all
        (lambda p: p.write_bytes(tar_archive({f"f{i}": b"" for i in range(10_001)})), "more than 10,000 members"),
        (lambda p: p.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(64)), "a zstd-compressed file"),
        # truncated inside its first member (incompressible bytes), before /etc/nccl.conf
        (lambda p: p.write_bytes(tar_archive({"noise": random.Random(1).randbytes(1 << 20), "etc/nccl.conf": CONF},
                                      "w:gz")[:200_000]), "unreadable"),
    ],
)
def test_an_archive_past_a_bound_is_unknown_not_read_to_its_end(tmp_path: Path, make: Any, says: str) -> None:
    import resource
    import time

    make(tmp_path / "a.tar.gz")
    started, peak = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    image = evaluate(f"{BASE}ADD a.tar.gz /\n", context=tmp_path, wanted=["/etc/nccl.conf"])
    assert time.monotonic() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 256 << 10  # KiB: well under 256 MiB
    assert [f for f in image.files if f.content is not None] == []
    assert any(says in u.construct for u in image.unknowns), image.unknowns


@pytest.mark.parametrize(
    ("directives", "custom"),
    [
        ("# syntax=docker/dockerfile:1\n", None),
        ("# syntax=docker/dockerfile:1.7\n", None),
        ("#syntax = docker.io/docker/dockerfile:1.4.3\n", None),
        ("# syntax=docker/dockerfile:1@sha256:" + "a" * 64 + "\n", None),
        ("# escape=`\n# syntax=docker/dockerfile\n", None),
        ("# syntax=ghcr.io/example/frontend:1\n", "ghcr.io/example/frontend:1"),
        ("# escape=`\n# SYNTAX=example/df\n", "example/df"),
        ("# syntax=docker/dockerfile:1-labs\n", "docker/dockerfile:1-labs"),  # experimental: not the standard
        ("# syntax=docker/dockerfile-upstream:master\n", "docker/dockerfile-upstream:master"),
        ("\n# syntax=example/df\n", None),  # after a blank line: a comment, not a directive
        ("# a comment\n# syntax=example/df\n", None),
    ],
)
def test_a_custom_frontend_makes_the_image_unknown(directives: str, custom: str | None) -> None:
    text = directives + BASE + "ENV NCCL_IB_DISABLE=1\nRUN echo NCCL_NET=Socket > /etc/nccl.conf\n"
    assert dockerfile.frontend(text) == custom
    image = evaluate(text, wanted=["/etc/nccl.conf"])
    if custom is None:
        assert {v.name for v in image.env} == {"NCCL_IB_DISABLE"} and image.files
    else:
        assert image.env == () and image.files == () and image.runs == ()
        assert [u.kind for u in image.unknowns] == ["parse error"]
        assert f"# syntax={custom}: a custom BuildKit frontend" in image.unknowns[0].construct
