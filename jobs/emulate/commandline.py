"""The run's command made runnable on one machine: placeholders filled, per-node launchers rescaled.

A per-node launcher (torchrun, ``python -m torch.distributed.launch``, ``accelerate launch``, the
``deepspeed`` CLI, Lightning) is started once per node and starts its own workers, so scaling the
run down locally means rewriting its process-count flags. Which launcher a command uses is decided
once, by :func:`jobs.launchers.infer_launcher`; this module finds that launcher among the simple commands
:mod:`analysis.shell` reads in the text (a ``bash -c`` body included) and edits the words of its flags where
they are written, leaving every other character of the command as written. For the launchers that take a
training script, only their own options (up to the script or ``-m module``) are edited; Lightning's flags
belong to the script, so the script's arguments are searched.

Only a launch the policy pack passes is rescaled (``amlgpu run-local`` refuses one that
``run-launcher-node-count`` or ``run-launcher-rendezvous`` blocks): scaling a consistent launch down to the
local topology keeps it consistent, and never turns a launch that would hang or split on Azure ML into one
that works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from analysis import shell, topology
from jobs import launchers
from stack.runs import PLACEHOLDER

_PROCS_FLAGS: dict[str, tuple[str, ...]] = {
    launchers.TORCHRUN: ("--nproc_per_node", "--nproc-per-node"),
    launchers.TORCH_DISTRIBUTED_LAUNCH: ("--nproc_per_node", "--nproc-per-node"),
    launchers.ACCELERATE: ("--num_processes", "--num-processes"),
    launchers.DEEPSPEED: ("--num_gpus", "--num-gpus"),
    launchers.LIGHTNING: ("--trainer.devices", "--devices"),
}
_NODES_FLAGS: dict[str, tuple[str, ...]] = {
    launchers.TORCHRUN: ("--nnodes",),
    launchers.TORCH_DISTRIBUTED_LAUNCH: ("--nnodes",),
    launchers.ACCELERATE: ("--num_machines", "--num-machines"),
    launchers.DEEPSPEED: ("--num_nodes", "--num-nodes"),
    launchers.LIGHTNING: ("--trainer.num_nodes", "--num_nodes", "--num-nodes"),
}
_TOTAL_PROCESSES = {launchers.ACCELERATE}
"""Launchers whose process flag counts processes across all nodes, not per node."""
_DEFAULTS_TO_ONE = {launchers.TORCHRUN, launchers.TORCH_DISTRIBUTED_LAUNCH}
"""Launchers that start one worker when the flag is left out (so it can be added)."""


@dataclass(frozen=True)
class Span:
    """A word of the command where it is written: ``text[start:end]`` is its source text."""

    start: int
    end: int
    value: str | None


@dataclass(frozen=True)
class LauncherCall:
    """Where a per-node launcher sits in a command: its kind, where its options begin, and the words its
    flags may be among (its own options; a Lightning script's arguments)."""

    kind: str
    options_start: int
    options: tuple[Span, ...]


@dataclass(frozen=True)
class _Flag:
    value: str
    """Its value (quotes removed); as written when only known at run time (``$WORLD_SIZE``)."""
    start: int
    """Where the value's word starts in the command."""
    end: int


def _spans(text: str, command: shell.Command) -> list[Span] | None:
    """Each word of ``command`` (after wrappers) where it is written in ``text``; None when the command is not
    written in ``text`` as it was read (a script's line, a word built by an expansion)."""
    at = text.find(command.raw) if command.raw else -1
    if at < 0:
        return None
    spans: list[Span] = []
    pos = at
    for word in command.argv:
        found = text.find(word.raw, pos, at + len(command.raw))
        if found < 0 or not word.raw:
            return None
        spans.append(Span(found, found + len(word.raw), word.value))
        pos = found + len(word.raw)
    return spans


def locate(command: str, kind: str) -> LauncherCall | None:
    """Where the per-node launcher ``kind`` (a :mod:`jobs.launchers` name) starts in ``command``: the gate's
    reading of its words (:func:`analysis.topology.launcher_words`), so run-local edits the flags the gate read,
    in every form the gate reads (``python -W ignore -m torch.distributed.run``, ``python -mtorch.distributed.run``)."""
    script = shell.evaluate(command, placeholders={})
    for cmd in script.commands:
        words = topology.launcher_words(cmd)
        if words is None or words.launcher != kind:
            continue
        spans = _spans(command, cmd)
        if spans is None:
            return None
        return LauncherCall(kind, spans[words.program - 1].end, tuple(spans[words.program:words.end]))
    return None


def _flag(command: str, call: LauncherCall, names: tuple[str, ...]) -> _Flag | None:
    for i, span in enumerate(call.options):
        value = span.value or ""
        name, eq, inline = value.partition("=")
        if name not in names:
            continue
        if eq:
            text = command[span.start:span.end]
            offset = text.find("=") + 1
            return _Flag(inline, span.start + offset, span.end)
        if i + 1 < len(call.options):
            nxt = call.options[i + 1]
            written = command[nxt.start:nxt.end]
            return _Flag(nxt.value if nxt.value is not None else written, nxt.start, nxt.end)
    return None


def counts(command: str, call: LauncherCall) -> tuple[str | None, str | None]:
    """The worker and node counts the launcher's flags give, as :func:`rescale` reads them (None: not set)."""
    procs = _flag(command, call, _PROCS_FLAGS[call.kind])
    nodes = _flag(command, call, _NODES_FLAGS[call.kind])
    return (procs.value if procs else None), (nodes.value if nodes else None)


def workers_flag_given(command: str, call: LauncherCall) -> bool:
    """Whether the command sets the launcher's worker count at all."""
    return _flag(command, call, _PROCS_FLAGS[call.kind]) is not None


def default_workers(kind: str, gpus_per_node: int) -> int:
    """Workers per node a launcher starts when its count flag is left out."""
    return 1 if kind in _DEFAULTS_TO_ONE else gpus_per_node


def rescale(command: str, call: LauncherCall, *, nodes: int, procs_per_node: int,
            gpus_per_node: int) -> tuple[str, list[str]]:
    """The command with the launcher's worker and node counts set to the local topology, and a note
    per flag changed (``--nproc_per_node 8 -> 2``). A missing worker flag is left out while the
    launcher's default (:func:`default_workers`) is what is wanted. Raises ValueError when a count
    must change but the command does not set it and the launcher cannot be given it (only
    torchrun's flag can be added)."""
    procs_value = procs_per_node * nodes if call.kind in _TOTAL_PROCESSES else procs_per_node
    edits: list[tuple[int, int, str, str]] = []  # start, end, replacement, note
    procs_name = _PROCS_FLAGS[call.kind][0]
    procs = _flag(command, call, _PROCS_FLAGS[call.kind])
    if procs is None:
        if procs_per_node != default_workers(call.kind, gpus_per_node):
            if call.kind not in _DEFAULTS_TO_ONE:
                raise ValueError(f"the command gives {call.kind} no {procs_name}, so its worker count cannot be "
                                 "scaled down: add the flag to the command")
            edits.append((call.options_start, call.options_start, f" {procs_name} {procs_value}",
                          f"added {procs_name} {procs_value}"))
    elif procs.value != str(procs_value):
        edits.append((procs.start, procs.end, str(procs_value), f"{procs_name} {procs.value} -> {procs_value}"))
    nodes_flag = _flag(command, call, _NODES_FLAGS[call.kind])
    # A literal node count is rescaled; `--nnodes $WORLD_SIZE` already follows the local contract.
    literal = nodes_flag is not None and nodes_flag.value.replace(":", "", 1).isdigit()
    if nodes_flag is not None and literal and nodes_flag.value != str(nodes):
        name = _NODES_FLAGS[call.kind][0]
        edits.append((nodes_flag.start, nodes_flag.end, str(nodes), f"{name} {nodes_flag.value} -> {nodes}"))
    for start, end, replacement, _ in sorted(edits, reverse=True):  # from the end: earlier offsets stay valid
        command = command[:start] + replacement + command[end:]
    return command, [note for *_, note in edits]


def fill_placeholders(command: str, values: Mapping[tuple[str, str], str]) -> str:
    """Replace ``${{inputs.x}}`` / ``${{outputs.x}}`` with ``values[(kind, name)]``, as Azure ML does:
    textually; the caller quotes paths (:func:`shlex.quote`), literal values go in as written."""
    return PLACEHOLDER.sub(lambda m: values[(m.group(1), m.group(2))], command)


def referenced_inputs(command: str) -> set[str]:
    """Names of the inputs the command's placeholders use."""
    return {m.group(2) for m in PLACEHOLDER.finditer(command) if m.group(1) == "inputs"}
