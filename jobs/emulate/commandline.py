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

_NAMES: dict[str, tuple[str, str]] = {
    launchers.TORCHRUN: ("--nproc_per_node", "--nnodes"),
    launchers.TORCH_DISTRIBUTED_LAUNCH: ("--nproc_per_node", "--nnodes"),
    launchers.ACCELERATE: ("--num_processes", "--num_machines"),
    launchers.DEEPSPEED: ("--num_gpus", "--num_nodes"),
    launchers.LIGHTNING: ("--trainer.devices", "--trainer.num_nodes"),
}
"""How notes name each launcher's worker and node count flags (which words hold them is the gate's reading)."""
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
class Count:
    """A count the launcher's flags give, where it is written."""

    value: str
    """Its value (quotes removed); as written when only known at run time (``$WORLD_SIZE``)."""
    start: int
    """Where the value starts in the command (after the ``=`` of ``--nnodes=4``)."""
    end: int


@dataclass(frozen=True)
class LauncherCall:
    """Where a per-node launcher sits in a command: its kind, where its options begin, and the worker and node
    counts the gate read of it (:func:`analysis.topology.launcher_words`), where they are written."""

    kind: str
    options_start: int
    workers: Count | None
    nodes: Count | None


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
    """Where the per-node launcher ``kind`` (a :mod:`jobs.launchers` name) starts in ``command``, and its counts:
    the gate's reading of its words (:func:`analysis.topology.launcher_words`), so run-local edits the very words
    the gate read, in every form the gate reads (``python -W ignore -m torch.distributed.run``,
    ``python -mtorch.distributed.run``, ``--nproc-per-node=8``)."""
    script = shell.evaluate(command, placeholders={})
    for cmd in script.commands:
        words = topology.launcher_words(cmd)
        if words is None or words.launcher != kind:
            continue
        spans = _spans(command, cmd)
        if spans is None:
            return None
        return LauncherCall(kind, spans[words.program - 1].end, _count(command, spans, words.workers),
                            _count(command, spans, words.nodes))
    return None


def _count(command: str, spans: list[Span], where: tuple[int, bool] | None) -> Count | None:
    if where is None:
        return None
    index, attached = where
    span = spans[index]
    written = command[span.start:span.end]
    if attached:
        offset = written.find("=") + 1
        value = (span.value or "").partition("=")[2] if span.value is not None else written[offset:]
        return Count(value, span.start + offset, span.end)
    return Count(span.value if span.value is not None else written, span.start, span.end)


def counts(call: LauncherCall) -> tuple[str | None, str | None]:
    """The worker and node counts the launcher's flags give, as :func:`rescale` reads them (None: not set)."""
    return (call.workers.value if call.workers else None), (call.nodes.value if call.nodes else None)


def workers_flag_given(command: str, call: LauncherCall) -> bool:
    """Whether the command sets the launcher's worker count at all."""
    return call.workers is not None


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
    procs_name, nodes_name = _NAMES[call.kind]
    procs = call.workers
    if procs is None:
        if procs_per_node != default_workers(call.kind, gpus_per_node):
            if call.kind not in _DEFAULTS_TO_ONE:
                raise ValueError(f"the command gives {call.kind} no {procs_name}, so its worker count cannot be "
                                 "scaled down: add the flag to the command")
            edits.append((call.options_start, call.options_start, f" {procs_name} {procs_value}",
                          f"added {procs_name} {procs_value}"))
    elif procs.value != str(procs_value):
        edits.append((procs.start, procs.end, str(procs_value), f"{procs_name} {procs.value} -> {procs_value}"))
    nodes_flag = call.nodes
    # A literal node count is rescaled; `--nnodes $WORLD_SIZE` already follows the local contract.
    literal = nodes_flag is not None and nodes_flag.value.replace(":", "", 1).isdigit()
    if nodes_flag is not None and literal and nodes_flag.value != str(nodes):
        edits.append((nodes_flag.start, nodes_flag.end, str(nodes), f"{nodes_name} {nodes_flag.value} -> {nodes}"))
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
