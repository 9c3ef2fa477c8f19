"""Launch-style inference: which launcher a command uses and the per-node process count it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs.launchers import (
    LAUNCHERS,
    MAX_SCRIPT_BYTES,
    PER_GPU_LAUNCHERS,
    PER_NODE_LAUNCHERS,
    infer_launcher,
    read_command,
)
from stack.runs import Run


def run(command: str, distribution: dict[str, Any] | None = None, **fields: Any) -> Run:
    return Run(
        name="r", code="jobs/workloads", command=command, environment=fields.pop("environment", "acpt-pytorch"),
        compute="gpu-a100", distribution=distribution or {"type": "pytorch"}, **fields,
    )


PYTORCH = {"type": "pytorch"}
MPI = {"type": "mpi"}

CASES: list[tuple[str, dict[str, Any], tuple[str, int | None]]] = [
    # per-process launches: Azure ML starts the processes
    ("python train.py --epochs 3", PYTORCH, ("per-process", None)),
    ("python3.11 -u train.py", PYTORCH, ("per-process", None)),
    ("python train.py --deepspeed --deepspeed_config ds_config.json", PYTORCH, ("per-process", None)),
    ("python -m mypkg.train --lr 0.1", PYTORCH, ("per-process", None)),
    ("bash run.sh", PYTORCH, ("per-process", None)),
    ("python run_glue.py --model_name_or_path bert-base-cased --local_rank $LOCAL_RANK", PYTORCH,
     ("hf-trainer", None)),
    ("python hf_train.py --local_rank $LOCAL_RANK --per_device_train_batch_size 32", PYTORCH, ("hf-trainer", None)),
    ("python t.py --per-device-train-batch-size=8", PYTORCH, ("hf-trainer", None)),
    # torchrun and its spellings
    ("torchrun --nproc_per_node 8 train.py", PYTORCH, ("torchrun", 8)),
    ("torchrun --nproc-per-node=4 --nnodes 2 train.py --nproc_per_node 99", PYTORCH, ("torchrun", 4)),
    ("torchrun --nnodes 2 train.py", PYTORCH, ("torchrun", None)),
    ("torchrun --nproc_per_node gpu train.py", PYTORCH, ("torchrun", 8)),
    ("torchrun --nproc_per_node $GPUS train.py", PYTORCH, ("torchrun", None)),
    ("python -m torch.distributed.run --nproc_per_node 8 train.py", PYTORCH, ("torchrun", 8)),
    ("/opt/conda/bin/python -m torch.distributed.launch --nproc_per_node=2 train.py", PYTORCH,
     ("torch.distributed.launch", 2)),
    ("cd src && NCCL_DEBUG=INFO torchrun --nproc_per_node 8 train.py", PYTORCH, ("torchrun", 8)),
    ("pip list; env torchrun --nproc_per_node 8 train.py", PYTORCH, ("torchrun", 8)),
    ("bash -c 'torchrun --nproc_per_node 2 train.py'", PYTORCH, ("torchrun", 2)),
    ("torchrun \\\n  --nproc_per_node 8 \\\n  train.py", PYTORCH, ("torchrun", 8)),
    ("echo start\ntorchrun --nproc_per_node 8 train.py", PYTORCH, ("torchrun", 8)),
    # accelerate counts processes over all machines
    ("accelerate launch --num_processes 8 train.py", PYTORCH, ("accelerate", 8)),
    ("accelerate launch --num_machines 2 --num_processes 16 train.py", PYTORCH, ("accelerate", 8)),
    ("accelerate launch --num-machines=2 --num-processes=15 train.py", PYTORCH, ("accelerate", None)),
    ("accelerate launch --multi_gpu train.py", PYTORCH, ("accelerate", None)),
    ("python -m accelerate.commands.launch --num_processes 4 train.py", PYTORCH, ("accelerate", 4)),
    # the deepspeed CLI (not the --deepspeed flag of a script)
    ("deepspeed --num_gpus 8 train.py --deepspeed_config ds.json", PYTORCH, ("deepspeed", 8)),
    ("deepspeed --num_gpus=4 --num_nodes 1 train.py", MPI, ("deepspeed", 4)),
    ("deepspeed train.py", PYTORCH, ("deepspeed", None)),
    ("python train.py --strategy deepspeed", PYTORCH, ("per-process", None)),
    # Lightning
    ("python lightning_train.py --devices 8 --num-nodes 2", PYTORCH, ("lightning", 8)),
    ("python main.py fit --trainer.devices 4 --trainer.num_nodes 2", PYTORCH, ("lightning", 4)),
    ("lightning run model --devices 8 train.py", PYTORCH, ("lightning", 8)),
    ("python -m lightning run model --devices=2 train.py", PYTORCH, ("lightning", 2)),
    ("python train_pl_lightning.py --gpus 8", MPI, ("lightning", 8)),
    # MPI
    ("python horovod_mnist.py", MPI, ("horovod", None)),
    ("python train.py --use-hvd", MPI, ("horovod", None)),
    ("python train.py --backend mpi", MPI, ("mpi", None)),
    ("python -c 'import horovod.torch as hvd'", MPI, ("horovod", None)),
    ("python allreduce_perf.py -b 8M", MPI, ("mpi", None)),
    ("./all_reduce_perf -b 8 -e 8G -f 2 -g 1", MPI, ("mpi", None)),
    # TensorFlow
    ("python mnist.py", {"type": "tensorflow", "worker_count": 2}, ("tf-multiworker", None)),
    ("python mnist.py", {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1},
     ("tf-parameter-server", None)),
]


@pytest.mark.parametrize(("command", "distribution", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_infers_launcher_and_per_node_count(command: str, distribution: dict[str, Any],
                                            expected: tuple[str, int | None]) -> None:
    assert infer_launcher(run(command, distribution), gpus_per_node=8) == expected


def test_counts_read_from_the_runs_environment_variables() -> None:
    declared = run("torchrun --nproc_per_node ${GPUS} train.py", environment_variables={"GPUS": "4"})
    assert infer_launcher(declared) == ("torchrun", 4)


def test_gpu_keyword_stays_unknown_without_the_clusters_gpus() -> None:
    assert infer_launcher(run("torchrun --nproc_per_node auto train.py")) == ("torchrun", None)


def test_horovod_recognised_from_the_environment_name() -> None:
    assert infer_launcher(run("python train.py", MPI, environment="horovod"))[0] == "horovod"


def test_unbalanced_quotes_do_not_break_inference() -> None:
    assert infer_launcher(run("torchrun --nproc_per_node 8 train.py --name 'x")) == ("torchrun", 8)


def test_vocabulary_is_partitioned_by_who_starts_the_gpu_processes() -> None:
    inferred = {c[2][0] for c in CASES}
    assert inferred == set(LAUNCHERS)
    assert not PER_NODE_LAUNCHERS & PER_GPU_LAUNCHERS
    assert set(LAUNCHERS) - PER_NODE_LAUNCHERS - PER_GPU_LAUNCHERS == {"tf-multiworker", "tf-parameter-server"}


@pytest.mark.parametrize(("command", "padding", "launched"), [
    ("bash run.sh", 0, True), ("bash run.sh", 1, False), ("./run.sh", 0, True), ("./run.sh", 1, False),
], ids=["bash-at-the-limit", "bash-a-byte-over", "program-at-the-limit", "program-a-byte-over"])
def test_a_code_folders_script_is_read_up_to_the_limit(tmp_path: Path, command: str, padding: int,
                                                        launched: bool) -> None:
    body = "torchrun --nproc_per_node 8 train.py\n"
    filler = "#" * (MAX_SCRIPT_BYTES - len(body) - 1) + "\n"
    (tmp_path / "run.sh").write_text(filler + body + "#" * padding)
    reading = read_command(command, code=tmp_path)
    assert [launch.launcher for launch in reading.launches] == (["torchrun"] if launched else [])
