"""Launch styles: which program starts a run's training processes, read from its command and distribution.

Started by Azure ML, one process (or MPI rank) per GPU: ``per-process``, ``hf-trainer``, ``horovod``, ``mpi``.
Per-node launchers, started once per node, starting the GPU processes themselves: ``torchrun``,
``torch.distributed.launch``, ``lightning``, ``accelerate``, ``deepspeed``. TensorFlow: ``tf-multiworker`` and
``tf-parameter-server``. A per-node launcher anywhere in the command (evaluated as bash would run it, by
:mod:`analysis.shell`) wins over the distribution's own style. How each style is recognised: docs/development.md,
"jobs/launchers.py".
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from analysis import shell, topology
from kernel import bounded
from kernel import regex as linear
from kernel.paths import resolve_inside
from stack import inputs
from stack.inputs import Folded
from stack.runs import Run

PER_PROCESS = "per-process"
HF_TRAINER = "hf-trainer"
TORCHRUN = topology.TORCHRUN
TORCH_DISTRIBUTED_LAUNCH = topology.TORCH_DISTRIBUTED_LAUNCH
LIGHTNING = topology.LIGHTNING
ACCELERATE = topology.ACCELERATE
DEEPSPEED = topology.DEEPSPEED
HOROVOD = "horovod"
MPI = "mpi"
TF_MULTIWORKER = "tf-multiworker"
TF_PARAMETER_SERVER = "tf-parameter-server"

LAUNCHERS = (
    PER_PROCESS, HF_TRAINER, TORCHRUN, TORCH_DISTRIBUTED_LAUNCH, LIGHTNING, ACCELERATE, DEEPSPEED,
    HOROVOD, MPI, TF_MULTIWORKER, TF_PARAMETER_SERVER,
)
"""The whole vocabulary of :attr:`stack.resolved.ResolvedRun.launcher`."""

PER_NODE_LAUNCHERS = frozenset({TORCHRUN, TORCH_DISTRIBUTED_LAUNCH, LIGHTNING, ACCELERATE, DEEPSPEED})
"""Launchers started once per node that start the GPU processes themselves: Azure ML must start one
process per node (``process_count_per_instance: 1``) under them."""

PER_GPU_LAUNCHERS = frozenset({PER_PROCESS, HF_TRAINER, HOROVOD, MPI})
"""Styles where Azure ML itself starts one process (or MPI rank) per GPU."""


_PYTHON = linear.compile(r"python[0-9.]*")
_HOROVOD_ALIAS = linear.compile(r"\bhvd\b")
_HF_TRAINER_FLAGS = frozenset({
    "--model_name_or_path", "--model-name-or-path", "--per_device_train_batch_size",
    "--per-device-train-batch-size", "--per_device_eval_batch_size",
})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_SCRIPT_RUNNERS = frozenset({"torchrun", "deepspeed", "accelerate", "mpirun", "mpiexec", "horovodrun"})
_INSTALLERS = frozenset({"pip", "pip3", "conda", "mamba", "micromamba", "apt", "apt-get", "yum", "dnf"})
MAX_SCRIPT_BYTES = 1 << 20
"""Shell scripts of the code folder larger than this (1 MiB) are not read."""


@dataclass(frozen=True)
class ScriptRef:
    """A file of the code folder a command runs."""

    kind: str
    """``python`` or ``shell``."""
    path: str
    """Relative to the code folder, POSIX, normalised (the directory the command ``cd``-ed into included)."""
    cwd: str
    """The directory the command runs it from, relative to the code folder (``.`` when it never moved)."""


@dataclass(frozen=True)
class CommandReading:
    """A run's command as bash would run it, and what it starts."""

    commands: tuple[shell.Command, ...]
    launches: tuple[topology.Launch, ...]
    """Every launcher the command (or a shell script of the code folder it runs) starts, in order."""
    scripts: tuple[ScriptRef, ...]
    unknown: tuple[str, ...]
    """What could not be followed and may start processes (``eval``, ``source``, a script not readable)."""
    launcher_script: str | None = None
    """The code folder's shell script that starts the first per-node launcher, when the command does not."""

    def variables_read(self, prefix: str) -> tuple[str, ...]:
        """``where NAME`` for each variable named ``prefix...`` a command's words read with no default
        (``${NAME:-x}`` has one), in order: ``the command $AZ_BATCHAI_MPI_MASTER_NODE``."""
        found: list[str] = []
        for command in self.commands:
            where, _ = _where(command)
            for word in command.words:
                for name in word.variables:
                    if not name.startswith(prefix) or f"${{{name}:-" in word.raw or f"${{{name}-" in word.raw:
                        continue
                    entry = f"{where} ${name}"
                    if entry not in found:
                        found.append(entry)
        return tuple(found)

    def installs_packages(self) -> bool:
        """Whether the command installs packages (``pip install``, ``conda install``, ``apt-get install``)."""
        for command in self.commands:
            values = [w.value for w in command.argv]
            name = posixpath.basename(values[0] or "") if values else ""
            if _PYTHON.fullmatch(name) and values[1:3] == ["-m", "pip"]:
                values = values[2:]
                name = "pip"
            if name in _INSTALLERS and "install" in values[1:]:
                return True
        return False


def _neutral(run: Run | None, gpus: int | None) -> topology.Contract:
    """The launch contract of ``run`` (or of nothing: one node, one process)."""
    if run is None:
        return topology.Contract("pytorch", 1, 1, gpus=gpus)
    dist = run.distribution
    per_node = 1 if dist.type == "tensorflow" else (dist.process_count_per_instance or 1)
    return topology.Contract(dist.type, run.resources.instance_count, per_node, dict(run.environment_variables),
                             gpus=gpus)


def code_reader(code: Path | None) -> Callable[[str], str | None] | None:
    """Reads a file of the code folder for the shell (``bash run.sh``): inside the folder only, bounded."""
    if code is None:
        return None

    def read(path: str) -> str | None:
        found = resolve_inside(code, path) if not path.startswith("/") else None
        if found is None or not found.is_file():
            return None
        try:
            data = bounded.read_bytes(found, MAX_SCRIPT_BYTES, "a launcher script")
        except (OSError, bounded.BoundedInputError):
            return None  # unreadable, or larger than MAX_SCRIPT_BYTES: not read
        return data.decode("utf-8", errors="replace")

    return read


def _placeholders(run: Run | None, given: Sequence[Folded] = ()) -> dict[str, str]:
    """``${{inputs.x}}`` of literal inputs (a ``${{parent...}}`` binding is not one), and what a pipeline or
    sweep gives (``given``) where it is one value, as Azure ML substitutes them before the shell runs
    (:mod:`stack.inputs`)."""
    if run is None:
        return {}
    return inputs.single([*inputs.of_inputs(run.inputs), *given])


def _where(command: shell.Command) -> tuple[str, str | None]:
    """(where, the script's path): ``the command``, or ``run.sh line 3`` inside ``bash run.sh``."""
    for label in command.where.within:
        program, _, script = label.partition(" ")
        if program in _SHELLS and script and not script.startswith("-c"):
            return f"{script} line {command.where.line}", script
    return "the command", None


def _python_script(args: list[shell.Word]) -> str | None:
    """The script ``python [options] script.py`` runs (None for ``-m``/``-c``)."""
    i = 0
    while i < len(args):
        value = args[i].value
        if value is None:
            return None
        if value in ("-m", "-c") or (value.startswith(("-m", "-c")) and len(value) > 2):
            return None
        if value in ("-W", "-X"):
            i += 2
            continue
        if value.startswith("-"):
            i += 1
            continue
        return value
    return None


def _script(command: shell.Command) -> tuple[str, str] | None:
    """``(kind, path as written)`` of the code-folder file a simple command runs, when it names one."""
    words = list(command.argv)
    if not words or words[0].value is None:
        return None
    program = words[0].value
    name = posixpath.basename(program)
    rest = words[1:]
    values = [w.value for w in rest]
    if _PYTHON.fullmatch(name):
        found = _python_script(rest)
        return ("python", found) if found else None
    if name in _SCRIPT_RUNNERS or (name == "accelerate" and values[:1] == ["launch"]):
        found = next((v for v in values if v is not None and v.endswith(".py")), None)
        return ("python", found) if found else None
    if name in _SHELLS:
        if any(v is not None and v.startswith("-") and "c" in v[1:] and not v.startswith("--") for v in values):
            return None
        found = next((v for v in values if v is not None and not v.startswith("-")), None)
        return ("shell", found) if found else None
    if program.startswith("./") or program.endswith(".sh"):
        return ("shell", program)
    return None


def _opaque_script(command: shell.Command, found: tuple[str, str] | None) -> str | None:
    """The script a shell command runs when it cannot be read: outside the code folder (``bash /opt/x.sh``)
    or only known at run time (``bash $SCRIPT``)."""
    words = command.argv
    if not words or posixpath.basename(words[0].value or "") not in _SHELLS:
        return None
    if found is None:
        operand = next((w for w in words[1:] if not (w.value or "").startswith("-")), None)
        return operand.raw if operand is not None and operand.value is None else None
    return found[1] if found[1].startswith(("/", "~")) else None


def read_command(command: str, *, run: Run | None = None, code: Path | None = None,
                 gpus_per_node: int | None = None, given: Sequence[Folded] = ()) -> CommandReading:
    """``command`` evaluated as bash would run it on a node of ``run`` (Azure ML's variables for its
    distribution, its ``environment_variables``, its literal inputs), following the shell scripts of the
    code folder ``code`` it runs (``bash run.sh``, ``./run.sh``); each launcher read with
    :func:`analysis.topology.read_launch`."""
    contract = _neutral(run, gpus_per_node)
    read = code_reader(code)
    script = shell.evaluate(command, environment=contract.known(), platform=contract.platform(),
                            placeholders=_placeholders(run, given), read_file=read)
    commands = list(script.commands)
    unknown = [str(u) for u in script.unknowns
               if u.kind in ("eval", "source", "shell input", "dynamic command", "parse error", "too large",
                             "too deep", "timeout", "alias", "trap")]
    # `./run.sh` runs a script as a program: read it too (bash follows only `bash run.sh` and `source`).
    for cmd in list(commands):
        program = cmd.argv[0].value if cmd.argv else None
        if read is None or not program or not (program.startswith("./") or program.endswith(".sh")):
            continue
        if cmd.where.within or cmd.cwd is None or cmd.cwd.startswith("/"):
            continue
        path = posixpath.normpath(posixpath.join(cmd.cwd, program))
        text = read(path)
        if text is None:
            continue
        nested = shell.evaluate(text, environment=contract.known(), platform=contract.platform(),
                                label=path, cwd=cmd.cwd, read_file=read)
        commands.extend(replace_where(c, f"bash {program}") for c in nested.commands)
        unknown.extend(f"{u} in {program}" for u in nested.unknowns if u.kind in ("eval", "source", "shell input",
                                                                                   "dynamic command"))
    launches: list[topology.Launch] = []
    scripts: list[ScriptRef] = []
    launcher_script = None
    for cmd in commands:
        where, in_script = _where(cmd)
        found = _script(cmd)
        if found is not None and in_script is None:
            kind, path = found
            if (cmd.cwd is not None and not cmd.cwd.startswith("/") and "$" not in path and "{{" not in path
                    and not path.startswith(("/", "~"))):
                full = posixpath.normpath(posixpath.join(cmd.cwd, path))
                scripts.append(ScriptRef(kind, full, posixpath.normpath(cmd.cwd)))
        opaque = _opaque_script(cmd, found)
        if opaque is not None and in_script is None and code is not None:
            unknown.append(f"cannot tell what `{cmd.raw or opaque}` starts: {opaque} is not a file of the code folder")
        launch = topology.read_launch(cmd, contract, where=where)
        if launch is not None:
            launches.append(launch)
            if in_script is not None and launcher_script is None and launch.launcher in PER_NODE_LAUNCHERS:
                launcher_script = in_script
    return CommandReading(tuple(commands), tuple(launches), tuple(scripts), tuple(unknown), launcher_script)


def replace_where(command: shell.Command, label: str) -> shell.Command:
    """``command`` as found inside the script ``label`` (``bash run.sh``)."""
    return replace(command, where=shell.Where(command.where.line, (label, *command.where.within)))


def infer_launcher(run: Run, *, gpus_per_node: int | None = None,
                   reading: CommandReading | None = None) -> tuple[str, int | None]:
    """The run's launch style (one of :data:`LAUNCHERS`) and the per-node process count its command
    gives a per-node launcher (``--nproc_per_node``, deepspeed ``--num_gpus``, accelerate
    ``--num_processes`` / ``--num_machines``, Lightning ``--devices``); None when not given or only
    known at run time. ``gpus_per_node`` turns torchrun's ``gpu``/``auto`` into a number. ``reading``:
    the command already read (with its code folder's scripts)."""
    if reading is None:
        reading = read_command(run.command, run=run, gpus_per_node=gpus_per_node)
    for launch in reading.launches:
        if launch.launcher in PER_NODE_LAUNCHERS:
            return launch.launcher, launch.procs_per_node
    distribution = run.distribution
    if distribution.type == "tensorflow":
        return (TF_PARAMETER_SERVER if distribution.parameter_server_count else TF_MULTIWORKER), None
    if distribution.type == "mpi":
        named = run.environment if isinstance(run.environment, str) else run.environment.image or ""
        mentions = f"{run.command} {named}".lower()
        return (HOROVOD if "horovod" in mentions or _HOROVOD_ALIAS.search(mentions) else MPI), None
    words = [w.value for command in reading.commands for w in command.argv if w.value is not None]
    if any(w.split("=", 1)[0] in _HF_TRAINER_FLAGS for w in words):
        return HF_TRAINER, None
    return PER_PROCESS, None


def command_scripts(command: str) -> list[tuple[str, str]]:
    """Files of the code folder the command runs, as ``(kind, path)``: ``("python", "train.py")`` for
    ``python [-u] train.py`` or a launcher's training script, ``("shell", "run.sh")`` for ``bash run.sh``,
    ``sh run.sh`` or ``./run.sh``, relative to where the command starts (a ``cd`` before it included).
    Paths with variables, placeholders or absolute paths are left out (only known at run time, or not in
    the code folder)."""
    return [(ref.kind, ref.path) for ref in read_command(command).scripts]
