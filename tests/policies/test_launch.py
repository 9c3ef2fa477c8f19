"""Launch topology: what a run's launcher starts on each node, judged against the run (policies/rules/launch.py),
and Microsoft's own commands that start processes without opening a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis import topology
from jobs.resolve import resolve_run
from policies.catalogue import BY_ID, RULES
from stack.resolved import ResolvedRun
from tests.conftest import ROOT
from tests.jobs.test_resolve import declared, stack

HISTORY = ROOT / "tests" / "fixtures" / "azureml-examples-history"
BASICS = HISTORY / "085cd6ea" / "cli" / "jobs" / "pipelines-with-components" / "basics"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    return tmp_path


def _mandatory(run: Any) -> dict[str, list[str]]:
    found = {}
    for rule in RULES:
        if rule.kind == "run" and rule.enforcement == "mandatory":
            messages = list(rule.check(run, **rule.parameters))
            if messages:
                found[rule.id] = messages
    return found


@pytest.mark.parametrize("example", ["6a_tf_hello_world", "6b_pytorch_hello_world"])
def test_microsofts_hello_world_components_pass_on_a_one_gpu_size(root: Path, example: str) -> None:
    """The pipelines' hello-world components as runs on their `gpu-cluster` (a 1-GPU size): the command only
    echoes the launch variables, so 2 processes per node are no finding."""
    component = yaml.safe_load((BASICS / example / "component.yml").read_text())
    node = yaml.safe_load((BASICS / example / "pipeline.yml").read_text())["jobs"]
    (step,) = node.values()
    environment = component["environment"].replace("/labels/latest", "/versions/1")
    run = declared(name=component["name"].replace("_", "-"), command=component["command"], code=None,
                   environment=environment, compute="gpu-cluster", resources=step["resources"],
                   distribution=step["distribution"])
    clusters = [{"name": "gpu-cluster", "size": "Standard_NC24ads_A100_v4", "max_instances": 2}]
    config = stack(root, [run], clusters=clusters)
    resolved = resolve_run(config.jobs[0], config, root)
    assert _mandatory(resolved) == {}


STATIC = "--node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT"
C10D = "--rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT"
NODE_COUNT, RENDEZVOUS, UNKNOWN = "run-launcher-node-count", "run-launcher-rendezvous", "run-launch-topology-unknown"

MISTAKES = [
    # (command on 2 nodes of 8 GPUs, process_count_per_instance 1, the rule, a phrase of its message)
    (f"torchrun --nnodes 4 --nproc_per_node 8 {STATIC} train.py", NODE_COUNT,
     "waits for 4 node(s) (--nnodes 4); the run has 2 (resources.instance_count): the rendezvous waits for nodes "
     "that never come"),
    ("torchrun --nnodes 2 --nproc_per_node 8 train.py", RENDEZVOUS,
     "no --master_addr (127.0.0.1): each node waits on its own localhost for 2 node(s) that never come"),
    ("torchrun --standalone --nproc_per_node 8 train.py", RENDEZVOUS,
     "--standalone (a rendezvous on localhost of each node): each node holds its own rendezvous on localhost: the "
     "run trains as 2 independent copies"),
    ("torchrun --nnodes 1 --nproc_per_node 8 train.py", RENDEZVOUS, "the run trains as 2 independent copies"),
    (f"python -m torch.distributed.launch --nnodes 3 --nproc_per_node 8 {STATIC} train.py", NODE_COUNT,
     "waits for 3 node(s) (--nnodes 3); the run has 2"),
    ("python -m torch.distributed.launch --nnodes 3 --nproc_per_node 8 --use_env train.py", RENDEZVOUS,
     "each node waits on its own localhost for 3 node(s)"),
    ("accelerate launch --multi_gpu --num_machines 1 --num_processes 8 train.py", RENDEZVOUS,
     "--num_machines 1 (a standalone launch on each node)"),
    ("deepspeed --num_gpus 8 train.py --deepspeed --deepspeed_config ds.json", RENDEZVOUS,
     "no --hostfile: --master_addr 127.0.0.1 on each node"),
    ("deepspeed --num_nodes 2 --num_gpus 8 train.py", RENDEZVOUS, "Num nodes is >1 but no extra nodes available"),
    ("torchrun --nnodes 2 --nproc_per_node 8 --master_addr $MASTER_ADDR --master_port $MASTER_PORT train.py",
     RENDEZVOUS, "no --node_rank (0 on every node): every node claims the same node rank"),
    ("torchrun --nnodes 2 --nproc_per_node 8 --node_rank 0 --master_addr $MASTER_ADDR train.py", RENDEZVOUS,
     "--node_rank 0: every node claims the same node rank"),
    ("accelerate launch --num_machines 2 --num_processes 16 --main_process_ip $MASTER_ADDR train.py", RENDEZVOUS,
     "no --machine_rank: it stops at start"),
    ("accelerate launch --num_machines 2 --num_processes 16 --machine_rank $NODE_RANK train.py", RENDEZVOUS,
     "no --main_process_ip: a multi-node launch given no address"),
    ("mpirun -np 16 python train.py", RENDEZVOUS, "no -H/--host: every rank starts on the node that runs it"),
    ("fabric run --num-nodes 2 --devices 8 train.py", RENDEZVOUS, "no --main-address (127.0.0.1)"),
    ("python main.py fit --trainer.num_nodes 4 --trainer.devices 8", NODE_COUNT,
     "waits for 4 node(s) (--trainer.num_nodes 4)"),
    ("torchrun --nnodes 2 --nproc_per_node 8 --master_addr localhost --node_rank $NODE_RANK train.py", RENDEZVOUS,
     "--master_addr localhost: each node waits on its own localhost"),
    ("torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d train.py", RENDEZVOUS,
     "--rdzv_backend c10d with no --rdzv_endpoint (localhost)"),
    # a launch written in a script of the code folder, and a bash -c body
    ("bash launch.sh", NODE_COUNT, "(launch.sh line 2) waits for 4 node(s) (--nnodes 4)"),
    ("cd sub && ./start.sh", RENDEZVOUS, "(./start.sh line 1) on 2 nodes: --standalone"),
    ("bash -c 'torchrun --standalone --nproc_per_node 8 train.py'", RENDEZVOUS, "--standalone"),
    # values Azure ML gives: WORLD_SIZE is nodes x processes per node
    (f"torchrun --nnodes $WORLD_SIZE --nproc_per_node 4 {STATIC} train.py", None, None),
]

CORRECT = [
    f"torchrun --nnodes 2 --nproc_per_node 8 {STATIC} train.py",
    "torchrun --nnodes=2 --nproc-per-node=8 --node-rank=$NODE_RANK --master-addr=$MASTER_ADDR "
    "--master-port=$MASTER_PORT train.py",
    f"torchrun --nnodes 2 --nproc_per_node 8 {C10D} --rdzv_id job-1 train.py",
    f"torchrun --nnodes 1:4 --nproc_per_node 8 {C10D} train.py",  # elastic, with an endpoint
    f"python -m torch.distributed.run --nnodes $WORLD_SIZE --nproc_per_node gpu {STATIC} train.py",
    f"python -m torch.distributed.launch --nnodes 2 --nproc_per_node 8 {STATIC} --use_env train.py",
    "accelerate launch --multi_gpu --num_machines 2 --num_processes 16 --machine_rank $NODE_RANK "
    "--main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT train.py",
    "fabric run --num-nodes 2 --node-rank $NODE_RANK --main-address $MASTER_ADDR --main-port $MASTER_PORT "
    "--devices 8 train.py",
    "python lightning_train.py --devices 8 --num-nodes 2",
    "python train.py --epochs 2",  # Azure ML starts the processes: nothing to meet
    'export NNODES=2; torchrun --nnodes "$NNODES" --nproc_per_node 8 ' + STATIC + " train.py",
    "bash good.sh",
]


@pytest.fixture
def scripts(root: Path) -> Path:
    src = root / "src"
    (src / "main.py").write_text("from lightning.pytorch.cli import LightningCLI\n")
    (src / "lightning_train.py").write_text("import lightning\n")
    (src / "launch.sh").write_text("set -e\ntorchrun --nnodes 4 --nproc_per_node 8 " + STATIC + " train.py\n")
    (src / "good.sh").write_text("NPROC=${NPROC:-8}\ntorchrun --nnodes 2 --nproc_per_node $NPROC " + STATIC
                                 + ' train.py "$@"\n')
    (src / "sub").mkdir()
    (src / "sub" / "start.sh").write_text("torchrun --standalone --nproc_per_node 8 ../train.py\n")
    return root


def _resolved(root: Path, command: str, nodes: int = 2, distribution: dict[str, Any] | None = None) -> Any:
    run = declared(command=command, resources={"instance_count": nodes},
                   distribution=distribution or {"type": "pytorch", "process_count_per_instance": 1})
    config = stack(root, [run])
    return resolve_run(config.jobs[0], config, root)


def _found(run: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rule in RULES:
        if rule.kind == "run" and rule.family == "launch" and rule.id != "run-copies-without-process-group":
            messages = list(rule.check(run, **rule.parameters))
            if messages:
                out[rule.id] = messages
    return out


@pytest.mark.parametrize(("command", "rule", "says"), MISTAKES, ids=[m[0][:70] for m in MISTAKES])
def test_every_launch_topology_mistake_is_a_mandatory_finding_with_the_fix(scripts: Path, command: str,
                                                                           rule: str | None, says: str | None) -> None:
    found = _found(_resolved(scripts, command))
    if rule is None:
        assert found == {}
        return
    assert set(found) == {rule}, found
    (message,) = found[rule]
    assert says is not None and says in message and "Fix: " in message, message
    assert BY_ID[rule].enforcement == "mandatory"


@pytest.mark.parametrize("command", CORRECT)
def test_correct_launches_pass_clean(scripts: Path, command: str) -> None:
    assert _found(_resolved(scripts, command)) == {}


@pytest.mark.parametrize("command", [
    "torchrun --standalone --nproc_per_node 8 train.py",
    "deepspeed --num_gpus 8 train.py --deepspeed",
    "accelerate launch --num_processes 8 train.py",
    "mpirun -np 8 python train.py",
])
def test_a_single_node_launch_needs_no_rendezvous(scripts: Path, command: str) -> None:
    assert _found(_resolved(scripts, command, nodes=1)) == {}


@pytest.mark.parametrize(("command", "distribution", "says"), [
    ("torchrun --nnodes $NODES --nproc_per_node 8 " + STATIC + " train.py", None,
     "--nnodes $NODES: the nodes it waits for: `$NODES` is only known at run time"),
    # set from something read at run time (a never-set $HEAD is certainly empty: run-launch-variable-empty)
    ("HEAD=$(cat /etc/head-node); torchrun --nnodes 2 --nproc_per_node 8 --node_rank $NODE_RANK --master_addr $HEAD "
     "train.py", None, "`$HEAD` is only known at run time"),
    ("torchrun --nnodes 2 --node_rank $NODE_RANK --master_addr 10.0.0.4 --master_port 29500 train.py", None,
     "a fixed address `10.0.0.4`"),
    ("torchrun $TORCHRUN_ARGS train.py", None, "`$TORCHRUN_ARGS` before the script is only known at run time"),
    ("bash /opt/launch.sh", None, "cannot tell what `bash /opt/launch.sh` starts"),
    ("eval $LAUNCH", None, "cannot tell: `eval $LAUNCH`"),
    ("deepspeed --hostfile hosts --num_gpus 8 train.py", None, "Azure ML sets up no SSH between nodes"),
    ("accelerate launch --multi_gpu --num_processes 16 train.py", None, "no --num_machines: the number of machines"),
    ("accelerate launch --config_file cfg.yaml train.py", None, "--config_file cfg.yaml"),
    ("python train.py --num_nodes 1", None, None),  # not a Lightning script: its flag means nothing here
    ("python lightning_train.py --num_nodes 1 --devices 8", None,
     "--num_nodes 1 is the script's own flag: if it is Trainer(num_nodes=...), Lightning waits for 1 node(s)"),
    # Azure ML sets MASTER_ADDR and NODE_RANK under distribution pytorch, not mpi
    ("torchrun --nnodes 2 --nproc_per_node 8 " + STATIC + " train.py", {"type": "mpi", "process_count_per_instance": 1},
     "reads $NODE_RANK, which Azure ML sets under another distribution, not mpi"),
])
def test_what_cannot_be_read_is_advisory_never_silent(scripts: Path, command: str,
                                                      distribution: dict[str, Any] | None, says: str | None) -> None:
    found = _found(_resolved(scripts, command, distribution=distribution))
    if says is None:
        assert found == {}
        return
    assert set(found) == {UNKNOWN}, found
    assert any(says in message for message in found[UNKNOWN]), found[UNKNOWN]
    assert BY_ID[UNKNOWN].enforcement == "advisory"


def test_under_mpi_azure_mls_own_variables_lead_across_nodes(scripts: Path) -> None:
    command = ("torchrun --nnodes $OMPI_COMM_WORLD_SIZE --nproc_per_node 8 --node_rank $OMPI_COMM_WORLD_RANK "
               "--master_addr ${AZ_BATCH_MASTER_NODE%:*} --master_port 6105 train.py")
    run = _resolved(scripts, command, distribution={"type": "mpi", "process_count_per_instance": 1})
    (launch,) = run.launches
    assert (launch.nodes, launch.rendezvous, launch.node_rank) == ((2, 2), "across nodes", "per node")
    assert _found(run) == {}


@pytest.mark.parametrize(("command", "missing"), [
    # a folder cloned at run time: what runs in it is unknown, not missing
    ("git clone https://github.com/NVIDIA/apex && cd apex && python setup.py install && cd .. && python train.py", ()),
    ("cd sub && python ../train.py", ()),
    ("cd sub && python train.py", ("sub/train.py",)),  # sub exists in the code folder: train.py is not in it
    ("python third_party/train.py", ("third_party/train.py",)),
    ("cd $WORKDIR && python train.py", ()),
])
def test_entry_scripts_are_found_where_the_command_cd_s(scripts: Path, command: str, missing: tuple[str, ...]) -> None:
    assert _resolved(scripts, command).missing_scripts == missing


def test_launches_travel_through_the_engine(scripts: Path) -> None:
    run = _resolved(scripts, f"torchrun --nnodes 1:4 --nproc_per_node 8 {C10D} train.py")
    props = json.loads(json.dumps(run.to_props()))
    assert ResolvedRun.from_props(props) == run


# ------------------------------------------------------------------ the flag tables against the launchers' own parsers

SAMPLES = [
    f"--nnodes 2 --nproc_per_node 8 {STATIC} train.py --lr 1",
    "--standalone --nproc-per-node=4 -m pkg.train --nnodes 9",
    f"--nnodes=1:4 --max-restarts 3 {C10D} --rdzv_id x --no-python --run-path ./bin/train -x",
    "--redirects 3 --tee 1 --node-rank 1 --master-addr 10.0.0.4 --master-port 29500 --log-dir /tmp/l train.py",
]


def _words(text: str) -> list[Any]:
    from analysis import shell

    environment = {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "6105"}
    (command,) = shell.evaluate(f"prog {text}", environment=environment).commands
    return list(command.argv[1:])


@pytest.mark.parametrize("sample", SAMPLES)
def test_torchrun_options_are_read_as_torchs_own_parser_reads_them(sample: str) -> None:
    run = pytest.importorskip("torch.distributed.run")
    words = _words(sample)
    ours = topology._options([], words, topology.TORCHRUN_BOOLEANS)
    theirs = run.get_args_parser().parse_args([w.value for w in words])
    assert ours.rest[0].value == theirs.training_script
    for flag in ("--nnodes", "--nproc_per_node", "--rdzv_backend", "--rdzv_endpoint", "--node_rank", "--master_addr",
                 "--master_port"):
        word = ours.get(flag)
        if word is not None:
            assert str(getattr(theirs, flag[2:])) == word.value, flag
    assert ours.has("--standalone") == theirs.standalone


def test_the_flag_tables_name_every_option_that_takes_no_value() -> None:
    run = pytest.importorskip("torch.distributed.run")
    accelerate = pytest.importorskip("accelerate.commands.launch")

    def booleans(parser: Any) -> set[str]:
        return {topology._key(option) for action in parser._actions if action.option_strings and action.nargs == 0
                for option in action.option_strings}

    # torch.distributed.launch adds --use-env to torchrun's parser
    assert booleans(run.get_args_parser()) | {"--use_env"} == set(topology.TORCHRUN_BOOLEANS)
    assert booleans(accelerate.launch_command_parser()) == set(topology.ACCELERATE_BOOLEANS)


def test_torchrun_takes_a_missing_flag_from_its_pet_variable(scripts: Path) -> None:
    run = _resolved(scripts, "PET_NNODES=4 torchrun --nproc_per_node 8 " + STATIC + " train.py")
    (launch,) = run.launches
    assert launch.nodes == (4, 4)
    assert set(_found(run)) == {NODE_COUNT}
