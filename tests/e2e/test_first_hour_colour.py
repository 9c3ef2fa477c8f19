"""The first hour III, on a terminal: mandatory failures red, advisory findings yellow; no colour when piped or
with NO_COLOR; `--color` forces it (issue 38, point 9)."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pytest

from amlgpu.cli import main
from amlgpu.terminal import RED, RESET, YELLOW, paint_line
from tests.conftest import ROOT, copy_project_folders


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The dev stack with one mandatory failure (a node rank read from a variable nothing sets)."""
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    copy_project_folders(tmp_path)
    text = (ROOT / "Pulumi.dev.yaml").read_text().replace("--node_rank $NODE_RANK", "--node_rank $NODERANK")
    (tmp_path / "Pulumi.dev.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    return tmp_path


def _run(monkeypatch: pytest.MonkeyPatch, argv: list[str], stream: io.StringIO) -> tuple[int, str, str]:
    """``amlgpu argv`` writing to ``stream`` (and a stream of its kind for stderr)."""
    err = type(stream)()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = stream, err
    try:
        code = main(argv)
    finally:
        sys.stdout, sys.stderr = saved
    return code, stream.getvalue(), err.getvalue()


def test_a_terminal_gets_red_and_yellow(clone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = _run(monkeypatch, ["plan", "--stack", "dev"], Terminal())
    assert code == 1
    lines = out.splitlines()
    (mandatory,) = [line for line in lines if "run-launch-variable-empty  [high]" in line]
    assert mandatory.startswith(RED + "Pulumi.dev.yaml:") and mandatory.endswith(RESET)
    advisory = [line for line in lines if "storage-replication-redundant  [low]" in line]
    assert advisory and all(line.startswith(YELLOW + "  Pulumi.dev.yaml:") for line in advisory)
    assert f"{RED}Mandatory policy failures:{RESET}" in lines
    assert not any("\x1b" in line for line in lines if line.startswith("Cost at list price"))  # the rest plain


def test_no_colour_when_piped_or_with_no_color_and_forced_with_color(clone: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = _run(monkeypatch, ["plan", "--stack", "nope"], io.StringIO())  # piped
    assert code == 2 and "\x1b" not in out + err and err.startswith("error: ") and "nope" in err
    monkeypatch.setenv("NO_COLOR", "1")
    code, out, err = _run(monkeypatch, ["plan", "--stack", "nope"], Terminal())
    assert code == 2 and "\x1b" not in out + err
    code, out, err = _run(monkeypatch, ["plan", "--stack", "nope", "--color"], io.StringIO())  # forced
    assert code == 2 and err.startswith(RED + "error: ")


def test_only_the_tools_own_lines_are_painted() -> None:
    assert paint_line("  warning: prices read 2024-08-18 are old\n") == (
        f"{YELLOW}  warning: prices read 2024-08-18 are old{RESET}\n")
    assert paint_line("Cost at list price: 70.98 USD/h\n") == "Cost at list price: 70.98 USD/h\n"
    assert paint_line("\n") == "\n"
