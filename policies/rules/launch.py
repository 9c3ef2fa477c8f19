"""Launch-topology rules: what a run's command starts on each node, against what Azure ML gives the run.

Azure ML starts the command ``instance_count x process_count_per_instance`` times (once per node under a
per-node launcher) and gives each copy the variables of its distribution (see docs/jobs.md). A launcher
inside the command (torchrun, ``torch.distributed.launch``, accelerate, the deepspeed CLI, Lightning,
``mpirun``) then decides how many nodes it waits for and where its processes meet. The command is read by
:mod:`analysis.topology` into :class:`~analysis.topology.Launch` facts, which these rules judge against the run.
What cannot be read (a variable whose value is only known at run time, a wrapper script) is reported by the
advisory ``run-launch-topology-unknown``, never taken as right or wrong.
"""

from __future__ import annotations

import difflib

from analysis import contract, shell, topology
from analysis.topology import Launch
from jobs.launchers import PER_NODE_LAUNCHERS, TORCH_DISTRIBUTED_LAUNCH, TORCHRUN
from kernel import regex as linear
from policies.rule import run_rule
from policies.rules.runs import DISTRIBUTED_GUIDE
from stack.resolved import ResolvedRun


def _copies(run: ResolvedRun) -> int:
    """How many times the command's scripts run: Azure ML's processes, times the workers a per-node launcher
    starts in each (its count, else one per GPU); TensorFlow: one per worker and parameter server."""
    dist = run.distribution
    if dist["type"] == "tensorflow":
        return int(dist.get("worker_count") or run.instance_count) + int(dist.get("parameter_server_count") or 0)
    per_process = 1
    if run.launcher in PER_NODE_LAUNCHERS:
        # torchrun and torch.distributed.launch start 1 worker without --nproc_per_node; the others every GPU.
        default = 1 if run.launcher in (TORCHRUN, TORCH_DISTRIBUTED_LAUNCH) else run.cluster.gpus
        per_process = run.launcher_nproc_per_node or default
    return run.instance_count * run.processes_per_node * per_process


@run_rule(
    id="run-copies-without-process-group",
    title="A script started more than once joins a process group",
    severity="medium",
    enforcement="advisory",
    rationale="A script that never joins a process group (no torch.distributed or DistributedDataParallel, "
    "DeepSpeed, Horovod, Lightning, accelerate, Hugging Face Trainer, tf.distribute, mpi4py or Ray in it or in "
    "the code-folder modules it imports, read with Python's ast) does the same work in every copy Azure ML "
    "starts: a preprocessing script on 2 nodes x 8 GPUs runs 16 times, each copy writing the same files, 15 of "
    "them paid for nothing. Advisory: a script may pick its shard from RANK on purpose, and packages outside "
    "the code folder are judged by name only.",
    remediation="Run the script once (a single-node, single-process run, or a pipeline step before the "
    "distributed one), or make it distributed.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("command",),
)
def run_copies_without_process_group(run: ResolvedRun) -> list[str]:
    copies = _copies(run)
    if copies <= 1 or not run.scripts_without_process_group:
        return []
    return [f"{script} joins no process group and is started {copies} times: {copies - 1} duplicate "
            "copies doing the same work" for script in run.scripts_without_process_group]


_ALONE = ("each node alone", "missing")
"""Rendezvous verdicts under which the nodes of a multi-node run never meet (:data:`analysis.topology.Rendezvous`)."""


def _rendezvous_fix(launch: Launch, run: ResolvedRun) -> str:
    n = run.instance_count
    if launch.launcher in (topology.TORCHRUN, topology.TORCH_DISTRIBUTED_LAUNCH):
        return (f"give it --nnodes {n} --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT, "
                f"or --nnodes {n} --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT, under "
                "distribution: pytorch")
    if launch.launcher == topology.ACCELERATE:
        return (f"use --num_machines {n} --machine_rank $NODE_RANK --main_process_ip $MASTER_ADDR "
                "--main_process_port $MASTER_PORT, under distribution: pytorch")
    if launch.launcher == topology.DEEPSPEED:
        return ("start DeepSpeed once per GPU instead (python train.py --deepspeed ..., distribution: pytorch, "
                "process_count_per_instance = the node's GPUs), as azureml-examples' deepspeed-training job does: "
                "the deepspeed launcher needs a hostfile and passwordless SSH between nodes, which Azure ML does "
                "not set up")
    if launch.launcher == topology.LIGHTNING:
        return (f"give fabric run --num-nodes {n} --node-rank $NODE_RANK --main-address $MASTER_ADDR "
                "--main-port $MASTER_PORT")
    return ("let Azure ML start the ranks on every node (distribution: mpi, process_count_per_instance = the "
            "node's GPUs) instead of a mpirun of the command's own")


def _count_fix(launch: Launch, run: ResolvedRun) -> str:
    n = run.instance_count
    flag = {topology.ACCELERATE: "--num_machines", topology.DEEPSPEED: "--num_nodes",
            topology.LIGHTNING: launch.nodes_from.split(" ", 1)[0] or "--num-nodes"}.get(launch.launcher, "--nnodes")
    elastic = f" (or an elastic range such as 1:{n} with a c10d --rdzv_endpoint)" if flag == "--nnodes" else ""
    return f"use {flag} {n}{elastic}, or set resources.instance_count to what the launch expects"


def _nodes(launch: Launch) -> str:
    assert launch.nodes is not None
    low, high = launch.nodes
    return f"{low} node(s)" if low == high else f"{low} to {high} nodes"


@run_rule(
    id="run-launcher-node-count",
    title="A launcher waits for the nodes the run has",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML starts the run on resources.instance_count nodes. A launcher told another node count "
    "(torchrun or torch.distributed.launch --nnodes, accelerate --num_machines, deepspeed --num_nodes, "
    "LightningCLI --trainer.num_nodes, fabric run --num-nodes) waits for nodes that never come (the rendezvous "
    "blocks until the run's timeout, every node billed), or gets nodes it does not expect, which fail or train "
    "apart. An elastic range (--nnodes 1:4) that holds instance_count is fine. Flag meanings from each "
    "launcher's source (torch/distributed/run.py, accelerate/commands/launch.py, deepspeed/launcher/runner.py, "
    "lightning/fabric/cli.py; see docs/jobs.md).",
    remediation="Make the launcher's node count the run's instance_count (or use $WORLD_SIZE under a per-node "
    "launch), or change instance_count.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("command",),
)
def run_launcher_node_count(run: ResolvedRun) -> list[str]:
    out = []
    for launch in run.launches:
        if launch.nodes is None or launch.rendezvous in _ALONE:
            continue  # no count, or nodes that never meet (run-launcher-rendezvous says so)
        low, high = launch.nodes
        n = run.instance_count
        if low <= n <= high:
            continue
        what = ("the rendezvous waits for nodes that never come: the run hangs until its timeout" if low > n
                else f"{n - high} node(s) it does not expect start it too: they fail or train apart")
        out.append(f"`{launch.shown}` ({launch.where}) waits for {_nodes(launch)} ({launch.nodes_from}); the run "
                   f"has {n} (resources.instance_count): {what}. Fix: {_count_fix(launch, run)}")
    return out


@run_rule(
    id="run-launcher-rendezvous",
    title="A launcher on several nodes meets the other nodes",
    severity="high",
    enforcement="mandatory",
    rationale="Started on every node, a launcher must be told where node 0 is and which node it runs on. Without "
    "that each node holds its own rendezvous on localhost: torchrun without --master_addr/--rdzv_endpoint "
    "(127.0.0.1 by default; torchrun reads PET_* variables, never MASTER_ADDR), --standalone, --nnodes 1, "
    "accelerate --num_machines 1, fabric run without --main-address, the deepspeed launcher without a hostfile "
    "(it runs on localhost only; Azure ML writes none), mpirun without hosts. The nodes then train as "
    "independent copies or wait for each other until the timeout. A static rendezvous needs a different "
    "--node_rank on each node ($NODE_RANK); accelerate on several machines stops at start without "
    "--machine_rank or --main_process_ip. Azure ML gives each node MASTER_ADDR, MASTER_PORT and NODE_RANK "
    "under distribution: pytorch.",
    remediation="Pass Azure ML's $NODE_RANK, $MASTER_ADDR and $MASTER_PORT to the launcher (static rendezvous), "
    "or a c10d --rdzv_endpoint $MASTER_ADDR:$MASTER_PORT; for DeepSpeed start one process per GPU under "
    "distribution: pytorch.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("command",),
)
def run_launcher_rendezvous(run: ResolvedRun) -> list[str]:
    n = run.instance_count
    if n <= 1:
        return []
    out = []
    for launch in run.launches:
        head = f"`{launch.shown}` ({launch.where}) on {n} nodes"
        if launch.rendezvous in _ALONE:
            if launch.rendezvous == "missing":
                what = "a multi-node launch given no address: it stops at start"
            elif launch.nodes is not None and launch.nodes[0] > 1:
                what = (f"each node waits on its own localhost for {_nodes(launch)} that never come: the run hangs "
                        "until its timeout")
            else:
                what = f"each node holds its own rendezvous on localhost: the run trains as {n} independent copies"
            out.append(f"{head}: {launch.rendezvous_from}: {what}. Fix: {_rendezvous_fix(launch, run)}")
        elif launch.node_rank == "the same on every node":
            out.append(f"{head}: {launch.node_rank_from}: every node claims the same node rank and the rendezvous "
                       f"never completes. Fix: {_rendezvous_fix(launch, run)}")
        elif launch.node_rank == "missing":
            out.append(f"{head}: {launch.node_rank_from}: it stops at start. Fix: {_rendezvous_fix(launch, run)}")
    return out


AZURE_SETS = frozenset({*contract.LAUNCHER_VARIABLES, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK"})
"""The launch contract's names: what Azure ML (or Open MPI under it) gives a process under some distribution
(analysis/contract.py; shared/reference/azureml-launch-contract.md). The did-you-mean candidates."""

_PLATFORM_PREFIXES = ("AZUREML_", "AZ_BATCH", "OMPI_", "PMI_", "PMIX_", "PET_", "SLURM_")
"""Prefixes of names a platform or launcher may set that the contract does not list: never judged empty."""

_PLAIN_VARIABLE = linear.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
_MAY_SET_ANYTHING = frozenset({"eval", "source", "shell input", "dynamic command", "parse error", "too large",
                               "too deep", "timeout", "alias", "trap"})


def _set_by_the_command(run: ResolvedRun) -> frozenset[str] | None:
    """Names the command assigns (or exports) anywhere; None when it runs something that may set any name."""
    script = shell.evaluate(str(run.spec.get("command", "")))
    if not script.complete or any(u.kind in _MAY_SET_ANYTHING for u in script.unknowns):
        return None
    return frozenset({a.name for a in script.assignments} | set(script.variables))


def _empty_reads(run: ResolvedRun) -> list[tuple[Launch, str, str]]:
    """(launch, flag as written, variable) for each node-rank or address flag of a launch in the command that
    reads a variable nothing sets: not Azure ML under any distribution, not environment_variables, not the
    command. An image cannot set these either: a node rank differs per node and node 0's address is known only
    when the run starts, so a value baked into the image would be the same wrong value on every node."""
    if run.instance_count <= 1:
        return []
    given = set(run.spec.get("environment_variables") or {})
    found: list[tuple[Launch, str, str]] = []
    assigned: frozenset[str] | None = None
    for launch in run.launches:
        if launch.where != "the command":
            continue
        for verdict, written in ((launch.node_rank, launch.node_rank_from), (launch.rendezvous,
                                                                             launch.rendezvous_from)):
            flag, _, word = written.partition(" ")
            match = _PLAIN_VARIABLE.match(word.strip())
            if verdict != "unknown" or not flag.startswith("-") or not match:
                continue
            name = match.group(1)
            if name in AZURE_SETS or name in given or name.startswith(_PLATFORM_PREFIXES):
                continue
            if assigned is None:
                assigned = _set_by_the_command(run)
                if assigned is None:
                    return []
            if name not in assigned:
                found.append((launch, written, name))
    return found


def _did_you_mean(name: str, flag: str) -> str:
    """The closest name of the launch contract, as a question and a fix; a generic fix when none is close."""
    close = difflib.get_close_matches(name.upper(), sorted(AZURE_SETS), n=1, cutoff=0.6)
    if close:
        return f" Did you mean ${close[0]}? Fix: {flag} ${close[0]}"
    return (f" Fix: read Azure ML's variable (NODE_RANK, MASTER_ADDR, MASTER_PORT under distribution: pytorch) or "
            f"set ${name} in the command before the launcher")


@run_rule(
    id="run-launch-variable-empty",
    title="A launcher's node-rank and address flags read a variable that is set",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML gives each node its rank and node 0's address in the variables of the launch contract "
    "(NODE_RANK, MASTER_ADDR, MASTER_PORT under distribution: pytorch; AZ_BATCH_MASTER_NODE under mpi). A flag "
    "that reads any other variable the command and environment_variables never set gets an empty word: "
    "`--node_rank $NODERANK` becomes `--node_rank` and torchrun stops at its argument parser on every node. "
    "An image cannot supply these values: they differ per node or are known only when the run starts.",
    remediation="Read Azure ML's variable (the finding suggests the closest name of the launch contract), or set "
    "the variable in the command before the launcher.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("command",),
)
def run_launch_variable_empty(run: ResolvedRun) -> list[str]:
    return [f"`{launch.shown}` ({launch.where}): {written} reads ${name}, which is certainly empty: Azure ML "
            f"never sets it and neither the command nor environment_variables assign it."
            f"{_did_you_mean(name, written.partition(' ')[0])}"
            for launch, written, name in _empty_reads(run)]


@run_rule(
    id="run-launch-topology-unknown",
    title="What a multi-node run's launcher does is known before the run",
    severity="low",
    enforcement="advisory",
    rationale="Node counts, addresses and node ranks the gate cannot read (a variable only known at run time that "
    "is not one of Azure ML's, a flag inside a variable, eval, a script outside the code folder, a launcher that "
    "reaches the other nodes over SSH from a hostfile) are neither right nor wrong before the run: they are "
    "reported so that a reviewer looks, never blocked.",
    remediation="Write the counts and Azure ML's variables ($NODE_RANK, $MASTER_ADDR, $MASTER_PORT, $WORLD_SIZE) on "
    "the command line, or waive this advisory for the run with the reason.",
    reference=DISTRIBUTED_GUIDE,
    config_key=("command",),
)
def run_launch_topology_unknown(run: ResolvedRun) -> list[str]:
    if run.instance_count <= 1:
        return []
    empty = {f"`{word.partition(' ')[2].strip()}`" for _, word, _ in _empty_reads(run)}  # judged above
    out = [f"cannot tell: `{launch.shown}` ({launch.where}): {why}" for launch in run.launches
           for why in launch.unknown if not any(why.startswith(e + " ") for e in empty)]
    out += [f"`{launch.shown}` ({launch.where}): {launch.rendezvous_from}: Azure ML sets up no SSH between "
            "nodes; the command must, and must start the launch on one node only" for launch in run.launches
            if launch.rendezvous == "over SSH"]
    return out + list(run.launch_unknowns)


TOPOLOGY_RULES = (run_launcher_node_count, run_launcher_rendezvous)
"""The mandatory launch-topology rules: a launch they block would hang or split on Azure ML, and ``amlgpu
run-local`` refuses to start it (it never rewrites a launch into one that works)."""
