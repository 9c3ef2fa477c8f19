"""One stack's internal error (a bug in an evaluator: RecursionError, MemoryError...) in a plan of several stacks.

The stack is reported as an internal error (exit 3, :data:`kernel.errors.EXIT_INTERNAL`): the message names the
stack and the exception and asks for a report, with no traceback; nothing is written for it; the other stacks
are still planned and written, and the summary, the JSON document and the pull-request comment show the stack
as errored. The failure is injected the way a user meets one: an evaluator of the plan fails on one stack's
input, in the same process as the plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from kernel.errors import EXIT_INTERNAL
from tests.conftest import NS, dev_config, make_project

MARKER = "internal-error-marker"
"""A word only the ``deep`` stack's commands hold: the injected failure hits that stack only."""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dev`` as shipped and ``deep``: dev with a word in each run's command that the injected failure meets."""
    folder = make_project(tmp_path_factory.mktemp("internal") / "project", dev_config(), stack="dev")
    config = dev_config()
    for job in config[f"{NS}:jobs"]:
        if "command" in job:
            job["command"] = f"echo {MARKER}; {job['command']}"
    (folder / "Pulumi.deep.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return folder


def _failing(real: Callable[..., Any], error: BaseException) -> Callable[..., Any]:
    def wrapper(command: str, *args: Any, **kwargs: Any) -> Any:
        if MARKER in command:
            raise error
        return real(command, *args, **kwargs)
    return wrapper


def _inject(monkeypatch: pytest.MonkeyPatch, where: str, error: BaseException) -> None:
    module, _, name = where.rpartition(".")
    target = __import__(module, fromlist=[name])
    monkeypatch.setattr(target, name, _failing(getattr(target, name), error))


INJECTED = [
    # the command's reading, inside the Pulumi program under the mock engine
    ("jobs.resolve.read_command", RecursionError("maximum recursion depth exceeded")),
    # the InfiniBand rule's evaluator, in the policy engine after the program
    ("policies.rules.fabric.assess", MemoryError()),
]


@pytest.mark.slow
@pytest.mark.parametrize(("where", "error"), INJECTED, ids=[w for w, _ in INJECTED])
def test_one_stacks_internal_error_is_reported_and_the_others_are_planned(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, where: str,
        error: BaseException) -> None:
    _inject(monkeypatch, where, error)
    out = f"build/{where}"
    monkeypatch.chdir(project)
    code = main(["plan", "--stack", "deep", "--stack", "dev", "--out", out, "--format", "json"])
    stdout, stderr = capsys.readouterr()
    assert code == EXIT_INTERNAL, stderr
    kind = type(error).__name__
    assert f"error: stack 'deep': internal error ({kind}" in stderr
    assert "Please report it" in stderr and "Traceback" not in stderr
    document = json.loads(stdout)
    assert document["exit_code"] == EXIT_INTERNAL
    entries = {entry["stack"]: entry for entry in document["stacks"]}
    assert entries["deep"]["exit_code"] == EXIT_INTERNAL and kind in entries["deep"]["error"]
    assert entries["dev"]["exit_code"] == 0 and "error" not in entries["dev"]
    assert sorted(p.name for p in (project / out).iterdir()) == ["dev"]  # nothing written for deep
    assert (project / out / "dev" / "policy.md").is_file()


@pytest.mark.slow
def test_the_comment_and_the_summary_show_the_errored_stack(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _inject(monkeypatch, "jobs.resolve.read_command", RecursionError("maximum recursion depth exceeded"))
    monkeypatch.chdir(project)
    for fmt, expected in (("markdown", ["| `deep` | 💥 internal error |", "<summary>💥 <code>deep</code>: internal "
                                        "error</summary>", "RecursionError"]),
                          ("text", ["0 bad input, 1 internal error (exit 3)"])):
        code = main(["plan", "--stack", "dev", "--stack", "deep", "--out", f"build/{fmt}", "--format", fmt])
        stdout, _ = capsys.readouterr()
        assert code == EXIT_INTERNAL
        for line in expected:
            assert line in stdout, (fmt, stdout)


@pytest.mark.slow
def test_a_single_stacks_internal_error_exits_3_without_a_traceback(
        project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    _inject(monkeypatch, "jobs.resolve.read_command", RecursionError("maximum recursion depth exceeded"))
    monkeypatch.chdir(project)
    code = main(["plan", "--stack", "deep", "--out", "build/single"])
    _, stderr = capsys.readouterr()
    assert code == EXIT_INTERNAL
    assert "stack 'deep': internal error (RecursionError" in stderr and "Traceback" not in stderr
    assert not (project / "build" / "single").exists()
