"""Launch topology: what a run's command starts on each node, read from the command as bash would run it.

Azure ML runs a run's command on every node, ``process_count_per_instance`` times, with its distribution's
variables (:func:`contract`). Each launcher the command starts (in the command or a shell script of the code
folder, evaluated by :mod:`analysis.shell`) is read into a :class:`Launch`: the nodes it waits for, its
rendezvous, how each node learns its rank; :mod:`policies.rules.launch` judges them. Each launcher's flags follow
its own source (torchrun, accelerate, deepspeed, Lightning Fabric's CLI, mpirun): docs/development.md,
"analysis/topology.py". What cannot be read is :attr:`Launch.unknown`, never taken as right or wrong.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from analysis import shell
from kernel import regex as linear

TORCHRUN = "torchrun"
TORCH_DISTRIBUTED_LAUNCH = "torch.distributed.launch"
ACCELERATE = "accelerate"
DEEPSPEED = "deepspeed"
LIGHTNING = "lightning"
MPIRUN = "mpirun"

Rendezvous = Literal["across nodes", "each node alone", "missing", "over SSH", "unknown", "not needed"]
"""How a launch's nodes find each other: through an address every node reaches (Azure ML's MASTER_ADDR);
each on its own ``localhost`` (every node trains alone, or waits for nodes that never come); a
multi-node launch given no address at all (it stops at start); over SSH from a hostfile (Azure ML sets up
neither); not known before the run; not needed (one node)."""

NodeRank = Literal["per node", "the same on every node", "missing", "not needed", "unknown"]


@dataclass(frozen=True)
class Launch:
    """One launcher the command starts, as read from its words."""

    launcher: str
    """:data:`TORCHRUN`, :data:`TORCH_DISTRIBUTED_LAUNCH`, :data:`ACCELERATE`, :data:`DEEPSPEED`,
    :data:`LIGHTNING` or :data:`MPIRUN`."""
    shown: str
    """The launch as written, up to its script (shortened): ``torchrun --nnodes 4 --nproc_per_node 8``."""
    where: str
    """``the command``, or ``run.sh line 3`` for a script of the code folder."""
    nodes: tuple[int, int] | None = None
    """The nodes it waits for, min and max (``--nnodes 1:4``); None when not known before the run or when
    the launcher has no node count (mpirun)."""
    nodes_from: str = ""
    """How: ``--nnodes 4``, ``--nnodes $WORLD_SIZE (2)``, ``no --nnodes (torchrun's default 1)``."""
    rendezvous: Rendezvous = "unknown"
    rendezvous_from: str = ""
    node_rank: NodeRank = "not needed"
    node_rank_from: str = ""
    procs_per_node: int | None = None
    """Processes it starts on each node when its command says (``--nproc_per_node 8``)."""
    unknown: tuple[str, ...] = ()
    """What cannot be read before the run, one sentence each."""

    def to_props(self) -> dict[str, Any]:
        return {"launcher": self.launcher, "shown": self.shown, "where": self.where,
                "nodes": list(self.nodes) if self.nodes else None, "nodes_from": self.nodes_from,
                "rendezvous": self.rendezvous, "rendezvous_from": self.rendezvous_from,
                "node_rank": self.node_rank, "node_rank_from": self.node_rank_from,
                "procs_per_node": self.procs_per_node, "unknown": list(self.unknown)}

    @classmethod
    def from_props(cls, props: Mapping[str, Any]) -> Launch:
        nodes = props.get("nodes")
        procs = props.get("procs_per_node")
        return cls(
            launcher=str(props["launcher"]), shown=str(props.get("shown", "")), where=str(props.get("where", "")),
            nodes=(int(nodes[0]), int(nodes[1])) if nodes else None, nodes_from=str(props.get("nodes_from", "")),
            rendezvous=props.get("rendezvous", "unknown"), rendezvous_from=str(props.get("rendezvous_from", "")),
            node_rank=props.get("node_rank", "not needed"), node_rank_from=str(props.get("node_rank_from", "")),
            procs_per_node=None if procs is None else int(procs), unknown=tuple(props.get("unknown") or ()),
        )


# ------------------------------------------------------------------------------------------ the contract


@dataclass(frozen=True)
class Contract:
    """What Azure ML gives the command of a run on every node (docs/jobs.md, "What each process sees";
    Microsoft Learn's distributed GPU training guide), and the run's own ``environment_variables``."""

    distribution: str
    nodes: int
    per_node: int
    """Processes Azure ML starts on each node."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """The run's ``environment_variables``."""
    gpus: int | None = None
    """GPUs per node (torchrun's ``--nproc_per_node gpu``/``auto``)."""

    @property
    def master(self) -> frozenset[str]:
        """Variables holding an address of node 0 that every node reaches."""
        return frozenset({"pytorch": {"MASTER_ADDR"}, "mpi": {"AZ_BATCH_MASTER_NODE"}}.get(self.distribution, set()))

    @property
    def per_node_rank(self) -> frozenset[str]:
        """Variables whose value is the node's own index (distinct on each node)."""
        if self.distribution == "pytorch":
            return frozenset({"NODE_RANK", "GROUP_RANK"} | ({"RANK"} if self.per_node == 1 else set()))
        if self.distribution == "mpi" and self.per_node == 1:
            return frozenset({"OMPI_COMM_WORLD_RANK"})
        return frozenset()

    def platform(self) -> frozenset[str]:
        """The variables Azure ML sets whose values are only known at run time."""
        return frozenset({
            "pytorch": {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "LOCAL_RANK"},
            "mpi": {"AZ_BATCH_MASTER_NODE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_NODE_RANK"},
            "tensorflow": {"TF_CONFIG"},
        }.get(self.distribution, set()))

    def known(self) -> list[shell.Variable]:
        """Variables with a value known before the run: Azure ML's counts, then the run's own."""
        total = str(self.nodes * self.per_node)
        azure = {"pytorch": {"WORLD_SIZE": total},
                 "mpi": {"OMPI_COMM_WORLD_SIZE": total, "OMPI_COMM_WORLD_LOCAL_SIZE": str(self.per_node)},
                 }.get(self.distribution, {})
        out = [shell.Variable(name, value, f"Azure ML (distribution {self.distribution})")
               for name, value in azure.items()]
        return out + [shell.Variable(name, value, "environment_variables")
                      for name, value in self.environment.items()]


# ------------------------------------------------------------------------------------------ reading words

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "0.0.0.0", "::1", "[::1]", "ip6-localhost"})
_OPTION = linear.compile(rf"--?[A-Za-z][{linear.WORD}.-]*")
_PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "-Q"})
_MODULES = {
    "torch.distributed.run": TORCHRUN,
    "torch.distributed.launch": TORCH_DISTRIBUTED_LAUNCH,
    "accelerate.commands.launch": ACCELERATE,
    "deepspeed.launcher.runner": DEEPSPEED,
}


def _name(word: shell.Word) -> str:
    return posixpath.basename(word.value) if word.value is not None else ""


def _as_written(word: shell.Word) -> str:
    return str(word)


def _shorten(words: Sequence[shell.Word], limit: int = 160) -> str:
    text = " ".join(_as_written(w) for w in words)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class _Options:
    """A launcher's own options (up to its script), as the launcher's argparse reads them."""

    values: dict[str, shell.Word]
    flags: frozenset[str]
    words: tuple[shell.Word, ...]
    """The words of the options, the program included (for messages)."""
    rest: tuple[shell.Word, ...]
    """The script and its arguments."""
    unknown: tuple[str, ...] = ()
    """Words among the options only known at run time (``$EXTRA_ARGS``): any of them may set or override any
    flag, so nothing is known of such a launch (:func:`read_launch`)."""
    at: Mapping[str, tuple[int, bool]] = field(default_factory=dict)
    """Where each value was read: the index of its word in the options (after the program) and whether it is
    attached to its flag (``--nnodes=4``). Values from elsewhere (``PET_NNODES``) have none."""

    def get(self, *names: str) -> shell.Word | None:
        found = self.key(*names)
        return self.values[found] if found is not None else None

    def key(self, *names: str) -> str | None:
        """The first of ``names`` that has a value."""
        return next((name for name in names if name in self.values), None)

    def has(self, *names: str) -> bool:
        return any(name in self.flags for name in names)


_HIDDEN = " before the script is only known at run time"
"""How :func:`_options` says that some options are hidden in a word only known at run time."""


def _key(option: str) -> str:
    """``--nproc-per-node`` and ``--nproc_per_node`` are one option."""
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def _options(program: Sequence[shell.Word], args: Sequence[shell.Word], booleans: frozenset[str]) -> _Options:
    """Read ``--name value``, ``--name=value`` and boolean flags (``booleans``, by :func:`_key`) until the first
    word that is not an option (the script): argparse's reading, with every option not in ``booleans`` taking one
    value."""
    values: dict[str, shell.Word] = {}
    at: dict[str, tuple[int, bool]] = {}
    flags: set[str] = set()
    unknown: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        text = word.value
        if text is None:
            raw = word.raw.strip("\"'")
            name, eq, _ = raw.partition("=")
            if eq and _OPTION.fullmatch(name):  # --nnodes=$NODES: the option is known
                values[_key(name)] = shell.Word(raw=raw[len(name) + 1:], value=None, line=word.line,
                                                variables=word.variables, unknown=word.unknown,
                                                shown=raw[len(name) + 1:])
                at[_key(name)] = (i, True)
                i += 1
                continue
            # A word only known at run time: one option, several, or the script (`$LAUNCHER_ARGS`).
            unknown.append(f"`{word.raw}`{_HIDDEN}")
            i += 1
            continue
        if not text.startswith("-") or text == "-":
            break
        name, eq, inline = text.partition("=")
        key = _key(name)
        if key in booleans and not eq:
            flags.add(key)
            i += 1
            continue
        if eq:
            values[key] = shell.Word(raw=word.raw, value=inline, line=word.line, variables=word.variables,
                                     shown=inline)
            at[key] = (i, True)
            i += 1
            continue
        if i + 1 < len(args):
            values[key] = args[i + 1]
            at[key] = (i + 1, False)
            i += 2
            continue
        values[key] = shell.Word(raw="", value="", line=word.line)
        at.pop(key, None)
        i += 1
    return _Options(values, frozenset(flags), (*program, *args[:i]), tuple(args[i:]), tuple(unknown), at)


def _count(word: shell.Word | None) -> int | None:
    if word is None or word.value is None:
        return None
    try:
        return int(word.value.strip())
    except ValueError:
        return None


def _procs(word: shell.Word | None, contract: Contract) -> int | None:
    """torchrun's ``--nproc_per_node``: a number, or ``gpu``/``auto`` for every GPU of the node."""
    if word is not None and word.value in ("gpu", "auto"):
        return contract.gpus
    return _count(word)


def _node_range(word: shell.Word) -> tuple[int, int] | None:
    if word.value is None:
        return None
    low, sep, high = word.value.strip().partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        return None


def _written(flag: str, word: shell.Word) -> str:
    """``--nnodes $WORLD_SIZE (2)`` or ``--nnodes 4``."""
    if word.value is not None and word.raw and word.raw.strip("\"'") != word.value:
        return f"{flag} {word.raw} ({word.value})"
    return f"{flag} {word}"


def _host(word: shell.Word, contract: Contract) -> tuple[Rendezvous, str | None]:
    """Where an address (or ``host:port`` endpoint) leads: Azure ML's node 0, this node, or unknown (and why)."""
    if word.value is not None:
        host = word.value.strip()
        if host.startswith("[") and "]" in host:
            host = host[: host.index("]") + 1]
        elif host.count(":") == 1:
            host = host.partition(":")[0]
        if not host or host in _LOCAL_HOSTS:
            return "each node alone", None
        return "unknown", f"a fixed address `{word.raw}` (Azure ML gives node 0's address as {_master(contract)})"
    if word.variables and any(name in contract.master for name in word.variables[:1]):
        return "across nodes", None
    return "unknown", _why_unknown(word, contract)


def _address(word: shell.Word | None, flag: str, contract: Contract, *,
             absent: tuple[Rendezvous, str]) -> tuple[Rendezvous, str, str | None]:
    """(rendezvous, how it was read, why unknown) of an address flag; ``absent``: what its default means."""
    if word is None:
        return absent[0], absent[1], None
    rendezvous, why = _host(word, contract)
    return rendezvous, _written(flag, word), why


def _master(contract: Contract) -> str:
    return {"mpi": "$AZ_BATCH_MASTER_NODE"}.get(contract.distribution, "$MASTER_ADDR")


def _why_unknown(word: shell.Word, contract: Contract) -> str:
    names = [n for n in word.variables if n not in contract.platform()]
    azure_elsewhere = [n for n in names if n in _AZURE_NAMES]
    if azure_elsewhere:
        return (f"`{word.raw}` reads ${azure_elsewhere[0]}, which Azure ML sets under another distribution, not "
                f"{contract.distribution}: empty unless the image or the command sets it")
    causes = [c for c in word.unknown if c != word.raw]
    if causes:
        return f"`{word.raw}` depends on `{causes[0]}`, only known at run time"
    return f"`{word.raw}` is only known at run time"


_AZURE_NAMES = frozenset({"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                          "AZ_BATCH_MASTER_NODE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "TF_CONFIG"})


def _rank(word: shell.Word | None, flag: str, default: str, contract: Contract) -> tuple[NodeRank, str, str | None]:
    """How a node-rank flag sets each node's rank: (verdict, how it was read, why unknown)."""
    if word is None:
        return "the same on every node", f"no {flag} ({default} on every node)", None
    if word.value is not None:
        return "the same on every node", _written(flag, word), None
    if word.variables and all(name in contract.per_node_rank for name in word.variables):
        return "per node", _written(flag, word), None
    return "unknown", _written(flag, word), _why_unknown(word, contract)


# ------------------------------------------------------------------------------------------ launchers

TORCHRUN_BOOLEANS = frozenset({"--standalone", "-m", "--module", "--no_python", "--run_path", "--virtual_local_rank",
                               "--use_env", "-h", "--help"})
"""torchrun's options that take no value (``torch/distributed/run.py``; ``--use-env`` is
``torch.distributed.launch``'s); every other option takes one."""
ACCELERATE_BOOLEANS = frozenset({
    "-h", "--help", "--quiet", "-q", "--cpu", "--multi_gpu", "--tpu", "--enable_cpu_affinity",
    "--dynamo_use_fullgraph", "--dynamo_use_dynamic", "--dynamo_use_regional_compilation", "--use_deepspeed",
    "--use_fsdp", "--use_parallelism_config", "--use_megatron_lm", "--same_network", "-m", "--module",
    "--no_python", "--tpu_cluster", "--no_tpu_cluster", "--tpu_use_sudo", "--downcast_bf16",
    "--fp8_use_autocast_during_eval", "--debug",
})
"""``accelerate launch``'s options that take no value (``accelerate/commands/launch.py``, accelerate 1.x)."""
DEEPSPEED_BOOLEANS = frozenset({"--module", "--no_python", "--no_local_rank", "--no_ssh_check", "--force_multi",
                                "--save_pid", "--elastic_training", "--bind_cores_to_rank", "-h", "--help"})
"""The deepspeed launcher's options that take no value (``deepspeed/launcher/runner.py``)."""
_HOST_FLAGS = {MPIRUN: ("-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
                        "--default-hostfile"),
               "horovodrun": ("-H", "--hosts", "-hostfile", "--hostfile", "--host-discovery-script")}


_PET = ("nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "node_rank", "master_addr", "master_port")


def _with_pet(opts: _Options, environ: shell.Environ) -> _Options:
    """torchrun takes a flag it is not given from ``PET_<FLAG>`` (``torch.distributed.argparse_util.env``;
    ``--standalone`` from ``PET_STANDALONE``)."""
    values = dict(opts.values)
    flags = set(opts.flags)
    for dest in _PET:
        name = f"PET_{dest.upper()}"
        if f"--{dest}" not in values and name in environ:
            value = environ.value(name)
            values[f"--{dest}"] = shell.Word(raw=f"${name}", value=value, line=0, variables=(name,),
                                             shown=value if value is not None else f"${name}")
    if "PET_STANDALONE" in environ and "--standalone" not in flags:
        flags.add("--standalone")
    return _Options(values, frozenset(flags), opts.words, opts.rest, opts.unknown,
                    {k: v for k, v in opts.at.items() if k in opts.values})


def _torchrun(launcher: str, opts: _Options, where: str, contract: Contract) -> Launch:
    unknown = list(opts.unknown)
    nnodes = opts.get(*COUNT_FLAGS["torchrun"][1])
    nodes: tuple[int, int] | None
    if nnodes is None:
        nodes, nodes_from = (1, 1), "no --nnodes (1)"
    else:
        nodes, nodes_from = _node_range(nnodes), _written("--nnodes", nnodes)
        if nodes is None:
            unknown.append(f"{nodes_from}: the nodes it waits for: {_why_unknown(nnodes, contract)}")
    procs = _procs(opts.get(*COUNT_FLAGS["torchrun"][0]), contract)
    backend_word = opts.get("--rdzv_backend")
    endpoint = opts.get("--rdzv_endpoint")
    master_addr = opts.get("--master_addr")
    rendezvous: Rendezvous
    if opts.has("--standalone"):
        return Launch(launcher, _shorten(opts.words), where, nodes, nodes_from, "each node alone",
                      "--standalone (a rendezvous on localhost of each node)", "not needed", "", procs, tuple(unknown))
    backend = "static" if backend_word is None else backend_word.value
    if backend is None:
        assert backend_word is not None
        unknown.append(f"{_written('--rdzv_backend', backend_word)} is only known at run time")
        return Launch(launcher, _shorten(opts.words), where, nodes, nodes_from, "unknown", "", "unknown", "", procs,
                      tuple(unknown))
    if backend == "static":
        if endpoint is not None and (endpoint.value or endpoint.variables):
            rendezvous, why = _host(endpoint, contract)
            how = _written("--rdzv_endpoint", endpoint)
        elif (nodes is not None and nodes[1] == 1 and opts.get("--master_port") is None) or master_addr is None:
            rendezvous, why = "each node alone", None
            how = ("no --master_addr (127.0.0.1)" if master_addr is None
                   else "one node and no --master_port (a rendezvous on localhost)")
        else:
            rendezvous, why = _host(master_addr, contract)
            how = _written("--master_addr", master_addr)
        rank, rank_from, rank_why = _rank(opts.get("--node_rank"), "--node_rank", "0", contract)
        for reason in (why, rank_why):
            if reason:
                unknown.append(reason)
        return Launch(launcher, _shorten(opts.words), where, nodes, nodes_from, rendezvous, how, rank, rank_from,
                      procs, tuple(unknown))
    # c10d, etcd, etcd-v2: the backend assigns ranks; an empty endpoint is localhost.
    if endpoint is None or (endpoint.value is not None and not endpoint.value.strip()):
        rendezvous, why, how = "each node alone", None, f"--rdzv_backend {backend} with no --rdzv_endpoint (localhost)"
    else:
        rendezvous, why = _host(endpoint, contract)
        how = _written("--rdzv_endpoint", endpoint)
    if why:
        unknown.append(why)
    return Launch(launcher, _shorten(opts.words), where, nodes, nodes_from, rendezvous, how, "not needed", "", procs,
                  tuple(unknown))


def _accelerate(opts: _Options, where: str, contract: Contract) -> Launch:
    unknown = list(opts.unknown)
    machines_word = opts.get(*COUNT_FLAGS["accelerate"][1])
    config = opts.get("--config_file")
    total = _count(opts.get(*COUNT_FLAGS["accelerate"][0]))
    shown = _shorten(opts.words)
    if machines_word is None:
        source = f"--config_file {config}" if config is not None else "accelerate's default config file, if any"
        unknown.append(f"no --num_machines: the number of machines comes from {source} (1 without one)")
        return Launch(ACCELERATE, shown, where, None, "", "unknown", "", "unknown", "", total, tuple(unknown))
    machines = _count(machines_word)
    nodes_from = _written("--num_machines", machines_word)
    if machines is None:
        unknown.append(f"{nodes_from}: {_why_unknown(machines_word, contract)}")
        return Launch(ACCELERATE, shown, where, None, nodes_from, "unknown", "", "unknown", "", None, tuple(unknown))
    procs = total // machines if total is not None and machines and total % machines == 0 else None
    if machines <= 1:
        return Launch(ACCELERATE, shown, where, (machines, machines), nodes_from, "each node alone",
                      f"{nodes_from} (a standalone launch on each node)", "not needed", "", procs, tuple(unknown))
    multinode = opts.get("--deepspeed_multinode_launcher")
    if opts.has("--use_deepspeed") and (multinode is None or multinode.value != "standard"):
        return Launch(ACCELERATE, shown, where, (machines, machines), nodes_from, "over SSH",
                      "--use_deepspeed on several machines (DeepSpeed's pdsh launcher, from a hostfile)",
                      "not needed", "", procs, tuple(unknown))
    rendezvous, how, why = _address(opts.get("--main_process_ip"), "--main_process_ip", contract,
                                    absent=("missing", "no --main_process_ip"))
    rank_word = opts.get("--machine_rank")
    if rank_word is None:
        rank: NodeRank = "missing"
        rank_from, rank_why = "no --machine_rank", None
    else:
        rank, rank_from, rank_why = _rank(rank_word, "--machine_rank", "", contract)
    unknown.extend(reason for reason in (why, rank_why) if reason)
    return Launch(ACCELERATE, shown, where, (machines, machines), nodes_from, rendezvous, how, rank, rank_from, procs,
                  tuple(unknown))


def _deepspeed(opts: _Options, where: str, contract: Contract) -> Launch:
    unknown = list(opts.unknown)
    shown = _shorten(opts.words)
    procs = _count(opts.get(*COUNT_FLAGS["deepspeed"][0]))
    num_nodes_word = opts.get(*COUNT_FLAGS["deepspeed"][1])
    hostfile = opts.get("--hostfile", "-H")
    if hostfile is None and opts.get("--include", "-i", "--exclude", "-e") is None:
        nodes_from = "no --hostfile (localhost only)"
        asked = _count(num_nodes_word)
        if num_nodes_word is not None and asked is not None and asked > 1:
            return Launch(DEEPSPEED, shown, where, (asked, asked), _written("--num_nodes", num_nodes_word),
                          "missing", "--num_nodes > 1 with no --hostfile: 'Num nodes is >1 but no extra nodes "
                          "available via hostfile'", "not needed", "", procs, tuple(unknown))
        return Launch(DEEPSPEED, shown, where, (1, 1), nodes_from, "each node alone",
                      "no --hostfile: --master_addr 127.0.0.1 on each node", "not needed", "", procs, tuple(unknown))
    count = _count(num_nodes_word)
    nodes = (count, count) if count is not None and count > 0 else None
    how = f"--hostfile {hostfile}" if hostfile is not None else "--include/--exclude hosts"
    return Launch(DEEPSPEED, shown, where, nodes, _written("--num_nodes", num_nodes_word) if num_nodes_word else "",
                  "over SSH", f"{how}: the launcher reaches the hosts over passwordless SSH", "not needed", "", procs,
                  tuple(unknown))


def _fabric(opts: _Options, where: str, contract: Contract) -> Launch:
    unknown = list(opts.unknown)
    word = opts.get(*COUNT_FLAGS["fabric"][1])
    nodes: tuple[int, int] | None = (1, 1)
    nodes_from = "no --num-nodes (1)"
    if word is not None:
        count = _count(word)
        nodes, nodes_from = ((count, count) if count is not None else None), _written("--num-nodes", word)
        if count is None:
            unknown.append(f"{nodes_from}: {_why_unknown(word, contract)}")
    rendezvous, how, why = _address(opts.get("--main_address"), "--main-address", contract,
                                    absent=("each node alone", "no --main-address (127.0.0.1)"))
    rank, rank_from, rank_why = _rank(opts.get("--node_rank"), "--node-rank", "0", contract)
    unknown.extend(reason for reason in (why, rank_why) if reason)
    return Launch(LIGHTNING, _shorten(opts.words), where, nodes, nodes_from, rendezvous, how, rank, rank_from,
                  _count(opts.get(*COUNT_FLAGS["fabric"][0])), tuple(unknown))


COUNT_FLAGS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "torchrun": (("--nproc_per_node",), ("--nnodes",)),
    "accelerate": (("--num_processes",), ("--num_machines",)),
    "deepspeed": (("--num_gpus", "--num_accelerators"), ("--num_nodes",)),
    "fabric": (("--devices",), ("--num_nodes",)),
    "lightning script": (("--trainer.devices", "--devices", "--gpus"), ("--trainer.num_nodes", "--num_nodes",
                                                                         "--num-nodes")),
}
"""Each reader's flags for its worker count and its node count (options by :func:`_key`; a Lightning script's
as written), first the one that wins. accelerate's worker count is over all machines."""


def _script_counts(args: Sequence[shell.Word]) -> _Options:
    """A Lightning script's count flags among its arguments, the first of each as written."""
    found: dict[str, shell.Word] = {}
    at: dict[str, tuple[int, bool]] = {}
    names = {*COUNT_FLAGS["lightning script"][0], *COUNT_FLAGS["lightning script"][1]}
    for i, word in enumerate(args):
        name, eq, inline = (word.value or "").partition("=")
        if name in names and name not in found:
            value = (shell.Word(raw=word.raw, value=inline, line=word.line, shown=inline) if eq
                     else args[i + 1] if i + 1 < len(args) else None)
            if value is not None:
                found[name] = value
                at[name] = (i, True) if eq else (i + 1, False)
    return _Options(found, frozenset(), (), tuple(args), (), at)


def _lightning_script(program: Sequence[shell.Word], args: Sequence[shell.Word], where: str,
                      contract: Contract) -> Launch:
    """A Lightning script started once per node: its devices (``--devices``, ``--trainer.devices``, ``--gpus``)
    and node count: LightningCLI's ``--trainer.num_nodes`` is ``Trainer(num_nodes=...)``; a script's own
    ``--num_nodes``/``--num-nodes`` is most often passed to the Trainer, but that is the script's choice.
    Lightning reads MASTER_ADDR, MASTER_PORT and NODE_RANK from the environment (Azure ML sets them under
    ``distribution: pytorch``)."""
    found = _script_counts(args).values
    devices = next((_count(found[n]) for n in COUNT_FLAGS["lightning script"][0] if n in found), None)
    shown = _shorten([*program, *args])
    unknown: list[str] = []
    nodes: tuple[int, int] | None = None
    nodes_from = ""
    cli = "--trainer.num_nodes" in found
    flag = next((n for n in COUNT_FLAGS["lightning script"][1] if n in found), None)
    if flag is not None:
        word = found[flag]
        count = _count(word)
        written = _written(flag, word)
        if count is None:
            unknown.append(f"{written}: {_why_unknown(word, contract)}")
        elif cli:
            nodes, nodes_from = (count, count), written
        elif count != contract.nodes:
            unknown.append(f"{written} is the script's own flag: if it is Trainer(num_nodes=...), Lightning waits "
                           f"for {count} node(s) and the run has {contract.nodes}")
    if contract.distribution == "pytorch":
        return Launch(LIGHTNING, shown, where, nodes, nodes_from, "across nodes",
                      "MASTER_ADDR, MASTER_PORT and NODE_RANK from Azure ML", "per node", "NODE_RANK from Azure ML",
                      devices, tuple(unknown))
    if contract.nodes > 1:
        unknown.append(f"Lightning reads MASTER_ADDR and NODE_RANK, which Azure ML sets under distribution "
                       f"pytorch, not {contract.distribution}: whether its nodes meet cannot be told")
    return Launch(LIGHTNING, shown, where, nodes, nodes_from, "unknown", "", "unknown", "", devices, tuple(unknown))


def _mpirun(name: str, args: Sequence[shell.Word], program: Sequence[shell.Word], where: str) -> Launch:
    hosts = _HOST_FLAGS[MPIRUN if name != "horovodrun" else "horovodrun"]
    given = [w for w in args if (w.value or "").split("=", 1)[0] in hosts]
    unknown = tuple(f"`{w.raw}` before the program is only known at run time" for w in args
                    if w.value is None and w.raw.startswith("$"))
    shown = _shorten([*program, *args[:6]])
    if given:
        return Launch(MPIRUN, shown, where, None, "", "over SSH", f"{given[0]} (the other hosts over SSH)",
                      "not needed", "", None, unknown)
    return Launch(MPIRUN, shown, where, None, "", "each node alone",
                  f"no {hosts[0]}/{hosts[1]}: every rank starts on the node that runs it", "not needed", "", None,
                  unknown)


def _python_module(args: Sequence[shell.Word]) -> tuple[str | None, int]:
    """The module ``python [options] -m MODULE`` runs, and the index of its first argument; (None, i) for a
    script or ``-c``."""
    i = 0
    while i < len(args):
        text = args[i].value
        if text is None:
            return None, i
        if text == "-m" and i + 1 < len(args):
            return args[i + 1].value, i + 2
        if text.startswith("-m") and len(text) > 2:
            return text[2:], i + 1
        if text in _PYTHON_VALUE_OPTIONS:
            i += 2
            continue
        if text.startswith("-") and text != "-":
            i += 1
            continue
        return None, i
    return None, i


def read_launch(command: shell.Command, contract: Contract, *, where: str = "the command") -> Launch | None:
    """The launcher ``command`` starts, read with its own flags' meaning; None when it starts none. A launch
    with options only known at run time (``torchrun $ARGS train.py``) is known to be one, nothing more."""
    launch = _read_launch(command, contract, where)
    if launch is not None and launch.launcher != MPIRUN and any(_HIDDEN in why for why in launch.unknown):
        return Launch(launch.launcher, launch.shown, where, None, "", "unknown", "", "unknown", "", None,
                      launch.unknown)
    return launch


@dataclass(frozen=True)
class _Invocation:
    """How a command starts a launcher: which one, the reader of its options, the words naming it and the rest."""

    launcher: str
    reader: Literal["torchrun", "accelerate", "deepspeed", "fabric", "mpirun", "lightning script"]
    program: tuple[shell.Word, ...]
    args: tuple[shell.Word, ...]


def _invocation(command: shell.Command) -> _Invocation | None:
    """The one reading of which launcher a command starts and where its program's words end: ``torchrun``,
    ``python [-u -W ignore ...] -m torch.distributed.run``, ``python -mtorch.distributed.run``, ``accelerate
    launch``, ``fabric run model``, a Lightning script..."""
    argv = tuple(command.argv)
    if not argv:
        return None
    name = _name(argv[0])
    args = argv[1:]
    if name == "torchrun":
        return _Invocation(TORCHRUN, "torchrun", argv[:1], args)
    if name == "deepspeed":
        return _Invocation(DEEPSPEED, "deepspeed", argv[:1], args)
    if name == "accelerate" and args and args[0].value == "launch":
        return _Invocation(ACCELERATE, "accelerate", argv[:2], args[1:])
    if name in ("fabric", "lightning") and args and args[0].value == "run":
        skip = 2 if len(args) > 1 and args[1].value == "model" else 1
        return _Invocation(LIGHTNING, "fabric", argv[: 1 + skip], args[skip:])
    if name in ("mpirun", "mpiexec", "orterun", "horovodrun"):
        return _Invocation(MPIRUN, "mpirun", argv[:1], args)
    if name.startswith("python") and all(c in "0123456789." for c in name[6:]):  # python3, python3.11
        module, at = _python_module(args)
        launcher = _MODULES.get(module or "")
        program = argv[: 1 + at]
        if launcher in (TORCHRUN, TORCH_DISTRIBUTED_LAUNCH):
            return _Invocation(launcher, "torchrun", program, args[at:])
        if launcher == ACCELERATE:
            return _Invocation(ACCELERATE, "accelerate", program, args[at:])
        if launcher == DEEPSPEED:
            return _Invocation(DEEPSPEED, "deepspeed", program, args[at:])
        if module == "lightning" and at < len(args) and args[at].value == "run":
            skip = 2 if at + 1 < len(args) and args[at + 1].value == "model" else 1
            return _Invocation(LIGHTNING, "fabric", argv[: 1 + at + skip], args[at + skip:])
        if module is None and at < len(args) and _named_lightning(args[at:]):
            return _Invocation(LIGHTNING, "lightning script", argv[: 1 + at + 1], args[at + 1:])
    return None


_BOOLEANS = {"torchrun": TORCHRUN_BOOLEANS, "accelerate": ACCELERATE_BOOLEANS, "deepspeed": DEEPSPEED_BOOLEANS,
             "fabric": frozenset({"-h", "--help"})}


def _read_launch(command: shell.Command, contract: Contract, where: str) -> Launch | None:
    found = _invocation(command)
    if found is None:
        return None
    if found.reader == "mpirun":
        return _mpirun(_name(found.program[0]), found.args, found.program, where)
    if found.reader == "lightning script":
        return _lightning_script(found.program, found.args, where, contract)
    opts = _options(found.program, found.args, _BOOLEANS[found.reader])
    if found.reader == "torchrun":
        return _torchrun(found.launcher, _with_pet(opts, command.environ), where, contract)
    if found.reader == "accelerate":
        return _accelerate(opts, where, contract)
    if found.reader == "deepspeed":
        return _deepspeed(opts, where, contract)
    return _fabric(opts, where, contract)


@dataclass(frozen=True)
class LauncherWords:
    """Where a launcher's words are in its command, as the gate reads them (:func:`launcher_words`)."""

    launcher: str
    """:data:`TORCHRUN`, :data:`TORCH_DISTRIBUTED_LAUNCH`, :data:`ACCELERATE`, :data:`DEEPSPEED`,
    :data:`LIGHTNING` or :data:`MPIRUN`."""
    program: int
    """How many words name the launcher (``torchrun``: 1; ``python -W ignore -m torch.distributed.run``: 5;
    ``python -mtorch.distributed.run``: 2; a Lightning script: the interpreter, its options and the script)."""
    end: int
    """Index of the first word after the launcher's own options (its script, or what ``-m`` runs): the words
    from :attr:`program` up to here are its options. For Lightning (a Fabric launch, a script) and mpirun: every
    word of the command (a Lightning script's flags are among its arguments)."""
    workers: tuple[int, bool] | None = None
    """The word holding the worker count the gate read (its index in the command, and whether it is attached
    to its flag: ``--nproc_per_node=8``); None when the command sets none."""
    nodes: tuple[int, bool] | None = None
    """The same for the node count."""


def launcher_words(command: shell.Command) -> LauncherWords | None:
    """Which launcher ``command`` starts and where its own options are, read as :func:`read_launch` reads
    them (``amlgpu run-local`` edits these words); None when it starts none."""
    found = _invocation(command)
    if found is None:
        return None
    program = len(found.program)
    if found.reader == "mpirun":
        return LauncherWords(found.launcher, program, program + len(found.args))
    if found.reader == "lightning script":
        opts = _script_counts(found.args)
    else:
        opts = _options(found.program, found.args, _BOOLEANS[found.reader])
    end = program + len(found.args) if found.reader in ("lightning script", "fabric") else len(opts.words)

    def where(names: tuple[str, ...]) -> tuple[int, bool] | None:
        key = opts.key(*names)
        if key is None or key not in opts.at:
            return None
        index, attached = opts.at[key]
        return program + index, attached

    workers, nodes = COUNT_FLAGS[found.reader]
    return LauncherWords(found.launcher, program, end, where(workers), where(nodes))


def _named_lightning(args: Sequence[shell.Word]) -> bool:
    script = args[0].value if args else None
    return bool(script and "lightning" in posixpath.basename(script).lower()) or any(
        (w.value or "").startswith("--trainer.") for w in args)
