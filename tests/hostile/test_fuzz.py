"""Fuzzing the whole input surface (docs/security.md): stack files as text, CLI arguments, pack config files
and waiver entries. Whatever the input: exit 0, 1 or 2, never a traceback (an exception escaping ``main``),
a one-line error for exit 2, and nothing written outside ``--out``.

Everything runs in-process through ``amlgpu.cli.main`` with fixed example counts (``deadline=None``: the
2-core CI machine is slow, not wrong) so the file stays within about half a minute. Inputs that reach a
full plan are rare by construction (each costs seconds); those that stop at validation are the point.
"""

from __future__ import annotations

import io
import json
import string
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amlgpu.cli import main
from kernel.errors import UserError
from policies.engine import evaluate
from stack.config import from_stackfile
from stack.resolved import RUN_TYPE, ResolvedRun
from stack.stackfile import read
from tests.conftest import NS, ROOT, make_project
from tests.reliability.test_corpus import STACK, STACK_FILE, good_config, snapshot


def fuzz(max_examples: int) -> settings:
    """Fixed examples on every run (derandomized, no example database): the suite is deterministic, and a
    failure repeats."""
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("fuzz"), good_config(), stack=STACK)


def _run(project: Path, argv: list[str]) -> tuple[int, str, str]:
    """``amlgpu ARGV`` in ``project``; an exception other than argparse's exit propagates (a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        patch.chdir(project)
        try:
            code = main(argv)
        except SystemExit as exited:  # argparse: usage errors (2) and --help (0)
            code = exited.code if isinstance(exited.code, int) else 0
    return code, out.getvalue(), err.getvalue()


def _outside(project: Path, out: str) -> dict[str, bytes]:
    """Every file of the project but those under ``out`` (what a command may write)."""
    return {k: v for k, v in snapshot(project).items() if not k.startswith(f"{out}/")}


def _check(project: Path, argv: list[str], out_folder: str = "fuzz-out") -> tuple[int, str]:
    before = _outside(project, out_folder)
    code, out, err = _run(project, argv)
    assert code in (0, 1, 2), (argv, code, err[-2000:])
    assert "Traceback" not in out + err
    if code == 2 and "usage:" not in err:
        # One closing "error:" line: the whole message, or the count after a stack file's problems.
        assert len([line for line in err.splitlines() if line.startswith("error: ")]) == 1, err
    assert _outside(project, out_folder) == before, f"{argv} wrote outside {out_folder}"
    return code, err


# ------------------------------------------------------------------------------------------------ stack text

YAML_CHARS = string.ascii_letters + string.digits + " \t\n:-[]{},&*!|>'\"#%@`?.\\\u2028\x00\ufeff"
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=12)
KEYS = [f"{NS}:{k}" for k in ("workspace", "network", "clusters", "environments", "jobs", "waivers")]
KEYS += ["azure-native:location", "not-namespaced", f"{NS}:unknown", "other:key"]


@st.composite
def stack_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["chars", "shaped", "dumped", "mutated"]))
    if kind == "chars":
        return draw(st.text(alphabet=YAML_CHARS, max_size=300))
    if kind == "shaped":
        config = draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=5))
        shared = draw(values)
        if config and draw(st.booleans()):  # the same object twice: yaml writes an anchor and an alias
            config[next(iter(config))] = [shared, shared]
        return yaml.safe_dump({"config": config}, allow_unicode=True)
    base = yaml.safe_dump({"config": good_config()}, sort_keys=False)
    lines = base.splitlines(keepends=True)
    if kind == "dumped":  # a section replaced by anything
        key = draw(st.sampled_from(KEYS))
        config = good_config()
        config[key] = draw(values)
        return yaml.safe_dump({"config": config}, sort_keys=False, allow_unicode=True)
    start = draw(st.integers(0, len(lines) - 1))
    end = draw(st.integers(start, min(len(lines), start + 3)))
    junk = draw(st.text(alphabet=YAML_CHARS, max_size=20))
    return "".join(lines[:start]) + junk + "".join(lines[end:])


@pytest.mark.slow
@fuzz(60)
@given(text=stack_texts())
@example(text="config: &a\n  x:y: *a\n")
@example(text="config:\n  " + f"{NS}:jobs: " + "[" * 200 + "]" * 200 + "\n")
@example(text="\ufeffconfig: {}\n")
def test_any_stack_file_text_exits_0_1_or_2_without_a_traceback(project: Path, text: str) -> None:
    (project / STACK_FILE).write_text(text, encoding="utf-8", errors="surrogatepass")
    _check(project, ["plan", "--stack", STACK, "--out", "fuzz-out", "--format", "json"])


# ------------------------------------------------------------------------------------------------ CLI arguments

TOKENS = ["plan", "policy", "list", "schema", "--stack", "-s", STACK, "dev", "nope", "../x", "--out", "fuzz-out",
          "--format", "json", "text", "table", "--policy-config", "missing.json", "--config", "--help", "-h",
          "--version", "", "-", "--", "=", "\x00", "é", "--out=fuzz-out", "--stack=" + STACK]


@fuzz(80)
@given(argv=st.lists(st.sampled_from(TOKENS) | st.text(max_size=6), max_size=7))
@example(argv=["plan", "--stack", STACK, "--out", "fuzz-out", "--policy-config", "\x00"])
@example(argv=["plan", "--stack", "\x00"])
def test_any_command_line_exits_0_1_or_2_without_a_traceback(project: Path, argv: list[str]) -> None:
    """Commands that write into the project by design (``schema --write``, ``policy docs``), sign in to
    Azure (``submit``) or start processes (``run-local``, ``doctor``) are fuzzed elsewhere or not at all."""
    if any(a in ("docs", "--write", "submit", "run-local", "doctor") for a in argv):
        return
    if "plan" in argv and "--out" not in argv and "--out=fuzz-out" not in argv:
        argv = [*argv, "--out", "fuzz-out"]
    (project / STACK_FILE).write_text(yaml.safe_dump({"config": good_config()}, sort_keys=False))
    _check(project, argv)


# ------------------------------------------------------------------------------------------------ pack config

RULES = ["all", "compute-max-nodes", "run-tensorflow-parameter-servers", "compute-allowed-sizes", "no-such-rule"]
pack_values = st.one_of(
    st.sampled_from(["advisory", "mandatory", "disabled", "remediate", "MANDATORY", ""]),
    st.dictionaries(st.sampled_from(["enforcementLevel", "max_nodes_per_cluster", "allowed_sizes", "x"]),
                    values, max_size=3),
    values,
)


@st.composite
def pack_texts(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(alphabet='{}[]":,0123456789.eE-+ntrufalse \n\\', max_size=60))
    data = draw(st.dictionaries(st.sampled_from(RULES), pack_values, max_size=3) | values)
    return json.dumps(data, allow_nan=True)


@fuzz(80)
@given(text=pack_texts())
@example(text="[" * 100_000 + "]" * 100_000)
@example(text='{"compute-max-nodes": {"max_nodes_per_cluster": 1e999}}')
@example(text='{"compute-max-nodes": {"enforcementLevel": ["mandatory"]}}')
def test_any_pack_config_file_exits_0_1_or_2_without_a_traceback(project: Path, text: str) -> None:
    (project / "pack.json").write_text(text, encoding="utf-8")
    (project / STACK_FILE).write_text(yaml.safe_dump({"config": {"azure-native:location": "x"}}))
    code, err = _check(project, ["plan", "--stack", STACK, "--out", "fuzz-out", "--policy-config", "pack.json"])
    assert code == 2  # the stack is incomplete: a valid pack config gets that far, an invalid one stops first
    # A bad pack config stops first, naming it; a good one gets as far as the incomplete stack file,
    # whose problems are listed one per line (`file:line:col  key  message`, or `file  key  message`).
    assert err.startswith(("error: pack.json", f"error: {STACK_FILE}", f"{STACK_FILE}  ", f"{STACK_FILE}:")), err


def test_a_valid_pack_config_reaches_the_policy_list(project: Path) -> None:
    (project / "pack.json").write_text(json.dumps({"compute-max-nodes": "advisory"}))
    code, err = _check(project, ["policy", "list", "--format", "json", "--config", "pack.json"])
    assert code == 0, err


# ------------------------------------------------------------------------------------------------ waivers

waiver = st.fixed_dictionaries(
    {},
    optional={
        "rule": st.sampled_from(["compute-max-nodes", "no-such-rule", "Bad Rule", ""]) | st.text(max_size=8),
        "resource": st.sampled_from(["gpu-a100", "mlw-gpu-dev", "network", "ddp", "nothing"]) | values,
        "reason": st.sampled_from(["reviewed by the platform team", "short"]) | values,
        "expires": st.sampled_from(["2099-12-31", "2000-01-01", "2027-02-30", "tomorrow", 20991231]) | values,
        "extra": values,
    },
)


@pytest.fixture(scope="module")
def dev_findings_input(dev_plan: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """The dev stack's planned resources and resolved runs: what waivers are applied to."""
    return [r.to_json() for r in dev_plan.resources], sorted(
        (ResolvedRun.from_props(r.inputs) for r in dev_plan.by_type(RUN_TYPE)), key=lambda r: r.name
    )


@fuzz(50)
@given(entries=st.lists(waiver | values, max_size=3) | values)
@example(entries=[{"rule": "compute-max-nodes", "resource": "gpu-a100", "reason": "reviewed by the platform team",
                   "expires": "2099-12-31"}])
def test_any_waiver_entries_are_refused_naming_the_key_or_applied(
    tmp_path_factory: pytest.TempPathFactory, dev_findings_input: tuple[list[dict[str, Any]], list[Any]],
    entries: Any,
) -> None:
    """The dev stack with any ``waivers:`` value: the stack model and the policy engine take them or raise a
    :class:`UserError` (exit 2) naming the file, never another exception."""
    config = good_config()
    config[f"{NS}:waivers"] = entries
    path = tmp_path_factory.mktemp("waivers") / "Pulumi.waivers.yaml"
    path.write_text(yaml.safe_dump({"config": config}, allow_unicode=True))
    resources, runs = dev_findings_input
    try:
        model = from_stackfile(read(path), ROOT)
        evaluate(resources, runs, model, source=path.name)  # applies the waivers the pack config allows
    except UserError as err:
        assert str(err).startswith(("Pulumi.waivers.yaml: ", "Pulumi.waivers.yaml:", "Pulumi.waivers.yaml  ")), err
