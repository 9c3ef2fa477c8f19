"""What a run needs on this machine (jobs/emulate/requirements.py), and run-local and doctor saying so.

A table of runs (distribution, command, code) and the packages and programs each needs; the real environment
(TensorFlow is never installed in it) refusing the dev stack's TensorFlow run with exit 2 and what to install,
before anything is made; ``amlgpu doctor`` naming every shipped run that cannot be emulated here.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs.emulate import requirements
from jobs.resolve import resolve_run
from stack.project import load_stack
from stack.runs import Run
from tests import cli
from tests.conftest import ROOT, emulation_project

CODE = {
    "tf_train.py": "import json\n\ndef main():\n    import tensorflow as tf\n    return tf\n",
    "plain.py": "import os, json\nprint(os.environ['TF_CONFIG'])\n",
    "guarded.py": "try:\n    import apex\nexcept ImportError:\n    apex = None\n"
                  "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\nimport torch\n",
    "uses_helper.py": "import helper\nfrom pkg.sub import thing\n",
    "helper.py": "from transformers import Trainer\n",
    "pkg/__init__.py": "",
    "pkg/sub.py": "import lightning.pytorch as pl\nthing = pl\n",
    "ds.py": "import deepspeed\n",
}
TF = {"type": "tensorflow", "worker_count": 2}
PT = {"type": "pytorch", "process_count_per_instance": 1}
MPI = {"type": "mpi", "process_count_per_instance": 1}
TORCHRUN = "torchrun --nnodes 2 --nproc_per_node 8 --node_rank $NODE_RANK --master_addr $MASTER_ADDR " \
           "--master_port $MASTER_PORT plain.py"
CASES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    # name, command, distribution, what it needs (in order)
    ("tf-imports-tensorflow", "python tf_train.py", TF, ["tensorflow"]),
    ("tf-reads-tf-config-only", "python plain.py", TF, []),  # the contract needs no TensorFlow
    ("guarded-imports-left-out", "python guarded.py", PT, ["torch"]),
    ("code-folder-modules-followed", "python uses_helper.py", PT, ["lightning", "transformers"]),
    ("torchrun-is-torchs", TORCHRUN, PT, ["torch"]),
    ("mpi-needs-mpirun", "python ds.py", MPI, ["mpirun", "deepspeed"]),
    ("installs-its-own-packages", "pip install deepspeed && python ds.py", PT, []),
    ("script-not-in-the-code-folder", "python elsewhere.py", PT, []),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    jobs = [{"name": name, "code": "c", "command": command, "environment": "azureml:acpt:1", "compute": "gpu-a100",
             "resources": {"instance_count": 2}, "distribution": distribution}
            for name, command, distribution, _ in CASES]
    root = emulation_project(tmp_path_factory.mktemp("project"), jobs)
    for path, text in CODE.items():
        (root / "c" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "c" / path).write_text(text)
    return root


@pytest.mark.parametrize(("name", "expected"), [(c[0], c[3]) for c in CASES])
def test_what_a_run_needs(project: Path, name: str, expected: list[str]) -> None:
    stack = load_stack("test", project)
    declared = next(j for j in stack.config.jobs if isinstance(j, Run) and j.name == name)
    needs = requirements.needs(resolve_run(declared, stack.config, project), project)
    assert [n.name for n in needs] == expected


def test_only_what_the_interpreter_lacks_is_missing() -> None:
    wanted = [requirements.Need("torch", "package", "x"), requirements.Need("no_such_package_xyz", "package", "y")]
    missing = requirements.missing(wanted, python=sys.executable, environ={"PATH": "/usr/bin:/bin"})
    assert [(m.need.name, m.detail) for m in missing] == [("no_such_package_xyz", "pip install no_such_package_xyz")]


def test_a_pythonpath_the_processes_get_is_searched_too(tmp_path: Path) -> None:
    (tmp_path / "fancy_pkg_xyz").mkdir()
    (tmp_path / "fancy_pkg_xyz" / "__init__.py").write_text("")
    wanted = [requirements.Need("fancy_pkg_xyz", "package", "x")]
    assert requirements.missing(wanted, python=sys.executable, environ={"PATH": "/usr/bin:/bin"})
    assert requirements.missing(wanted, python=sys.executable,
                                environ={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}) == []


def test_another_interpreter_is_asked_about_its_own_packages() -> None:
    other = shutil.which("python3", path="/usr/bin:/bin")
    if other is None or Path(other).resolve() == Path(sys.executable).resolve():
        pytest.skip("no interpreter here other than the test's")
    # The system interpreter has no project packages: pydantic (this environment's) is missing there.
    assert requirements.absent_packages(["pydantic", "json"], python=other, pythonpath=None) == ["pydantic"]


def test_the_dev_tensorflow_run_exits_2_naming_tensorflow_and_makes_nothing(tmp_path: Path) -> None:
    result = cli.amlgpu(ROOT, "run-local", "mnist-tf-multiworker", "--stack", "dev",
                        env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "run-local cannot start 'mnist-tf-multiworker' of stack 'dev' here" in result.stderr
    assert "  tensorflow: tf_mnist_multiworker.py imports it (line 65); pip install tensorflow" in result.stderr
    assert "--python" in result.stderr and "docs/local-emulation.md" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_python_that_is_not_an_interpreter_is_bad_input(tmp_path: Path) -> None:
    result = cli.amlgpu(ROOT, "run-local", "ddp-train", "--stack", "dev", "--python", str(tmp_path / "nope"),
                        timeout=120)
    assert result.returncode == 2
    assert f"error: --python: {tmp_path / 'nope'} is not an executable file" in result.stderr


@pytest.mark.slow
def test_doctor_names_every_shipped_run_it_cannot_emulate() -> None:
    result = cli.amlgpu(ROOT, "doctor", "--format", "json", timeout=300)
    rows = {(r["stack"], r["run"]): r for r in json.loads(result.stdout)["runs"]}
    tf = rows[("dev", "mnist-tf-multiworker")]
    assert tf["status"] == "MISSING" and [m["name"] for m in tf["missing"]] == ["tensorflow"]
    dev = load_stack("dev", ROOT)
    assert {run for stack, run in rows if stack == "dev"} == {j.name for j in dev.config.jobs}
    for row in rows.values():  # every other run: emulable, or named with what it lacks
        assert row["status"] == "OK" or (row["status"] == "MISSING" and row["missing"]), row
    text = cli.amlgpu(ROOT, "doctor", timeout=300).stdout
    assert "MISSING  dev/mnist-tf-multiworker" in text and "tensorflow: tf_mnist_multiworker.py imports it" in text
