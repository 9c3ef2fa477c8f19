"""Launch styles: which program starts a run's training processes, read from its command and distribution.

Azure ML starts ``process_count_per_instance`` processes per node itself (``distribution: pytorch``
or ``mpi``; TensorFlow: one per worker). What runs inside them decides whether that count must be
the node's GPUs or 1.

Started by Azure ML, one process (or MPI rank) per GPU:

* ``per-process``: plain ``python script.py`` under ``distribution: pytorch``;
* ``hf-trainer``: the same with Hugging Face Trainer arguments (``--model_name_or_path``,
  ``--per_device_train_batch_size``);
* ``horovod``: ``distribution: mpi`` with Horovod in the command or the environment's name;
* ``mpi``: any other program under ``distribution: mpi``.

Per-node launchers, started once per node, starting the GPU processes themselves:

* ``torchrun``: ``torchrun`` or ``python -m torch.distributed.run``;
* ``torch.distributed.launch``: ``python -m torch.distributed.launch``;
* ``lightning``: ``lightning run`` / ``fabric run``, ``python -m lightning``, LightningCLI
  ``--trainer.*`` flags, or a script named ``*lightning*``;
* ``accelerate``: ``accelerate launch``;
* ``deepspeed``: the ``deepspeed`` CLI (``python -m deepspeed.launcher.runner``), not a script's
  ``--deepspeed`` flag.

TensorFlow, one task per node: ``tf-multiworker`` (no parameter servers) and ``tf-parameter-server``.

A per-node launcher found anywhere in the command wins over the distribution's own style (Lightning
or torchrun under ``distribution: mpi`` are still per-node launchers). Only the command is read:
a script that spawns its own workers without saying so on the command line looks per-process.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence

from infra import regex as linear
from model.runs import Run

PER_PROCESS = "per-process"
HF_TRAINER = "hf-trainer"
TORCHRUN = "torchrun"
TORCH_DISTRIBUTED_LAUNCH = "torch.distributed.launch"
LIGHTNING = "lightning"
ACCELERATE = "accelerate"
DEEPSPEED = "deepspeed"
HOROVOD = "horovod"
MPI = "mpi"
TF_MULTIWORKER = "tf-multiworker"
TF_PARAMETER_SERVER = "tf-parameter-server"

LAUNCHERS = (
    PER_PROCESS, HF_TRAINER, TORCHRUN, TORCH_DISTRIBUTED_LAUNCH, LIGHTNING, ACCELERATE, DEEPSPEED,
    HOROVOD, MPI, TF_MULTIWORKER, TF_PARAMETER_SERVER,
)
"""The whole vocabulary of :attr:`jobs.resolved.ResolvedRun.launcher`."""

PER_NODE_LAUNCHERS = frozenset({TORCHRUN, TORCH_DISTRIBUTED_LAUNCH, LIGHTNING, ACCELERATE, DEEPSPEED})
"""Launchers started once per node that start the GPU processes themselves: Azure ML must start one
process per node (``process_count_per_instance: 1``) under them."""

PER_GPU_LAUNCHERS = frozenset({PER_PROCESS, HF_TRAINER, HOROVOD, MPI})
"""Styles where Azure ML itself starts one process (or MPI rank) per GPU."""

# Flags that give a per-node launcher its process count, and (accelerate only) its node count.
_NPROC_FLAGS: dict[str, tuple[str, ...]] = {
    TORCHRUN: ("--nproc_per_node", "--nproc-per-node"),
    TORCH_DISTRIBUTED_LAUNCH: ("--nproc_per_node", "--nproc-per-node"),
    ACCELERATE: ("--num_processes", "--num-processes"),
    DEEPSPEED: ("--num_gpus", "--num-gpus"),
    LIGHTNING: ("--trainer.devices", "--devices", "--gpus"),
}
_ACCELERATE_MACHINES = ("--num_machines", "--num-machines")
_ALL_GPUS = frozenset({"gpu", "auto"})
"""torchrun's ``--nproc_per_node gpu|auto``: one process per visible GPU."""

_PYTHON = linear.compile(r"python[0-9.]*")
_MODULE_LAUNCHERS = {
    "torch.distributed.run": TORCHRUN,
    "torch.distributed.launch": TORCH_DISTRIBUTED_LAUNCH,
    "accelerate.commands.launch": ACCELERATE,
    "deepspeed.launcher.runner": DEEPSPEED,
    "lightning": LIGHTNING,
}
_WRAPPERS = frozenset({"env", "exec", "time", "nohup"})
_SHELLS = frozenset({"bash", "sh", "zsh"})
_SEPARATORS = ";&|()\n"
_HF_TRAINER_FLAGS = frozenset({
    "--model_name_or_path", "--model-name-or-path", "--per_device_train_batch_size",
    "--per-device-train-batch-size", "--per_device_eval_batch_size",
})
_ASSIGNMENT = linear.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_HVD = linear.compile(r"\bhvd\b")
_QUOTED_ASSIGNMENT = linear.compile(r"""[A-Za-z_][A-Za-z0-9_]*\+?=["']([^"'\n]+)["']""")
_VARIABLE = linear.compile(r"\$(?:\{(\w+)\}|(\w+))")


SHLEX_LIMIT = 1 << 13
"""Longer shell text (or text with a word over :data:`SHLEX_WORD_LIMIT`) is split on white space instead:
:mod:`shlex` reads about 6 us a character and builds each word by string concatenation, time quadratic in
a word's length (a 1 MB command word took 108 s). No command a person writes comes near either limit."""
SHLEX_WORD_LIMIT = 1 << 10


def shlex_can_read(text: str) -> bool:
    """``text`` is short enough for :mod:`shlex` to read in bounded time (see :data:`SHLEX_LIMIT`)."""
    return len(text) <= SHLEX_LIMIT and max(map(len, text.split()), default=0) <= SHLEX_WORD_LIMIT


def _simple_commands(command: str) -> list[list[str]]:
    """The command's simple commands as word lists; ``bash -c '...'`` bodies are split too."""
    text = command.replace("\\\n", " ")  # line continuations
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_SEPARATORS)
    lexer.whitespace = " \t\r"  # unquoted newlines separate commands, like ';'
    lexer.whitespace_split = True
    try:
        words = list(lexer) if shlex_can_read(text) else text.split()
    except ValueError:  # unbalanced quotes: Azure ML would fail too, but inference should not
        words = text.split()
    commands: list[list[str]] = [[]]
    for word in words:
        if word and set(word) <= set(_SEPARATORS):
            commands.append([])
        else:
            commands[-1].append(word)
    out: list[list[str]] = []
    for simple in filter(None, commands):
        program = _program_index(simple)
        if program is not None and posixpath.basename(simple[program]) in _SHELLS and "-c" in simple[program:]:
            body = simple[simple.index("-c", program) + 1:]
            if body:
                out.extend(_simple_commands(body[0]))
                continue
        out.append(simple)
    return out


def _program_index(words: Sequence[str]) -> int | None:
    """Where the program word is: after ``VAR=value`` assignments and wrappers such as ``env``."""
    for i, word in enumerate(words):
        if _ASSIGNMENT.fullmatch(word) or word in _WRAPPERS:
            continue
        return i
    return None


def _options_until_script(words: Sequence[str]) -> list[str]:
    """A launcher's own options: the words before the training script (``*.py``, ``-m``, a program)."""
    options: list[str] = []
    for i, word in enumerate(words):
        if word.endswith(".py") or word in ("-m", "--module"):
            break
        if i and words[i - 1] in ("--no_python", "--no-python"):
            break
        options.append(word)
    return options


def _find_launcher(words: Sequence[str]) -> tuple[str, list[str]] | None:
    """The per-node launcher this simple command starts, with the words holding its count flags."""
    start = _program_index(words)
    if start is None:
        return None
    program, rest = posixpath.basename(words[start]), list(words[start + 1:])
    if program == "torchrun":
        return TORCHRUN, _options_until_script(rest)
    if program == "deepspeed":
        return DEEPSPEED, _options_until_script(rest)
    if program == "accelerate" and rest[:1] == ["launch"]:
        return ACCELERATE, _options_until_script(rest[1:])
    if program in ("lightning", "fabric") and rest[:1] == ["run"]:
        return LIGHTNING, rest[1:]
    if _PYTHON.fullmatch(program):
        if "-m" in rest:
            module_at = rest.index("-m") + 1
            module = rest[module_at] if module_at < len(rest) else ""
            launcher = _MODULE_LAUNCHERS.get(module) or _MODULE_LAUNCHERS.get(module.split(".")[0])
            if launcher == LIGHTNING:
                return LIGHTNING, rest[module_at + 1:]
            if launcher is not None:
                return launcher, _options_until_script(rest[module_at + 1:])
        if _looks_like_lightning(rest):
            return LIGHTNING, rest
    return None


def _looks_like_lightning(args: Sequence[str]) -> bool:
    script = next((a for a in args if a.endswith(".py")), "")
    if "lightning" in posixpath.basename(script).lower():
        return True
    return any(a.startswith("--trainer.") for a in args)


def _flag_value(words: Sequence[str], names: Sequence[str]) -> str | None:
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                return words[i + 1]
            if word.startswith(name + "="):
                return word[len(name) + 1:]
    return None


def _as_count(value: str | None, env: Mapping[str, str], gpus_per_node: int | None) -> int | None:
    """A literal count; ``$VAR`` taken from the run's environment_variables; ``gpu``/``auto`` as the
    node's GPUs when known. None when the value is only known at run time."""
    if value is None:
        return None
    variable = _VARIABLE.fullmatch(value)
    if variable:
        value = env.get(variable.group(1) or variable.group(2), value)
    if value.isdigit():
        return int(value)
    if value in _ALL_GPUS and gpus_per_node is not None:
        return gpus_per_node
    return None


def _nproc(launcher: str, options: Sequence[str], env: Mapping[str, str], gpus_per_node: int | None) -> int | None:
    count = _as_count(_flag_value(options, _NPROC_FLAGS[launcher]), env, gpus_per_node)
    if launcher == ACCELERATE and count is not None:
        # accelerate counts processes across all machines; per node is the total over --num_machines.
        machines = _as_count(_flag_value(options, _ACCELERATE_MACHINES), env, None) or 1
        count = count // machines if count % machines == 0 else None
    return count


def infer_launcher(run: Run, *, gpus_per_node: int | None = None) -> tuple[str, int | None]:
    """The run's launch style (one of :data:`LAUNCHERS`) and the per-node process count its command
    gives a per-node launcher (``--nproc_per_node``, deepspeed ``--num_gpus``, accelerate
    ``--num_processes`` / ``--num_machines``, Lightning ``--devices``); None when not given or only
    known at run time. ``gpus_per_node`` turns torchrun's ``gpu``/``auto`` into a number."""
    env = run.environment_variables
    for words in _simple_commands(run.command):
        found = _find_launcher(words)
        if found is not None:
            launcher, options = found
            return launcher, _nproc(launcher, options, env, gpus_per_node)
    distribution = run.distribution
    if distribution.type == "tensorflow":
        return (TF_PARAMETER_SERVER if distribution.parameter_server_count else TF_MULTIWORKER), None
    if distribution.type == "mpi":
        named = run.environment if isinstance(run.environment, str) else run.environment.image or ""
        mentions = f"{run.command} {named}".lower()
        return (HOROVOD if "horovod" in mentions or _HVD.search(mentions) else MPI), None
    words = [w for command in _simple_commands(run.command) for w in command]
    if any(w.split("=", 1)[0] in _HF_TRAINER_FLAGS for w in words):
        return HF_TRAINER, None
    return PER_PROCESS, None


_SCRIPT_RUNNERS = frozenset({"torchrun", "deepspeed", "accelerate", "mpirun", "mpiexec", "horovodrun"})
_PRIVILEGE = frozenset({"sudo", "doas"})


def command_scripts(command: str) -> list[tuple[str, str]]:
    """Files of the code folder the command runs, as ``(kind, path)``: ``("python", "train.py")`` for
    ``python [-u] train.py`` or a launcher's training script, ``("shell", "run.sh")`` for ``bash run.sh``,
    ``sh run.sh`` or ``./run.sh``. Paths with variables, placeholders or absolute paths are left out
    (only known at run time, or not in the code folder)."""
    found: list[tuple[str, str]] = []
    for words in _simple_commands(command):
        words = list(words)
        if words and words[0] in _PRIVILEGE:  # sudo [-E] [-H] ...
            words = words[1:]
            while words and words[0].startswith("-"):
                words = words[1:]
        start = _program_index(words)
        if start is None:
            continue
        program, rest = words[start], words[start + 1:]
        name = posixpath.basename(program)
        script: tuple[str, str] | None = None
        if _PYTHON.fullmatch(name) or name in _SCRIPT_RUNNERS or (name == "accelerate" and rest[:1] == ["launch"]):
            if "-m" in rest or "-c" in rest:
                before = rest[: min(i for i in (rest.index(f) for f in ("-m", "-c") if f in rest))]
                rest = before
            py = next((w for w in rest if w.endswith(".py")), None)
            script = ("python", py) if py else None
        elif name in _SHELLS and "-c" not in rest:
            arg = next((w for w in rest if not w.startswith("-")), None)
            script = ("shell", arg) if arg else None
        elif program.startswith("./") or program.endswith(".sh"):
            script = ("shell", program)
        if script is None:
            continue
        path = script[1]
        if "$" in path or "{{" in path or path.startswith("/") or path.startswith("~"):
            continue
        found.append((script[0], posixpath.normpath(path)))
    return found


def launcher_in_script(text: str, env: Mapping[str, str], gpus_per_node: int | None) -> tuple[str, int | None] | None:
    """The per-node launcher a shell script starts (``deepspeed --hostfile ...``, ``torchrun ...``),
    with its per-node process count when the script gives a literal one; None when it starts none.
    Commands built in a variable and run with ``eval`` are read too (``ds_call="deepspeed ..."``)."""
    texts = [text, *_QUOTED_ASSIGNMENT.findall(text)]
    for body in texts:
        for words in _simple_commands(body):
            found = _find_launcher(words)
            if found is not None and found[0] in PER_NODE_LAUNCHERS:
                launcher, options = found
                return launcher, _nproc(launcher, options, env, gpus_per_node)
    return None
