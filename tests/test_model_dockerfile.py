"""analysis/dockerfile.py: Dockerfiles through BuildKit's parser, and what the last stage bakes in."""

from __future__ import annotations

from pathlib import Path

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
