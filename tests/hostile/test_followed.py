"""Issue 36, point 4: what the gate can know, it follows. An attack corpus, one class per table, planned as a user
plans (``amlgpu plan`` with one stack per case, in one process): each attack exits 1 with the mandatory finding
naming what was read; each look-alike exits 0 (no false alarm), with an advisory where the value cannot be told.

A. Dockerfile constructs BuildKit follows: ``ADD`` of a local tar archive (unpacked into the image), ``ENV
BASH_ENV`` naming a file the build writes (bash reads it before the command), a custom ``# syntax=`` frontend
(the image is "cannot tell", never judged as written).
B. Values the stack file states: ``${{inputs.x}}`` of a literal input of the run, of the pipeline (bound with
``${{parent.inputs.x}}``) or a component's default, and a sweep's ``choice`` (every value judged).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from amlgpu.cli import main
from tests.analysis.test_dockerfile import tar_archive
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.reliability.test_corpus import RUN

E, J = f"{NS}:environments", f"{NS}:jobs"
PYTORCH = (ROOT / "environments" / "pytorch" / "Dockerfile").read_text()
"""The shipped acpt-pytorch build: each Dockerfile case adds its lines to it."""
TRAIN = "python train_ddp.py --epochs 1"
STEP = {"code": "jobs/workloads", "environment": "acpt-pytorch", "resources": {"instance_count": 2},
        "distribution": {"type": "pytorch"}}
DISABLED = "`run-infiniband-disabled`"
UNCLEAR = "`run-infiniband-setting-unclear`"


# A case: (stack name, jobs, Dockerfile lines added to the build (None: the shipped one), build-context files)
Case = tuple[str, list[dict[str, Any]], str | None, dict[str, bytes]]


def _run(command: str, **fields: Any) -> list[dict[str, Any]]:
    return [{**copy.deepcopy(RUN), "command": f"{command}; {TRAIN}", **fields}]


def _pipeline(command: str, *, pipeline_inputs: dict[str, Any], step: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "pipe", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
             "inputs": pipeline_inputs, "jobs": {"train": {**STEP, "command": f"{command}; {TRAIN}", **step}}}]


def _sweep(command: str, values: list[Any]) -> list[dict[str, Any]]:
    return [{"name": "sw", "type": "sweep", "compute": "gpu-a100",
             "trial": {**STEP, "command": f"{command}; {TRAIN}"},
             "search_space": {"ib": {"type": "choice", "values": values}}, "sampling_algorithm": "grid",
             "objective": {"goal": "minimize", "primary_metric": "loss"},
             "limits": {"max_total_trials": 4, "trial_timeout": 3600}}]


def _component(default: Any) -> dict[str, Any]:
    return {"component": {"command": f"export NCCL_IB_DISABLE=${{{{inputs.ib}}}}; {TRAIN}", **STEP,
                          "inputs": {"ib": {"type": "integer", "default": default}}}}


NCCL_CONF = b"NCCL_IB_DISABLE=1\n"
ATTACKS: list[tuple[Case, str]] = [
    # A: Dockerfile constructs BuildKit follows
    (("add-tar", _run("true"), "ADD conf.tar /\n", {"conf.tar": tar_archive({"etc/nccl.conf": NCCL_CONF})}),
     "NCCL_IB_DISABLE='1' (/etc/nccl.conf (ADD conf.tar at line"),
    (("add-tgz-home", _run("true"), "ADD nccl.tgz /\n",
      {"nccl.tgz": tar_archive({"root/.nccl.conf": b"NCCL_NET=Socket\n"}, "w:gz")}),
     "member root/.nccl.conf of the archive)) makes NCCL use TCP sockets"),
    (("bash-env-run", _run("true"), "RUN echo 'export NCCL_IB_DISABLE=1' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n", {}),
     "NCCL_IB_DISABLE='1' (/etc/ib.sh (RUN at line"),
    (("bash-env-copy", _run("true"), "COPY ib.sh /opt/\nENV BASH_ENV=/opt/ib.sh\n",
      {"ib.sh": b"export UCX_TLS=tcp\n"}), "UCX_TLS='tcp' (/opt/ib.sh (COPY ib.sh at line"),
    # A, a variant the issue does not list: a JSON-form ADD of an xz archive whose member climbs out with ../,
    # which BuildKit keeps inside the destination (/etc/nccl.conf)
    (("add-xz-climbing", _run("true"), 'ADD ["conf.tar.xz", "/etc/"]\n',
      {"conf.tar.xz": tar_archive({"../nccl.conf": NCCL_CONF}, "w:xz")}), "member ../nccl.conf of the archive"),
    # B: values the stack file states
    (("run-input", _run("export NCCL_IB_DISABLE=${{inputs.ib}}", inputs={"ib": 1}), None, {}),
     "(${{inputs.ib}} read as '1', the run's input ib)"),
    (("pipeline-input", _pipeline("export NCCL_IB_DISABLE=${{inputs.ib}}", pipeline_inputs={"ib": 1},
                                  step={"inputs": {"ib": "${{parent.inputs.ib}}"}}), None, {}),
     "the pipeline's input ib (bound by ${{parent.inputs.ib}})"),
    (("component-default", [{"name": "pipe", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
                             "jobs": {"train": _component(1)}}], None, {}),
     "the component's default of input ib"),
    (("sweep-every-value", _sweep("export NCCL_IB_DISABLE=${{search_space.ib}}", [1, 2]), None, {}),
     "every value of ${{search_space.ib}} disables InfiniBand"),
    # B, variants the issue does not list: Azure ML puts a literal in the command as written, so an input may
    # be an assignment prefix, or a line of a configuration file the command writes
    (("input-as-prefix", [{**copy.deepcopy(RUN), "command": "${{inputs.pre}} " + TRAIN,
                           "inputs": {"pre": "NCCL_IB_DISABLE=1"}}], None, {}),
     "(${{inputs.pre}} read as 'NCCL_IB_DISABLE=1', the run's input pre)"),
    (("input-in-conf-file", _run("echo NCCL_NET=${{inputs.net}} > ~/.nccl.conf", inputs={"net": "Socket"}),
      None, {}), "(${{inputs.net}} read as 'Socket', the run's input net)"),
]

DATA = {"type": "uri_file", "path": "azureml:ib-setting:1"}
BENIGN: list[tuple[Case, str | None]] = [
    # an input bound to data, or to a pipeline input that is data: unknown, never guessed
    (("data-input", _run("export NCCL_IB_DISABLE=${{inputs.ib}}", inputs={"ib": DATA}), None, {}),
     "NCCL_IB_DISABLE='' (the command, line 1): the value is only known at run time"),
    (("pipeline-data", _pipeline("export NCCL_IB_DISABLE=${{inputs.ib}}", pipeline_inputs={"ib": DATA},
                                 step={"inputs": {"ib": "${{parent.inputs.ib}}"}}), None, {}),
     "the value is only known at run time"),
    (("literal-zero", _run("export NCCL_IB_DISABLE=${{inputs.ib}}", inputs={"ib": 0}), None, {}), None),
    (("component-default-zero", [{"name": "pipe", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
                                  "jobs": {"train": _component(0)}}], None, {}), None),
    # some of a choice's values: named, advisory
    (("sweep-some-values", _sweep("export NCCL_IB_DISABLE=${{search_space.ib}}", [0, 1]), None, {}),
     "(${{search_space.ib}} read as '1', the sweep's choice ib): in the trials that draw it only; with "
     "${{search_space.ib}} '0' InfiniBand stays on"),
    # COPY never unpacks; an archive whose file leaves InfiniBand on; --unpack=false
    (("copy-tar", _run("true"), "COPY conf.tar /\n", {"conf.tar": tar_archive({"etc/nccl.conf": NCCL_CONF})}), None),
    (("add-tar-benign", _run("true"), "ADD conf.tar /\n",
      {"conf.tar": tar_archive({"etc/nccl.conf": b"NCCL_IB_DISABLE=0\nNCCL_DEBUG=INFO\n"})}), None),
    (("bash-env-benign", _run("true"), "RUN echo 'export NCCL_DEBUG=INFO' > /etc/ib.sh\nENV BASH_ENV=/etc/ib.sh\n",
      {}), None),
    # a custom frontend: the image cannot be told (advisory, naming it); Docker's own frontend is judged as written
    (("custom-frontend", _run("true"), None, {}), "# syntax=ghcr.io/example/frontend:1: a custom BuildKit frontend"),
]
SYNTAX = {"custom-frontend": "# syntax=ghcr.io/example/frontend:1\n"}
"""Cases whose directive goes above the shipped Dockerfile."""
OFFICIAL: tuple[Case, str] = (("official-frontend", _run("true"), "ENV NCCL_IB_DISABLE=1\n", {}),
            "NCCL_IB_DISABLE='1' (Dockerfile ENV at line")


def _project(root: Path, cases: list[Case]) -> Path:
    """A project with one stack per case: the dev stack with the case's jobs, on an environment built from the
    shipped acpt-pytorch Dockerfile with the case's lines (and build-context files) added."""
    folder = make_project(root, dev_config(), stack="dev")
    for name, jobs, lines, files in cases:
        config = dev_config()
        if lines is not None or name in SYNTAX:
            context = folder / "environments" / f"case-{name}"
            context.mkdir()
            (context / "Dockerfile").write_text(SYNTAX.get(name, "") + PYTORCH + "\n" + (lines or ""))
            for file, content in files.items():
                (context / file).write_bytes(content)
            config[E] = [{"name": "acpt-pytorch", "version": "1", "build": {"path": f"environments/case-{name}"}}]
        config[J] = jobs
        (folder / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return folder


def _plan(project: Path, names: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        main(["plan", *(f"--stack={n}" for n in names), "--out", "build", "--format", "json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return {entry["stack"]: entry["exit_code"] for entry in json.loads(out)["stacks"]}


def _rows(project: Path, stack: str, rule: str) -> list[str]:
    report = (project / "build" / stack / "policy.md").read_text()
    return [row for row in report.splitlines() if rule in row]


def _table(cases: list[tuple[Case, Any]]) -> Callable[[Path, pytest.CaptureFixture[str]], dict[str, int]]:
    def plan(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
        return _plan(_project(root, [case for case, _ in cases]), [case[0] for case, _ in cases], capsys)
    return plan


@pytest.mark.slow
def test_each_attack_exits_1_with_the_finding_naming_what_was_read(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cases = [*ATTACKS, OFFICIAL]
    codes = _table(cases)(tmp_path / "project", capsys)
    for (name, *_), says in cases:
        assert codes[name] == 1, name
        rows = _rows(tmp_path / "project", name, DISABLED)
        assert any(says in row for row in rows), (name, rows)


@pytest.mark.slow
def test_each_look_alike_exits_0_and_what_cannot_be_told_is_named(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    codes = _table(BENIGN)(tmp_path / "project", capsys)
    for (name, *_), says in BENIGN:
        assert codes[name] == 0, name
        unclear = _rows(tmp_path / "project", name, UNCLEAR)
        if says is None:
            assert unclear == [], (name, unclear)
        else:
            assert any(says in row for row in unclear), (name, unclear)
