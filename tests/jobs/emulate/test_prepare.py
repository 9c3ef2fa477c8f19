"""From a declared run to a launch plan, without starting anything: topology, inputs, outputs,
snapshot and each process's environment."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs.emulate.errors import EmulationError
from jobs.emulate.prepare import Prepared, Request, prepare
from jobs.resolve import resolve_run
from stack.config import build
from stack.resolved import ResolvedRun

A100 = {"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 4}  # 8 GPUs per node


def resolved(tmp_path: Path, **run: Any) -> ResolvedRun:
    """The run declared with ``run`` (over a minimal pytorch run), resolved as `amlgpu submit` would."""
    (tmp_path / "src").mkdir(exist_ok=True)
    declared = {"name": "r", "code": "src", "command": "python train.py", "environment": "azureml:acpt:1",
                "compute": "gpu-a100", "distribution": {"type": "pytorch"}, **run}
    config = build({"workspace": {"name": "mlw-test"}, "clusters": [A100], "jobs": [declared]},
                   location="westeurope", file="Pulumi.test.yaml", root=tmp_path)
    return resolve_run(config.jobs[0], config, tmp_path)


def plan(tmp_path: Path, request: Request | None = None, environ: dict[str, str] | None = None,
         **run: Any) -> Prepared:
    return prepare(resolved(tmp_path, **run), request or Request(), root=tmp_path, workdir=tmp_path / "work",
                   environ={"PATH": "/usr/bin:/bin"} if environ is None else environ)


@pytest.mark.parametrize(
    ("run", "request_", "style", "shape"),
    [
        # process_count_per_instance left out resolves to the node's GPUs for a per-process launch
        ({"resources": {"instance_count": 2}}, Request(), "per-process", (2, 8, None)),
        ({"resources": {"instance_count": 2}}, Request(nodes=1, procs_per_node=2), "per-process", (1, 2, None)),
        ({"command": "torchrun --nproc_per_node 8 train.py", "resources": {"instance_count": 2}},
         Request(procs_per_node=2), "per-node", (2, 1, 2)),
        ({"command": "torchrun --nproc_per_node gpu train.py"}, Request(), "per-node", (1, 1, 8)),
        ({"command": "torchrun train.py"}, Request(), "per-node", (1, 1, 1)),
        ({"distribution": {"type": "mpi", "process_count_per_instance": 4}, "resources": {"instance_count": 2}},
         Request(procs_per_node=2), "mpi", (2, 2, None)),
        # under mpi, torchrun is each rank's program: Azure ML's mpirun starts it, counts stay as written
        ({"command": "torchrun --nproc_per_node 8 t.py", "distribution": {"type": "mpi"}}, Request(), "mpi",
         (1, 1, None)),
        ({"distribution": {"type": "tensorflow", "parameter_server_count": 1}, "resources": {"instance_count": 3}},
         Request(nodes=2), "tensorflow", (2, 1, None)),
    ],
)
def test_topology_is_the_resolved_one_scaled_down(tmp_path: Path, run: dict[str, Any], request_: Request,
                                                  style: str, shape: tuple[int, int, int | None]) -> None:
    topology = plan(tmp_path, request_, **run).topology
    assert (topology.style, (topology.nodes, topology.procs_per_node, topology.launcher_procs_per_node)) == (
        style, shape)


@pytest.mark.parametrize(
    ("run", "request_", "key", "message"),
    [
        ({"resources": {"instance_count": 2}}, Request(nodes=3), "--nodes", "3 is more than the run declares: 2"),
        ({"distribution": {"type": "pytorch", "process_count_per_instance": 2}}, Request(procs_per_node=4),
         "--procs-per-node", "4 is more than the run declares: 2"),
        ({"command": "torchrun train.py"}, Request(procs_per_node=2), "--procs-per-node",
         "1 worker(s) per node started by torchrun"),
        ({"command": "torchrun --nproc_per_node 8 train.py",
          "distribution": {"type": "pytorch", "process_count_per_instance": 8}}, Request(),
         "distribution.process_count_per_instance", "Duplicate GPU detected"),
        ({"distribution": {"type": "tensorflow"}}, Request(procs_per_node=1), "--procs-per-node",
         "one process per task"),
        ({"command": "accelerate launch train.py"}, Request(procs_per_node=2), "command", "add the flag"),
    ],
)
def test_topology_errors_name_the_flag_or_the_key(tmp_path: Path, run: dict[str, Any], request_: Request, key: str,
                                                  message: str) -> None:
    with pytest.raises(EmulationError, match=re.escape(message)) as caught:
        plan(tmp_path, request_, **run)
    assert caught.value.key == key
    assert not (tmp_path / "work").exists()  # nothing written on bad input


def test_every_process_gets_its_contract_the_runs_variables_and_the_local_python(tmp_path: Path) -> None:
    prepared = plan(
        tmp_path, Request(nodes=2, procs_per_node=2),
        environ={"PATH": "/usr/bin", "RANK": "7", "TF_CONFIG": "{}", "HOME": "/root"},
        resources={"instance_count": 2}, environment_variables={"NCCL_DEBUG": "INFO"},
    )
    envs = [dict(p.env) for p in prepared.plan.processes]
    assert [p.label for p in prepared.plan.processes] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert [(e["NODE_RANK"], e["LOCAL_RANK"], e["RANK"]) for e in envs] == [
        ("0", "0", "0"), ("0", "1", "1"), ("1", "0", "2"), ("1", "1", "3")]
    for env in envs:
        assert env["WORLD_SIZE"] == "4" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["MASTER_PORT"] == envs[0]["MASTER_PORT"]
        assert "TF_CONFIG" not in env  # the user's shell is not the launcher
        assert env["NCCL_DEBUG"] == "INFO" and env["HOME"] == "/root"
        assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
        assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 4))
    assert prepared.plan.cwd == tmp_path / "work" / "code"


def test_tensorflow_processes_get_one_tf_config_each(tmp_path: Path) -> None:
    prepared = plan(tmp_path, distribution={"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1})
    specs = prepared.plan.processes
    assert [(p.label, p.service) for p in specs] == [("worker 0", False), ("worker 1", False), ("ps 0", True)]
    configs = [json.loads(p.env["TF_CONFIG"]) for p in specs]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1},
                                            {"type": "ps", "index": 0}]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    addresses = configs[0]["cluster"]["worker"] + configs[0]["cluster"]["ps"]
    assert len(set(addresses)) == 3


def test_inputs_and_outputs_become_local_values_and_folders(tmp_path: Path) -> None:
    data = tmp_path / "my data"
    data.mkdir()
    prepared = plan(
        tmp_path, Request(inputs={"data": str(data)}),
        command="python t.py --lr ${{inputs.lr}} --data ${{inputs.data}} --out ${{outputs.model}} "
                "--log ${{outputs.log}}",
        inputs={"lr": 0.1, "data": {"type": "uri_folder", "path": "azureml:images:3"}},
        outputs={"model": {"type": "uri_folder"}, "log": {"type": "uri_file"}},
    )
    work = tmp_path / "work"
    assert prepared.command == (
        f"python t.py --lr 0.1 --data '{data}' --out {work}/outputs/model --log {work}/outputs/log/log"
    )
    assert prepared.outputs == {"log": work / "outputs" / "log" / "log", "model": work / "outputs" / "model"}
    assert (work / "outputs" / "model").is_dir() and (work / "outputs" / "log").is_dir()


@pytest.mark.parametrize(
    ("inputs", "key", "message"),
    [
        ({}, "inputs.data.path", "pass a local copy with --input data=PATH"),
        ({"data": "/no/such/folder"}, "--input", "does not exist"),
        ({"other": "1"}, "--input", "has no input 'other' (its inputs: data)"),
    ],
)
def test_data_inputs_need_a_local_copy(tmp_path: Path, inputs: dict[str, str], key: str, message: str) -> None:
    with pytest.raises(EmulationError, match=re.escape(message)) as caught:
        plan(tmp_path, Request(inputs=inputs), command="python t.py ${{inputs.data}}",
             inputs={"data": {"type": "uri_folder", "path": "azureml://datastores/ds/paths/x"}})
    assert caught.value.key == key


def test_the_snapshot_is_a_copy_without_what_amlignore_lists(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "pkg").mkdir()
    for name in ("train.py", "data/big.bin", "pkg/mod.py", "pkg/mod.pyc", "keep.log", "drop.log"):
        (src / name).write_text("x")
    (src / ".amlignore").write_text("# build outputs\n*.pyc\n/data/\n*.log\n!keep.log\n")
    prepared = plan(tmp_path)
    copied = sorted(p.relative_to(prepared.plan.cwd).as_posix() for p in prepared.plan.cwd.rglob("*") if p.is_file())
    assert copied == [".amlignore", "keep.log", "pkg/mod.py", "train.py"]
    assert prepared.snapshot_files == 4


@pytest.mark.parametrize(
    ("run", "request_", "visible"),
    [
        ({"resources": {"instance_count": 2}}, Request(procs_per_node=2),
         {"rank 0": "0,1", "rank 1": "0,1", "rank 2": "2,3", "rank 3": "2,3"}),
        ({"command": "torchrun --nproc_per_node 8 train.py", "resources": {"instance_count": 2}},
         Request(procs_per_node=2), {"node 0": "0,1", "node 1": "2,3"}),
        ({"distribution": {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1}}, Request(),
         {"worker 0": "0", "worker 1": "1", "ps 0": ""}),
        ({"resources": {"instance_count": 2}}, Request(procs_per_node=4),  # 8 processes, 4 GPUs: the CPU
         {f"rank {r}": "" for r in range(8)}),
    ],
)
def test_each_emulated_node_sees_gpus_of_its_own(tmp_path: Path, run: dict[str, Any], request_: Request,
                                                 visible: dict[str, str]) -> None:
    prepared = plan(tmp_path, request_, environ={"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, **run)
    assert {p.label: p.env["CUDA_VISIBLE_DEVICES"] for p in prepared.plan.processes} == visible
