"""Hostile stack files and paths (docs/security.md): bounded YAML, and every path a stack names kept inside
the project with symbolic links followed.

The pull-request gate plans fork pull requests, so each case here is something an attacker controls: the
stack file's text, the project's files and links, the ``--stack`` argument.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis import code_scan
from jobs.submit import uploadable
from kernel import bounded
from kernel.errors import ConfigError
from stack import stackfile
from tests import cli
from tests.conftest import ROOT, make_project
from tests.reliability.test_corpus import (
    STACK,
    STACK_FILE,
    E,
    J,
    assert_clean_refusal,
    good_config,
    names,
    plan_in_process,
    snapshot,
)

# ------------------------------------------------------------------------------------------------ YAML bounds


def _nested_anchors(levels: int, width: int = 9) -> str:
    """The classic alias bomb: each anchor repeats the previous one ``width`` times."""
    lines = ["config:", "  azure-native:location: westeurope", f"  x:l0: &l0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels + 1):
        lines.append(f"  x:l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


HOSTILE_YAML: list[tuple[str, str, str]] = [
    # (case, text, what the one-line error says)
    ("alias bomb 9^9", _nested_anchors(8), "line 8: expands to more than 500,000 values"),
    # Just over the limit: the old reader accepted it (and spent seconds and hundreds of MB on it).
    ("alias expansion just over the limit", _nested_anchors(5), "expands to more than 500,000 values"),
    ("nesting 100,000 deep (libyaml's composer crashed)", "a: " + "[" * 100_000 + "]" * 100_000,
     "line 1: nested more than 64 levels deep"),
    ("block nesting 65 deep", "".join(f"{'  ' * i}k{i}:\n" for i in range(65)) + "  " * 65 + "v\n",
     "line 65: nested more than 64 levels deep"),
    ("a value that contains itself", "config:\n  x:loop: &a [1, *a]\n",
     "line 2: invalid YAML: alias *a is inside its own anchor &a"),
    ("a mapping that contains itself", "config:\n  x:loop: &m {k: *m}\n", "alias *m is inside its own anchor &m"),
]


@pytest.mark.parametrize(("case", "text", "says"), HOSTILE_YAML, ids=[c[0] for c in HOSTILE_YAML])
def test_a_hostile_stack_file_is_refused_naming_the_file_and_the_limit(
    tmp_path: Path, case: str, text: str, says: str
) -> None:
    path = tmp_path / "Pulumi.bomb.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        stackfile.read(path)
    message = str(raised.value)
    assert message.startswith("Pulumi.bomb.yaml: "), message
    assert says in message
    assert "\n" not in message


def test_a_stack_file_over_the_size_limit_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.big.yaml"
    with path.open("w") as handle:
        handle.write("config:\n  x:pad: |\n")
        handle.write(("    " + "a" * 1000 + "\n") * (stackfile.MAX_BYTES // 1000))
    with pytest.raises(ConfigError, match=r"^Pulumi.big.yaml: larger than 8,388,608 bytes, the limit"):
        stackfile.read(path)


def test_the_limits_leave_room_for_a_large_real_stack() -> None:
    """Anchors a stack file really uses (one shared block, repeated per run) stay far under the limits."""
    text = yaml.safe_dump({"config": good_config()}, sort_keys=False)
    text = text.replace("    resources:\n", "    resources: &r\n", 1)
    bounded.check(text, bounded.STACK_FILE)  # raises past a limit
    big = (ROOT / "Pulumi.prod.yaml").read_text()
    bounded.check(big, bounded.STACK_FILE)


def test_the_console_script_refuses_the_bomb_at_once_in_bounded_memory(tmp_path: Path) -> None:
    """The 10-line file that ran past 120 s and 10 GB: exit 2, one line, under a 1 GiB address-space cap."""
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    (project / STACK_FILE).write_text(_nested_anchors(8))
    done = cli.amlgpu(project, "plan", "--stack", STACK, timeout=120, fresh=True, address_space=cli.ONE_GIB)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: {STACK_FILE}: line 8: expands to more than 500,000 values (aliases counted in full), the limit "
        "for a stack file: an alias bomb?"
    ]
    assert not (project / "build").exists()


# ------------------------------------------------------------------------------------------------ paths


Arrange = Callable[[Path, dict[str, Any]], None]


def _link(name: str, target: str | Path) -> Callable[[Path], None]:
    def make(project: Path) -> None:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).symlink_to(target)

    return make


def _outside(tmp: Path) -> Path:
    folder = tmp / "outside"
    folder.mkdir(exist_ok=True)
    (folder / "Dockerfile").write_text("FROM scratch\n")
    (folder / "conda.yaml").write_text("name: x\n")
    (folder / "train.py").write_text("print('not the project')\n")
    return folder


def _env_build(path: str, dockerfile: str = "Dockerfile") -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        config[E][1]["build"] = {"path": path, "dockerfile_path": dockerfile}

    return mutate


def _code(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        config[J][0]["code"] = path

    return mutate


def _conda(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(config: dict[str, Any]) -> None:
        config[E][2]["conda_file"] = path

    return mutate


ESCAPES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    # (case, link made in the project -> the outside folder ('' for none), stack change, key named)
    ("code is a link to a folder outside", "leak", _code("leak"), f"{J}[0].code"),
    ("code goes through a linked parent", "src", _code("src/deeper"), f"{J}[0].code"),
    ("build.path is a link outside", "ctx", _env_build("ctx"), f"{E}[1].build.path"),
    ("dockerfile_path climbs out of the context", "",
     _env_build("environments/tensorflow", "../../../outside/Dockerfile"), f"{E}[1].build.dockerfile_path"),
    ("conda_file is a link outside", "envs/conda.yaml", _conda("envs/conda.yaml"), f"{E}[2].conda_file"),
]


@pytest.mark.parametrize(("case", "link", "mutate", "key"), ESCAPES, ids=[c[0] for c in ESCAPES])
def test_a_path_that_leads_outside_the_project_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, link: str,
    mutate: Callable[[dict[str, Any]], None], key: str,
) -> None:
    outside = _outside(tmp_path)
    (outside / "deeper").mkdir()
    config = good_config()
    mutate(config)
    project = make_project(tmp_path / "project", config, stack=STACK)
    if link:
        target = outside / "conda.yaml" if link.endswith(".yaml") else outside
        (project / link).parent.mkdir(parents=True, exist_ok=True)
        (project / link).symlink_to(target)
    before = snapshot(project)

    outcome = plan_in_process(project, capsys)

    assert_clean_refusal(outcome)
    assert names(outcome.error_line, key), outcome.error_line
    assert "leads outside the project root (symbolic links followed)" in outcome.error_line
    assert snapshot(project) == before


@pytest.mark.parametrize("stack", ["../escape", "a/b", "x\\y", "", "dev\n::error::x", "a b", "x" * 101])
def test_a_stack_name_that_is_a_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], stack: str) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    outcome = plan_in_process(project, capsys, stack=stack)
    assert_clean_refusal(outcome)
    assert outcome.error_line.startswith(
        f"error: --stack: {stack!r} is not a stack name (Pulumi.<stack>.yaml in the project root"
    )


def test_a_stack_file_linked_to_a_file_outside_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Linked to /proc/self/environ, a stack file would echo CI secrets back in its parse error."""
    secret = tmp_path / "environ"
    secret.write_text("config:\n  x:token: SECRET-VALUE\n  broken: [\n")
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    (project / "Pulumi.linked.yaml").symlink_to(secret)
    outcome = plan_in_process(project, capsys, stack="linked")
    assert_clean_refusal(outcome)
    assert outcome.error_line == (
        "error: --stack: Pulumi.linked.yaml leads outside the project root (symbolic links followed): "
        "a stack file must be a file of the project"
    )
    assert "SECRET" not in outcome.out + outcome.err


# ---------------------------------------------------------------------------------------- links in a code folder


@pytest.fixture
def code_with_links(tmp_path: Path) -> Path:
    """A code folder with its own file, a link inside it, and links (file, folder, dangling) leading out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "credentials").write_text("aws_secret_access_key = " + "A" * 40 + "\n")
    folder = tmp_path / "project" / "src"
    (folder / "pkg").mkdir(parents=True)
    (folder / "train.py").write_text("print('train')\n")
    (folder / "pkg" / "model.py").write_text("print('model')\n")
    (folder / "alias.py").symlink_to("train.py")
    (folder / "creds").symlink_to(outside / "credentials")
    (folder / "etc").symlink_to(outside)
    (folder / "pkg" / "gone").symlink_to(tmp_path / "missing")
    return folder


def test_the_code_scan_neither_reads_nor_lists_links_leading_outside(code_with_links: Path) -> None:
    assert code_scan.scan(code_with_links).findings == ()  # the outside file holds a credential: it was not read
    assert code_scan.outside_links(code_with_links) == ("creds", "etc", "pkg/gone")


def test_an_upload_sends_a_copy_without_the_links_leading_outside(code_with_links: Path) -> None:
    root = code_with_links.parent
    with uploadable(root, "src") as staged:
        assert staged is not None and staged.name == "src" and not staged.is_relative_to(root)
        sent = snapshot(staged)
    assert sent == {
        "alias.py": b"print('train')\n", "pkg/model.py": b"print('model')\n", "train.py": b"print('train')\n"
    }
    assert not staged.exists()


def test_an_upload_of_a_folder_without_such_links_is_the_folder_itself(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('train')\n")
    with uploadable(tmp_path, "src") as staged:
        assert staged is None  # the folder is uploaded as it is


def test_plan_says_which_links_it_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    (project / "jobs" / "workloads" / "etc").symlink_to("/etc")
    outcome = plan_in_process(project, capsys, "--format", "json")
    assert outcome.code == 0, outcome.err
    assert (
        "note: code folder 'jobs/workloads': symbolic links leading outside it are neither scanned nor uploaded: etc"
        in outcome.err.splitlines()
    )


def test_the_shipped_code_folder_has_no_link_leading_outside() -> None:
    assert code_scan.outside_links(ROOT / "jobs" / "workloads") == ()


def test_run_local_snapshots_leave_out_links_leading_outside(code_with_links: Path, tmp_path: Path) -> None:
    from jobs.emulate.snapshot import copy_code

    copied = copy_code(code_with_links, tmp_path / "snapshot")
    names = sorted(p.relative_to(tmp_path / "snapshot").as_posix() for p in (tmp_path / "snapshot").rglob("*"))
    assert names == ["alias.py", "pkg", "pkg/model.py", "train.py"]
    assert copied == 3
