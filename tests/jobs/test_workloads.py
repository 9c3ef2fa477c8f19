"""The sample workloads behind the shipped runs: their command lines parse, and they train for real on CPU.

The shipped runs target 8-GPU nodes; here the same scripts start the way Azure ML starts them (the
launch contract's variables, or the per-node launcher) with gloo on CPU and tiny sizes. Horovod,
TensorFlow and DeepSpeed cannot be installed next to this project (build requirements, protobuf
pins): their scripts' launch-contract logic and argument parsers are tested, not their training.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pickle
import re
import shlex
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from stack import stackfile
from stack.config import from_stackfile
from tests.conftest import ROOT

WORKLOADS = ROOT / "jobs" / "workloads"
PYTHON = sys.executable


def workload(name: str) -> ModuleType:
    """A workload script as a module (its folder on sys.path, as when Azure ML runs it from the snapshot)."""
    if str(WORKLOADS) not in sys.path:
        sys.path.insert(0, str(WORKLOADS))
    spec = importlib.util.spec_from_file_location(f"workload_{name}", WORKLOADS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def shipped_commands() -> list[tuple[str, str, list[str]]]:
    """(run, script, arguments) of every shipped run, placeholders and launch variables filled in."""
    found = []
    for stack in ("dev", "prod"):
        config = from_stackfile(stackfile.read(ROOT / f"Pulumi.{stack}.yaml"), ROOT)
        for run in config.jobs:
            def fill(match: re.Match[str], run: Any = run) -> str:
                kind, name = match.group(1), match.group(2)
                value = run.inputs.get(name) if kind == "inputs" else None
                return str(value) if isinstance(value, int | float | str) else f"/mnt/azureml/{kind}/{name}"

            command = re.sub(r"\$\{\{\s*(inputs|outputs)\.(\w+)\s*\}\}", fill, run.command)
            words = [re.sub(r"^\$\w+$", "0", w) for w in shlex.split(command)]
            script = next(i for i, w in enumerate(words) if w.endswith(".py"))
            found.append((f"{stack}/{run.name}", words[script].removesuffix(".py"), words[script + 1:]))
    return found


@pytest.mark.parametrize(("run", "script", "argv"), shipped_commands(), ids=[c[0] for c in shipped_commands()])
def test_every_shipped_command_line_parses(run: str, script: str, argv: list[str]) -> None:
    if script == "deepspeed_train":
        pytest.skip("deepspeed (its --deepspeed_config parser) cannot be installed here")
    module = workload(script)
    if script == "hf_train":
        module.argument_parser().parse_args(argv)  # argparse level: TrainingArguments refuses --bf16 without a GPU
    else:
        module.parse_args(argv)


def test_synthetic_digits_are_learnable_and_reproducible() -> None:
    digits = workload("digits")
    x, y = digits.synthetic(2000, seed=3)
    assert x.shape == (2000, 28, 28) and x.dtype == np.float32 and set(np.unique(y)) == set(range(10))
    again, _ = digits.synthetic(2000, seed=3)
    assert np.array_equal(x, again)
    # nearest class mean, fitted on half: the digits carry their class, so simple models learn them
    means = np.stack([x[:1000][y[:1000] == c].mean(0) for c in range(10)])
    predicted = ((x[1000:, None] - means[None]) ** 2).sum((2, 3)).argmin(1)
    assert (predicted == y[1000:]).mean() > 0.9


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"cluster": {"worker": ["10.0.0.4:2222", "10.0.0.5:2222"], "ps": []}, "task": {"type": "worker", '
         '"index": 1}}',
         {"cluster": {"worker": ["10.0.0.4:2222", "10.0.0.5:2222"]}, "task": {"type": "worker", "index": 1}}),
        ('{"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "ps", "index": 0}}',
         {"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "ps", "index": 0}}),
    ],
)
def test_tensorflow_tf_config_drops_azure_mls_empty_ps(raw: str, expected: dict[str, Any]) -> None:
    assert json.loads(workload("tf_mnist_multiworker").tensorflow_tf_config(raw)) == expected


@pytest.mark.parametrize(
    ("tf_config", "chief"),
    [
        (None, True),
        ({"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 0}}, True),
        ({"cluster": {"worker": ["a", "b"]}, "task": {"type": "worker", "index": 1}}, False),
        ({"cluster": {"chief": ["c"], "worker": ["a"]}, "task": {"type": "worker", "index": 0}}, False),
        ({"cluster": {"chief": ["c"], "worker": ["a"]}, "task": {"type": "chief", "index": 0}}, True),
    ],
)
def test_tensorflow_worker_zero_is_chief_when_azure_ml_names_none(tf_config: dict[str, Any] | None,
                                                                  chief: bool) -> None:
    assert workload("tf_mnist_multiworker").is_chief(tf_config) is chief


AZURE_PER_NODE = {"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "NODE_RANK": "1", "RANK": "1",
                  "LOCAL_RANK": "0", "WORLD_SIZE": "2", "PATH": "/usr/bin"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (AZURE_PER_NODE, {"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "NODE_RANK": "1", "PATH": "/usr/bin"}),
        ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "AZ_BATCH_MASTER_NODE": "10.0.0.9:6105"},
         {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "AZ_BATCH_MASTER_NODE": "10.0.0.9:6105",
          "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "6105", "NODE_RANK": "3"}),
        ({"PATH": "/usr/bin"}, {"PATH": "/usr/bin"}),  # plain `python lightning_train.py`: one machine
    ],
    ids=["pytorch-per-node", "mpi-per-node", "local"],
)
def test_lightning_gets_the_per_node_contract(environ: dict[str, str], expected: dict[str, str]) -> None:
    assert workload("lightning_train").per_node_environment(environ) == expected


def fake_cifar(path: Path, per_batch: int = 24) -> Path:
    """An archive in CIFAR-10's python format (pickled batches in cifar-10-batches-py/)."""
    rng = np.random.default_rng(0)
    with tarfile.open(path, "w:gz") as archive:
        for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
            blob = pickle.dumps({b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                                 b"labels": rng.integers(0, 10, per_batch).tolist()})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            archive.addfile(info, io.BytesIO(blob))
    return path


def contract_env(**extra: str) -> dict[str, str]:
    """A clean environment; TMPDIR is the session's (conftest), so torchrun's log folders
    (``torchelastic_*``) and the like stay out of the machine's /tmp."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(WORKLOADS), "TMPDIR": tempfile.gettempdir(), **extra}


def metrics(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"')]


@pytest.mark.slow
def test_cifar_ddp_trains_under_torchrun_and_saves_from_rank_0(tmp_path: Path) -> None:
    archive = fake_cifar(tmp_path / "cifar-10-python.tar.gz")
    done = subprocess.run(
        [str(Path(PYTHON).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", free_port(), "cifar_ddp.py",
         "--data", str(archive), "--epochs", "2", "--width", "8", "--batch-size", "8", "--num-workers", "1",
         "--model-dir", str(tmp_path / "model")],
        cwd=WORKLOADS, env=contract_env(), capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = metrics(done.stdout)
    assert [m["epoch"] for m in lines] == [0, 1] and {m["world_size"] for m in lines} == {2}
    assert (tmp_path / "model" / "model.pt").is_file()


@pytest.mark.slow
def test_cifar_ddp_reads_the_extracted_folder_and_checks_the_archive(tmp_path: Path) -> None:
    with tarfile.open(fake_cifar(tmp_path / "cifar.tar.gz")) as archive:
        archive.extractall(tmp_path / "extracted", filter="data")
    ok = subprocess.run([PYTHON, "cifar_ddp.py", "--data", str(tmp_path / "extracted"), "--epochs", "1", "--width",
                         "4", "--num-workers", "0", "--model-dir", str(tmp_path / "m")],
                        cwd=WORKLOADS, env=contract_env(), capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0, ok.stderr[-3000:]
    (tmp_path / "extracted" / "cifar-10-batches-py" / "test_batch").unlink()
    bad = subprocess.run([PYTHON, "cifar_ddp.py", "--data", str(tmp_path / "extracted")], cwd=WORKLOADS,
                         env=contract_env(), capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 1
    assert "not a CIFAR-10 python archive (missing test_batch)" in bad.stderr


@pytest.mark.slow
def test_lightning_starts_its_own_devices_under_a_per_node_launch(tmp_path: Path) -> None:
    # Azure ML's `distribution: pytorch` with one process per node, on node 0 of 1.
    env = contract_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port(), NODE_RANK="0", RANK="0", LOCAL_RANK="0",
                       WORLD_SIZE="1")
    done = subprocess.run(
        [PYTHON, "lightning_train.py", "--devices", "2", "--num-nodes", "1", "--accelerator", "cpu",
         "--max-epochs", "1", "--samples", "512", "--default-root-dir", str(tmp_path)],
        cwd=WORKLOADS, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = metrics(done.stdout)
    assert result["world_size"] == 2 and 0 <= result["val_accuracy"] <= 1


@pytest.mark.slow
def test_hf_trainer_runs_per_process_with_local_rank(tmp_path: Path) -> None:
    # Azure ML's per-process launch: one process per device, each told its LOCAL_RANK.
    port = free_port()
    procs = [
        subprocess.Popen(
            [PYTHON, "hf_train.py", "--local_rank", str(rank), "--output_dir", str(tmp_path), "--use_cpu",
             "--ddp_backend", "gloo", "--report_to", "none", "--save_strategy", "no", "--max_steps", "4",
             "--per_device_train_batch_size", "8", "--samples", "128", "--width", "32", "--sequence_length", "16"],
            cwd=WORKLOADS, env=contract_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2",
                                            RANK=str(rank), LOCAL_RANK=str(rank), NODE_RANK="0"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][1][-3000:]
    (result,) = metrics(outputs[0][0])
    assert result["world_size"] == 2 and result["eval_loss"] > 0
    assert (tmp_path / "model.safetensors").is_file()
