"""The docs run as written.

Fenced blocks in the pages below are read by their info string:

* ```` ```sh ````: offline commands; run in order, page by page, with bash in a scratch copy of the
  project (``.venv/bin`` first on PATH, as after ``source .venv/bin/activate``); each must exit 0;
* ```` ```sh setup ```` (installing, cloning) and ```` ```sh azure ```` (needs a subscription, the
  Pulumi CLI or ``az``): not run here, but they must parse as shell;
* ```` ```yaml stack ````: a stack fragment (``aml-gpu-training:<key>:`` entries); all of a page's
  fragments, added to the dev stack, must validate and plan offline with no mandatory policy failure;
* anything else (``console`` transcripts, ``yaml``, ``python``) is prose.

Relative links in every page must point at files that exist.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import (
    NS,
    ROOT,
    copy_project_folders,
    dev_config,
    make_project,
    shipped_stack_names,
    shipped_stacks,
)
from tests.forkserver import amlgpu_on_path

PAGES = (
    "docs/quickstart.md",
    "docs/frameworks.md",
    "docs/jobs.md",
    "docs/infiniband.md",
    "docs/gitops.md",
    "docs/troubleshooting.md",
    "docs/migrating.md",
    "examples/multi-team/README.md",
)
FRAGMENT_PAGES = ("docs/frameworks.md", "docs/jobs.md", "docs/troubleshooting.md")
"""The pages with ``yaml stack`` fragments (the tag test keeps this list complete)."""
SHELLS = {"sh", "bash", "shell"}
pytestmark = pytest.mark.usefixtures("shared_plans")  # the commands plan the same stacks again and again
SKIPPED_TAGS = {"setup", "azure"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    tags: tuple[str, ...]
    body: str


def blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        language, *tags = match.group("info").split() or [""]
        indent = match.group("indent")
        body = "".join(line.removeprefix(indent) for line in match.group("body").splitlines(keepends=True))
        found.append(Block(page, text.count("\n", 0, match.start()) + 1, language, tuple(tags), body))
    return found


def _scratch_project(folder: Path) -> Path:
    """A copy of the project a reader would have; shared trees are links, the rest copies (writable)."""
    folder.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", *(p.name for p in shipped_stacks())):
        shutil.copy(ROOT / name, folder / name)
    for name in ("docs", "schema", "examples", ".github", "policies"):
        shutil.copytree(ROOT / name, folder / name)
    copy_project_folders(folder)
    return folder


def test_every_page_has_blocks_and_only_known_tags() -> None:
    for page in PAGES:
        found = blocks(page)
        assert found, f"{page}: no fenced block"
        for block in found:
            if block.language in SHELLS:
                assert set(block.tags) <= SKIPPED_TAGS, f"{page}:{block.line}: unknown tags {block.tags}"
            assert block.language, f"{page}:{block.line}: a fence without a language"
            if block.language == "yaml" and block.tags:
                assert block.tags == ("stack",) and page in FRAGMENT_PAGES, f"{page}:{block.line}: {block.tags}"


def test_quickstart_runs_the_offline_commands() -> None:
    runnable = [b for b in blocks("docs/quickstart.md") if b.language in SHELLS and not b.tags]
    commands = "\n".join(b.body for b in runnable)
    for command in ("amlgpu init", "amlgpu doctor", "amlgpu plan --stack dev", "amlgpu policy list", "amlgpu schema"):
        assert command in commands


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_shell_blocks_run_as_written(page: str, tmp_path: Path) -> None:
    """``amlgpu`` is the fork server's (tests/forkserver.py): a fresh process per command, as a shell starts it,
    without importing the packages again for each; every other program (torchrun, actionlint, python) is real."""
    project = _scratch_project(tmp_path / "project")
    shim = amlgpu_on_path(tmp_path / "bin").parent
    path = os.pathsep.join([str(shim), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path}
    for block in blocks(page):
        if block.language not in SHELLS:
            continue
        if block.tags:
            result = subprocess.run(["bash", "-n", "-c", block.body], capture_output=True, text=True, check=False)
            assert result.returncode == 0, f"{page}:{block.line}: not valid shell\n{result.stderr}"
            continue
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.body], cwd=project, env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        assert result.returncode == 0, (
            f"{page}:{block.line}: exit {result.returncode}\n{block.body}\n--- stdout\n{result.stdout[-3000:]}"
            f"\n--- stderr\n{result.stderr[-3000:]}"
        )


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--version"], ["plan", "--stack", "nope"], ["policy", "list", "--format", "x"]],
                         ids=["succeeds", "bad-input", "usage-error"])
def test_the_shells_amlgpu_answers_as_the_console_script_does(argv: list[str], tmp_path: Path) -> None:
    """The fork server's ``amlgpu`` above gives what the real console script gives: exit status, stdout, stderr
    (which names the working folder), so a failing block cannot pass."""
    from tests import cli

    shim = amlgpu_on_path(tmp_path / "bin")
    real = cli.amlgpu(tmp_path, *argv, fresh=True)
    forked = subprocess.run([str(shim), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            check=False, stdin=subprocess.DEVNULL)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == (0 if argv == ["--version"] else 2), real.stderr


def _fragments(page: str) -> list[dict[str, Any]]:
    fragments = []
    for block in blocks(page):
        if block.language == "yaml" and block.tags == ("stack",):
            fragment = yaml.safe_load(block.body)
            assert isinstance(fragment, dict) and all(k.startswith(f"{NS}:") for k in fragment), block
            fragments.append(fragment)
    return fragments


# What docs/frameworks.md promises about each of its runs: the launcher amlgpu infers for it.
FRAMEWORK_LAUNCHERS = {
    "ddp-per-process": "per-process",
    "ddp-torchrun": "torchrun",
    "lightning-per-node": "lightning",
    "hf-trainer": "hf-trainer",
    "hf-accelerate": "accelerate",
    "deepspeed-per-process": "per-process",
    "deepspeed-mpi": "mpi",
    "deepspeed-cli": "deepspeed",
    "horovod-mpi": "horovod",
    "tf-multiworker": "tf-multiworker",
}


@pytest.mark.parametrize("page", FRAGMENT_PAGES)
def test_stack_fragments_plan_without_a_mandatory_failure(page: str, tmp_path: Path) -> None:
    from planning.service import PlanOptions, plan_stack
    from stack.project import load_stack

    config = dev_config()
    for fragment in _fragments(page):
        for key, value in fragment.items():
            if isinstance(value, list):
                config[key] = [*config.get(key, []), *value]
            else:
                config[key] = value
    project = make_project(tmp_path / "project", config)
    (project / "src").mkdir()  # the pages' runs upload `code: src`
    (project / "src" / "train.py").write_text("print('training')\n")
    result = plan_stack(load_stack("test", project), PlanOptions(project / "build"))
    mandatory = [f.text for f in result.report.findings if f.enforcement == "mandatory" and not f.waived]
    assert result.report.mandatory_failures == 0, mandatory
    launchers = {run.name: run.launcher for run in result.runs}
    if page == "docs/frameworks.md":
        assert {name: launchers.get(name) for name in FRAMEWORK_LAUNCHERS} == FRAMEWORK_LAUNCHERS


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", [*PAGES, "docs/config.md"])
def test_relative_links_resolve(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    for match in _LINK.finditer(text):
        target, _, anchor = match.group("target").partition("#")
        if re.match(r"^[a-z]+:", target):
            continue
        path = (ROOT / page).parent / target if target else ROOT / page
        assert path.exists(), f"{page}: broken link {match.group('target')}"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path.read_text(encoding="utf-8")), f"{page}: no anchor {match.group('target')}"


# ------------------------------------------------------------------------------------------------ every command


ALL_PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
             *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.md")))
"""Every page a reader may copy an ``amlgpu`` command from."""
_MENTION = re.compile(r"(?<![\w/.-])amlgpu((?: +[^\s`|#]+)+)")
_PLACEHOLDER = re.compile(r"[<>\[\]$\"]|^[A-Z][A-Z_=.]*$")
"""A synopsis, not a command: ``<run>``, ``[--nodes N]``, ``RUN``, ``$stack``..."""


@dataclass(frozen=True)
class DocCommand:
    where: str
    argv: tuple[str, ...]


def doc_commands() -> list[DocCommand]:
    """Every concrete ``amlgpu`` command written in the docs (synopses and bare mentions left out)."""
    from amlgpu.cli import COMMANDS

    found = []
    for page in ALL_PAGES:
        for number, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1):
            for match in _MENTION.finditer(line):
                argv = [token.rstrip(").,;:") for token in match.group(1).split()]
                if not argv or argv[0] not in (*COMMANDS, "--version"):
                    continue  # prose: "amlgpu accepts..."
                if any(_PLACEHOLDER.search(token) for token in argv) or _incomplete(argv):
                    continue  # a synopsis, or a mention of a command (or of one flag) in prose
                found.append(DocCommand(f"{page}:{number}", tuple(argv)))
    return found


@functools.cache
def _parser() -> argparse.ArgumentParser:
    """The CLI's parser, built once: the docs mention commands 150 times, and building it is most of reading them."""
    from amlgpu.cli import build_parser

    return build_parser()


def _incomplete(argv: list[str]) -> bool:
    """Whether argparse refuses ``argv`` only for missing required arguments (``amlgpu plan --base`` in prose)."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            _parser().parse_args(argv)
    except SystemExit:
        return any(reason in said.getvalue() for reason in ("the following arguments are required", "expected one "
                                                                "argument", "one of the arguments"))
    return False


NOT_RUN_HERE = {
    ("prices", "refresh"): "online (Azure's Retail Prices API); tests/planning/test_review_prices.py replays "
    "recorded pages",
    ("import",): "reads the reader's own job files; tests/importer/test_import.py imports real CLI v2 and SDK files",
    ("job",): "a submitted job of a deployed workspace; tests/jobs/test_remote.py follows one over recorded Azure ML",
}
"""Commands the docs show that this test only parses and checks (stack, run), and where they are run."""


DOC_COMMANDS = doc_commands()
DISTINCT = sorted({c.argv: c for c in DOC_COMMANDS}.values(), key=lambda c: (c.argv[0] != "init", c.argv))


def _stacks_named_in_docs() -> set[str]:
    """Stacks a reader has: the project's, the examples' (copied in by their page) and init's."""
    stacks = {*shipped_stack_names(), *shipped_stack_names("examples/multi-team")}
    return stacks | {c.argv[c.argv.index("--stack") + 1] for c in DOC_COMMANDS if c.argv[0] == "init"}


def _parse(argv: tuple[str, ...]) -> Any:
    from amlgpu.cli import build_parser

    try:
        return build_parser().parse_args(list(argv))
    except SystemExit as exit_:
        raise AssertionError(f"not a valid command line: amlgpu {' '.join(argv)}") from exit_


def test_the_docs_name_commands_that_parse_with_stacks_and_runs_that_exist() -> None:
    from stack.project import load_stack

    assert len(DOC_COMMANDS) >= 15, DOC_COMMANDS
    stacks = _stacks_named_in_docs()
    for command in DOC_COMMANDS:
        args = _parse(command.argv)
        stack = getattr(args, "stack", None)
        for named in [stack, *(getattr(args, "stacks", None) or ())]:  # plan takes --stack repeated
            assert named is None or named in stacks, f"{command.where}: no stack {named!r} (known: {sorted(stacks)})"
        job = getattr(args, "job", None)
        if job is not None and (ROOT / f"Pulumi.{stack}.yaml").is_file():
            declared = {run.name for run in load_stack(stack, ROOT).config.jobs}
            assert job in declared, f"{command.where}: stack {stack!r} declares no run {job!r}: {sorted(declared)}"


@pytest.fixture(scope="module")
def docs_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reader's project: the examples' stack files and their pack config copied in, as examples/multi-team
    says to (the research stack's identity and waiver are the platform's to allow)."""
    project = _scratch_project(tmp_path_factory.mktemp("docs") / "project")
    for path in shipped_stacks("examples/multi-team"):
        shutil.copy(path, project / path.name)
    shutil.copy(ROOT / "examples" / "multi-team" / "policy-config.json", project / "policies" / "config.json")
    return project


@pytest.mark.slow
@pytest.mark.parametrize("command", DISTINCT, ids=[" ".join(c.argv) for c in DISTINCT])
def test_every_command_in_the_docs_runs_or_dry_runs(command: DocCommand, docs_project: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each distinct command, as written: submissions as ``--dry-run`` (offline, no subscription), local runs
    prepared up to the point of starting processes, everything else run; each must succeed."""
    from amlgpu.cli import main

    monkeypatch.chdir(docs_project)
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    argv = list(command.argv)
    if any(tuple(argv[:len(prefix)]) == prefix for prefix in NOT_RUN_HERE):
        _parse(command.argv)
        return
    for earlier in _prerequisites(command):  # what an earlier command of the page made: a stack, a base plan
        assert main(list(earlier.argv)) == 0, earlier.where
    if argv[0] == "init" and (docs_project / f"Pulumi.{argv[argv.index('--stack') + 1]}.yaml").exists():
        argv.append("--force")
    if argv[0] == "--version":
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 0
        return
    if argv[0] == "run-local":
        _prepare_only(_parse(command.argv), docs_project)
        return
    if argv[0] == "submit" and "--dry-run" not in argv:
        argv.append("--dry-run")
    code = main(argv)
    assert code == 0, f"{command.where}: amlgpu {' '.join(argv)} exited {code}\n{capsys.readouterr().err[-3000:]}"


def _prerequisites(command: DocCommand) -> list[DocCommand]:
    """The docs' commands that make what ``command`` names and a reader made first: the stack ``amlgpu init``
    writes, the plan folder ``--base`` compares with."""
    def value(argv: tuple[str, ...], flag: str) -> str | None:
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else None

    stack, base = value(command.argv, "--stack"), value(command.argv, "--base")
    return [c for c in DISTINCT if c.argv != command.argv and (
        (c.argv[0] == "init" and stack is not None and value(c.argv, "--stack") == stack
         and not Path(f"Pulumi.{stack}.yaml").exists())
        or (c.argv[0] == "plan" and base is not None and value(c.argv, "--out") == base and not Path(base).exists())
    )]


def _prepare_only(args: Any, project: Path) -> None:
    """``amlgpu run-local`` up to the point where it would start processes: the run, its topology and inputs."""
    from amlgpu.local_jobs import find_run, parse_inputs
    from jobs.emulate.prepare import Request, prepare
    from jobs.resolve import resolve_run
    from stack.project import load_stack

    stack = load_stack(args.stack, project)
    request = Request(nodes=args.nodes, procs_per_node=args.procs_per_node, timeout_s=args.timeout,
                      inputs=parse_inputs(args.input), tf_empty_ps=args.tf_empty_ps)
    workdir = project / "build" / "run-local" / args.job
    composite = next((job for job in stack.config.composites if job.name == args.job), None)
    if composite is not None:  # a pipeline's steps, a sweep's trials: every one prepared
        from jobs.emulate.composite import prepare_pipeline, prepare_sweep
        from jobs.pipelines import resolve_composite

        job, runs = resolve_composite(composite, stack.config, project)
        if job.kind == "pipeline":
            prepare_pipeline(job, {r.name: r for r in runs}, request, root=project, workdir=workdir, environ={})
        else:
            prepare_sweep(job, runs[0], request, trials=args.trials, root=project, workdir=workdir, environ={})
    else:
        _, declared = find_run(stack, args.job)
        prepare(resolve_run(declared, stack.config, project), request, root=project, workdir=workdir, environ={})
    shutil.rmtree(workdir)
