"""The interconnect settings a run's processes will see, and what NCCL, Open MPI and UCX make of them.

A multi-node run on an InfiniBand cluster can be moved to TCP by a handful of settings, which reach its
processes from the image, ``environment_variables``, ``docker_args``, the command and ``mpirun``'s options.
:func:`baked` reads the image's part from a build context, :func:`assess` puts the rest together for each
process the command starts and :func:`judge` says what each setting does, by the libraries' own rules
(docs/development.md, "analysis/interconnect.py"; sources with commits in docs/infiniband.md). What cannot be
evaluated is "cannot tell", never silently dropped and never mandatory.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from analysis import docker_run, dockerfile, shell
from kernel import bounded
from kernel import regex as linear

WATCHED = ("NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_NET", "OMPI_MCA_pml", "OMPI_MCA_btl", "UCX_TLS",
           "UCX_NET_DEVICES")
"""The variables that can take a run off InfiniBand."""
STEERING = ("NCCL_CONF_FILE", "OMPI_MCA_mca_base_param_files", "OMPI_MCA_mca_param_files", "HOME", "BASH_ENV",
            "DS_ENV_FILE")
"""Variables that choose which configuration files the libraries (and bash, :data:`STARTUP`) read."""
NAMING = ("NCCL_CONF_FILE", "OMPI_MCA_mca_base_param_files", "OMPI_MCA_mca_param_files", "BASH_ENV")
"""Of those, the ones whose value names the files: read from the build context too when a ``COPY`` puts them there."""
STARTUP = "BASH_ENV"
"""The bash manual, "Bash Startup Files", invoked non-interactively: bash "looks for the variable BASH_ENV in the
environment, expands its value, and uses the expanded value as the name of a file to read and execute", as if by
``if [ -n "$BASH_ENV" ]; then . "$BASH_ENV"; fi`` (PATH not searched). The command is read as bash runs it
(``bash -c``), so what that file exports is in the command's environment before its first word runs."""
NCCL_SYSTEM_FILE = "/etc/nccl.conf"
MCA_FILES = ("openmpi-mca-params.conf", "openmpi-mca-params-override.conf")
"""Open MPI's system parameter files (in its ``etc`` folder, wherever its prefix is) and the override
file, whose values beat even the environment (opal/mca/base/mca_base_var.c)."""
DEFAULT_HOME = "/root"
"""Azure ML starts the job's container as root unless the image's ``USER`` says otherwise."""
IMAGE_PATHS = ("/etc/nccl.conf", "/root/.nccl.conf", "/root/.openmpi/mca-params.conf",
               "/etc/openmpi-mca-params.conf", "/etc/openmpi/openmpi-mca-params.conf",
               "/usr/local/etc/openmpi-mca-params.conf", "/opt/hpcx/ompi/etc/openmpi-mca-params.conf",
               "/usr/etc/openmpi-mca-params.conf", "/etc/openmpi-mca-params-override.conf",
               "/etc/openmpi/openmpi-mca-params-override.conf",
               "/usr/local/etc/openmpi-mca-params-override.conf",
               "/opt/hpcx/ompi/etc/openmpi-mca-params-override.conf")
"""Build-context files a ``COPY`` may put there are read (any path a ``RUN`` writes is followed anyway)."""
PLATFORM = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK", "AZ_BATCH_MASTER_NODE",
            "AZ_BATCHAI_MPI_MASTER_NODE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "AZUREML_RUN_ID", "AZUREML_CR_NODE_RANK")
"""Names Azure ML sets in each process at run time (shared/reference launch contract)."""
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun", "oshrun")
NOT_TRAINING = frozenset({
    "echo", "printf", "cat", "ls", "mkdir", "cp", "mv", "rm", "ln", "chmod", "chown", "touch", "pip", "pip3",
    "conda", "mamba", "micromamba", "apt-get", "apt", "yum", "dnf", "nvidia-smi", "ibstat", "ibv_devinfo",
    "ibv_devices", "printenv", "sleep", "date", "hostname", "whoami", "id", "pwd", "tee", "grep", "sed", "awk",
    "head", "tail", "wc", "sort", "uniq", "tr", "cut", "which", "tar", "unzip", "gzip", "wget", "curl", "git",
    "df", "du", "free", "nproc", "lscpu", "base64", "find", "rsync", "env", "true", "false", "test", "[",
    "service", "ssh-keygen", "lsblk", "mount", "ip", "ifconfig", "ps", "kill", "nvcc", "dpkg",
})
"""Programs that start no NCCL or MPI work: their environment is not judged."""

Effect = Literal["off", "no effect", "cannot tell"]


@dataclass(frozen=True, order=True)
class Setting:
    """One value of a watched variable that a process may see, and where it came from."""

    name: str
    value: str
    where: str
    """``environment_variables``, ``docker_args``, ``the command, line 2``, ``Dockerfile ENV at line 3``,
    ``/etc/nccl.conf (COPY conf/nccl.conf at line 7)``..."""
    resolved: bool = True
    """False when the value is only known at run time (``$VAR``, ``$(cmd)``, ``read``)."""
    maybe: bool = False
    """Set on some of the paths the command takes only (a branch whose condition is not known)."""


@dataclass(frozen=True)
class ConfigFile:
    """A configuration file the image holds: its path, its text (None: not known), how it got there."""

    path: str
    content: str | None
    how: str


@dataclass(frozen=True)
class Baked:
    """What an image built from a Dockerfile gives every process: ``ENV`` values of the watched and
    steering variables, the configuration files it holds, and what the build does that cannot be told."""

    settings: tuple[Setting, ...] = ()
    files: tuple[ConfigFile, ...] = ()
    unknowns: tuple[str, ...] = ()
    home: str | None = DEFAULT_HOME


@dataclass(frozen=True, order=True)
class Finding:
    effect: Effect
    message: str


def baked(text: str, context: Path | None) -> Baked:
    """The image's part: ``ENV`` of the last stage, configuration files (written by ``RUN``, or copied
    from ``context``, never from outside it), and the build steps that cannot be followed."""
    image = dockerfile.evaluate(text, context=context, wanted=IMAGE_PATHS)
    env = {v.name: v for v in image.env}
    extra = [v.value for n, v in env.items() if n in NAMING and v.value]
    named = {posixpath.normpath(p) for value in extra for p in _paths(value or "") if p.startswith("/")}
    if any(p == to or p.startswith(to.rstrip("/") + "/") for p in named - set(IMAGE_PATHS) for to in image.copied_to):
        # NCCL_CONF_FILE / mca_base_param_files name more files a COPY may bring: read those from the context too
        wanted = (*IMAGE_PATHS, *(p for value in extra for p in _paths(value or "") if p.startswith("/")))
        image = dockerfile.evaluate(text, context=context, wanted=wanted)
    settings = tuple(
        Setting(v.name, v.value or "", f"Dockerfile ENV at line {v.where.line}" if v.where else "Dockerfile ENV",
                resolved=v.value is not None)
        for v in image.env if v.name in WATCHED or v.name in STEERING)
    files = tuple(ConfigFile(f.path, f.content, f.where) for f in image.files if _config_path(f.path, env))
    unknowns = tuple(f"{u} in the Dockerfile" for u in image.unknowns
                     if u.kind in ("eval", "shell input", "dynamic command", "parse error", "too large", "too deep",
                                   "timeout", "file"))
    return Baked(settings, files, unknowns, image.home)


def _config_path(path: str, env: Mapping[str, shell.Variable]) -> bool:
    name = posixpath.basename(path)
    if name in ("nccl.conf", ".nccl.conf", "mca-params.conf", *MCA_FILES):
        return True
    for steering in NAMING:
        value = env[steering].value if steering in env else None
        if value and path in _paths(value):
            return True
    return False


def _paths(value: str) -> list[str]:
    """The files a ``NCCL_CONF_FILE`` or ``mca_base_param_files`` value names (``,`` or ``:`` between them)."""
    return value.replace(":", ",").split(",")


def _unique(settings: Iterable[Setting]) -> list[Setting]:
    return list(dict.fromkeys(settings))


def _where(variable: shell.Variable) -> str:
    if variable.where is None:
        return variable.origin
    return f"{variable.origin}, {variable.where}"


def _candidates(name: str, binding: shell.Binding) -> list[Setting]:
    maybe = len(binding) > 1
    return [Setting(name, v.value or "", _where(v), resolved=v.value is not None, maybe=maybe)
            for v in binding if v is not None]


def _processes(script: shell.Script) -> list[shell.Command]:
    """The commands that may start NCCL or MPI work: every external program but the plain utilities."""
    return [c for c in script.commands if c.kind == "external" and c.program is not None
            and posixpath.basename(c.program) not in NOT_TRAINING]


def _final(script: shell.Script) -> shell.Environ:
    """The environment the command leaves for what it starts last, when it names no program itself."""
    return shell.Environ({name: tuple(v if v is None or v.exported else None for v in binding)
                          for name, binding in script.variables.items()})


def _nccl_file(text: str, where: str) -> list[Setting]:
    """NCCL's ``setEnvFile``: per line, strip one trailing newline/CR; skip lines starting with ``#``;
    the name is everything before the first ``=`` (nothing trimmed), the value everything after."""
    out = []
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        if name in WATCHED:
            out.append(Setting(name, value, where))
    return out


def _mca_file(text: str, where: str) -> list[Setting]:
    """Open MPI's parameter files: ``name = value`` per line, ``#`` comments, whitespace around both
    trimmed, quotes kept as part of the value."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        name, sep, value = line.partition("=")
        variable = f"OMPI_MCA_{name.strip()}"
        if sep and variable in WATCHED:
            out.append(Setting(variable, value.strip(), where))
    return out


def docker_env(args: str | None) -> tuple[list[Setting], list[str]]:
    """``-e``/``--env`` values in ``docker_args`` (as ``docker run`` reads them) and what cannot be told
    (``--env-file``, ``-e NAME`` taking the node's value)."""
    if not args:
        return [], []
    if not bounded.shlex_can_read(args):
        return [], [f"docker_args of {len(args):,} characters: too long to read"]
    try:
        tokens = shlex.split(args)
    except ValueError:
        return [], [f"docker_args {args!r} cannot be split into words"]
    settings: list[Setting] = []
    unclear: list[str] = []
    for token, value in docker_run.options(tokens):  # docker/cli's reading: -ite X=1, -e=X=1, --env X=1
        if token not in ("--env", "--env-file") or value is None:
            continue
        if token == "--env-file":
            unclear.append(f"docker_args --env-file {value}: the file's variables are not known before the run")
            continue
        name, eq, assigned = value.partition("=")
        if name in WATCHED or name in STEERING:
            if eq:
                settings.append(Setting(name, assigned, "docker_args"))
            else:
                unclear.append(f"docker_args -e {name}: takes the node's value, not known before the run")
    return settings, unclear


Reader = Callable[[str], str | None]
"""A file of the run's code folder by its path relative to the folder, or None when it cannot be read."""


def assess(command: str | None, *, variables: Mapping[str, str], docker_args: str | None = None,
           image: Baked = Baked(), adapters: int = 8, read_file: Reader | None = None) -> list[Finding]:
    """What each process the run starts sees, judged: one :class:`Finding` per setting that switches
    InfiniBand off, looks like it would but does not, or cannot be told. ``read_file``: the code folder's
    files (the scripts the command runs or sources, ``BASH_ENV``, NCCL and Open MPI configuration files,
    ``.deepspeed_env``); without it what they hold cannot be told."""
    findings: list[Finding] = []
    docker, unclear = docker_env(docker_args)
    findings += [Finding("cannot tell", message) for message in unclear]
    seed: dict[str, shell.Variable] = {}
    for s in image.settings:
        seed[s.name] = shell.Variable(s.name, s.value if s.resolved else None, s.where)
    if "HOME" not in seed:
        seed["HOME"] = shell.Variable("HOME", image.home, "the container")
    for name, value in sorted(variables.items()):
        seed[name] = shell.Variable(name, str(value), "environment_variables")
    for s in docker:
        if s.name in variables and str(variables[s.name]) != s.value:
            findings.append(Finding("cannot tell", f"{s.name} is {variables[s.name]!r} in environment_variables and "
                                                   f"{s.value!r} in docker_args: which one the container gets is not "
                                                   "documented"))
        seed[s.name] = shell.Variable(s.name, s.value, "docker_args")
    # Azure ML runs the command with a non-interactive bash (docs/security.md, "The shell evaluator"): a
    # BASH_ENV naming an absolute path (an image's file, :func:`_startup`) is read here with what the image shows
    # of it; any other (a code-folder file, one the command writes) is sourced by the evaluator itself
    # (``startup=True``); `./launch.sh` runs as the script it is.
    startup = True
    if STARTUP in seed and _from_image(seed[STARTUP]):
        seed, said = _startup(seed, image)
        findings += said
        startup = False
    script = shell.evaluate(command or "", environment=list(seed.values()), platform=PLATFORM, placeholders={},
                            read_file=_reader(image, read_file), startup=startup, scripts=True)
    processes = _processes(script)
    seen: list[Setting] = []
    if not processes:
        seen += _settings_of(_final(script), script, len(script.commands), image, None, read_file)
    chosen = {id(p) for p in processes}
    for index, process in enumerate(script.commands):
        if id(process) in chosen:
            seen += _settings_of(process.environ, script, index, image, process, read_file)
    for setting in _unique(seen):
        verdict = judge(setting, adapters=adapters)
        if verdict is not None:
            findings.append(Finding(*verdict))
    for unknown in script.unknowns:
        if unknown.names is None:
            findings.append(Finding("cannot tell", f"{unknown} of the command: what it sets or runs is not known "
                                                   "before the run"))
    findings += [Finding("cannot tell", f"{u}: what it writes is not known before the build")
                 for u in image.unknowns]
    return list(dict.fromkeys(findings))


def _reader(image: Baked, read_file: Reader | None) -> Reader:
    """What the shell reads (``source``, ``BASH_ENV``, ``bash FILE``): an absolute path is the image's file
    when the image's files hold it (an image's ``ENV BASH_ENV`` is read so once :func:`baked` keeps its file),
    a relative one the code folder's."""
    held = {f.path: f.content for f in image.files}

    def read(path: str) -> str | None:
        if path.startswith("/"):
            return held.get(path)
        return read_file(path) if read_file is not None else None
    return read


def _startup(seed: dict[str, shell.Variable], image: Baked) -> tuple[dict[str, shell.Variable], list[Finding]]:
    """The environment after bash has read ``$BASH_ENV`` (:data:`STARTUP`): the file the image holds, evaluated
    with the process's environment; what it exports replaces the seed. A file named only at run time, one the
    build does not write (the base image may hold it) or whose text is not known: "cannot tell"."""
    variable = seed[STARTUP]
    value = variable.value
    label = f"BASH_ENV={value!r} ({variable.origin})"
    if value == "":
        return seed, []
    if value is None or "$" in value or "`" in value:  # bash expands the value: only known at run time
        return seed, [Finding("cannot tell", f"{label}: bash reads the file it names before the command, and "
                                             "which file is only known at run time")]
    if not value.startswith("/"):
        return seed, [Finding("cannot tell", f"{label}: bash reads {value} (from the run's folder) before the "
                                             "command; it is not read before the run")]
    path = posixpath.normpath(value)
    written = [f for f in image.files if f.path == path]
    if not written:
        return seed, [Finding("cannot tell", f"{label}: bash reads {path} before the command, and the Dockerfile "
                                             "does not show what it holds (the base image may): what it sets is not "
                                             "known")]
    last = written[-1]
    if last.content is None:
        return seed, [Finding("cannot tell", f"{label}: bash reads {path} ({last.how}) before the command, and "
                                             "its text is not known before the build")]
    script = shell.evaluate(last.content, environment=list(seed.values()), platform=PLATFORM,
                            label=f"{path} ({last.how}, read by bash as $BASH_ENV)", placeholders={})
    out = dict(seed)
    for name, binding in _final(script).items():
        candidates = [v for v in binding if v is not None]
        if not candidates:
            out.pop(name, None)  # unset (or no longer exported): the command does not get it
        elif len(candidates) == len(binding) and len({v.value for v in candidates}) == 1:
            out[name] = candidates[0]
        else:  # set on some of its paths only, or to different values: not known before the run
            out[name] = shell.Variable(name, None, f"{path} (read by bash as $BASH_ENV), on some of its paths")
    said = [Finding("cannot tell", f"{u} of {path} (read by bash as $BASH_ENV): what it sets is not known before "
                                   "the run") for u in script.unknowns if u.names is None]
    return out, said


def _from_image(variable: shell.Variable) -> bool:
    """Whether a ``BASH_ENV`` is :func:`_startup`'s to read: a value only known at run time, or an absolute path
    (a file of the image). A relative one names a code-folder file (or one the command writes): the evaluator's."""
    value = variable.value
    return value is None or "$" in value or "`" in value or value.startswith("/")


def _settings_of(environ: shell.Environ, script: shell.Script, index: int, image: Baked,
                 process: shell.Command | None, read_file: Reader | None = None) -> list[Setting]:
    """The watched settings one process sees: its environment, then the files NCCL and Open MPI read
    where the environment leaves a name unset, then ``mpirun``'s own options."""
    out: list[Setting] = []
    for name in WATCHED:
        out += _candidates(name, environ.get(name, ()))
    set_here = {name for name in WATCHED if any(v is not None for v in environ.get(name, ()))}
    files = _files(script, index, image)
    home = environ.value("HOME") or image.home or DEFAULT_HOME
    # NCCL: $NCCL_CONF_FILE, else $HOME/.nccl.conf; then /etc/nccl.conf (first file wins: setenv(..., 0))
    conf = environ.get("NCCL_CONF_FILE", ())
    nccl_paths: list[str] = []
    if any(v is not None and v.value is None for v in conf):
        out.append(Setting("NCCL_CONF_FILE", "", _where(next(v for v in conf if v is not None)), resolved=False))
    elif environ.value("NCCL_CONF_FILE"):
        nccl_paths.append(_absolute(environ.value("NCCL_CONF_FILE") or "", process))
    else:
        nccl_paths.append(posixpath.join(home, ".nccl.conf"))
    nccl_paths.append(NCCL_SYSTEM_FILE)
    taken: set[str] = set(set_here)
    for path in nccl_paths:
        found = [s for s in _file_settings(path, files, "nccl", read_file) if s.name.startswith("NCCL_")]
        out += [s for s in found if s.name not in taken]
        taken |= {s.name for s in found}
    # Open MPI: its parameter files, below the environment (the override file above it)
    listed = environ.value("OMPI_MCA_mca_base_param_files") or environ.value("OMPI_MCA_mca_param_files")
    if listed == "none":
        mca_paths: list[str] = []
    elif listed:
        mca_paths = [_absolute(p, process) for p in listed.split(",") if p]
    else:
        mca_paths = [posixpath.join(home, ".openmpi", "mca-params.conf"),
                     *sorted({p for p in files if posixpath.basename(p) == MCA_FILES[0]})]
    for path in mca_paths:
        out += [s for s in _file_settings(path, files, "mca", read_file) if s.name not in set_here]
    for path in sorted(p for p in files if posixpath.basename(p) == MCA_FILES[1]):
        out += _file_settings(path, files, "mca")
    if process is not None and process.program and posixpath.basename(process.program) in MPI_LAUNCHERS:
        out += _mpirun(process)
    if process is not None and process.program and posixpath.basename(process.program) == "deepspeed":
        out += _deepspeed_env(process, environ, files, home, read_file)
    return out


DEEPSPEED_EXPORTED = ("MLFLOW", "NCCL", "PYTHON", "MV2", "UCX")
"""deepspeed/launcher/runner.py ``EXPORT_ENVS``: the launcher's variables it exports to every node."""


def _deepspeed_env(process: shell.Command, environ: shell.Environ,
                   files: Mapping[str, Sequence[tuple[str | None, str, bool]]], home: str,
                   read_file: Reader | None) -> list[Setting]:
    """DeepSpeed's multi-node launch (deepspeed/launcher/runner.py, ``main``; commit edaa722 of
    deepspeedai/DeepSpeed): with a hostfile (``-H``/``--hostfile``) and not ``--no_ssh`` it starts every node's
    ranks through pdsh or an MPI launcher, exporting each line ``NAME=value`` of ``DEEPSPEED_ENVIRONMENT_NAME``
    (``$DS_ENV_FILE``, else ``.deepspeed_env``) read from ``~`` then ``.`` (the later file wins; ``add_export``
    strips both sides): above the environment of each node. Without an explicit hostfile it reads the default
    ``/job/hostfile``, which Azure ML does not write: one node, the file not read."""
    words = [w.value for w in process.argv[1:]]
    options = words[:next((i for i, w in enumerate(words) if w is not None and not w.startswith("-")
                           and (i == 0 or words[i - 1] not in ("-H", "--hostfile"))), len(words))]
    if "--no_ssh" in options or not any(w is not None and (w in ("-H", "--hostfile") or w.startswith("--hostfile="))
                                        for w in options):
        return []
    where = f"exported by deepspeed at {process.where}"
    name_binding = environ.get("DS_ENV_FILE", ())
    if any(v is not None for v in name_binding) and environ.value("DS_ENV_FILE") is None:
        return [Setting("DS_ENV_FILE", "", where, resolved=False)]
    name = environ.value("DS_ENV_FILE") or ".deepspeed_env"
    out: dict[str, Setting] = {}
    for folder in (home, process.cwd or "."):
        path = shell.resolve_proc(name if name.startswith("/") else posixpath.join(folder, name), ".") or name
        parts = files.get(path)
        texts: list[tuple[str | None, str, bool]] = list(parts) if parts else []
        if not texts and not path.startswith("/") and read_file is not None:
            found = read_file(path)
            if found is not None:
                texts = [(found, "a file of the code folder", False)]
        for text, how, maybe in texts:
            if text is None:
                out["DS_ENV_FILE"] = Setting("DS_ENV_FILE", path, f"{path} ({how}), {where}", resolved=False)
                continue
            for line in text.splitlines():
                key, eq, value = line.partition("=")
                key = key.strip()
                if eq and key in WATCHED and key.startswith(DEEPSPEED_EXPORTED):
                    out[key] = Setting(key, value.strip(), f"{path} ({how}), {where}", maybe=maybe)
    return list(out.values())


def _absolute(path: str, process: shell.Command | None) -> str:
    """A file the process opens: a relative path from its folder, else from the code folder (``.``)."""
    return shell.resolve_proc(path, (process.cwd if process is not None else None) or ".") or path


def _files(script: shell.Script, index: int, image: Baked) -> dict[str, list[tuple[str | None, str, bool]]]:
    """Each configuration file's text as the process at ``index`` finds it: the image's, then what the
    command wrote before that process started (``>`` replaces, ``>>`` appends)."""
    files: dict[str, list[tuple[str | None, str, bool]]] = {}
    for f in image.files:
        files[f.path] = [(f.content, f.how, False)]
    for write in script.writes:
        if write.commands_before > index or write.path.value is None:
            continue
        if write.path.value.startswith("~/"):
            path = posixpath.normpath(posixpath.join(image.home or DEFAULT_HOME, write.path.value[2:]))
        else:  # relative to the writer's directory (a subshell's `cd`), /proc/self/cwd read as it
            located = write.location()
            if located is None:
                continue
            path = located
        how = f"written by the command at {write.where}"
        entry = (write.content, how, write.maybe)
        if write.append and write.source is None:
            files.setdefault(path, []).append(entry)
        else:
            files[path] = [entry]
    return files


def _file_settings(path: str, files: Mapping[str, Sequence[tuple[str | None, str, bool]]],
                   kind: Literal["nccl", "mca"], read_file: Reader | None = None) -> list[Setting]:
    parts = files.get(path)
    if not parts and not path.startswith("/") and read_file is not None:
        found = read_file(path)  # NCCL_CONF_FILE or mca_base_param_files naming a file of the code folder
        parts = [(found, "a file of the code folder", False)] if found is not None else None
    if not parts:
        if not path.startswith("/"):
            return [Setting("NCCL_CONF_FILE" if kind == "nccl" else "OMPI_MCA_mca_base_param_files", path,
                            f"{path} (a file of the code folder, not read before the run)", resolved=False)]
        return []
    out: list[Setting] = []
    for content, how, maybe in parts:
        where = f"{path} ({how})"
        if content is None:
            name = "NCCL_CONF_FILE" if kind == "nccl" else "OMPI_MCA_mca_base_param_files"
            out.append(Setting(name, path, where, resolved=False, maybe=maybe))
            continue
        read = _nccl_file(content, where) if kind == "nccl" else _mca_file(content, where)
        out += [replace(s, maybe=maybe) for s in read]
    if kind == "nccl":  # within one file NCCL keeps the first value of a name
        first: dict[str, Setting] = {}
        for s in out:
            first.setdefault(s.name, s)
        return [s for s in out if s is first[s.name] or not s.resolved]
    return out


def _mpirun(process: shell.Command) -> list[Setting]:
    """``mpirun -x NAME=value`` (the ranks' environment), ``--mca NAME value`` (above the environment; Open
    MPI's mpirun(1)) and Hydra's ``-genv``/``-env NAME VALUE``."""
    out: list[Setting] = []
    words = process.argv[1:]
    i = 0
    while i < len(words):
        flag = words[i].value
        where = f"mpirun options, {process.where}"
        if flag in ("-x",) and i + 1 < len(words):
            arg = words[i + 1]
            name, eq, value = (arg.value or "").partition("=")
            if arg.value is None:  # -x $SOMETHING: which variable is only known at run time
                out.append(Setting("mpirun -x", arg.raw, where, resolved=False))
            elif eq and name in WATCHED:
                out.append(Setting(name, value, where))
            i += 2
            continue
        if flag in ("-genv", "-env") and i + 2 < len(words):
            # MPICH's and Intel MPI's Hydra (mpiexec.hydra -h; Intel MPI "Global Options"): -genv NAME VALUE
            # sets NAME in every rank's environment, -env NAME VALUE in this executable's ranks
            name_word, value_word = words[i + 1], words[i + 2]
            if name_word.value is None:
                out.append(Setting(f"mpiexec {flag}", name_word.raw, where, resolved=False))
            elif name_word.value in WATCHED:
                out.append(Setting(name_word.value, value_word.value or "", where,
                                   resolved=value_word.value is not None))
            i += 3
            continue
        if flag in ("-mca", "--mca", "-gmca", "--gmca") and i + 2 < len(words):
            param, setting = words[i + 1].value, words[i + 2].value
            if param is not None and f"OMPI_MCA_{param}" in WATCHED:
                out.append(Setting(f"OMPI_MCA_{param}", setting or "", where, resolved=setting is not None))
            i += 3
            continue
        if flag in ("--tune", "-tune", "--am", "-am") and i + 1 < len(words):
            out.append(Setting("OMPI_MCA_mca_base_param_files", str(words[i + 1]),
                               f"{where} ({flag} reads a file of the code folder)", resolved=False))
            i += 2
            continue
        if flag is not None and not flag.startswith("-"):
            break  # the program the ranks run
        i += 1
    return out


_STRTOLL = linear.compile(rf"^[{linear.SPACE}]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_ZERO = linear.compile(r"[+-]?0+|[+-]?0[xX]0+")
_PORT = linear.compile(rf"[+-]?[{linear.DIGIT}]+")
_LLONG = 2**63


def strtoll(value: str) -> int:
    """C's ``strtoll(value, NULL, 0)``: base from the prefix (0x hex, 0 octal), the longest valid prefix
    read, 0 when nothing is; out of range is reported by NCCL as invalid, so the default (0) applies."""
    m = _STRTOLL.match(value)
    if not m:
        return 0
    digits = m.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10
    number = int(digits, base)
    number = -number if m.group(1) == "-" else number
    return number if -_LLONG <= number < _LLONG else 0


_UCX_CONNECTED = ("rc", "dc")
_UCX_IB_ALIASES = ("ib", "all")


def _ucx_transport_ok(name: str) -> bool:
    return name in _UCX_IB_ALIASES or name.startswith(_UCX_CONNECTED)


def judge(setting: Setting, *, adapters: int = 8) -> tuple[Effect, str] | None:
    """What ``setting`` does to InfiniBand: ``("off", why)`` when it takes the run off (or degrades it),
    ``("no effect", why)`` for a spelling that looks like it would but does not, ``("cannot tell", why)``
    for a value only known at run time or set on some paths only; None when it leaves InfiniBand alone.
    ``adapters``: the InfiniBand adapters of the cluster's size (one per GPU on Azure's ND sizes)."""
    label = f"{setting.name}={setting.value!r} ({setting.where})"
    if not setting.resolved:
        return "cannot tell", f"{label}: the value is only known at run time; check it leaves InfiniBand on"
    verdict = _judge_value(setting.name, setting.value, label, adapters)
    if verdict is not None and setting.maybe and verdict[0] == "off":
        return "cannot tell", (f"{verdict[1]}, on some of the command's paths only (a condition known at run "
                               "time); check it leaves InfiniBand on")
    return verdict


def _judge_value(name: str, raw: str, label: str, adapters: int) -> tuple[Effect, str] | None:
    value = raw.strip()
    if name == "NCCL_IB_DISABLE":
        number = strtoll(raw)
        if number != 0:
            return "off", f"{label} disables InfiniBand (NCCL reads it as {number})"
        if value and not _ZERO.fullmatch(value):
            return "no effect", f"{label} has no effect: NCCL reads it as 0, so InfiniBand stays on"
        return None
    if name == "NCCL_IB_HCA":
        return _judge_hca(label, raw, adapters)
    if name == "NCCL_NET" and raw.lower() == "socket":
        return "off", f"{label} makes NCCL use TCP sockets instead of InfiniBand"
    if name == "OMPI_MCA_pml":
        chosen = [p.strip() for p in value.lstrip("^").split(",") if p.strip()]
        excluded = value.startswith("^")
        if (excluded and "ucx" in chosen) or (not excluded and chosen and "ucx" not in chosen):
            return "off", f"{label} keeps Open MPI off its UCX PML, its only InfiniBand path: MPI traffic goes over TCP"
        return None
    if name == "OMPI_MCA_btl" and not value.startswith("^"):
        btls = {b.strip() for b in value.split(",") if b.strip()}
        if btls and not btls & {"openib", "uct", "ofi"}:
            return "cannot tell", (f"{label} leaves Open MPI no InfiniBand BTL: no effect while it uses its UCX "
                                   "PML (the default where the image's Open MPI has UCX), TCP if it falls back to ob1")
        return None
    if name == "UCX_TLS":
        transports = [t.strip().lower() for t in value.lstrip("^").split(",") if t.strip()]
        if value.startswith("^"):
            gone = set(transports)
            rc_gone = bool(gone & {"rc", "ib"}) or ({"rc_v", "rc_verbs"} & gone and {"rc_x", "rc_mlx5"} & gone)
            dc_gone = bool(gone & {"dc", "dc_x", "dc_mlx5", "ib"})
            off = bool(rc_gone and dc_gone)
        else:
            off = bool(transports) and not any(_ucx_transport_ok(t) for t in transports)
        if off:
            return "off", f"{label} leaves UCX no InfiniBand connected transport (rc or dc)"
        return None
    if name == "UCX_NET_DEVICES":
        devices = [d.strip() for d in value.split(",") if d.strip()]
        if devices and "all" not in devices and not any(d.startswith("mlx5") for d in devices):
            return "off", f"{label} gives UCX no Mellanox (mlx5) device, the only InfiniBand adapters Azure has"
    return None


def _judge_hca(label: str, value: str, adapters: int) -> tuple[Effect, str] | None:
    """NCCL's matching (src/misc/utils.cc ``parseStringList``/``matchIfList``): entries split on ``,``
    (empty ones dropped), each ``prefix[:port]``; a name matches an entry it starts with (``=``: equals);
    a leading ``^`` keeps the devices that match no entry. Nothing is trimmed: `` mlx5`` matches nothing."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    entries: list[tuple[str, int]] = []
    for item in rest.split(","):
        prefix, _, port_text = item.partition(":")
        if not prefix:
            continue
        port_digits = _PORT.match(port_text.split(":")[0]) if port_text else None
        entries.append((prefix, int(port_digits.group(0)) if port_digits else -1))
    if not entries:
        return None
    names = [f"mlx5_{i}" for i in range(adapters)] + [f"mlx5_ib{i}" for i in range(adapters)]

    def matches(device: str) -> bool:  # Azure's InfiniBand virtual functions have one port, port 1
        return any((device == p if exact else device.startswith(p)) and port in (-1, 1) for p, port in entries)

    every_mlx5 = any(not exact and "mlx5_".startswith(p) and port in (-1, 1) for p, port in entries)
    if exclude:
        if every_mlx5:
            return "off", f"{label} excludes every Mellanox (mlx5) HCA, all the InfiniBand adapters Azure has"
        plain = all(matches(n) for n in names[:adapters])
        renamed = all(matches(n) for n in names[adapters:])
        if plain or renamed:
            return "cannot tell", (f"{label} excludes all {adapters} adapters under one of Azure's two naming "
                                   "schemes (mlx5_N, mlx5_ibN): InfiniBand is off if the image's devices are named so")
        return None
    if not any(matches(n) for n in names) and not any(
            not exact and p.startswith("mlx5") and port in (-1, 1) for p, port in entries):
        return "off", f"{label} selects no Mellanox (mlx5) HCA, the only InfiniBand adapters Azure has"
    return None
