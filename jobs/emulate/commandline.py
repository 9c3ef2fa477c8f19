"""The run's command made runnable on one machine: placeholders filled, per-node launchers rescaled.

A per-node launcher (torchrun, ``python -m torch.distributed.launch``, ``accelerate launch``, the
``deepspeed`` CLI, Lightning) is started once per node and starts its own workers, so scaling the
run down locally means rewriting its process-count flags. Which launcher a command uses is decided
once, by :func:`jobs.launchers.infer_launcher`; this module only finds that launcher in the text
and edits its flags, leaving every other character of the command as written. For the launchers
that take a training script, only their own options (up to the script, ``-m module`` or the end of
the shell command) are edited; Lightning's flags belong to the script, so the whole shell command
is searched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from jobs import launchers
from model.runs import PLACEHOLDER

_PY = r"\S*python[0-9.]*\s+-m\s+"
_LOCATE: dict[str, re.Pattern[str]] = {
    kind: re.compile(r"(?:^|(?<=[\s;&|(]))(?:" + pattern + r")(?=\s|$)")
    for kind, pattern in {
        launchers.TORCHRUN: r"torchrun|" + _PY + r"torch\.distributed\.run",
        launchers.TORCH_DISTRIBUTED_LAUNCH: _PY + r"torch\.distributed\.launch",
        launchers.ACCELERATE: r"accelerate\s+launch|" + _PY + r"accelerate\.commands\.launch",
        launchers.DEEPSPEED: r"deepspeed|" + _PY + r"deepspeed\.launcher\.runner",
        launchers.LIGHTNING: r"(?:lightning|fabric)\s+run|\S*python[0-9.]*",
    }.items()
}
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
_SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}


@dataclass(frozen=True)
class LauncherCall:
    """Where a per-node launcher sits in a command: its kind and the span its flags may be in."""

    kind: str
    options_start: int
    options_end: int


@dataclass(frozen=True)
class _Flag:
    value: str
    start: int
    """Where the value starts in the command."""
    end: int


def locate(command: str, kind: str) -> LauncherCall | None:
    """Where the per-node launcher ``kind`` (a :mod:`jobs.launchers` name) starts in ``command``."""
    match = _LOCATE[kind].search(command)
    if match is None:
        return None
    end = len(command)
    tokens = list(re.finditer(r"\S+", command[match.end():]))
    for i, token in enumerate(tokens):
        text = token.group()
        ends_options = kind != launchers.LIGHTNING and (
            text.endswith(".py") or text in ("-m", "--module")
            or (i > 0 and tokens[i - 1].group() in ("--no_python", "--no-python"))
        )
        if text in _SHELL_OPERATORS or ends_options:
            end = match.end() + token.start()
            break
    return LauncherCall(kind=kind, options_start=match.end(), options_end=end)


def _flag(command: str, call: LauncherCall, names: tuple[str, ...]) -> _Flag | None:
    pattern = re.compile(r"(?<!\S)(?:" + "|".join(re.escape(n) for n in names) + r")(?:=|\s+)(?P<value>[^\s;&|]+)")
    match = pattern.search(command, call.options_start, call.options_end)
    if match is None:
        return None
    return _Flag(match.group("value"), match.start("value"), match.end("value"))


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
    literal = nodes_flag is not None and re.fullmatch(r"[0-9]+(:[0-9]+)?", nodes_flag.value)
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
