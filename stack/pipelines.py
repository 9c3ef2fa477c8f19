"""Pipeline jobs (CLI v2 ``type: pipeline``) of command and sweep steps, and the ``jobs`` list that holds them
beside runs and sweeps, told apart by ``type`` as Azure ML tells its job files apart.

Keys and meanings are azure-ai-ml 1.35's (``PipelineJobSchema``, ``CommandSchema`` for a step). Once the stack
is read (:mod:`stack.config`) each pipeline holds one :class:`~stack.runs.Run` per step, its component merged in
(:mod:`stack.components`) and its compute defaulted from ``settings.default_compute``, named ``<job>/<step>``.
A registered component (``azureml:<name>:<version>``, a registry URI) is judged against the spec ``amlgpu
components pull`` wrote into the project (:mod:`stack.registered`); without one the step holds no run and the
policy pack reports it (``pipeline-component-not-pulled``). A sweep step's trial (a command component, read
the same way) is held as the run Azure ML makes of the node (:func:`_trial_run`). Bindings between steps
(``${{parent.jobs.<step>.outputs.<x>}}``) are judged by the policy pack.
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
    StrictStr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from azurefacts import naming
from azurefacts.enums import AnyCase
from kernel import regex as linear
from stack import registered
from stack.components import CommandComponent, component_file, rebase, rebased_environment
from stack.diagnostics import first_problem
from stack.infrastructure import Model
from stack.keys import KeyPath
from stack.runs import (
    FILE_PREFIX,
    MISSING_DISTRIBUTION,
    Compute,
    DataOutput,
    Distribution,
    InlineEnvironment,
    Input,
    JobIdentity,
    Limits,
    QueueSettings,
    Resources,
    Run,
    Service,
)
from stack.sweeps import (
    SWEEP,
    TRIAL,
    EarlyTermination,
    Objective,
    ParameterizedSweep,
    SamplingAlgorithm,
    SearchParameter,
    SweepJob,
    SweepLimits,
)

PIPELINE = "pipeline"

STEP_NAME = linear.compile(r"[a-z_][a-z0-9_]*")
"""A pipeline step's name: azure-ai-ml's ``is_valid_node_name`` (a Python identifier in lower-case ASCII)."""

_S, _W = linear.SPACE, linear.WORD
_BINDING = linear.compile(
    rf"^\$\{{\{{[{_S}]*parent\.(?:inputs\.(?P<input>[{_W}]+)|outputs\.(?P<output>[{_W}]+)"
    rf"|jobs\.(?P<step>[{_W}]+)\.outputs\.(?P<step_output>[{_W}]+))[{_S}]*\}}\}}\n?$"  # a final newline too, as before
)
_ANY_PARENT = linear.compile(rf"\$\{{\{{[{_S}]*parent\.")


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

# ------------------------------------------------------------------------------------------ pipelines


class PipelineSettings(Model):
    """A pipeline's ``settings`` (azure-ai-ml's ``PipelineJobSettings``)."""

    default_compute: Compute | None = None
    """The stack cluster of every step that names no ``compute``."""
    default_datastore: str | None = None
    """Where steps write outputs that name no path (``azureml:<datastore>``)."""
    continue_on_step_failure: StrictBool | None = None
    """Keep running the steps that do not depend on a failed one."""
    force_rerun: StrictBool | None = None
    """Run every step again instead of reusing an earlier identical step's outputs."""


StepOutput = DataOutput | StrictStr | None
"""A step output: ``{type, mode, path}``, a ``${{parent.outputs.<name>}}`` binding, or empty (the default)."""


def _component_form(value: str | CommandComponent | None) -> str | CommandComponent | None:
    if isinstance(value, str) and registered.is_registered(value):
        registered.parse(value)  # judged against its pulled spec (stack.registered)
        return value
    if isinstance(value, str) and not value.startswith(FILE_PREFIX):
        return FILE_PREFIX + value  # CLI v2 reads a bare path as a file reference
    return value


def _input_bindings(value: dict[str, Any]) -> dict[str, Any]:
    for item in value.values():
        _only_known_bindings(item)
    return value


def _output_bindings(value: dict[str, Any]) -> dict[str, Any]:
    for name, item in value.items():
        if isinstance(item, str) and (found := binding(item)) is not None and found.kind != "outputs":
            raise ValueError(f"output {name!r}: a step output binds a pipeline output "
                             "(${{parent.outputs.<name>}}), not an input or another step")
        if isinstance(item, str) and binding(item) is None:
            raise ValueError(f"output {name!r} is {item!r}: give {{type, mode, path}} or "
                             "${{parent.outputs.<name>}}")
    return value


class PipelineStep(Model):
    """A command step of a pipeline (CLI v2 ``jobs.<step>`` with ``type: command``): an inline command, or a
    ``component`` (inline mapping or ``file:<component YAML>``) whose inputs the step gives values."""

    type: Literal["command"] = "command"
    """command (a sweep step is ``type: sweep``)."""
    component: str | CommandComponent | None = None
    """The step's command component: ``file:<path>`` (relative to the project root; ``./x.yml`` too), inline, or
    registered (``azureml:<name>:<version>``, ``azureml://registries/<registry>/components/<name>/versions/<version>``),
    judged against the spec ``amlgpu components pull`` writes into the project."""
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
                f"step type {value!r}: a pipeline here runs command and sweep steps (parallel, spark and nested "
                "pipeline steps are not declared here)"
            )
        return value

    _component = field_validator("component")(_component_form)
    _inputs = field_validator("inputs")(_input_bindings)
    _outputs = field_validator("outputs")(_output_bindings)


class SweepStep(ParameterizedSweep):
    """A sweep step of a pipeline (CLI v2 ``jobs.<step>`` with ``type: sweep``, azure-ai-ml's node ``SweepSchema``):
    its ``trial``, a command component, run ``limits.max_total_trials`` times, each with the component inputs
    that ``search_space`` names sampled; later steps bind its outputs (Azure ML's best trial's)."""

    type: Literal["sweep"]
    """sweep."""
    trial: str | CommandComponent
    """The command component each trial runs: ``file:<path>`` (relative to the project root; ``./x.yml`` too),
    inline, or registered (``azureml:<name>:<version>``, a registry URI), as a command step's ``component``. Each
    ``search_space`` parameter is the component input of the same name."""
    display_name: str | None = None
    """Name shown in Azure ML studio."""
    description: str | None = None
    """Free text."""
    tags: dict[str, str] = {}
    """Tags on the step."""
    compute: str | None = None
    """A stack cluster, every trial's (default: the pipeline's ``settings.default_compute``)."""
    inputs: dict[str, Input] = {}
    """Values of the trial component's inputs that the search space does not sample: literals, data, or bindings
    (``${{parent.inputs.<name>}}``, ``${{parent.jobs.<step>.outputs.<name>}}``)."""
    outputs: dict[str, StepOutput] = {}
    """The trial component's outputs: ``{type, mode, path}``, or bound to a pipeline output."""
    resources: Resources | None = None
    """Nodes of each trial and container settings (replace the component's)."""
    search_space: Annotated[dict[str, SearchParameter], Field(min_length=1)]
    """The sampled inputs of the trial component, by input name, and how each is sampled."""
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

    _trial = field_validator("trial")(_component_form)
    _inputs = field_validator("inputs")(_input_bindings)
    _outputs = field_validator("outputs")(_output_bindings)

    @model_validator(mode="after")
    def _sampled_not_given(self) -> SweepStep:
        both = sorted(set(self.search_space) & set(self.inputs))
        if both:
            raise ValueError(f"{', '.join(both)}: under both search_space and inputs; a sampled input takes its "
                             "value from search_space only")
        return self


Step = Annotated[
    Annotated[PipelineStep, Tag("PipelineStep")] | Annotated[SweepStep, Tag("SweepStep")],
    Discriminator(lambda value: "SweepStep" if (value.get("type") if isinstance(value, dict)
                                               else getattr(value, "type", None)) == SWEEP else "PipelineStep"),
]
"""One step of a pipeline: a command step, or a sweep step (any other ``type`` is refused by the command step's
reading, which names the kinds declared here)."""


def step_component(step: Step) -> str | CommandComponent | None:
    """The component a step runs: a command step's ``component``, a sweep step's ``trial``."""
    return step.trial if isinstance(step, SweepStep) else step.component


def _step_names(value: dict[str, Any]) -> dict[str, Any]:
    for name in value:
        if not STEP_NAME.fullmatch(name):
            raise ValueError(f"step name {name!r} is invalid: Azure ML's node names are lower-case letters, digits "
                             "and '_', starting with a letter or '_'")
    return value


class PipelineJob(Model):
    """A pipeline job (CLI v2 ``type: pipeline``) of command and sweep steps."""

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
    jobs: dict[str, Step] = Field(min_length=1)
    """The steps, by name; Azure ML orders them by their bindings."""
    identity: JobIdentity | None = None
    """Whose identity the steps' code uses by default."""

    _runs: dict[str, Run] = PrivateAttr(default_factory=dict)

    _names = field_validator("jobs")(_step_names)

    @property
    def runs(self) -> dict[str, Run]:
        """Each step as the run it is (read in by :func:`stack.references.resolved`), by step name."""
        return dict(self._runs)

    def with_runs(self, runs: Mapping[str, Run]) -> PipelineJob:
        copy = self.model_copy()
        copy._runs = dict(runs)
        return copy

    def step_runs(self, root: Path) -> Iterator[tuple[str, Run | None, list[tuple[KeyPath, str]]]]:
        """Each step as a run (its component merged in, its compute defaulted), with what is wrong with it
        (paths below the step). None when the step cannot be a run."""
        for name, step in self.jobs.items():
            if isinstance(step, SweepStep):
                run, problems = _trial_run(name, step, self.settings, root)
            else:
                run, problems = _step_run(name, step, self.settings, root)
            yield name, run, problems


def _run_name(step: str) -> str:
    return step if step[:1].isalpha() else f"step{step}"


def _step_run(
    name: str, step: PipelineStep, settings: PipelineSettings, root: Path
) -> tuple[Run | None, list[tuple[KeyPath, str]]]:
    fields: dict[str, Any] = {}
    problems: list[tuple[KeyPath, str]] = []
    component: CommandComponent | None = None
    folder = PurePosixPath(".")
    if isinstance(step.component, str) and registered.is_registered(step.component):
        pulled = registered.parse(step.component).file
        if not (root / pulled).is_file():
            return None, []  # not pulled: the pack's pipeline-component-not-pulled finding names the pull command
        try:
            component, folder = component_file(FILE_PREFIX + pulled, root)
        except ValueError as err:
            return None, [(("component",), f"{err} (pulled from {step.component}; amlgpu components pull again)")]
    elif isinstance(step.component, str):
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
                fields["code"] = rebase(component.code, folder)
            fields["environment"] = rebased_environment(component.environment, folder)
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
        return None, [first_problem(err)]


def _trial_run(
    name: str, step: SweepStep, settings: PipelineSettings, root: Path
) -> tuple[Run | None, list[tuple[KeyPath, str]]]:
    """The trial of sweep step ``name`` as a run: its component merged in as a command step's, with each sampled
    input's ``${{inputs.<x>}}`` in the command made ``${{search_space.<x>}}`` and its value left out, and
    ``limits.trial_timeout`` as its timeout. This is the sweep job Azure ML runs for the node: azure-ai-ml's
    ``Sweep._to_job`` (``entities/_builders/sweep.py``) replaces ``${{inputs.<key>}}`` by
    ``${{search_space.<key>}}`` for every key of the search space, as written (no spaces inside the braces)."""
    sampled = {key: "${{search_space." + key + "}}" for key in step.search_space}
    as_step = PipelineStep(
        component=step.trial, compute=step.compute, inputs={**step.inputs, **sampled}, outputs=step.outputs,
        resources=step.resources, identity=step.identity, queue_settings=step.queue_settings,
        limits=Limits(timeout=step.limits.trial_timeout) if step.limits.trial_timeout else None,
        display_name=step.display_name, description=step.description, tags=step.tags,
    )
    run, found = _step_run(name, as_step, settings, root)
    problems: list[tuple[KeyPath, str]] = []
    component = trial_component(step, root)
    if component is not None and component.environment_variables:
        # azure-ai-ml's CommandComponentSchema excludes environment_variables ("component doesn't have environment
        # variables"), and a sweep node has none of its own: nothing would set them in a trial.
        problems.append((("trial", "environment_variables"), "a sweep step's trial is a command component, which "
                         "sets no environment_variables in Azure ML: set them in the command (NAME=value command)"))
    for path, message in found:
        if path[:1] == ("component",):
            path = ("trial", *path[1:])
        elif path[:1] == ("inputs",) and len(path) > 1 and path[1] in step.search_space:
            path = ("search_space", *path[1:])
            message = message.replace("the component declares no input", "the trial component has no input to "
                                      "sample as")
        problems.append((path, message))
    if run is None:
        return None, problems
    command = run.command
    for key in step.search_space:
        command = command.replace("${{inputs." + key + "}}", "${{search_space." + key + "}}")
    inputs = {key: value for key, value in run.inputs.items() if key not in step.search_space}
    return run.model_copy(update={"command": command, "inputs": inputs}), problems


def trial_component(step: SweepStep, root: Path) -> CommandComponent | None:
    """The command component sweep ``step`` runs as its trial (None when it cannot be read, or is registered
    and not pulled: reported where the stack is read)."""
    reference = step.trial
    if isinstance(reference, CommandComponent):
        return reference
    if registered.is_registered(reference):
        reference = FILE_PREFIX + registered.parse(reference).file
        if not (root / reference.removeprefix(FILE_PREFIX)).is_file():
            return None
    try:
        return component_file(reference, root)[0]
    except ValueError:
        return None


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
            component = step_component(step)
            if isinstance(step, PipelineStep):
                written.append(step.environment)
            if isinstance(component, str):
                reference = component
                if registered.is_registered(reference):
                    reference = FILE_PREFIX + registered.parse(reference).file
                    named.append(registered.LOCK)
                named.append(reference.removeprefix(FILE_PREFIX))
                try:
                    component, folder = component_file(reference, root)
                except ValueError:
                    continue  # the stack would not have validated: reported there
                written.append(rebased_environment(component.environment, folder))
    named += [env.removeprefix(FILE_PREFIX) for env in written if isinstance(env, str) and env.startswith(FILE_PREFIX)]
    return named
