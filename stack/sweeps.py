"""Sweep jobs (CLI v2 ``type: sweep``): a trial run many times with sampled hyperparameters.

Keys and meanings are azure-ai-ml 1.35's ``SweepJobSchema`` and ``ParameterizedSweepSchema``. What Azure ML
refuses at submission is refused here, with the reason: grid sampling over anything but ``choice``, Bayesian
sampling outside ``choice``/``uniform``/``quniform`` or with early termination ("Hyperparameter tuning a model
(v2)", Microsoft Learn). The trial is held as a run on the sweep's compute, named ``<sweep>/trial``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from azurefacts import naming
from azurefacts.enums import AnyCase
from kernel import regex as linear
from stack.diagnostics import first_problem
from stack.infrastructure import Model
from stack.keys import KeyPath
from stack.runs import (
    Compute,
    DataOutput,
    Distribution,
    InlineEnvironment,
    Input,
    JobIdentity,
    Limits,
    PositiveCount,
    QueueSettings,
    Resources,
    Run,
)

SWEEP = "sweep"
TRIAL = "trial"
"""The name of a sweep's trial among the runs it holds (``<sweep>/trial``)."""

_S = linear.SPACE
SEARCH_SPACE = linear.compile(rf"\$\{{\{{[{_S}]*search_space\.([A-Za-z_][A-Za-z0-9_]*)[{_S}]*\}}\}}")
"""A trial command's ``${{search_space.<name>}}``: the value Azure ML samples for each trial."""

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


class ParameterizedSweep(Model):
    """What a sweep job and a pipeline's sweep step share (azure-ai-ml's ``ParameterizedSweepSchema``, "shared
    schema for standalone and pipeline sweep job"): the search space, how it is sampled, the objective, the
    limits and early termination, with the combinations Azure ML refuses refused here. Each declares the
    fields itself, so that each keeps its own key order (the schema's, the importer's, the first error's)."""

    if TYPE_CHECKING:
        search_space: dict[str, SearchParameter]
        sampling_algorithm: str | SamplingAlgorithm
        objective: Objective
        limits: SweepLimits
        early_termination: EarlyTermination | None

    @field_validator("search_space", check_fields=False)
    @classmethod
    def _identifier_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not (key.isascii() and key.isidentifier()):
                raise ValueError(f"{key!r} is not a valid parameter name (letters, digits, '_')")
        return value

    @model_validator(mode="after")
    def _sampling_fits_the_space(self) -> ParameterizedSweep:
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
        return self

    @property
    def algorithm(self) -> str:
        """random, grid or bayesian, whichever form ``sampling_algorithm`` takes."""
        alg = self.sampling_algorithm
        return alg if isinstance(alg, str) else alg.type

    def sweep_keys(self) -> dict[str, Any]:
        """The sweep's own keys as a job file writes them (search space, sampling, objective, limits, early
        termination), the same for a sweep job and a sweep step."""
        algorithm = self.sampling_algorithm
        return {
            "search_space": {name: p.model_dump(exclude_none=True) for name, p in self.search_space.items()},
            "sampling_algorithm": algorithm if isinstance(algorithm, str) else algorithm.model_dump(exclude_none=True),
            "objective": self.objective.model_dump(),
            "limits": self.limits.model_dump(exclude_none=True),
            "early_termination": self.early_termination.model_dump(exclude_none=True)
            if self.early_termination else None,
        }


class SweepJob(ParameterizedSweep):
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
    compute: Compute
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

    @model_validator(mode="after")
    def _command_uses_the_space(self) -> SweepJob:
        unknown = sorted({m.group(1) for m in SEARCH_SPACE.finditer(self.trial.command)} - set(self.search_space))
        if unknown:
            raise ValueError(f"trial.command uses {', '.join('${{search_space.' + u + '}}' for u in unknown)}, "
                             f"which search_space does not declare (declared: {', '.join(self.search_space)})")
        return self

    @property
    def runs(self) -> dict[str, Run]:
        """``{"trial": <the trial as a run>}`` (read in by :func:`stack.references.resolved`)."""
        return dict(self._runs)

    def with_runs(self, runs: Mapping[str, Run]) -> SweepJob:
        copy = self.model_copy()
        copy._runs = dict(runs)
        return copy

    def step_runs(self, root: Path) -> Iterator[tuple[str, Run | None, list[tuple[KeyPath, str]]]]:
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
            yield TRIAL, None, [first_problem(err)]
