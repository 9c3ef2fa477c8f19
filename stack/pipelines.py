"""Pipeline and sweep jobs: Azure ML's CLI v2 ``pipelineJob`` and ``sweepJob``, declared beside the runs.

A stack's ``jobs`` list holds three kinds of entry, told apart by ``type`` as Azure ML tells its job files
apart: a run (no ``type``: a command job), ``type: pipeline`` (:class:`PipelineJob`) and ``type: sweep``
(:class:`SweepJob`). Keys and meanings are Azure ML's (azure-ai-ml 1.35's ``PipelineJobSchema``,
``CommandSchema`` for a pipeline's command steps, ``SweepJobSchema`` and ``ParameterizedSweepSchema``).

Every command step of a pipeline and the trial of a sweep *is* a run for every other purpose: once the
stack is read (:mod:`stack.config`), each pipeline holds one :class:`~stack.runs.Run` per step, its
component (inline or ``file:``) merged in and its compute taken from ``settings.default_compute`` when the
step names none; a sweep holds its trial as a run on the sweep's compute, with the sweep's inputs and
outputs and ``limits.trial_timeout`` as its timeout. They resolve, render and are judged like any run,
named ``<job>/<step>`` (``<sweep>/trial``).

What Azure ML refuses at submission is refused here, with the reason: a sweep step inside a pipeline,
registered components (the gate cannot see their command), grid sampling over anything but ``choice``,
Bayesian sampling outside ``choice``/``uniform``/``quniform`` or with early termination ("Hyperparameter
tuning a model (v2)", Microsoft Learn). Bindings between steps (``${{parent.jobs.<step>.outputs.<x>}}``)
are judged by the policy pack, which names the step at fault.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    Discriminator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from azurefacts import naming
from azurefacts.enums import AnyCase
from kernel import bounded
from kernel import regex as linear
from kernel.paths import resolve_inside
from stack.runs import (
    FILE_PREFIX,
    MISSING_DISTRIBUTION,
    DataOutput,
    Distribution,
    InlineEnvironment,
    Input,
    JobIdentity,
    Limits,
    Model,
    PositiveCount,
    QueueSettings,
    Resources,
    Run,
    Service,
    distribution_any_case,
    strip_compute_prefix,
)

PIPELINE = "pipeline"
SWEEP = "sweep"
TRIAL = "trial"
"""The name of a sweep's trial among the runs it holds (``<sweep>/trial``)."""

STEP_NAME = linear.compile(r"[a-z_][a-z0-9_]*")
"""A pipeline step's name: azure-ai-ml's ``is_valid_node_name`` (a Python identifier in lower-case ASCII)."""

_S, _W = linear.SPACE, linear.WORD
_BINDING = linear.compile(
    rf"^\$\{{\{{[{_S}]*parent\.(?:inputs\.(?P<input>[{_W}]+)|outputs\.(?P<output>[{_W}]+)"
    rf"|jobs\.(?P<step>[{_W}]+)\.outputs\.(?P<step_output>[{_W}]+))[{_S}]*\}}\}}\n?$"  # a final newline too, as before
)
_ANY_PARENT = linear.compile(rf"\$\{{\{{[{_S}]*parent\.")
SEARCH_SPACE = linear.compile(rf"\$\{{\{{[{_S}]*search_space\.([A-Za-z_][A-Za-z0-9_]*)[{_S}]*\}}\}}")
"""A trial command's ``${{search_space.<name>}}``: the value Azure ML samples for each trial."""


def qualified(job: str, part: str) -> str:
    """``<pipeline>/<step>`` (``<sweep>/trial``): how findings, the plan and waivers name a step."""
    return f"{job}/{part}"


class Binding(NamedTuple):
    """What a ``${{parent...}}`` value binds."""

    kind: Literal["inputs", "outputs", "jobs"]
    """``inputs`` / ``outputs``: the pipeline's; ``jobs``: another step's output."""
    name: str
    """The pipeline input or output, or the step."""
    output: str = ""
    """The step's output (``jobs`` only)."""


def binding(value: object) -> Binding | None:
    """What a ``${{parent.inputs.<x>}}``, ``${{parent.outputs.<x>}}`` or ``${{parent.jobs.<step>.outputs.<x>}}``
    value binds; None for any other value."""
    if not isinstance(value, str):
        return None
    match = _BINDING.match(value)
    if match is None:
        return None
    if match.group("input"):
        return Binding("inputs", match.group("input"))
    if match.group("output"):
        return Binding("outputs", match.group("output"))
    return Binding("jobs", match.group("step"), match.group("step_output"))


def _only_known_bindings(value: object) -> None:
    if isinstance(value, str) and _ANY_PARENT.search(value) and binding(value) is None:
        raise ValueError(
            f"{value!r} is not a binding this stack reads: write ${{{{parent.inputs.<name>}}}}, "
            "${{parent.outputs.<name>}} or ${{parent.jobs.<step>.outputs.<name>}} as the whole value"
        )


# ------------------------------------------------------------------------------------------ components

ComponentIOType = Annotated[
    Literal["string", "integer", "number", "boolean", "uri_file", "uri_folder", "mltable", "custom_model",
            "mlflow_model", "triton_model"], AnyCase,
]
_DATA_TYPES = frozenset({"uri_file", "uri_folder", "mltable", "custom_model", "mlflow_model", "triton_model"})


class ComponentInput(Model):
    """An input a command component declares (CLI v2 ``commandComponent`` ``inputs.<name>``)."""

    type: ComponentIOType
    """Literal (string, integer, number, boolean) or data (uri_file, uri_folder, mltable, models)."""
    default: StrictBool | StrictInt | StrictFloat | StrictStr | None = None
    """The value a step that gives none gets."""
    optional: StrictBool = False
    """A step may leave it out (the command's ``$[[...]]`` segment using it is dropped)."""
    description: str | None = None
    """Free text."""
    min: StrictInt | StrictFloat | None = None
    """Smallest value of a number or integer input."""
    max: StrictInt | StrictFloat | None = None
    """Largest value of a number or integer input."""
    enum: list[StrictStr] | None = None
    """Allowed values of a string input."""
    mode: str | None = None
    """How a data input reaches the nodes (ro_mount, download...)."""


class ComponentOutput(Model):
    """An output a command component declares."""

    type: ComponentIOType = "uri_folder"
    """Kind of data."""
    mode: str | None = None
    """How the step writes it (rw_mount, upload)."""
    description: str | None = None
    """Free text."""


class CommandComponent(Model):
    """A command component (CLI v2 ``commandComponent``): inline under a step's ``component``, or the file it
    names. Paths in a file are relative to the file's folder; inline, to the project root."""

    type: Literal["command"] = "command"
    """command: the only kind of component a step of this stack runs."""
    name: str | None = None
    """The component's name (an inline component is anonymous in Azure ML; kept for reference)."""
    version: StrictStr | StrictInt | None = None
    """The component's version (ignored for an anonymous component)."""
    display_name: str | None = None
    """Name shown in Azure ML studio."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = {}
    """Tags on the component."""
    is_deterministic: StrictBool | None = None
    """Whether Azure ML may reuse an earlier step's outputs for the same inputs (ignored)."""
    code: str | None = None
    """The folder uploaded as the step's snapshot."""
    command: Annotated[str, Field(min_length=1)]
    """The command each process runs; ``${{inputs.x}}`` and ``${{outputs.x}}`` name the component's inputs and
    outputs."""
    environment: str | InlineEnvironment
    """The step's environment, in any form a run's ``environment`` takes."""
    environment_variables: dict[str, str] = {}
    """Variables set for every process."""
    inputs: dict[str, ComponentInput] = {}
    """The inputs the component declares; the step gives their values."""
    outputs: dict[str, ComponentOutput] = {}
    """The outputs the component writes."""
    resources: Resources | None = None
    """Nodes and container settings (a step's own resources replace them)."""
    distribution: Distribution | None = None
    """How Azure ML starts the processes (a step's own distribution replaces it)."""

    @field_validator("distribution", mode="before")
    @classmethod
    def _distribution_type_any_case(cls, value: Any) -> Any:
        return distribution_any_case(value)


def _rebase(path: str, folder: PurePosixPath) -> str:
    """A path relative to a component file's folder, as one relative to the project root."""
    joined = PurePosixPath(*(folder / path.replace("\\", "/")).parts)
    parts: list[str] = []
    for part in joined.parts:
        if part == "..":
            if not parts:
                raise ValueError(f"{path!r} leads outside the project")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts) or "."


def component_file(reference: str, root: Path) -> tuple[CommandComponent, PurePosixPath]:
    """The command component a ``component: file:<path>`` names, and its folder relative to the project root.
    Raises ValueError naming what is wrong (missing, unreadable, not YAML, outside the project, not a command
    component)."""
    relative = reference.removeprefix(FILE_PREFIX)
    path = resolve_inside(root, relative)
    if path is None:
        raise ValueError(f"component {relative!r} leads outside the project root (symbolic links followed)")
    if not path.is_file():
        raise ValueError(f"component file {relative!r} not found")
    try:
        data = bounded.load_file(path, bounded.COMPONENT_FILE)
    except OSError as err:
        raise ValueError(f"component file {relative!r} cannot be read: {err.strerror or err}") from None
    except bounded.BoundedInputError as err:
        raise ValueError(f"component file {relative!r}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"component file {relative!r}: expected a mapping")
    if data.get("type", "command") != "command":
        raise ValueError(f"component file {relative!r}: a {data.get('type')!r} component; a step here runs a "
                         "command component")
    if "additional_includes" in data:
        raise ValueError(f"component file {relative!r}: additional_includes copies files into the snapshot at "
                         "submission, which the gate cannot see; put them in the code folder")
    data.pop("$schema", None)  # the editor's schema of a component file, nothing Azure ML runs
    try:
        component = CommandComponent.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"component file {relative!r}: {where}: {first['msg'].removeprefix('Value error, ')}") \
            from None
    folder = PurePosixPath(path.parent.relative_to(root.resolve()).as_posix())
    return component, folder


def _rebased_environment(env: str | InlineEnvironment, folder: PurePosixPath) -> str | InlineEnvironment:
    if isinstance(env, str):
        return FILE_PREFIX + _rebase(env.removeprefix(FILE_PREFIX), folder) if env.startswith(FILE_PREFIX) else env
    update: dict[str, Any] = {}
    if env.build is not None:
        update["build"] = env.build.model_copy(update={"path": _rebase(env.build.path, folder)})
    if env.conda_file is not None:
        update["conda_file"] = _rebase(env.conda_file, folder)
    return env.model_copy(update=update)


# ------------------------------------------------------------------------------------------ pipelines


class PipelineSettings(Model):
    """A pipeline's ``settings`` (azure-ai-ml's ``PipelineJobSettings``)."""

    default_compute: str | None = None
    """The stack cluster of every step that names no ``compute``."""
    default_datastore: str | None = None
    """Where steps write outputs that name no path (``azureml:<datastore>``)."""
    continue_on_step_failure: StrictBool | None = None
    """Keep running the steps that do not depend on a failed one."""
    force_rerun: StrictBool | None = None
    """Run every step again instead of reusing an earlier identical step's outputs."""

    @field_validator("default_compute")
    @classmethod
    def _strip_compute_prefix(cls, value: str | None) -> str | None:
        return strip_compute_prefix(value) if value is not None else None


StepOutput = DataOutput | StrictStr | None
"""A step output: ``{type, mode, path}``, a ``${{parent.outputs.<name>}}`` binding, or empty (the default)."""


class PipelineStep(Model):
    """A command step of a pipeline (CLI v2 ``jobs.<step>`` with ``type: command``): an inline command, or a
    ``component`` (inline mapping or ``file:<component YAML>``) whose inputs the step gives values."""

    type: Literal["command"] = "command"
    """command: the only kind of step declared here."""
    component: str | CommandComponent | None = None
    """The step's command component: ``file:<path>`` (relative to the project root; ``./x.yml`` too), or inline."""
    display_name: str | None = None
    """Name shown in Azure ML studio."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = {}
    """Tags on the step."""
    code: str | None = None
    """Folder relative to the project root, uploaded as the step's snapshot."""
    command: str | None = None
    """The command each process runs (with no component)."""
    environment: str | InlineEnvironment | None = None
    """The step's environment, in any form a run's ``environment`` takes."""
    compute: str | None = None
    """A stack cluster (default: the pipeline's ``settings.default_compute``)."""
    inputs: dict[str, Input] = {}
    """Values of the step's inputs: literals, data, or bindings (``${{parent.inputs.<name>}}``,
    ``${{parent.jobs.<step>.outputs.<name>}}``)."""
    outputs: dict[str, StepOutput] = {}
    """The step's outputs: ``{type, mode, path}``, or bound to a pipeline output (``${{parent.outputs.<name>}}``)."""
    environment_variables: dict[str, str] = {}
    """Variables set for every process."""
    resources: Resources | None = None
    """Nodes and container settings."""
    distribution: Distribution | None = None
    """How Azure ML starts the processes: type pytorch, mpi or tensorflow."""
    limits: Limits | None = None
    """limits.timeout: seconds before Azure ML cancels the step."""
    identity: JobIdentity | None = None
    """Whose identity the step's code uses."""
    services: dict[str, Service] = {}
    """Interactive endpoints on the step's nodes."""
    queue_settings: QueueSettings | None = None
    """Job tier and priority."""

    @field_validator("type", mode="before")
    @classmethod
    def _command_steps_only(cls, value: Any) -> Any:
        if value != "command":
            raise ValueError(
                f"step type {value!r}: a pipeline here runs command steps (a sweep is a job of its own in this "
                "stack's jobs; parallel, spark and nested pipeline steps are not declared here)"
            )
        return value

    @field_validator("component")
    @classmethod
    def _component_form(cls, value: str | CommandComponent | None) -> str | CommandComponent | None:
        if isinstance(value, str) and value.startswith("azureml:"):
            raise ValueError(
                f"component {value!r} is registered in a workspace: the gate cannot see its command, so it cannot "
                "judge the step; declare it inline or as file:<component YAML> in the project"
            )
        if isinstance(value, str) and not value.startswith(FILE_PREFIX):
            return FILE_PREFIX + value  # CLI v2 reads a bare path as a file reference
        return value

    @field_validator("distribution", mode="before")
    @classmethod
    def _distribution_type_any_case(cls, value: Any) -> Any:
        return distribution_any_case(value)

    @field_validator("inputs")
    @classmethod
    def _input_bindings(cls, value: dict[str, Any]) -> dict[str, Any]:
        for item in value.values():
            _only_known_bindings(item)
        return value

    @field_validator("outputs")
    @classmethod
    def _output_bindings(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, item in value.items():
            if isinstance(item, str) and (found := binding(item)) is not None and found.kind != "outputs":
                raise ValueError(f"output {name!r}: a step output binds a pipeline output "
                                 "(${{parent.outputs.<name>}}), not an input or another step")
            if isinstance(item, str) and binding(item) is None:
                raise ValueError(f"output {name!r} is {item!r}: give {{type, mode, path}} or "
                                 "${{parent.outputs.<name>}}")
        return value


def _step_names(value: dict[str, Any]) -> dict[str, Any]:
    for name in value:
        if not STEP_NAME.fullmatch(name):
            raise ValueError(f"step name {name!r} is invalid: Azure ML's node names are lower-case letters, digits "
                             "and '_', starting with a letter or '_'")
    return value


class PipelineJob(Model):
    """A pipeline job (CLI v2 ``type: pipeline``) of command steps."""

    type: Literal["pipeline"]
    """pipeline."""
    name: naming.RunName
    """Pipeline name: unique among the stack's jobs, the name of its job file and stack output."""
    display_name: str | None = None
    """Name shown in Azure ML studio."""
    experiment_name: str | None = None
    """Experiment the pipeline is filed under in Azure ML studio."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = {}
    """Tags on the pipeline job."""
    settings: PipelineSettings = PipelineSettings()
    """default_compute, default_datastore, continue_on_step_failure, force_rerun."""
    inputs: dict[str, Input] = {}
    """The pipeline's inputs, which steps bind as ``${{parent.inputs.<name>}}``."""
    outputs: dict[str, DataOutput] = {}
    """The pipeline's outputs, which steps bind as ``${{parent.outputs.<name>}}``."""
    jobs: dict[str, PipelineStep] = Field(min_length=1)
    """The steps, by name; Azure ML orders them by their bindings."""
    identity: JobIdentity | None = None
    """Whose identity the steps' code uses by default."""

    _runs: dict[str, Run] = PrivateAttr(default_factory=dict)

    _names = field_validator("jobs")(_step_names)

    @property
    def runs(self) -> dict[str, Run]:
        """Each step as the run it is (read from the stack: see :mod:`stack.config`), by step name."""
        return dict(self._runs)

    def with_runs(self, runs: Mapping[str, Run]) -> PipelineJob:
        copy = self.model_copy()
        copy._runs = dict(runs)
        return copy

    def step_runs(self, root: Path) -> Iterator[tuple[str, Run | None, list[tuple[tuple[str | int, ...], str]]]]:
        """Each step as a run (its component merged in, its compute defaulted), with what is wrong with it
        (paths below the step). None when the step cannot be a run."""
        for name, step in self.jobs.items():
            run, problems = _step_run(name, step, self.settings, root)
            yield name, run, problems


def _run_name(step: str) -> str:
    return step if step[:1].isalpha() else f"step{step}"


def _step_run(
    name: str, step: PipelineStep, settings: PipelineSettings, root: Path
) -> tuple[Run | None, list[tuple[tuple[str | int, ...], str]]]:
    fields: dict[str, Any] = {}
    problems: list[tuple[tuple[str | int, ...], str]] = []
    component: CommandComponent | None = None
    folder = PurePosixPath(".")
    if isinstance(step.component, str):
        try:
            component, folder = component_file(step.component, root)
        except ValueError as err:
            return None, [(("component",), str(err))]
    elif isinstance(step.component, CommandComponent):
        component = step.component
    given = step.model_fields_set
    if component is not None:
        problems += [((key,), f"a step runs its component's {key}: remove {key} or component")
                     for key in ("command", "code") if getattr(step, key) is not None]
        try:
            if component.code is not None:
                fields["code"] = _rebase(component.code, folder)
            fields["environment"] = _rebased_environment(component.environment, folder)
        except ValueError as err:
            return None, [(("component",), str(err))]
        fields["command"] = component.command
        fields["environment_variables"] = dict(component.environment_variables)
        if component.resources is not None:
            fields["resources"] = component.resources
        if component.distribution is not None:
            fields["distribution"] = component.distribution
        if component.display_name:
            fields["display_name"] = component.display_name
        if component.description:
            fields["description"] = component.description
        inputs, missing = _component_inputs(component, step.inputs)
        problems += [(("inputs", key), f"component input {key!r} has no value and no default: give it under "
                                       "the step's inputs") for key in missing]
        unknown = sorted(set(step.inputs) - set(component.inputs))
        problems += [(("inputs", key), f"the component declares no input {key!r} (its inputs: "
                                       f"{', '.join(component.inputs) or 'none'})") for key in unknown]
        fields["inputs"] = inputs
        fields["outputs"] = {key: DataOutput(type=out.type, mode=out.mode)  # type: ignore[arg-type]
                             for key, out in component.outputs.items()}
        unknown = sorted(set(step.outputs) - set(component.outputs))
        problems += [(("outputs", key), f"the component declares no output {key!r} (its outputs: "
                                        f"{', '.join(component.outputs) or 'none'})") for key in unknown]
    for key in ("display_name", "description", "code", "command", "environment", "resources", "distribution",
                "limits", "identity", "queue_settings"):
        if key in given and getattr(step, key) is not None:
            fields[key] = getattr(step, key)
    for key in ("tags", "services"):
        if getattr(step, key):
            fields[key] = dict(getattr(step, key))
    fields["environment_variables"] = {**fields.get("environment_variables", {}), **step.environment_variables}
    if component is None:
        fields["inputs"] = dict(step.inputs)
        fields["outputs"] = {}
    for key, out in step.outputs.items():
        base = fields["outputs"].get(key, DataOutput())
        fields["outputs"][key] = out if isinstance(out, DataOutput) else base
    compute = step.compute or settings.default_compute
    required = {"command": "needs a command (or a component)",
                "environment": "needs an environment (or a component with one)",
                "distribution": MISSING_DISTRIBUTION}
    problems += [((key,), what) for key, what in required.items() if key not in fields]
    if compute is None:
        problems.append((("compute",), "names no compute and the pipeline has no settings.default_compute"))
    if problems:
        return None, problems
    fields.update(name=_run_name(name), compute=compute)
    try:
        return Run.model_validate(fields), []
    except ValidationError as err:
        return None, [_first_problem(err)]


def _first_problem(err: ValidationError) -> tuple[tuple[str | int, ...], str]:
    """A run's first validation error: its path below the run (the union members' class names pydantic puts
    in it left out) and its message."""
    first = err.errors(include_url=False)[0]
    where = tuple(p for p in first["loc"] if isinstance(p, int) or not str(p)[:1].isupper())
    return where, first["msg"].removeprefix("Value error, ")


def _component_inputs(component: CommandComponent, given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The values of a component's inputs: the step's, else the default; (values, inputs left without one)."""
    values: dict[str, Any] = {}
    missing = []
    for key, declared in component.inputs.items():
        if key in given:
            values[key] = given[key]
        elif declared.default is not None:
            values[key] = declared.default
        elif not declared.optional:
            missing.append(key)
    return values, missing


def output_bindings(pipeline: PipelineJob) -> dict[str, dict[str, str]]:
    """Each step's outputs bound to a pipeline output: step -> output -> ``${{parent.outputs.<name>}}``."""
    return {
        name: {key: value for key, value in step.outputs.items() if isinstance(value, str)}
        for name, step in pipeline.jobs.items()
        if any(isinstance(value, str) for value in step.outputs.values())
    }


# ------------------------------------------------------------------------------------------ sweeps

SearchType = Literal["choice", "uniform", "loguniform", "quniform", "qloguniform", "normal", "lognormal", "qnormal",
                     "qlognormal", "randint"]
Number = StrictInt | StrictFloat

_PARAMETER_KEYS: dict[str, tuple[str, ...]] = {
    "choice": ("values",), "uniform": ("min_value", "max_value"), "loguniform": ("min_value", "max_value"),
    "quniform": ("min_value", "max_value", "q"), "qloguniform": ("min_value", "max_value", "q"),
    "normal": ("mu", "sigma"), "lognormal": ("mu", "sigma"), "qnormal": ("mu", "sigma", "q"),
    "qlognormal": ("mu", "sigma", "q"), "randint": ("upper",),
}
"""The keys each kind of search-space parameter takes (azure-ai-ml's search_space schemas)."""


class SearchParameter(Model):
    """One hyperparameter of a sweep's ``search_space`` (``loguniform`` and ``lognormal`` bounds are natural
    logarithms: Azure ML samples ``exp(uniform(min_value, max_value))``)."""

    type: Annotated[SearchType, AnyCase]
    """choice, uniform, loguniform, quniform, qloguniform, normal, lognormal, qnormal, qlognormal or randint."""
    values: list[StrictBool | StrictInt | StrictFloat | StrictStr] | None = Field(default=None, min_length=1)
    """choice: the values to choose from."""
    min_value: Number | None = None
    """uniform family: the lower bound."""
    max_value: Number | None = None
    """uniform family: the upper bound."""
    mu: Number | None = None
    """normal family: the mean."""
    sigma: Number | None = None
    """normal family: the standard deviation."""
    q: Number | None = None
    """q-families: values are rounded to a multiple of q."""
    upper: StrictInt | None = None
    """randint: integers from 0 up to, not including, upper."""

    @model_validator(mode="after")
    def _keys_of_its_type(self) -> SearchParameter:
        wanted = _PARAMETER_KEYS[self.type]
        given = [key for key in ("values", "min_value", "max_value", "mu", "sigma", "q", "upper")
                 if getattr(self, key) is not None]
        missing = [key for key in wanted if key not in given]
        extra = [key for key in given if key not in wanted]
        if missing:
            raise ValueError(f"a {self.type} parameter needs {', '.join(missing)}")
        if extra:
            raise ValueError(f"a {self.type} parameter takes {', '.join(wanted)}, not {', '.join(extra)}")
        if self.min_value is not None and self.max_value is not None and self.min_value > self.max_value:
            raise ValueError(f"min_value {self.min_value} is above max_value {self.max_value}")
        if self.upper is not None and self.upper < 1:
            raise ValueError(f"upper {self.upper} leaves no integer to draw (randint draws from 0 to upper - 1)")
        return self


class SamplingAlgorithm(Model):
    """``sampling_algorithm`` as a mapping; ``seed``, ``rule`` and ``logbase`` are random sampling's."""

    type: Annotated[Literal["random", "grid", "bayesian"], AnyCase]
    """random, grid or bayesian."""
    seed: StrictInt | None = None
    """random: the seed of the draws."""
    rule: Annotated[Literal["random", "sobol"], AnyCase] | None = None
    """random: random or sobol (a low-discrepancy sequence)."""
    logbase: Number | StrictStr | None = None
    """random: the base of the logarithm of log-scaled parameters."""

    @model_validator(mode="after")
    def _random_only_keys(self) -> SamplingAlgorithm:
        extra = [k for k in ("seed", "rule", "logbase") if getattr(self, k) is not None]
        if extra and self.type != "random":
            raise ValueError(f"{', '.join(extra)} belong to random sampling, not {self.type}")
        return self


class Objective(Model):
    """What the sweep optimises: the metric the trials log (``mlflow.log_metric``) and which way is better."""

    goal: Annotated[Literal["minimize", "maximize"], AnyCase]
    """minimize or maximize."""
    primary_metric: Annotated[str, Field(min_length=1)]
    """The metric's name, as the training script logs it."""


class SweepLimits(Model):
    """A sweep's limits (azure-ai-ml's ``SweepJobLimits``)."""

    max_total_trials: PositiveCount
    """Trials to run in all."""
    max_concurrent_trials: PositiveCount | None = None
    """Trials running at once (each on its own ``trial.resources.instance_count`` nodes of the cluster)."""
    timeout: PositiveCount | None = None
    """Seconds before Azure ML cancels the whole sweep, running trials included."""
    trial_timeout: PositiveCount | None = None
    """Seconds before Azure ML cancels one trial."""


_POLICY_KEYS = {"bandit": ("slack_factor", "slack_amount"), "median_stopping": (),
                "truncation_selection": ("truncation_percentage",)}


class EarlyTermination(Model):
    """An early termination policy: bandit, median_stopping or truncation_selection."""

    type: Annotated[Literal["bandit", "median_stopping", "truncation_selection"], AnyCase]
    """bandit, median_stopping or truncation_selection."""
    evaluation_interval: Annotated[StrictInt, Field(ge=0)] | None = None
    """How often (in logged intervals of the primary metric) the policy is applied."""
    delay_evaluation: Annotated[StrictInt, Field(ge=0)] | None = None
    """Intervals to wait before the first evaluation."""
    slack_factor: Number | None = None
    """bandit: the allowed slack, as a ratio of the best trial's metric."""
    slack_amount: Number | None = None
    """bandit: the allowed slack, as an absolute amount."""
    truncation_percentage: Annotated[StrictInt, Field(ge=1, le=99)] | None = None
    """truncation_selection: the percentage of lowest-performing trials cancelled at each evaluation."""

    @model_validator(mode="after")
    def _keys_of_its_type(self) -> EarlyTermination:
        own = _POLICY_KEYS[self.type]
        extra = [k for keys in _POLICY_KEYS.values() for k in keys if k not in own and getattr(self, k) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)} {'does' if len(extra) == 1 else 'do'} not apply to {self.type}")
        if self.type == "bandit" and (self.slack_factor is None) == (self.slack_amount is None):
            raise ValueError("a bandit policy takes exactly one of slack_factor and slack_amount")
        if self.type == "truncation_selection" and self.truncation_percentage is None:
            raise ValueError("a truncation_selection policy needs truncation_percentage")
        return self


class Trial(Model):
    """The command each trial of a sweep runs (CLI v2 ``trial``); ``${{search_space.<name>}}`` in the command is
    the trial's sampled value."""

    command: Annotated[str, Field(min_length=1)]
    """The command each process runs; may use ``${{inputs.x}}``, ``${{outputs.x}}`` and ``${{search_space.x}}``."""
    code: str | None = None
    """Folder relative to the project root, uploaded as each trial's snapshot."""
    environment: str | InlineEnvironment
    """The trials' environment, in any form a run's ``environment`` takes."""
    environment_variables: dict[str, str] = {}
    """Variables set for every process."""
    resources: Resources = Resources()
    """Nodes of each trial and container settings."""
    distribution: Distribution
    """How Azure ML starts each trial's processes: type pytorch, mpi or tensorflow."""

    @field_validator("distribution", mode="before")
    @classmethod
    def _distribution_type_any_case(cls, value: Any) -> Any:
        return distribution_any_case(value)


class SweepJob(Model):
    """A sweep job (CLI v2 ``type: sweep``): ``max_total_trials`` runs of ``trial``, each with values sampled from
    ``search_space``, at most ``max_concurrent_trials`` at a time on ``compute``."""

    type: Literal["sweep"]
    """sweep."""
    name: naming.RunName
    """Sweep name: unique among the stack's jobs, the name of its job file and stack output."""
    display_name: str | None = None
    """Name shown in Azure ML studio."""
    experiment_name: str | None = None
    """Experiment the sweep is filed under in Azure ML studio."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = {}
    """Tags on the sweep job."""
    compute: str
    """The stack cluster every trial runs on."""
    inputs: dict[str, Input] = {}
    """Inputs of every trial."""
    outputs: dict[str, DataOutput] = {}
    """Outputs of every trial."""
    trial: Trial
    """What each trial runs."""
    search_space: Annotated[dict[str, SearchParameter], Field(min_length=1)]
    """The hyperparameters, by name, and how each is sampled."""
    sampling_algorithm: Annotated[Literal["random", "grid", "bayesian"], AnyCase] | SamplingAlgorithm
    """random, grid or bayesian (or a mapping with type and, for random, seed and rule)."""
    objective: Objective
    """The metric to optimise and its goal."""
    limits: SweepLimits
    """max_total_trials, max_concurrent_trials, timeout, trial_timeout."""
    early_termination: EarlyTermination | None = None
    """Cancel poorly performing trials early."""
    identity: JobIdentity | None = None
    """Whose identity the trials' code uses."""
    queue_settings: QueueSettings | None = None
    """Job tier and priority."""

    _runs: dict[str, Run] = PrivateAttr(default_factory=dict)

    @field_validator("compute")
    @classmethod
    def _strip_compute_prefix(cls, value: str) -> str:
        return strip_compute_prefix(value)

    @field_validator("search_space")
    @classmethod
    def _identifier_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not (key.isascii() and key.isidentifier()):
                raise ValueError(f"{key!r} is not a valid parameter name (letters, digits, '_')")
        return value

    @model_validator(mode="after")
    def _sampling_fits_the_space(self) -> SweepJob:
        algorithm = self.algorithm
        kinds = {name: p.type for name, p in self.search_space.items()}
        allowed = {"grid": {"choice"}, "bayesian": {"choice", "uniform", "quniform"}}.get(algorithm)
        if allowed is not None:
            off = sorted(f"{name} ({kind})" for name, kind in kinds.items() if kind not in allowed)
            if off:
                raise ValueError(f"{algorithm} sampling supports {', '.join(sorted(allowed))} parameters only "
                                 f"(Azure ML): {', '.join(off)}")
        if algorithm == "bayesian" and self.early_termination is not None:
            raise ValueError("bayesian sampling takes no early_termination (Azure ML refuses the combination)")
        unknown = sorted({m.group(1) for m in SEARCH_SPACE.finditer(self.trial.command)} - set(self.search_space))
        if unknown:
            raise ValueError(f"trial.command uses {', '.join('${{search_space.' + u + '}}' for u in unknown)}, "
                             f"which search_space does not declare (declared: {', '.join(self.search_space)})")
        return self

    @property
    def algorithm(self) -> str:
        """random, grid or bayesian, whichever form ``sampling_algorithm`` takes."""
        alg = self.sampling_algorithm
        return alg if isinstance(alg, str) else alg.type

    @property
    def runs(self) -> dict[str, Run]:
        """``{"trial": <the trial as a run>}`` (read from the stack: see :mod:`stack.config`)."""
        return dict(self._runs)

    def with_runs(self, runs: Mapping[str, Run]) -> SweepJob:
        copy = self.model_copy()
        copy._runs = dict(runs)
        return copy

    def step_runs(self, root: Path) -> Iterator[tuple[str, Run | None, list[tuple[tuple[str | int, ...], str]]]]:
        """The trial as a run on the sweep's compute (paths of what is wrong below ``trial``)."""
        fields: dict[str, Any] = {
            "name": TRIAL, "code": self.trial.code, "command": self.trial.command,
            "environment": self.trial.environment,
            "compute": self.compute, "inputs": dict(self.inputs), "outputs": dict(self.outputs),
            "environment_variables": dict(self.trial.environment_variables), "resources": self.trial.resources,
            "distribution": self.trial.distribution, "limits": Limits(timeout=self.limits.trial_timeout),
            "identity": self.identity, "queue_settings": self.queue_settings,
        }
        try:
            yield TRIAL, Run.model_validate(fields), []
        except ValidationError as err:
            yield TRIAL, None, [_first_problem(err)]


# ------------------------------------------------------------------------------------------ the jobs list


def job_kind(value: Any) -> str | None:
    """The model a ``jobs`` entry is read with, by its ``type`` (none or command: a run)."""
    kind = value.get("type", "command") if isinstance(value, dict) else getattr(value, "type", "command")
    return {"command": "Run", PIPELINE: "PipelineJob", SWEEP: "SweepJob"}.get(kind) if isinstance(kind, str) else None


def job_parts(job: PipelineJob | SweepJob) -> list[tuple[str, tuple[str, ...]]]:
    """Each run inside ``job`` and where it is written below the job's entry: ``(step, ("jobs", step))``, or
    ``("trial", ("trial",))``."""
    if isinstance(job, PipelineJob):
        return [(step, ("jobs", step)) for step in job.jobs]
    return [(TRIAL, (TRIAL,))]


JobEntry = Annotated[
    Annotated[Run, Tag("Run")] | Annotated[PipelineJob, Tag("PipelineJob")] | Annotated[SweepJob, Tag("SweepJob")],
    Discriminator(
        job_kind,
        custom_error_type="job_type",
        custom_error_message="type must be pipeline or sweep (a run, Azure ML's command job, has no type)",
    ),
]
"""One entry of a stack's ``jobs``: a run, a pipeline or a sweep."""

JOB_ENTRY: TypeAdapter[Run | PipelineJob | SweepJob] = TypeAdapter(JobEntry)
"""Validates one ``jobs`` entry on its own (the stack's cross-references aside)."""

Composite = PipelineJob | SweepJob
"""A job made of runs: a pipeline's steps, a sweep's trial."""



def named_files(job: Composite, root: Path) -> list[str]:
    """The project files ``job`` names that its runs do not show (relative to the project root): each step's
    component file, and each ``file:`` environment written in the stack or in a component. What the runs hold
    (code folders, build contexts, conda files) is in :attr:`PipelineJob.runs` / :attr:`SweepJob.runs`."""
    named: list[str] = []
    written: list[str | InlineEnvironment | None] = []
    if isinstance(job, SweepJob):
        written.append(job.trial.environment)
    else:
        for step in job.jobs.values():
            written.append(step.environment)
            if isinstance(step.component, str):
                named.append(step.component.removeprefix(FILE_PREFIX))
                try:
                    component, folder = component_file(step.component, root)
                except ValueError:
                    continue  # the stack would not have validated: reported there
                written.append(_rebased_environment(component.environment, folder))
    named += [env.removeprefix(FILE_PREFIX) for env in written if isinstance(env, str) and env.startswith(FILE_PREFIX)]
    return named
