"""Azure ML SDK scripts as stack ``jobs`` entries, read with :mod:`ast` (never executed).

SDK v1 (azureml-core): each ``ScriptRunConfig(...)`` becomes a run, its distributed configuration mapped with
its documented v1 semantics (the table: docs/development.md, "importer/sdk.py"). SDK v2 (azure-ai-ml): each
``command(...)`` call with its keyword arguments, already in CLI v2 vocabulary. Relative paths are read against
the script's folder; what the text does not determine is left as a placeholder naming the file and line.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from importer.base import PLACEHOLDER_MARK, Draft, ImportInputError, Source, contains_placeholder, slug
from importer.cliv2 import NO_DISTRIBUTION_NOTE, distribution, inline_environment, local_data
from importer.mapping import Context, add_environment, map_compute, map_environment_reference, project_path
from importer.static import (
    MAX_SCRIPT_BYTES,
    SUBMITTED,
    Call,
    DataRef,
    Module,
    PathValue,
    ScriptTooLarge,
    Unknown,
    evaluate_tree,
    parse,
)
from kernel import bounded
from kernel import regex as linear
from stack.runs import is_remote_path

V1_KIND = "SDK v1 ScriptRunConfig"
V2_KIND = "SDK v2 command()"

_SHELL_SAFE = linear.compile(r"^[A-Za-z0-9_@%+=:,./{}$-]+$")
_GENERIC_STEMS = frozenset({"job", "run", "submit", "main", "launch", "pipeline", "train_job", "submit_job"})


def _word(token: str) -> str:
    """One argument on the command line: bare when the shell leaves it alone, else quoted, ``$VAR`` expanded."""
    if _SHELL_SAFE.match(token):
        return token
    if "$" in token:
        return '"' + linear.compile(r'(["\\`])').sub(r"\\\1", token) + '"'
    return shlex.quote(token)


def read_script(source: Source) -> str:
    """The text of a submission script, read within :data:`MAX_SCRIPT_BYTES`; bad input names the file."""
    try:
        return bounded.decode(bounded.read_bytes(source.path, MAX_SCRIPT_BYTES, "a submission script"))
    except OSError as err:
        raise ImportInputError(f"cannot read the file: {err.strerror or err}", file=source.display) from None
    except bounded.BoundedInputError as err:
        raise ImportInputError(err.message, file=source.display, line=err.line) from None


def parse_script(source: Source) -> tuple[str, ast.Module]:
    """The text of a submission script and its syntax tree; bad input (unreadable, past the bounds, not Python)
    names the file (and the line)."""
    text = read_script(source)
    with python_errors(source):
        return text, parse(text, str(source.path.resolve()))


@contextlib.contextmanager
def python_errors(source: Source) -> Iterator[None]:
    """Text that is not Python, or a script past the import's bounds, as bad input naming the file and line."""
    try:
        yield
    except SyntaxError as err:
        raise ImportInputError(f"not Python: {err.msg}", file=source.display, line=err.lineno) from None
    except ScriptTooLarge as err:
        raise ImportInputError(str(err), file=source.display, line=err.line) from None


def read(source: Source, ctx: Context, text: str, tree: ast.Module) -> list[Draft]:
    """Every ``ScriptRunConfig(...)`` and ``command(...)`` of a script (its ``text`` and syntax ``tree``, as
    :func:`parse_script` reads them), as drafts (exit 2 when none)."""
    with python_errors(source):
        module = evaluate_tree(tree, str(source.path.resolve()))
    runs = [c for c in module.calls if c.name == "ScriptRunConfig"]
    commands = [c for c in module.calls if c.name == "command" and c.qualified.startswith(("azure.ai.ml", "command"))]
    if not runs and not commands:
        hint = ""
        unread = _unread_call(tree)
        if unread is not None:
            raise ImportInputError(
                f"{unread[1]}(...) is called inside a function, class or loop, which import does not follow: "
                "move the call to the module level (or into main()) with its arguments", file=source.display,
                line=unread[0])
        if linear.compile(r"\b(Estimator|PyTorch|TensorFlow)\s*\(").search(text):
            hint = "; SDK v1 estimators are not read: rewrite the estimator as a ScriptRunConfig first"
        raise ImportInputError(
            "no ScriptRunConfig(...) (SDK v1) or command(...) (SDK v2) call: nothing to import" + hint,
            file=source.display,
        )
    experiments = [c.arg(1, "name") for c in module.calls if c.name == "Experiment"]
    experiment = experiments[0] if len(set(map(str, experiments))) == 1 and isinstance(experiments[0], str) else None
    stem = source.path.stem
    base = slug(source.path.parent.name if stem in _GENERIC_STEMS else stem)
    drafts = []
    for i, call in enumerate([*runs, *commands]):
        if call.spread:
            raise ImportInputError(f"{call.name}(...) takes its arguments from *args/**kwargs, known only at run "
                                   "time: write them out as keyword arguments", file=source.display, line=call.line)
        name = base if len(runs) + len(commands) == 1 else f"{base}-{i + 1}"
        if call.name == "ScriptRunConfig":
            drafts.append(_v1(call, module, source, ctx, name, experiment))
        else:
            drafts.append(_v2(call, source, ctx, name))
    pipeline = _v1_pipeline(tree, text)
    if pipeline is not None:
        line, steps = pipeline
        for draft in drafts:
            draft.todo("pipeline", line, f"SDK v1 Pipeline(...) of {len(steps)} step(s) ({', '.join(steps)}) at "
                       f"line {line} was dropped: only the ScriptRunConfig is imported, as one run, without the "
                       "steps' order, the data they pass (PipelineData, OutputFileDatasetConfig) or a schedule",
                       "declare a pipeline job (type: pipeline, jobs: one command step per step, outputs bound "
                       "with ${{parent.jobs.<step>.outputs.<name>}}): docs/migrating.md")
    return drafts


_V1_STEPS = frozenset({"CommandStep", "PythonScriptStep", "MpiStep", "EstimatorStep", "ParallelRunStep",
                       "DataTransferStep", "HyperDriveStep", "AutoMLStep", "ModuleStep", "AdlaStep",
                       "DatabricksStep", "SynapseSparkStep", "KustoStep"})
"""Step classes of azureml-pipeline-steps (SDK v1)."""


def _v1_pipeline(tree: ast.Module, text: str) -> tuple[int, list[str]] | None:
    """(line, step classes in the order written) of an SDK v1 ``Pipeline(...)`` in a script that imports
    ``azureml.pipeline``; None when there is none."""
    if "azureml.pipeline" not in text:
        return None
    line = None
    steps: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "Pipeline" and line is None:
                line = node.lineno
            elif name in _V1_STEPS:
                steps.append((node.lineno, name))
    if line is None:
        return None
    return line, [name for _, name in sorted(steps)] or ["steps not read"]


# ------------------------------------------------------------------------------------------ shared


def _unread_call(tree: ast.Module) -> tuple[int, str] | None:
    """The first ``ScriptRunConfig(...)``/``command(...)`` call anywhere in the script, by its name only."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("ScriptRunConfig", "command"):
                return node.lineno, name
    return None


def _path(value: Any) -> str | None:
    if isinstance(value, PathValue):
        return value.path
    return value if isinstance(value, str) else None


def _folder(ctx: Context, draft: Draft, source: Source, value: Any, key: str, line: int) -> str:
    path = _path(value)
    if path is None:
        why = value.why if isinstance(value, Unknown) else f"{key} is not given"
        return draft.leave("code", getattr(value, "line", line) or line, why,
                           "set code to the folder (under the project) holding the training script")
    return project_path(ctx, source.folder / path, draft, key, line)


def _text_placeholder(draft: Draft, key: str, value: Unknown, fix: str) -> str:
    return f"<{draft.leave(key, value.line, value.why, fix)}>"


def _count(draft: Draft, value: Any, what: str, line: int) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, Unknown):
        return draft.leave(what, value.line, value.why, f"write the {what} the run uses")
    raise ImportInputError(f"{what} {value!r} is not a whole number", file=draft.file, line=line)


def _literal(draft: Draft, value: Any, key: str, line: int) -> Any:
    """A plain value (str/number/bool/list/dict of them); anything else becomes a placeholder."""
    if isinstance(value, Unknown):
        return draft.leave(key, value.line, value.why, f"write the value of {key}")
    if isinstance(value, PathValue):
        return value.path
    if isinstance(value, dict):
        return {str(k): _literal(draft, v, f"{key}.{k}", line) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(draft, v, key, line) for v in value]
    if isinstance(value, Call | DataRef):
        return draft.leave(key, line, f"{key} is an object this importer does not map", f"write the value of {key}")
    return value


# ------------------------------------------------------------------------------------------ SDK v1


_V1_PARAMETERS = ("source_directory", "script", "arguments", "run_config", "compute_target", "environment",
                  "distributed_job_config", "resume_from", "max_run_duration_seconds", "command",
                  "docker_runtime_config")
"""``ScriptRunConfig``'s parameters: also its attributes, which a script may set after construction."""


def _v1(call: Call, module: Module, source: Source, ctx: Context, name: str, experiment: str | None) -> Draft:
    draft = Draft(file=source.display, line=call.line, kind=V1_KIND, run={"name": name})
    run = draft.run
    later = {k: v for k, v in call.attrs.items() if k in _V1_PARAMETERS}
    for key in sorted(later):
        draft.notes.append(f"{key} is set after ScriptRunConfig(...) (line {call.attr_lines[key]}): imported as the "
                           "value the run is submitted with")
    call = dataclasses.replace(call, kwargs={**call.kwargs, **later})
    if experiment:
        run["experiment_name"] = experiment
    run["code"] = _folder(ctx, draft, source, call.arg(0, "source_directory"), "source_directory", call.line)
    inputs: dict[str, Any] = {}
    run["command"] = _v1_command(draft, call, inputs)
    run_config = call.arg(3, "run_config")
    # What the run configuration holds: the RunConfiguration passed in, then `src.run_config.x = ...` assignments.
    settings = dict(run_config.attrs) if isinstance(run_config, Call) else {}
    settings |= {k.removeprefix("run_config."): v for k, v in call.attrs.items() if k.startswith("run_config.")}
    setting_lines = {k.removeprefix("run_config."): v for k, v in call.attr_lines.items()
                     if k.startswith("run_config.")}
    if run_config is not None:
        # azureml-core ignores compute_target, environment, distributed_job_config... when run_config is given.
        why = "the run's compute, environment and distribution are set by run_config (a RunConfiguration)"
        fix = "write them here as the RunConfiguration sets them"
        environment = settings.pop("environment", None)
        if environment is not None or ctx.environment:
            run["environment"], variables = _v1_environment(ctx, draft, source, environment, call.line, name)
            if variables:
                run["environment_variables"] = variables
        else:
            run["environment"] = draft.leave("environment", call.line, why, fix)
        target = settings.pop("target", None)
        run["compute"] = _v1_compute(ctx, draft, target, call.line) if target is not None or ctx.compute \
            else draft.leave("compute", call.line, why, fix)
        run["distribution"] = draft.leave("distribution", call.line, why, fix)
        nodes: Any = None
    else:
        environment, variables = _v1_environment(ctx, draft, source, call.arg(6, "environment"), call.line, name)
        run["environment"] = environment
        if variables:
            run["environment_variables"] = variables
        run["compute"] = _v1_compute(ctx, draft, call.arg(5, "compute_target"), call.line)
        dist, nodes = _v1_distribution(draft, call.arg(7, "distributed_job_config"), call.line, run["command"])
        run["distribution"] = dist
    resources: dict[str, Any] = {} if nodes is None else {"instance_count": nodes}
    _v1_run_config(draft, settings, setting_lines, run, resources, distributed=call.given(7, "distributed_job_config"))
    docker = call.arg(11, "docker_runtime_config")
    if isinstance(docker, Call) and docker.name == "DockerConfiguration":
        if docker.given(99, "shm_size"):
            resources["shm_size"] = _literal(draft, docker.arg(99, "shm_size"), "resources.shm_size", docker.line)
        arguments = docker.arg(99, "arguments")  # keyword-only here: positions differ across versions
        if isinstance(arguments, list) and arguments:
            resources["docker_args"] = " ".join(_word(str(a)) for a in arguments)
    if resources:
        run["resources"] = resources
    if inputs:
        run["inputs"] = inputs
    duration = call.arg(9, "max_run_duration_seconds")
    if call.given(9, "max_run_duration_seconds"):
        run["limits"] = {"timeout": _count(draft, duration, "max_run_duration_seconds", call.line)}
    if isinstance(call.arg(8, "resume_from"), Call | Unknown):
        run["command"] += " " + _text_placeholder(
            draft, "command", Unknown(call.line, "resume_from adds --resume-from <a mounted checkpoint folder>"),
            "declare the checkpoint folder as an input and pass --resume-from ${{inputs.<name>}}")
    _submitted_v1(draft, call)
    _files_written(draft, module, source, ctx)
    _note_v1_variables(draft, run["command"])
    return draft


def _v1_run_config(draft: Draft, settings: dict[str, Any], lines: dict[str, int], run: dict[str, Any],
                   resources: dict[str, Any], *, distributed: bool) -> None:
    """What the run configuration sets (``src.run_config.environment_variables["X"] = ...``, ``.node_count``...):
    mapped where the entry has the key, a TODO where it does not."""
    for key, value in sorted(settings.items()):
        line = lines.get(key, draft.line)
        if key == "environment_variables":
            variables = _strings(draft, value, "environment_variables", line)
            known = run.get("environment_variables", {})
            run["environment_variables"] = {**known, **variables} if isinstance(variables, dict) else variables
        elif key == "node_count" and not distributed:
            resources["instance_count"] = _count(draft, value, "run_config.node_count", line)
        elif key == "node_count" and value != resources.get("instance_count"):
            draft.todo("resources.instance_count", line, f"run_config.node_count is {value!r} and "
                       f"distributed_job_config gives {resources.get('instance_count')!r} nodes",
                       "write the node count the run uses")
        elif key in ("target", "environment") and run.get("compute" if key == "target" else "environment"):
            if key == "target" and isinstance(value, str) and value.removeprefix("azureml:") == run["compute"]:
                continue
            entry_key = "compute" if key == "target" else "environment"
            draft.todo(key, line, f"run_config.{key} is set as well as the ScriptRunConfig's own",
                       f"check that the entry's {entry_key} is the one it runs on")
        elif key != "node_count":
            draft.todo(f"run_config.{key}", line, f"run_config.{key} is set and not imported",
                       f"write what {key} sets in the entry (docs/migrating.md maps the SDK v1 settings)")


def _submitted_v1(draft: Draft, call: Call) -> None:
    """``experiment.submit(src, tags={...})``: the submission's tags are the run's; anything else a TODO."""
    for key, value in call.attrs.items():
        if not key.startswith(SUBMITTED):
            continue
        keyword, line = key.removeprefix(SUBMITTED), call.attr_lines[key]
        if keyword == "tags":
            draft.run["tags"] = _strings(draft, value, "tags", line)
        else:
            draft.todo(keyword, line, f"the submission passes {keyword}=..., which is not imported",
                       f"write what {keyword} sets in the entry")


def _files_written(draft: Draft, module: Module, source: Source, ctx: Context) -> None:
    """Each file the script writes into the run's code folder before submitting: the run reads it from its
    snapshot, which the stack uploads from the project as it is. A TODO names a file the project lacks."""
    code = draft.run.get("code")
    if not isinstance(code, str) or contains_placeholder(code):
        return
    folder = (ctx.root / code).resolve()
    for write in module.writes:
        if isinstance(write.path, Unknown):
            draft.notes.append(f"the script writes a file whose path is known only at run time (line {write.line}): "
                               f"if it lands in the code folder {code!r}, the run needs it there")
            continue
        path = Path(os.path.normpath(source.folder / write.path))
        if not path.is_relative_to(folder):
            continue
        inside = path.relative_to(folder).as_posix()
        if path.is_file():
            draft.notes.append(f"the script writes {inside} into the code folder (line {write.line}); the run gets the "
                               f"copy in {code}/: keep it as the script would write it")
        else:
            draft.todo("code", write.line, f"the script writes {inside} into the code folder before submitting, and "
                       "the run reads its copy there", f"save {inside} in {code}/ (the content the script writes)")


def _v1_command(draft: Draft, call: Call, inputs: dict[str, Any]) -> str:
    script, command, arguments = call.arg(1, "script"), call.arg(10, "command"), call.arg(2, "arguments")
    if script is not None and command is not None:
        raise ImportInputError("ScriptRunConfig has both script and command (azureml-core refuses that): keep one",
                               file=draft.file, line=call.line)
    if command is None and script is None:
        raise ImportInputError("ScriptRunConfig has neither script nor command: nothing to run", file=draft.file,
                               line=call.line)
    if isinstance(command, str):
        return command
    words: list[str] = []
    tokens: list[Any]
    if command is not None:
        if not isinstance(command, list):
            return _text_placeholder(draft, "command", command if isinstance(command, Unknown)
                                     else Unknown(call.line, "command is not a list or string"),
                                     "write the command the run executes")
        tokens = command
    else:
        script_word = _path(script)
        words = ["python", _word(script_word) if script_word else _text_placeholder(
            draft, "command", script if isinstance(script, Unknown) else Unknown(call.line, "script is not a string"),
            "write the script's path relative to the code folder")]
        if isinstance(arguments, str):
            return " ".join([*words, arguments])
        if arguments is not None and not isinstance(arguments, list):
            return " ".join([*words, _text_placeholder(draft, "command", arguments if isinstance(arguments, Unknown)
                                                       else Unknown(call.line, "arguments is not a list"),
                                                       "write the script's arguments")])
        tokens = arguments or []
    for i, token in enumerate(tokens):
        words.append(_argument(draft, token, tokens[i - 1] if i else None, inputs, call.line))
    return " ".join(words)


def _argument(draft: Draft, token: Any, previous: Any, inputs: dict[str, Any], line: int) -> str:
    if isinstance(token, bool | int | float):
        return str(token)  # what azureml-core passes: str(value)
    if isinstance(token, str):
        # A list item may hold several words ("--nproc_per_node 2 --nnodes 2"): v1 joins items with spaces.
        return token if " " in token and not token.startswith(("'", '"')) else _word(token)
    if isinstance(token, PathValue):
        return _word(token.path)
    if isinstance(token, DataRef):
        return _data_input(draft, token, previous, inputs)
    unknown = token if isinstance(token, Unknown) else Unknown(
        line, "an argument is an object this importer does not map")
    return _text_placeholder(draft, "command", unknown, "write the argument's value")


def _data_input(draft: Draft, ref: DataRef, previous: Any, inputs: dict[str, Any]) -> str:
    flag = previous.lstrip("-").split()[-1] if isinstance(previous, str) and previous.startswith("-") else None
    base = linear.compile(r"[^A-Za-z0-9_]").sub("_", ref.name or flag or "data")
    if not linear.compile(r"[A-Za-z_]").match(base):
        base = f"data_{base}"
    name, n = base, 2
    while name in inputs:
        name, n = f"{base}_{n}", n + 1
    dataset = ref.dataset
    path: str
    kind = "uri_folder"
    url = _single_url(dataset)
    if url is not None:
        # A FileDataset of one file delivers that file (azureml-core: "the download location will be the path of
        # the single downloaded file"); v2 reads the URL itself as a uri_file input.
        path, kind = url, "uri_file"
    elif isinstance(dataset, Call) and dataset.name == "Dataset.get_by_name":
        asset, version = dataset.arg(1, "name"), dataset.arg(2, "version", "latest")
        if isinstance(asset, str) and isinstance(version, str | int) and not isinstance(version, bool):
            path = f"azureml:{asset}@latest" if str(version) == "latest" else f"azureml:{asset}:{version}"
        else:
            path = draft.leave(f"inputs.{name}.path", dataset.line,
                               "the dataset's name or version is computed at run time",
                               "write azureml:<name>:<version>")
    else:
        why = dataset.why if isinstance(dataset, Unknown) else (
            f"the dataset comes from {dataset.name}(...), which creates or uploads data when the script runs"
            if isinstance(dataset, Call) else "the dataset is computed at run time")
        path = draft.leave(f"inputs.{name}.path", ref.line, why,
                           "register the data as a data asset and write azureml:<name>:<version>")
    inputs[name] = {"type": kind, "path": path, "mode": ref.mode}
    return f"${{{{inputs.{name}}}}}"


def _single_url(dataset: Any) -> str | None:
    """The one http(s) URL a ``Dataset.File.from_files(...)`` reads, if that is what it reads."""
    if not isinstance(dataset, Call) or dataset.name != "Dataset.File.from_files":
        return None
    path = dataset.arg(0, "path")
    if isinstance(path, list) and len(path) == 1:
        path = path[0]
    return path if isinstance(path, str) and path.startswith(("https://", "http://")) else None


def _v1_compute(ctx: Context, draft: Draft, target: Any, line: int) -> str:
    if isinstance(target, Call) and target.name in ("ComputeTarget", "ComputeTarget.create"):
        target = target.arg(1, "name")
    if isinstance(target, Unknown) and not ctx.compute:
        return draft.leave("compute", target.line, target.why, "pass --compute CLUSTER")
    if target is None and not ctx.compute:
        return draft.leave("compute", line, "no compute_target: SDK v1 ran this on the submitting machine",
                           "pass --compute CLUSTER")
    return map_compute(ctx, draft, target if isinstance(target, str) else None, line)


def _v1_environment(ctx: Context, draft: Draft, source: Source, env: Any, line: int,
                    run_name: str) -> tuple[str, dict[str, str]]:
    """The environment as the stack names it, and the environment variables the v1 environment sets."""
    variables: dict[str, str] = {}
    if isinstance(env, Call) and isinstance(env.attrs.get("environment_variables"), dict):
        variables = {str(k): str(v) for k, v in env.attrs["environment_variables"].items()}
    if ctx.environment:
        return map_environment_reference(ctx, draft, "the script's environment"), variables
    if env is None:
        return draft.leave("environment", line, "no environment: SDK v1 used its default CPU image",
                           "pass --environment ENV"), variables
    if not isinstance(env, Call):
        why = env.why if isinstance(env, Unknown) else "the environment is not an Environment(...) call"
        return draft.leave("environment", getattr(env, "line", line), why, "pass --environment ENV"), variables
    name = env.arg(0, "name") if env.name != "Environment.get" else env.arg(1, "name")
    if env.name == "Environment.get":
        version = env.arg(2, "version")
        if not isinstance(name, str) or isinstance(version, Unknown):
            return draft.leave("environment", env.line, "the environment's name or version is computed at run time",
                               "pass --environment ENV"), variables
        reference = f"azureml:{name}:{version}" if version is not None else f"azureml:{name}@latest"
        return map_environment_reference(ctx, draft, reference), variables
    entry: dict[str, Any] = {"name": name if isinstance(name, str) else f"{run_name}-env", "version": "1"}
    base_image = env.attrs.get("docker.base_image")
    if env.name == "Environment.from_docker_image":
        base_image = env.arg(1, "image")
    if env.name == "Environment.from_dockerfile":
        dockerfile = _path(env.arg(1, "dockerfile"))
        if dockerfile is None or "\n" in dockerfile or dockerfile.lstrip().upper().startswith("FROM "):
            return draft.leave("environment", env.line, "the Dockerfile is given as text or computed at run time",
                               "save it as a Dockerfile under the project and declare a build environment"), variables
        path = source.folder / dockerfile
        entry["build"] = {"path": project_path(ctx, path.parent, draft, "dockerfile", env.line),
                          "dockerfile_path": path.name}
    elif env.name == "Environment.from_docker_build_context":
        context = env.arg(1, "docker_build_context")
        folder = _path(context.arg(1, "path")) if isinstance(context, Call) else None
        dockerfile = context.arg(2, "dockerfile_path", "Dockerfile") if isinstance(context, Call) else None
        if not isinstance(context, Call) or context.name != "DockerBuildContext.from_local_directory" \
                or folder is None or not isinstance(dockerfile, str):
            return draft.leave("environment", env.line, "the build context is not a local folder this script names",
                               "save it under the project and declare a build environment"), variables
        entry["build"] = {"path": project_path(ctx, source.folder / folder, draft, "build.path", env.line),
                          "dockerfile_path": dockerfile}
    elif isinstance(base_image, str):
        entry["image"] = base_image
    else:
        why = (base_image.why if isinstance(base_image, Unknown)
               else "no docker.base_image: SDK v1 used its default CPU image (it depends on the azureml-core version)")
        fix = "set the GPU image and pass --environment, or declare it"
        return draft.leave("environment", env.line, why, fix), variables
    conda = env.arg(1, "file_path") if env.name == "Environment.from_conda_specification" else env.arg(
        3 if env.name == "Environment.from_docker_image" else 2, "conda_specification")
    if conda is not None:
        conda_path = _path(conda)
        if conda_path is None:
            return draft.leave("environment", env.line, "the conda file's path is computed at run time",
                               "pass --environment ENV"), variables
        entry["conda_file"] = project_path(ctx, source.folder / conda_path, draft, "conda_file", env.line)
    if env.name in ("Environment", "Environment.from_pip_requirements") or env.attrs.get("python.conda_dependencies"):
        return draft.leave("environment", env.line, f"{env.name}(...) packages are set in code",
                           "write them to a conda file and declare an environment"), variables
    return add_environment(ctx, draft, entry, was=f"{env.name}({name!r})", line=env.line), variables


def _v1_distribution(draft: Draft, config: Any, line: int, command: str) -> tuple[Any, Any]:
    """(distribution, node count) as azureml-core's ScriptRunConfig sets them from the configuration."""
    if config is None:
        draft.notes.append(f"no distributed_job_config: SDK v1 ran it once, on one node; {NO_DISTRIBUTION_NOTE}")
        return {"type": "pytorch", "process_count_per_instance": 1}, 1
    if not isinstance(config, Call) or config.name not in (
            "MpiConfiguration", "PyTorchConfiguration", "TensorflowConfiguration"):
        why = config.why if isinstance(config, Unknown) else "distributed_job_config is not a v1 configuration"
        return (draft.leave("distribution", getattr(config, "line", line), why, "write the distribution"),
                draft.leave("resources.instance_count", line, why, "write the node count"))
    at = config.line
    if config.name == "MpiConfiguration":
        per_node = _count(draft, config.arg(0, "process_count_per_node", 1), "process_count_per_node", at)
        nodes = _count(draft, config.arg(1, "node_count", 1), "node_count", at)
        return {"type": "mpi", "process_count_per_instance": per_node}, nodes
    if config.name == "TensorflowConfiguration":
        workers = _count(draft, config.arg(0, "worker_count", 1), "worker_count", at)
        servers = _count(draft, config.arg(1, "parameter_server_count", 1), "parameter_server_count", at)
        if not config.given(1, "parameter_server_count"):
            draft.notes.append("TensorflowConfiguration without parameter_server_count: SDK v1's default is 1 "
                               "parameter server, kept (parameter_server_count: 0 for MultiWorkerMirroredStrategy)")
        return {"type": "tensorflow", "worker_count": workers, "parameter_server_count": servers}, workers
    backend = config.arg(0, "communication_backend", "Nccl")
    if isinstance(backend, str) and backend.lower() != "nccl":
        draft.notes.append(f"communication_backend {backend!r} has no CLI v2 key: the script's "
                           "init_process_group(backend=...) chooses it")
    nodes = _count(draft, config.arg(2, "node_count", 1), "node_count", at)
    total = config.arg(1, "process_count")
    if total is None:
        return {"type": "pytorch", "process_count_per_instance": 1}, nodes  # v1: process_count = node_count
    total = _count(draft, total, "process_count", at)
    if isinstance(total, int) and isinstance(nodes, int):
        if total % nodes:
            raise ImportInputError(
                f"PyTorchConfiguration(process_count={total}, node_count={nodes}): process_count is the total over "
                f"all nodes and {total} does not divide into {nodes} nodes; make it a multiple of node_count "
                f"(e.g. {nodes * max(1, total // nodes)})", file=draft.file, line=at)
        return {"type": "pytorch", "process_count_per_instance": total // nodes}, nodes
    return {"type": "pytorch", "process_count_per_instance": draft.leave(
        "distribution.process_count_per_instance", at, "process_count or node_count is computed at run time",
        "write process_count / node_count")}, nodes


def _note_v1_variables(draft: Draft, command: str) -> None:
    if "AZ_BATCHAI_MPI_MASTER_NODE" in command:
        draft.notes.append("the command reads $AZ_BATCHAI_MPI_MASTER_NODE, which current images no longer set: "
                           "use $AZ_BATCH_MASTER_NODE (addr:port)")
    elif "$AZ_BATCHAI_" in command or "${AZ_BATCHAI_" in command:
        draft.notes.append("the command reads $AZ_BATCHAI_* variables of SDK v1's images, passed through as written: "
                           "check the image still sets them")


# ------------------------------------------------------------------------------------------ SDK v2

_V2_KEYS = frozenset({
    "name", "display_name", "experiment_name", "description", "tags", "properties", "code", "command", "environment",
    "compute", "inputs", "outputs", "environment_variables", "instance_count", "distribution", "shm_size",
    "docker_args", "timeout", "job_tier", "priority", "resources", "instance_type", "identity",
})
_DISTRIBUTIONS = {"PyTorchDistribution": "pytorch", "MpiDistribution": "mpi", "TensorFlowDistribution": "tensorflow"}
_IDENTITIES = {"UserIdentityConfiguration": "user_identity", "ManagedIdentityConfiguration": "managed",
               "AmlTokenConfiguration": "aml_token"}
_SUBMISSION_KEYS = ("experiment_name", "description", "tags", "compute")
"""``ml_client.jobs.create_or_update(job, ...)`` keywords that set the job's own (azure-ai-ml applies them to it)."""


def _strings(draft: Draft, value: Any, key: str, line: int) -> Any:
    """A mapping of str values (tags, properties, environment variables) as the SDK sends it: ``str(v)``."""
    plain = _literal(draft, value, key, line)
    if not isinstance(plain, dict):
        return plain
    return {k: v if isinstance(v, str) else str(v) for k, v in plain.items()}


def _v2(call: Call, source: Source, ctx: Context, name: str) -> Draft:
    draft = Draft(file=source.display, line=call.line, kind=V2_KIND, run={})
    run = draft.run
    # `job.distribution = ...` after the call counts too, and so does what the submission sets.
    given = {**call.kwargs, **{k: v for k, v in call.attrs.items() if not k.startswith(SUBMITTED)}}
    lines = {**dict.fromkeys(call.kwargs, call.line), **call.attr_lines}
    submitted = {k.removeprefix(SUBMITTED): v for k, v in call.attrs.items() if k.startswith(SUBMITTED)}
    for key, value in submitted.items():
        if key in _SUBMISSION_KEYS:
            given[key], lines[key] = value, call.attr_lines[SUBMITTED + key]
        elif key != "skip_validation":
            draft.todo(key, call.attr_lines[SUBMITTED + key], f"the submission passes {key}=..., which is not imported",
                       f"write what {key} sets in the entry")
    resource_keys = {key for key in given if key.startswith("resources.")}
    for key in sorted(set(given) - _V2_KEYS - resource_keys):
        how = f"command({key}=...)" if key in call.kwargs else f"`<job>.{key} = ...` after command()"
        draft.todo(key, lines.get(key, call.line), f"{how} is not imported", f"write what {key} sets in the entry")
    run["name"] = given["name"] if isinstance(given.get("name"), str) else name
    for key in ("display_name", "experiment_name", "description"):
        if key in given:
            run[key] = _literal(draft, given[key], key, lines[key])
    for key in ("tags", "properties"):
        if key in given:
            run[key] = _strings(draft, given[key], key, lines[key])
    if "code" in given:
        run["code"] = _folder(ctx, draft, source, given["code"], "code", call.line)
    command = given.get("command")
    run["command"] = command if isinstance(command, str) else draft.leave(
        "command", call.line, command.why if isinstance(command, Unknown) else "no command", "write the command")
    run["environment"] = _v2_environment(ctx, draft, source, given.get("environment"), call.line, run["name"])
    run["compute"] = _v2_compute(ctx, draft, given.get("compute"), lines.get("compute", call.line))
    if "inputs" in given:
        run["inputs"] = _v2_data(draft, given["inputs"], "inputs", call.line)
    if "outputs" in given:
        run["outputs"] = _v2_data(draft, given["outputs"], "outputs", call.line)
    if "environment_variables" in given:
        run["environment_variables"] = _strings(draft, given["environment_variables"], "environment_variables",
                                                call.line)
    resources = _v2_resources(draft, given.get("resources"), lines.get("resources", call.line))
    for key in sorted(resource_keys):  # job.resources.instance_count = 2
        resources.update(_v2_resources(draft, {key.removeprefix("resources."): given[key]}, lines[key]))
    if "instance_type" in given:
        _drop_instance_type(draft, given["instance_type"])
    if "instance_count" in given:
        resources["instance_count"] = _count(draft, given["instance_count"], "instance_count", call.line)
    for key in ("shm_size", "docker_args"):
        if key in given:
            resources[key] = _literal(draft, given[key], key, call.line)
    if resources:
        run["resources"] = resources
    dist = given.get("distribution")
    if isinstance(dist, Call) and dist.name in _DISTRIBUTIONS:
        dist = {"type": _DISTRIBUTIONS[dist.name], **_literal(draft, dist.kwargs, "distribution", dist.line)}
    elif dist is not None:
        dist = _literal(draft, dist, "distribution", call.line)
    run["distribution"] = distribution(draft, dist, resources or {"instance_count": 1})
    if "timeout" in given:
        run["limits"] = {"timeout": _count(draft, given["timeout"], "timeout", call.line)}
    queue = {k: _literal(draft, given[k], k, call.line) for k in ("job_tier", "priority") if k in given}
    if queue:
        run["queue_settings"] = queue
    if "identity" in given:
        run["identity"] = _v2_identity(draft, given["identity"], lines["identity"])
    return draft


def _v2_compute(ctx: Context, draft: Draft, compute: Any, line: int) -> str:
    """The cluster: ``--compute`` whenever given (the script's value may be an expression), else the script's."""
    if isinstance(compute, Unknown):
        if not ctx.compute:
            return draft.leave("compute", compute.line, compute.why, "pass --compute CLUSTER")
        draft.notes.append(f"compute is chosen when the script runs ({compute.why}, line {compute.line}); "
                           f"--compute {ctx.compute!r} used")
        return map_compute(ctx, draft, None, line)
    return map_compute(ctx, draft, compute if isinstance(compute, str) else None, line)


def _v2_resources(draft: Draft, value: Any, line: int) -> dict[str, Any]:
    """``resources=dict(...)`` / ``JobResourceConfiguration(...)`` as the entry's ``resources``; what the stack's
    clusters decide (``instance_type``) is noted, anything else left as a TODO."""
    if value is None:
        return {}
    if isinstance(value, Call) and value.name in ("JobResourceConfiguration", "ResourceConfiguration"):
        fields, line = value.kwargs, value.line
    elif isinstance(value, dict):
        fields = value
    else:
        why = value.why if isinstance(value, Unknown) else "resources is not a mapping or JobResourceConfiguration"
        draft.todo("resources", getattr(value, "line", line) or line, why,
                   "write resources (instance_count, shm_size) as the run uses them on the stack's cluster")
        return {}
    out: dict[str, Any] = {}
    for key, item in fields.items():
        if key == "instance_count":
            out[key] = _count(draft, item, "resources.instance_count", line)
        elif key in ("shm_size", "docker_args"):
            out[key] = _literal(draft, item, f"resources.{key}", line)
        elif key == "instance_type":
            _drop_instance_type(draft, item)
        else:
            draft.todo(f"resources.{key}", line, f"resources {key}=... is not imported",
                       f"write what {key} sets in the entry")
    return out


def _drop_instance_type(draft: Draft, value: Any) -> None:
    shown = repr(value) if isinstance(value, str) else "(computed at run time)"
    draft.notes.append(f"instance_type {shown} dropped: it picks the VM of serverless compute; on the stack the "
                       "cluster's size decides it")


def _v2_identity(draft: Draft, value: Any, line: int) -> Any:
    if isinstance(value, Call) and value.name in _IDENTITIES:
        fields = _literal(draft, {k: v for k, v in value.kwargs.items() if k in ("client_id", "object_id")},
                          "identity", value.line)
        unknown = sorted(set(value.kwargs) - {"client_id", "object_id"})
        if unknown:
            draft.todo("identity", value.line, f"{value.name}({', '.join(unknown)}=...) is not imported",
                       "select the managed identity by client_id or object_id")
        return {"type": _IDENTITIES[value.name], **fields}
    return _literal(draft, value, "identity", line)


def _v2_environment(ctx: Context, draft: Draft, source: Source, env: Any, line: int, run_name: str) -> str:
    if isinstance(env, str):
        if not env.startswith("azureml:") and linear.compile(r"[^:@/]+(:[^:@/]+|@[^:@/]+)").fullmatch(env):
            env = f"azureml:{env}"  # azure-ai-ml reads "name:version" and "name@label" as asset references
        return map_environment_reference(ctx, draft, env)
    if isinstance(env, Call) and env.name == "Environment" and env.qualified.startswith("azure.ai.ml"):
        definition = _literal(draft, {k: v for k, v in env.kwargs.items() if k != "build"}, "environment", env.line)
        build = env.kwargs.get("build")
        if isinstance(build, Call) and build.name == "BuildContext":
            definition["build"] = _literal(draft, build.kwargs, "environment.build", build.line)
        if PLACEHOLDER_MARK in str(definition):
            return draft.leave("environment", env.line, "part of the Environment(...) is computed at run time",
                               "pass --environment ENV")
        return inline_environment(ctx, draft, source, definition, env.line, run_name, was="Environment(...)")
    if ctx.environment:
        return map_environment_reference(ctx, draft, "")
    why = env.why if isinstance(env, Unknown) else "no environment named"
    return draft.leave("environment", getattr(env, "line", line), why, "pass --environment ENV")


def _v2_data(draft: Draft, value: Any, key: str, line: int) -> Any:
    if not isinstance(value, dict):
        return _literal(draft, value, key, line)
    out: dict[str, Any] = {}
    for name, item in value.items():
        if isinstance(item, Call) and item.name in ("Input", "Output"):
            fields = _literal(draft, item.kwargs, f"{key}.{name}", item.line)
            path = fields.get("path")
            if key == "inputs" and isinstance(path, str) and PLACEHOLDER_MARK not in path and not is_remote_path(path):
                fields["path"] = local_data(draft, str(name), path, item.line)
            out[str(name)] = fields
        else:
            out[str(name)] = _literal(draft, item, f"{key}.{name}", line)
    return out


def is_script(path: Path) -> bool:
    return path.suffix.lower() == ".py"
