"""A corpus of malformed stacks: each one exits 2 naming the file and the key, with no traceback, and leaves
the previous plan's output exactly as it was (or no output at all).

Most cases run in-process through ``amlgpu.cli.main`` (config errors never reach the Pulumi engine, so this
is what the console script does, minus the interpreter start); a handful run the real console script in a
subprocess. The helpers here (planning in-process or in a subprocess, snapshots of an output folder) are
shared by the other ``test_reliability_*`` modules.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from tests import cli
from tests.conftest import NS, dev_config, make_project

STACK = "case"
STACK_FILE = f"Pulumi.{STACK}.yaml"

RUN: dict[str, Any] = {
    "name": "ddp",
    "code": "jobs/workloads",
    "command": "python train_ddp.py --epochs 1",
    "environment": "acpt-pytorch",
    "compute": "gpu-a100",
    "resources": {"instance_count": 2},
    "distribution": {"type": "pytorch"},
    "limits": {"timeout": 3600},
}
"""A valid run on the dev stack's cluster, so every section of the stack has something to break."""

W, C, E, J, N = (f"{NS}:{key}" for key in ("workspace", "clusters", "environments", "jobs", "network"))


def good_config() -> dict[str, Any]:
    """The dev stack with one run: plans cleanly (exit 0) and writes every kind of output file."""
    config = dev_config()
    config[J] = [copy.deepcopy(RUN)]
    return config


# ------------------------------------------------------------------------------------------------ helpers


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    @property
    def error_line(self) -> str:
        """The first diagnostic: ``FILE:LINE:COL  KEY  MESSAGE`` for a stack file's problems (then a count
        line), else the one ``error: ...`` line."""
        errors = [line for line in self.err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, self.err
        problems = [line for line in self.err.splitlines() if line.startswith("Pulumi.")]
        return problems[0] if problems else errors[0]


def names(line: str, key: str | None) -> bool:
    """Whether a diagnostic names the stack file and ``key`` (``line N``: the file at line N, any key)."""
    if key is not None and key.startswith("line ") and line.startswith(f"{STACK_FILE}:{key.split()[1]}:"):
        return True
    if line.startswith(f"error: {STACK_FILE}: {key}: " if key else f"error: {STACK_FILE}: "):
        return True
    return key is not None and re.match(rf"{re.escape(STACK_FILE)}(:\d+:\d+)?  {re.escape(key)}  ", line) is not None


def plan_in_process(project: Path, capsys: pytest.CaptureFixture[str], *args: str, stack: str = STACK) -> Outcome:
    """``amlgpu plan --stack STACK ARGS`` run in ``project`` by the CLI's own entry point."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        try:
            code = main(["plan", "--stack", stack, *args])
        except SystemExit as exited:  # argparse's own usage errors
            code = int(exited.code or 0)
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def amlgpu(project: Path, *args: str, env: dict[str, str] | None = None, fresh: bool = False) -> Outcome:
    """``amlgpu ARGS`` in a process of its own, as a user runs it (``tests/cli.py``); ``fresh``: the console script
    in a fresh interpreter, for what is decided as it starts (the hash seed, the locale)."""
    done = cli.amlgpu(project, *args, env={**os.environ, **(env or {})}, fresh=fresh)
    return Outcome(done.returncode, done.stdout, done.stderr)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative POSIX path -> bytes)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(folder: Path) -> list[str]:
    """Staging or swap folders an output write left next to its target (``.<name>.*.tmp`` / ``.old``)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.suffix in (".tmp", ".old"))


def assert_clean_refusal(outcome: Outcome) -> None:
    assert outcome.code == 2, outcome.err
    assert "Traceback" not in outcome.out + outcome.err


# ------------------------------------------------------------------------------------------------ the corpus


Mutation = Callable[[dict[str, Any]], None]


def at(path: tuple[Any, ...], value: Any) -> Mutation:
    """Set the value at ``path`` of the good config (creating the last key)."""

    def mutate(config: dict[str, Any]) -> None:
        node = config
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return mutate


def drop(path: tuple[Any, ...]) -> Mutation:
    def mutate(config: dict[str, Any]) -> None:
        node = config
        for part in path[:-1]:
            node = node[part]
        del node[path[-1]]

    return mutate


def again(section: str, **changes: Any) -> Mutation:
    """Append a copy of the section's first item with ``changes`` (a second cluster, environment or run)."""
    return lambda config: config[section].append({**copy.deepcopy(config[section][0]), **changes})


@dataclass(frozen=True)
class Case:
    id: str
    stack: str | bytes | Mutation
    """The stack file's text (or bytes), or a change to the good config."""
    key: str | None
    """What the error line names after the file: the config key (or ``line N`` for YAML errors)."""
    says: str
    """A fragment of the message the user reads."""

    def write(self, path: Path) -> None:
        if isinstance(self.stack, bytes):
            path.write_bytes(self.stack)
        elif isinstance(self.stack, str):
            path.write_text(self.stack, encoding="utf-8")
        else:
            config = good_config()
            self.stack(config)
            path.write_text(yaml.safe_dump({"config": config}, sort_keys=False), encoding="utf-8")


_WS = "aml-gpu-training:workspace"
CASES = [
    # The file itself: YAML and encoding errors point at the line.
    Case("yaml-tab-indent", f"config:\n\t{_WS}: {{}}\n", "line 2", "invalid YAML: found character '\\t'"),
    Case("yaml-bad-indentation", "config:\n  azure-native:location: westeurope\n   a:b: 1\n", "line 3",
         "invalid YAML"),
    Case("yaml-unclosed-quote", f'config:\n  {_WS}: {{name: "mlw}}\n', "line 3", "invalid YAML"),
    Case("yaml-duplicate-key", "config:\n  azure-native:location: westeurope\n  azure-native:location: eastus\n",
         "line 3", "duplicate key 'azure-native:location'"),
    Case("yaml-duplicate-nested-key",
         f"config:\n  {NS}:clusters:\n    - name: gpu-a100\n      max_instances: 2\n      max_instances: 4\n",
         "line 5", "duplicate key 'max_instances'"),
    Case("yaml-recursive-alias", f"config:\n  {_WS}: &w {{name: *w}}\n", "line 2", "invalid YAML"),
    Case("not-utf8", b"config:\n  azure-native:location: west\xffeurope\n", "line 2", "not UTF-8 text: byte 0xff"),
    Case("empty-file", "", None, "the file is empty"),
    Case("only-comments", "# the dev stack\n# nothing here yet\n", None, "the file is empty"),
    Case("top-level-list", "- config\n", None, "expected a mapping at the top level"),
    Case("config-a-list", "config:\n  - azure-native:location\n", "config", "expected a mapping"),
    Case("config-a-string", "config: westeurope\n", "config", "expected a mapping"),
    Case("key-without-namespace", "config:\n  location: westeurope\n", "config.location",
         "write 'azure-native:location'"),
    # Sections of the wrong type or missing.
    Case("unknown-section-hint", at((f"{NS}:cluster",), []), f"{NS}:cluster", "did you mean 'clusters'?"),
    Case("no-workspace", drop((W,)), W, "required key is missing"),
    Case("workspace-a-string", at((W,), "mlw-gpu-dev"), W, "expected a mapping"),
    Case("no-region", drop(("azure-native:location",)), "azure-native:location", "no region"),
    Case("region-a-number", at(("azure-native:location",), 5), "azure-native:location", "expected a region name"),
    Case("no-clusters", drop((C,)), C, "required key is missing"),
    Case("clusters-empty", at((C,), []), C, "at least 1 item"),
    Case("clusters-a-mapping", at((C,), {"gpu-a100": {"max_instances": 2}}), C, "expected a list"),
    Case("cluster-a-string", at((C, 0), "gpu-a100"), f"{C}[0]", "expected a mapping"),
    Case("jobs-a-mapping", at((J,), {"ddp": RUN}), J, "expected a list"),
    Case("network-a-string", at((N,), "10.40.0.0/16"), N, "expected a mapping"),
    Case("environment-variables-a-list", at((J, 0, "environment_variables"), ["A=1"]),
         f"{J}[0].environment_variables", "expected a mapping"),
    # Keys of the wrong type.
    Case("workspace-name-a-number", at((W, "name"), 123), f"{W}.name", "expected a string (got 123)"),
    Case("protect-a-string", at((W, "protect"), "no"), f"{W}.protect", "expected true or false"),
    Case("tag-value-a-number", at((W, "tags", "cost-center"), 42), f"{W}.tags.cost-center", "expected a string"),
    Case("size-a-number", at((C, 0, "size"), 96), f"{C}[0].size", "expected a string"),
    Case("environment-version-a-number", at((E, 0, "version"), 1), f"{E}[0].version", "expected a string (got 1)"),
    Case("environment-variable-a-number", at((J, 0, "environment_variables"), {"OMP_NUM_THREADS": 4}),
         f"{J}[0].environment_variables.OMP_NUM_THREADS", "expected a string"),
    Case("identity-null", at((W, "identity"), None), f"{W}.identity", "got null"),
    Case("distribution-a-string", at((J, 0, "distribution"), "pytorch"), f"{J}[0].distribution", "expected a mapping"),
    # Missing required keys.
    Case("workspace-without-name", drop((W, "name")), f"{W}.name", "required key is missing"),
    Case("cluster-without-max", drop((C, 0, "max_instances")), f"{C}[0].max_instances", "required key is missing"),
    Case("run-without-distribution", drop((J, 0, "distribution")), f"{J}[0].distribution", "required"),
    Case("run-without-command", drop((J, 0, "command")), f"{J}[0].command", "required key is missing"),
    Case("environment-without-source", drop((E, 0, "build")), f"{E}[0]", "exactly one of image, build or reference"),
    # Azure's naming rules.
    Case("workspace-name-leading-hyphen", at((W, "name"), "-mlw"), f"{W}.name", "workspace name '-mlw' is invalid"),
    Case("workspace-name-too-long", at((W, "name"), "m" * 34), f"{W}.name", "3-33 characters"),
    Case("workspace-name-too-short", at((W, "name"), "ml"), f"{W}.name", "3-33 characters"),
    Case("workspace-name-dot", at((W, "name"), "mlw.dev"), f"{W}.name", "is invalid"),
    Case("resource-group-ending-in-dot", at((W, "resource_group"), "rg-aml."), f"{W}.resource_group",
         "not ending in '.'"),
    Case("cluster-name-hyphen-digits", at((C, 0, "name"), "gpu-1"), f"{C}[0].name", "hyphen followed by digits"),
    Case("cluster-name-25-chars", at((C, 0, "name"), "g" * 25), f"{C}[0].name", "3-24 characters"),
    Case("cluster-name-leading-digit", at((C, 0, "name"), "1gpu"), f"{C}[0].name", "starting with a letter"),
    Case("cluster-name-underscore", at((C, 0, "name"), "gpu_a100"), f"{C}[0].name", "is invalid"),
    Case("environment-name-leading-dot", at((E, 0, "name"), ".acpt"), f"{E}[0].name", "environment name"),
    Case("environment-version-space", at((E, 0, "version"), "1 beta"), f"{E}[0].version", "version '1 beta'"),
    Case("run-name-leading-digit", at((J, 0, "name"), "1-ddp"), f"{J}[0].name", "run name '1-ddp' is invalid"),
    Case("unknown-gpu-size", at((C, 0, "size"), "Standard_ND96asr_v9"), f"{C}[0].size",
         "did you mean Standard_ND96asr_v4"),
    # Duplicate names, which Azure compares case-insensitively.
    Case("duplicate-cluster", again(C), f"{C}[1].name", "duplicate name 'gpu-a100'"),
    Case("duplicate-cluster-other-case", again(C, name="GPU-A100"), f"{C}[1].name", "duplicate name 'GPU-A100'"),
    Case("duplicate-environment-other-case", again(E, name="ACPT-PyTorch"), f"{E}[3].name", "duplicate name"),
    Case("duplicate-run-other-case", again(J, name="DDP"), f"{J}[1].name", "duplicate name 'DDP'"),
    Case("cluster-named-like-the-image-builder", at((C, 0, "name"), "image-builder"), f"{C}[0].name",
         "image-build cluster's name"),
    # Dangling references.
    Case("run-on-unknown-cluster", at((J, 0, "compute"), "gpu-a10"), f"{J}[0].compute", "did you mean 'gpu-a100'?"),
    Case("run-with-unknown-environment", at((J, 0, "environment"), "pytorch"), f"{J}[0].environment",
         "unknown environment 'pytorch'"),
    Case("undeclared-placeholder", at((J, 0, "command"), "python train.py --data ${{inputs.data}}"),
         f"{J}[0].command", "${{inputs.data}} has no declared input/output"),
    Case("code-folder-missing", at((J, 0, "code"), "src/train"), f"{J}[0].code", "does not exist"),
    Case("code-folder-outside-project", at((J, 0, "code"), "../elsewhere"), f"{J}[0].code", "inside the project"),
    Case("build-context-missing", at((E, 1, "build", "path"), "environments/nope"), f"{E}[1].build",
         "no Dockerfile"),
    Case("conda-file-missing", at((E, 2, "conda_file"), "environments/horovod/nope.yaml"), f"{E}[2].conda_file",
         "not found"),
    # Impossible topologies and counts.
    Case("min-above-max", at((C, 0, "min_instances"), 3), f"{C}[0]", "min_instances (3) is greater than max"),
    Case("max-zero", at((C, 0, "max_instances"), 0), f"{C}[0].max_instances", "must be at least 1"),
    Case("min-negative", at((C, 0, "min_instances"), -1), f"{C}[0].min_instances", "must be at least 0"),
    Case("max-beyond-int32", at((C, 0, "max_instances"), 2**31), f"{C}[0].max_instances", "must be at most"),
    Case("max-fractional", at((C, 0, "max_instances"), 1.5),
         f"{C}[0].max_instances", "expected a whole number (got 1.5)"),
    Case("max-a-float", at((C, 0, "max_instances"), 2.0),
         f"{C}[0].max_instances", "expected a whole number (got 2.0)"),
    Case("max-a-boolean", at((C, 0, "max_instances"), True),
         f"{C}[0].max_instances", "expected a whole number (got true)"),
    Case("max-a-numeric-string", at((C, 0, "max_instances"), "2"), f"{C}[0].max_instances", 'got "2"'),
    Case("idle-time-negative", at((C, 0, "idle_time_before_scale_down"), -60),
         f"{C}[0].idle_time_before_scale_down", "must be at least 0"),
    Case("instance-count-zero", at((J, 0, "resources", "instance_count"), 0), f"{J}[0].resources.instance_count",
         "must be at least 1"),
    Case("instance-count-negative", at((J, 0, "resources", "instance_count"), -2),
         f"{J}[0].resources.instance_count", "got -2"),
    Case("instance-count-a-boolean", at((J, 0, "resources", "instance_count"), True),
         f"{J}[0].resources.instance_count", "expected a whole number (got true)"),
    Case("instance-count-fractional", at((J, 0, "resources", "instance_count"), 1.5),
         f"{J}[0].resources.instance_count", "expected a whole number"),
    Case("processes-per-node-zero", at((J, 0, "distribution"), {"type": "mpi", "process_count_per_instance": 0}),
         f"{J}[0].distribution.process_count_per_instance", "must be at least 1"),
    Case("worker-count-zero", at((J, 0, "distribution"), {"type": "tensorflow", "worker_count": 0}),
         f"{J}[0].distribution.worker_count", "must be at least 1"),
    Case("parameter-servers-negative",
         at((J, 0, "distribution"), {"type": "tensorflow", "parameter_server_count": -1}),
         f"{J}[0].distribution.parameter_server_count", "must be at least 0"),
    Case("timeout-zero", at((J, 0, "limits"), {"timeout": 0}), f"{J}[0].limits.timeout", "must be at least"),
    Case("unknown-distribution-type", at((J, 0, "distribution"), {"type": "ray"}), f"{J}[0].distribution",
         "'pytorch', 'mpi', 'tensorflow'"),
    Case("subnet-outside-address-space", at((N, "subnet_prefix"), "10.50.0.0/20"), N, "not inside address_space"),
    # Unknown keys, with the did-you-mean hint.
    Case("unknown-workspace-key", at((W, "protectt"), True), f"{W}.protectt", "did you mean 'protect'?"),
    Case("unknown-cluster-key", at((C, 0, "max_instance"), 2), f"{C}[0].max_instance",
         "did you mean 'max_instances'?"),
    Case("unknown-run-key", at((J, 0, "enviroment"), "acpt-pytorch"), f"{J}[0].enviroment",
         "did you mean 'environment'?"),
    Case("unknown-distribution-key", at((J, 0, "distribution"), {"type": "pytorch", "process_count": 8}),
         f"{J}[0].distribution.process_count", "did you mean 'process_count_per_instance'?"),
    Case("unknown-resources-key", at((J, 0, "resources", "instances"), 2), f"{J}[0].resources.instances",
         "did you mean 'instance_count'?"),
]


def good_plan_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The output folder of a good plan of the case stack, as bytes."""
    project = make_project(tmp_path_factory.mktemp("good"), good_config(), stack=STACK)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        assert main(["plan", "--stack", STACK, "--format", "json"]) == 0
    return snapshot(project / "build" / STACK)


@pytest.fixture(scope="module")
def earlier_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The output folder of a good plan of the case stack, as bytes: what each bad plan must leave alone."""
    files = good_plan_output(tmp_path_factory)
    assert {"resources.json", "outputs.json", "policy.sarif", "policy.md", "jobs/ddp.yml"} <= set(files)
    return files


def _project_with_earlier_output(folder: Path, earlier: dict[str, bytes]) -> Path:
    project = make_project(folder, good_config(), stack=STACK)
    for relative, data in earlier.items():
        (project / "build" / STACK / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / "build" / STACK / relative).write_bytes(data)
    return project


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_stack_exits_2_naming_file_and_key_and_keeps_the_earlier_output(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], earlier_output: dict[str, bytes]
) -> None:
    project = _project_with_earlier_output(tmp_path / "project", earlier_output)
    case.write(project / STACK_FILE)

    outcome = plan_in_process(project, capsys)

    assert_clean_refusal(outcome)
    assert names(outcome.error_line, case.key), outcome.error_line
    assert case.says in outcome.error_line
    assert outcome.out == ""
    assert snapshot(project / "build" / STACK) == earlier_output
    assert leftovers(project / "build") == []


def test_valid_variants_of_the_corpus_base_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The corpus breaks one thing at a time: its base really plans, so each refusal is the case's doing."""
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    outcome = plan_in_process(project, capsys, "--format", "json")
    assert outcome.code == 0, outcome.err
    assert json.loads(outcome.out)["stacks"][0]["runs"] == ["ddp", "fabric-check-gpu-a100"]


# ------------------------------------------------------------------------------------------------ stack files


def test_missing_stack_file_names_it_and_lists_the_stacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    outcome = plan_in_process(project, capsys, stack="prod")
    assert_clean_refusal(outcome)
    assert "Pulumi.prod.yaml" in outcome.error_line
    assert f"stacks here: {STACK}" in outcome.error_line
    assert not (project / "build").exists()


def test_a_folder_instead_of_a_stack_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    (project / "Pulumi.prod.yaml").mkdir()
    outcome = plan_in_process(project, capsys, stack="prod")
    assert_clean_refusal(outcome)
    assert "Pulumi.prod.yaml" in outcome.error_line
    assert not (project / "build").exists()


def test_outside_a_project_the_error_says_where_it_looked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = plan_in_process(tmp_path, capsys)
    assert_clean_refusal(outcome)
    assert "no Pulumi.yaml" in outcome.error_line


# ------------------------------------------------------------------------------------------------ real processes


SUBPROCESS_CASES = [c for c in CASES if c.id in {
    "yaml-tab-indent", "not-utf8", "only-comments", "cluster-name-hyphen-digits", "max-a-boolean",
    "run-on-unknown-cluster", "unknown-cluster-key",
}]


@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[c.id for c in SUBPROCESS_CASES])
def test_console_script_refuses_malformed_stack_and_writes_nothing(case: Case, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    case.write(project / STACK_FILE)

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert_clean_refusal(outcome)
    assert names(outcome.error_line, case.key), outcome.error_line
    assert case.says in outcome.error_line
    assert not (project / "build").exists()


def test_unquoted_dates_read_as_pulumi_reads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`expires: 2027-03-31` is a string to Pulumi; it must not crash the plan (it once did)."""
    from stack.stackfile import read

    path = tmp_path / "Pulumi.dates.yaml"
    path.write_text("config:\n  aml-gpu-training:waivers:\n    - expires: 2027-03-31\n")
    stack = read(path)
    assert stack.config["aml-gpu-training:waivers"] == [{"expires": "2027-03-31"}]
    assert '"expires": "2027-03-31"' in stack.cli_config()["aml-gpu-training:waivers"]
