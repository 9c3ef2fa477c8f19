"""``amlgpu plan`` with several stacks in one process: ``--stack`` repeated and ``--all``.

Each stack is planned in isolation: its artifacts are byte for byte those of the stack planned alone in a
fresh process, whatever was planned before it in the same process (a stack with another subscription, a
pack config of its own, a stack with bad input). Each gets ``<out>/<stack>/``; the exit code is the worst
stack's; a stack with bad input is reported and the others still planned; Ctrl-C leaves each stack's folder
whole or as it was.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from planning.service import OUTPUT_LAYOUT
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.hostile.test_interrupts import SLOW_WRITE
from tests.reliability.test_corpus import amlgpu, leftovers, snapshot

BROKEN = {"config": {f"{NS}:clusters": 3}}
"""A stack file the model refuses (exit 2)."""


def _failing() -> dict[str, Any]:
    """The dev stack with public IPs on its nodes: a mandatory policy fails (exit 1)."""
    config = dev_config()
    config[f"{NS}:clusters"][0]["enable_node_public_ip"] = True
    return config


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dev and prod as shipped (prod pins a subscription and has a pack config of its own), a stack whose
    policy gate fails, and one with bad input."""
    folder = make_project(tmp_path_factory.mktemp("stacks") / "project", dev_config(), stack="dev")
    shutil.copy(ROOT / "Pulumi.prod.yaml", folder / "Pulumi.prod.yaml")
    (folder / "policies").mkdir()
    shutil.copy(ROOT / "policies" / "config.prod.json", folder / "policies" / "config.prod.json")
    (folder / "Pulumi.failing.yaml").write_text(yaml.safe_dump({"config": _failing()}, sort_keys=False))
    (folder / "Pulumi.broken.yaml").write_text(yaml.safe_dump(BROKEN))
    return folder


@pytest.mark.slow
def test_planning_a_stack_after_others_gives_the_bytes_of_planning_it_alone(project: Path) -> None:
    """The proof of isolation: prod (its own subscription id, pack config and resources) then a stack with
    bad input then dev, in one process; dev then prod in another; each stack alone in a fresh process."""
    together = amlgpu(project, "plan", "--stack", "prod", "--stack", "broken", "--stack", "dev",
                      "--out", "build/together")
    assert together.code == 2, together.err
    assert sorted(p.name for p in (project / "build" / "together").iterdir()) == ["dev", "prod"]
    reverse = amlgpu(project, "plan", "--stack", "dev", "--stack", "prod", "--out", "build/reverse")
    assert reverse.code == 0, reverse.err
    for name in ("dev", "prod"):
        alone = amlgpu(project, "plan", "--stack", name, "--out", f"build/alone/{name}")
        assert alone.code == 0, alone.err
        expected = snapshot(project / "build" / "alone" / name)
        assert {"resources.json", "outputs.json", "policy.md", "policy.sarif", "cost.json"} <= set(expected)
        assert snapshot(project / "build" / "together" / name) == expected, name
        assert snapshot(project / "build" / "reverse" / name) == expected, name


def plan(project: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``amlgpu plan ARGS`` run in ``project`` by the CLI's entry point: exit code, stdout, stderr."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_worst_exit_code_wins_and_a_bad_stack_stops_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = plan(project, capsys, "--stack", "broken", "--stack", "failing", "--stack", "dev",
                           "--out", "build/worst")
    assert code == 2
    assert [line for line in err.splitlines() if line.startswith("[")] == [
        "[1/3] Planning stack 'broken' offline...", "[2/3] Planning stack 'failing' offline...",
        "[3/3] Planning stack 'dev' offline..."]
    assert "Pulumi.broken.yaml:2:3  aml-gpu-training:clusters  expected a list" in err and "Traceback" not in err
    assert sorted(p.name for p in (project / "build" / "worst").iterdir()) == ["dev", "failing"]
    # Each stack's own report, then the summary table.
    assert out.count("Plan for stack ") == 2
    table = out[out.index("\nStack "):].strip().splitlines()
    assert table[0].split() == ["Stack", "Verdict", "Mandatory", "Advisory", "Cost/h", "(USD)"]
    rows = {line.split()[0]: line.split() for line in table[1:4]}
    assert rows["broken"][1:] == ["bad", "input", "-", "-", "-"]
    assert rows["failing"][1:3] == ["failed", "1"] and rows["dev"][1:3] == ["passed", "0"]
    assert table[4] == "3 stacks planned: 1 passed, 1 failed a mandatory policy, 1 bad input (exit 2)."

    assert plan(project, capsys, "--stack", "failing", "--stack", "dev", "--out", "build/worst")[0] == 1
    assert plan(project, capsys, "--stack", "dev", "--stack", "prod", "--out", "build/worst")[0] == 0


def test_all_plans_every_stack_file_into_its_own_folder_and_json_has_one_entry_each(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = plan(project, capsys, "--all", "--format", "json")
    assert code == 2
    document = json.loads(out)
    assert [s["stack"] for s in document["stacks"]] == ["broken", "dev", "failing", "prod"]
    assert [s["exit_code"] for s in document["stacks"]] == [2, 0, 1, 0]
    assert document["exit_code"] == 2
    broken, dev = document["stacks"][:2]
    assert broken["error"].startswith("Pulumi.broken.yaml") and "out" not in broken
    assert dev["out"] == "build/dev" and dev["policy"]["mandatory_failures"] == 0
    for name in ("dev", "failing", "prod"):
        assert (project / "build" / name / "resources.json").is_file()
    assert not (project / "build" / "broken").exists()


def test_json_has_the_same_shape_for_one_stack_as_for_several(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = plan(project, capsys, "--stack", "failing", "--out", "build/one", "--format", "json")
    one = json.loads(out)
    _, out, _ = plan(project, capsys, "--stack", "failing", "--stack", "dev", "--out", "build/two", "--format", "json")
    two = json.loads(out)
    assert code == 1 and one["exit_code"] == 1 and two["exit_code"] == 1
    assert set(one) == set(two) == {"stacks", "exit_code"}
    assert [s["stack"] for s in one["stacks"]] == ["failing"]
    alone, among = one["stacks"][0], two["stacks"][0]
    assert alone["out"] == "build/one" and among["out"] == "build/two/failing"
    assert {**alone, "out": None} == {**among, "out": None}
    assert alone["exit_code"] == 1 and alone["policy"]["mandatory_failures"] > 0


def test_the_markdown_document_is_one_comment_with_a_section_per_stack(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = plan(project, capsys, "--stack", "dev", "--stack", "failing", "--format", "markdown",
                         "--out", "build/comment")
    assert code == 1
    assert out.startswith("## ❌ amlgpu plan: 2 stacks\n\n| Stack | Verdict |")
    assert "| `failing` | ❌ failed | 1 |" in out and "| `dev` | ✅ passed | 0 |" in out
    # Sections: the failed stack first and open, each holding the policy.md written for it.
    failing_at, dev_at = out.index("<details open>\n<summary>❌ <code>failing</code>"), out.index(
        "<details>\n<summary>✅ <code>dev</code>")
    assert failing_at < dev_at
    for name in ("dev", "failing"):
        assert (project / "build" / "comment" / name / "policy.md").read_text() in out


def test_several_stacks_need_several_names_and_one_way_of_naming_them(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, message in ((["--all", "--stack", "dev"], "argument --stack/-s: not allowed with argument --all"),
                          ([], "one of the arguments --stack/-s --all is required"),
                          (["--changed-since", "HEAD"], "one of the arguments --stack/-s --all is required")):
        with pytest.raises(SystemExit) as exited:
            plan(project, capsys, *argv)
        assert exited.value.code == 2 and message in capsys.readouterr().err
    empty = make_project(project.parent / "empty", dev_config(), stack="x")
    (empty / "Pulumi.x.yaml").unlink()
    code, _, err = plan(empty, capsys, "--all")
    assert code == 2 and "no stack file (Pulumi.<stack>.yaml)" in err


def test_a_base_folder_holds_a_plan_per_stack(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert plan(project, capsys, "--stack", "dev", "--out", "build/base/dev")[0] == 0
    code, _, err = plan(project, capsys, "--stack", "dev", "--stack", "prod", "--out", "build/head",
                         "--base", "build/base")
    assert code == 0
    diff = json.loads((project / "build" / "head" / "dev" / "diff.json").read_text())
    assert diff["base"] == "build/base/dev" and diff["verdict"].startswith("No change")
    # prod has no plan in the base folder (a new stack, or one the base could not plan): no diff, said so.
    assert not (project / "build" / "head" / "prod" / "diff.json").exists()
    assert "note: build/base holds no plan of stack 'prod'" in err

    code, out, err = plan(project, capsys, "--stack", "dev", "--stack", "prod", "--base", "no/such/folder")
    assert code == 2 and out == ""
    assert err.startswith("error: --base: 'no/such/folder' is neither a plan folder nor a git ref")
    assert "Planning stack" not in err


def _complete(folder: Path) -> bool:
    """Whether ``folder`` holds a whole plan: every file a plan without --base writes."""
    expected = {name for name, suffix in OUTPUT_LAYOUT.items() if suffix is None} - {"diff.json"}
    return expected <= {p.name for p in folder.iterdir()}


@pytest.mark.slow  # real plans in a fresh interpreter, interrupted: about 7 CPU s
def test_ctrl_c_in_the_second_stack_exits_130_and_leaves_no_half_written_folder(project: Path) -> None:
    """The first stack's folder is whole, the second's staging folder is gone, the third is not started."""
    out = project / "build" / "interrupted"
    process = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, "plan", "--stack", "dev", "--stack", "prod",
                                "--stack", "failing", "--out", str(out)], cwd=project,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not any(p.suffix == ".tmp" and any(p.iterdir()) for p in out.glob(".prod.*")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)

    assert process.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "interrupted" and "Traceback" not in stdout + stderr
    assert sorted(p.name for p in out.iterdir()) == ["dev"]
    assert _complete(out / "dev")
    assert leftovers(out) == []


def test_the_comment_keeps_within_githubs_limit_and_the_stacks_that_need_review_first() -> None:
    from planning.comment import pr_comment
    from planning.outcome import StackOutcome

    outcomes = [StackOutcome(f"team-{i:02d}", 0, policy_md=f"## report {i}\n" + "x" * 9_000) for i in range(12)]
    outcomes.insert(5, StackOutcome("late", 1, mandatory=2, policy_md="## failing report\n" + "y" * 9_000))
    outcomes.append(StackOutcome("broken", 2, error="Pulumi.broken.yaml:2:3  key  ```\n</details> @org/team"))
    text = pr_comment(outcomes, limit=60_000)
    assert len(text) <= 60_000
    # Bad input, then the failure, then the passed stacks while they fit; the rest as one line each.
    assert text.index("<summary>⛔ <code>broken</code>") < text.index("<summary>❌ <code>late</code>") < text.index(
        "<summary>✅ <code>team-00</code>")
    shown = [o.stack for o in outcomes if f"<code>{o.stack}</code>: passed</summary>" in text]
    noted = [o.stack for o in outcomes if f"- ✅ `{o.stack}`: passed; its report does not fit" in text]
    assert shown and noted and sorted(shown + noted) == sorted(f"team-{i:02d}" for i in range(12))
    # The error is shown verbatim in a fence longer than any it holds: it cannot close the block or the section.
    assert "````text\nPulumi.broken.yaml:2:3  key  ```\n</details> @org/team\n````" in text
    assert "| `broken` | ⛔ bad input | - | - | - |" in text and "| `late` | ❌ failed | 2 | 0 | - |" in text


@pytest.mark.parametrize(("name", "span"), [("dev", "`dev`"), ("a`b", "``a`b``"), ("`x", "`` `x ``"),
                                            ("a|b", "`a\\|b`")])
def test_stack_names_are_code_spans_in_the_comment(name: str, span: str) -> None:
    from planning.comment import code

    assert code(name) == span


def test_the_providers_type_aliases_are_dropped_and_nothing_recorded_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the mock engine the plan drops pulumi-azure-native's API-version type aliases (an offline plan has
    no state to match them against): what the plan records is the same with them, and other aliases stay."""
    import pulumi

    from planning import engine
    from stack.stackfile import read

    provider = pulumi.Alias(type_="azure-native:machinelearningservices/v20200101:Workspace")
    renamed, by_urn = pulumi.Alias(name="old-name"), "urn:pulumi:dev::aml-gpu-training::x:y:Z::old"
    opts = pulumi.ResourceOptions(aliases=[provider, renamed, by_urn], protect=True)
    args = pulumi.ResourceTransformationArgs(None, "azure-native:machinelearningservices:Workspace",  # type: ignore[arg-type]
                                             "ws", {"a": 1}, opts)
    result = engine.without_provider_type_aliases(args)
    assert result is not None and result.props == {"a": 1}
    assert result.opts.aliases == [renamed, by_urn] and result.opts.protect is True
    assert opts.aliases == [provider, renamed, by_urn]  # the program's own options are left as they were

    stack = read(ROOT / "Pulumi.prod.yaml")
    dropped = engine.run_program("prod", stack, ROOT)
    monkeypatch.setattr(engine, "without_provider_type_aliases", lambda args: None)
    kept = engine.run_program("prod", stack, ROOT)
    assert [r.to_json() for r in dropped.resources] == [r.to_json() for r in kept.resources]
    assert dropped.outputs == kept.outputs


def test_each_stack_starts_with_no_secret_remembered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value one stack holds as a secret is masked wherever it shows, but only in that stack's plan: the next
    stack's artifacts are those it has alone (here the same text is a run's description there). And each stack
    has the whole limit of remembered secrets to itself: 150 tokens each plan, where 300 in one stack would
    be refused."""
    from kernel import secrets
    from tests.hostile.test_secrets import WANDB, _hf
    from tests.reliability.test_corpus import good_config

    shared = WANDB[:-4] + "beef"
    a, b = good_config(), good_config()
    run_a, run_b = a[f"{NS}:jobs"][0], b[f"{NS}:jobs"][0]
    run_a.setdefault("environment_variables", {})["WANDB_API_KEY"] = shared  # a secret by its name
    run_b["description"] = f"reproduces {shared}"  # plain text in b
    run_a["environment_variables"].update({f"HF_TOKEN_{n}": _hf(n % 100) + f"{n:05d}" for n in range(150)})
    run_b.setdefault("environment_variables", {}).update(
        {f"HF_TOKEN_{n}": _hf(n % 100) + f"{n:05d}" for n in range(150, 300)})
    assert secrets.MAX_REMEMBERED < 300
    project = make_project(tmp_path / "project", a, stack="a")
    (project / "Pulumi.b.yaml").write_text(yaml.safe_dump({"config": b}, sort_keys=False))

    code, _, err = plan(project, capsys, "--stack", "a", "--stack", "b", "--out", "build/both")
    assert code == 1, err  # both planned: each fails the secret rules, neither is refused
    assert plan(project, capsys, "--stack", "b", "--out", "build/alone/b")[0] == 1
    assert snapshot(project / "build" / "both" / "b") == snapshot(project / "build" / "alone" / "b")
    assert shared in (project / "build" / "both" / "b" / "jobs" / "ddp.yml").read_text()
    assert shared not in (project / "build" / "both" / "a" / "jobs" / "ddp.yml").read_text()


def test_a_plan_writes_nothing_in_the_project_but_its_output_where_python_writes_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The program runs from the project folder, imported as a module: with bytecode writing on (Python's default,
    which a PYTHONDONTWRITEBYTECODE in the environment turns off) that import would leave
    ``__pycache__/__main__.*.pyc`` beside it."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    project = make_project(tmp_path / "project", dev_config(), stack="dev")
    before = sorted(p.relative_to(project) for p in project.rglob("*"))
    code, _, err = plan(project, capsys, "--stack", "dev", "--out", "out")
    assert code == 0, err
    after = sorted(p.relative_to(project) for p in project.rglob("*") if not p.is_relative_to(project / "out"))
    assert after == before
