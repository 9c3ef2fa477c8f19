"""The command made runnable locally: placeholders filled, per-node launchers' counts rewritten."""

from __future__ import annotations

import pytest

from jobs import launchers
from jobs.emulate import commandline

TR = launchers.TORCHRUN


@pytest.mark.parametrize(
    ("command", "kind", "nodes", "procs", "expected", "notes"),
    [
        (  # the Azure ML guide's torchrun line, scaled to 2 nodes x 2 workers
            "torchrun --nnodes 4 --nproc_per_node 8 --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
            "--master_port $MASTER_PORT train.py --epochs 3",
            TR, 2, 2,
            "torchrun --nnodes 2 --nproc_per_node 2 --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
            "--master_port $MASTER_PORT train.py --epochs 3",
            ["--nproc_per_node 8 -> 2", "--nnodes 4 -> 2"],
        ),
        (  # '=' spellings, the hyphenated flag, an elastic node range
            "python -m torch.distributed.run --nnodes=1:4 --nproc-per-node=8 train.py",
            TR, 1, 2,
            "python -m torch.distributed.run --nnodes=1 --nproc-per-node=2 train.py",
            ["--nproc_per_node 8 -> 2", "--nnodes 1:4 -> 1"],
        ),
        (  # the script's own --nnodes is not the launcher's
            "python3 -m torch.distributed.launch --nproc_per_node 4 train.py --nnodes 7",
            launchers.TORCH_DISTRIBUTED_LAUNCH, 2, 1,
            "python3 -m torch.distributed.launch --nproc_per_node 1 train.py --nnodes 7",
            ["--nproc_per_node 4 -> 1"],
        ),
        (  # torchrun's default of one worker: the flag is added when more are wanted
            "cd src && torchrun --nnodes $WORLD_SIZE train.py",
            TR, 2, 2,
            "cd src && torchrun --nproc_per_node 2 --nnodes $WORLD_SIZE train.py",
            ["added --nproc_per_node 2"],
        ),
        (  # already the local topology: nothing to say
            "torchrun --nproc_per_node 2 -m pkg.train --nproc_per_node 9",
            TR, 1, 2,
            "torchrun --nproc_per_node 2 -m pkg.train --nproc_per_node 9",
            [],
        ),
        (  # accelerate counts processes over all machines
            "accelerate launch --num_processes 16 --num_machines 2 --machine_rank $NODE_RANK train.py",
            launchers.ACCELERATE, 2, 1,
            "accelerate launch --num_processes 2 --num_machines 2 --machine_rank $NODE_RANK train.py",
            ["--num_processes 16 -> 2"],
        ),
        (  # Lightning's flags are the script's: searched after it too
            "python lightning_train.py --trainer.devices 8 --trainer.num_nodes 2",
            launchers.LIGHTNING, 1, 1,
            "python lightning_train.py --trainer.devices 1 --trainer.num_nodes 1",
            ["--trainer.devices 8 -> 1", "--trainer.num_nodes 2 -> 1"],
        ),
        (
            "deepspeed --num_gpus 8 --num_nodes 2 train.py --deepspeed ds.json",
            launchers.DEEPSPEED, 2, 2,
            "deepspeed --num_gpus 2 --num_nodes 2 train.py --deepspeed ds.json",
            ["--num_gpus 8 -> 2"],
        ),
    ],
)
def test_rescale_rewrites_only_the_launchers_counts(command: str, kind: str, nodes: int, procs: int, expected: str,
                                                    notes: list[str]) -> None:
    call = commandline.locate(command, kind)
    assert call is not None
    assert commandline.rescale(command, call, nodes=nodes, procs_per_node=procs, gpus_per_node=8) == (expected, notes)


def test_a_missing_count_that_cannot_be_added_is_an_error_only_when_it_must_change() -> None:
    command = "python lightning_train.py --max_epochs 3"
    call = commandline.locate(command, launchers.LIGHTNING)
    assert call is not None
    # Lightning's default is one worker per GPU: as declared, nothing to rewrite
    assert commandline.rescale(command, call, nodes=1, procs_per_node=8, gpus_per_node=8) == (command, [])
    with pytest.raises(ValueError, match=r"no --trainer\.devices, so its worker count cannot be scaled down"):
        commandline.rescale(command, call, nodes=1, procs_per_node=2, gpus_per_node=8)


@pytest.mark.parametrize(
    ("command", "kind", "given"),
    [
        ("torchrun train.py --nproc_per_node 3", TR, False),
        ("torchrun --nproc_per_node=gpu train.py", TR, True),
        ("accelerate launch train.py", launchers.ACCELERATE, False),
    ],
)
def test_workers_flag_given_looks_at_the_launchers_options_only(command: str, kind: str, given: bool) -> None:
    call = commandline.locate(command, kind)
    assert call is not None
    assert commandline.workers_flag_given(command, call) is given


def test_locate_finds_nothing_when_the_launcher_is_absent() -> None:
    assert commandline.locate("python train.py --torchrun-like", TR) is None


def test_placeholders_are_filled_textually() -> None:
    command = "python t.py --lr ${{inputs.lr}} --data ${{ inputs.data }} --out ${{outputs.model}}"
    values = {("inputs", "lr"): "0.1", ("inputs", "data"): "'/tmp/my data'", ("outputs", "model"): "/w/o/model"}
    assert commandline.fill_placeholders(command, values) == (
        "python t.py --lr 0.1 --data '/tmp/my data' --out /w/o/model"
    )
    assert commandline.referenced_inputs(command) == {"lr", "data"}


@pytest.mark.parametrize(("command", "expected"), [
    ("python -W ignore -m torch.distributed.run --nnodes 4 --nproc_per_node 8 train.py",
     "python -W ignore -m torch.distributed.run --nnodes 1 --nproc_per_node 2 train.py"),
    ("python -mtorch.distributed.run --nnodes=4 --nproc_per_node=8 train.py",
     "python -mtorch.distributed.run --nnodes=1 --nproc_per_node=2 train.py"),
], ids=["python-W-ignore", "python-mmodule"])
def test_run_local_rescales_every_python_form_the_gate_reads(command: str, expected: str) -> None:
    """Issue 35 point 3.4 / issue 40 point 6: run-local read ``ignore`` as the script and ``-mtorch...`` as an
    interpreter option, so it found no flags to rescale."""
    call = commandline.locate(command, TR)
    assert call is not None
    assert commandline.rescale(command, call, nodes=1, procs_per_node=2, gpus_per_node=8) == (
        expected, ["--nproc_per_node 8 -> 2", "--nnodes 4 -> 1"])


LAUNCH_FORMS = [
    "torchrun --nnodes 2 --nproc_per_node 4 train.py",
    "torchrun --standalone --nnodes=2 --nproc-per-node=4 train.py --nnodes 9",
    "python -m torch.distributed.run --nnodes=2 --nproc-per-node=4 train.py",
    "python -W ignore -m torch.distributed.run --nnodes 2 --nproc_per_node 4 train.py",
    "python -mtorch.distributed.run --nnodes 2 --nproc_per_node 4 train.py",
    "python3 -u -X faulthandler -m torch.distributed.launch --nnodes 2 --nproc_per_node 4 train.py --nnodes 7",
    "torchrun --nproc_per_node 4 --nnodes 2 -m pkg.train --nproc_per_node 9",
    "torchrun --nnodes 2 --no_python --nproc_per_node 4 bash run.sh",
    "accelerate launch --num_machines 2 --num_processes 8 train.py",
    "accelerate launch --multi_gpu --num-machines 2 --num-processes 8 train.py --num_processes 3",
    "python -m accelerate.commands.launch --num_machines 2 --num_processes 8 train.py",
    "deepspeed --hostfile hosts --num_nodes 2 --num_gpus 4 train.py --deepspeed ds.json",
    "python -m deepspeed.launcher.runner --hostfile hosts --num_nodes 2 --num_gpus 4 train.py",
    "fabric run model --num-nodes 2 --devices 4 train.py",
    "python -m lightning run model --num-nodes 2 --devices 4 train.py",
    "python lightning_train.py --trainer.num_nodes 2 --trainer.devices 4",
    "python lightning_train.py --trainer.num_nodes=2 --gpus 4",
    "deepspeed --hostfile hosts --num_nodes 2 --num_accelerators 4 train.py",
    "torchrun --nnodes 3 --nproc_per_node 4 --nnodes 2 train.py",
    "torchrun --nnodes=2 --nproc_per_node 8 --nproc-per-node=4 train.py",
]


@pytest.mark.parametrize("command", LAUNCH_FORMS)
def test_the_gate_and_run_local_read_each_launch_form_the_same(command: str) -> None:
    """One launcher reader: what ``amlgpu plan`` reads of a launch (its launcher, nodes and workers per node) is
    what ``amlgpu run-local`` finds to rescale."""
    from analysis import shell, topology

    (cmd,) = [c for c in shell.evaluate(command, placeholders={}).commands if topology.read_launch(
        c, topology.Contract("pytorch", 2, 4, gpus=4)) is not None]
    launch = topology.read_launch(cmd, topology.Contract("pytorch", 2, 4, gpus=4))
    assert launch is not None
    call = commandline.locate(command, launch.launcher)
    assert call is not None, launch.launcher
    procs, nodes = commandline.counts(call)
    assert launch.nodes == (2, 2) and nodes is not None and (int(nodes), int(nodes)) == launch.nodes
    per_node = int(procs or 0) // (int(nodes) if launch.launcher == launchers.ACCELERATE else 1)
    assert launch.procs_per_node == per_node == 4
    # What run-local writes is what the gate then reads: one node, two workers.
    scaled, _ = commandline.rescale(command, call, nodes=1, procs_per_node=2, gpus_per_node=4)
    (again,) = [topology.read_launch(c, topology.Contract("pytorch", 1, 2, gpus=4))
                for c in shell.evaluate(scaled, placeholders={}).commands]
    assert again is not None and again.nodes == (1, 1) and again.procs_per_node == 2, scaled
