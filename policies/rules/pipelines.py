"""Pipeline and sweep rules: what goes wrong in how runs are put together, not in any one of them.

Each step of a pipeline and the trial of a sweep is a run (``<job>/<step>``, ``<sweep>/trial``) and every
run rule judges it as such; these rules look at the composition: bindings between steps, the order they
imply, and how many trials a cluster can hold at once. They read the job's spec (the ``ComposedJob``
component's props, :class:`jobs.pipelines.ResolvedComposite`) and its runs' cluster facts. One run rule
lives here too: a run (typically a pipeline's data preparation step) that opens no GPU on GPU nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.launchers import PER_GPU_LAUNCHERS, command_scripts
from kernel.secrets import secrets_in_definition
from policies.rule import Violation, run_rule, stack_rule
from policies.stack import Stack
from stack.pipelines import binding
from stack.resolved import ResolvedRun

PIPELINE_YAML = "https://learn.microsoft.com/en-us/azure/machine-learning/reference-yaml-job-pipeline"
SWEEP_GUIDE = "https://learn.microsoft.com/en-us/azure/machine-learning/how-to-tune-hyperparameters"
COMPUTE_TARGETS = "https://learn.microsoft.com/en-us/azure/machine-learning/concept-compute-target"


def _steps(spec: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    steps: Mapping[str, Mapping[str, Any]] = spec.get("jobs") or {}
    return steps


def _unknown_bindings(spec: Mapping[str, Any], step: str) -> list[str]:
    """What one step binds that the pipeline does not have, in words."""
    steps = _steps(spec)
    found = []
    for direction in ("inputs", "outputs"):
        for key, value in sorted((steps[step].get(direction) or {}).items()):
            bound = binding(value)
            if bound is None:
                continue
            where = f"{direction[:-1]} {key!r} binds {value}"
            if bound.kind == "jobs":
                source, output = bound.name, bound.output
                if source not in steps:
                    found.append(f"{where}: the pipeline has no step {source!r} (steps: {', '.join(steps)})")
                elif output not in (steps[source].get("outputs") or {}):
                    outputs = ", ".join(steps[source].get("outputs") or {}) or "none"
                    found.append(f"{where}: step {source!r} has no output {output!r} (its outputs: {outputs})")
            elif bound.name not in (spec.get(bound.kind) or {}):
                declared = ", ".join(spec.get(bound.kind) or {}) or "none"
                found.append(f"{where}: the pipeline declares no {bound.kind[:-1]} {bound.name!r} "
                             f"(its {bound.kind}: {declared})")
    return found


@stack_rule(
    id="pipeline-binding-unknown",
    title="A pipeline step binds only inputs and outputs that exist",
    severity="critical",
    enforcement="mandatory",
    rationale="A step input bound to ${{parent.jobs.<step>.outputs.<x>}} of a step or output the pipeline "
    "does not have, or to a pipeline input or output it does not declare, is refused: azure-ai-ml's load_job "
    "(what az ml job create -f runs) fails with 'Failed to find referenced source for input binding' or "
    "'Failed to find top level definition', and nothing is submitted.",
    remediation="Fix the step or output name in the binding, or declare the pipeline input/output it names.",
    reference=PIPELINE_YAML,
    config_key=("inputs",),
)
def pipeline_binding_unknown(stack: Stack) -> list[Violation]:
    out = []
    for _, job in stack.composites:
        if job.kind != "pipeline":
            continue
        runs = {run.name: run for run in stack.runs_of(job.name)}
        for step in _steps(job.spec):
            run = runs.get(f"{job.name}/{step}")
            if run is not None:
                out += [Violation(run, message) for message in _unknown_bindings(job.spec, step)]
    return out


@stack_rule(
    id="pipeline-component-not-pulled",
    title="A pipeline step's registered component is pulled into the project",
    severity="critical",
    enforcement="mandatory",
    rationale="A step naming a registered component (azureml:<name>:<version>, or a registry's) runs a command, "
    "environment and distribution the stack file does not show: until its spec is in the project, no rule can "
    "judge the step (InfiniBand, processes per GPU, secrets), and whatever the component does reaches the "
    "cluster unreviewed.",
    remediation="Run amlgpu components pull --stack <stack>: it writes the component's spec under "
    "components/registered/ with a lock (source, version, hashes); commit both, and the step is judged as an "
    "inline component.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-manage-registries",
    config_key=("jobs",),
)
def pipeline_component_not_pulled(stack: Stack) -> list[Violation]:
    out = []
    for resource, job in stack.composites:
        if job.kind != "pipeline":
            continue
        judged = set(job.runs)
        for step, spec in _steps(job.spec).items():
            reference = spec.get("component") or (spec["trial"] if isinstance(spec.get("trial"), str) else None)
            if reference and f"{job.name}/{step}" not in judged:
                out.append(Violation(resource, (
                    f"step {step!r} runs registered component {reference}, whose spec is not in the "
                    f"project: run `amlgpu components pull --stack {stack.name or '<stack>'}` and commit "
                    "components/registered/")))
    return out


def _cycle(spec: Mapping[str, Any]) -> list[str] | None:
    """Steps that wait on each other through their bindings, as a path back to its start (None: no cycle)."""
    steps = _steps(spec)
    needs = {name: sorted({b.name for v in (step.get("inputs") or {}).values()
                           if (b := binding(v)) is not None and b.kind == "jobs" and b.name in steps})
             for name, step in steps.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for source in needs[name]:
            if state.get(source) == 1:
                return [*path[path.index(source):], source]
            if source not in state and (found := visit(source)) is not None:
                return found
        path.pop()
        state[name] = 2
        return None

    for name in steps:
        if name not in state and (found := visit(name)) is not None:
            return found
    return None


@stack_rule(
    id="pipeline-step-cycle",
    title="Pipeline steps do not wait on each other in a circle",
    severity="critical",
    enforcement="mandatory",
    rationale="Azure ML starts a step once every step whose output it binds has completed; steps whose bindings "
    "form a circle each wait for the other, so none of them can ever start (azure-ai-ml does not check this "
    "before submission).",
    remediation="Break the circle: bind the first step's inputs to data or pipeline inputs, not to a later step.",
    reference=PIPELINE_YAML,
    config_key=("jobs",),
)
def pipeline_step_cycle(stack: Stack) -> list[Violation]:
    out = []
    for resource, job in stack.composites:
        cycle = _cycle(job.spec) if job.kind == "pipeline" else None
        if cycle:
            out.append(Violation(resource, f"steps {' -> '.join(cycle)} wait on each other's outputs: none can start"))
    return out


@stack_rule(
    id="sweep-concurrent-trials-exceed-cluster",
    title="A sweep's concurrent trials fit its cluster",
    severity="medium",
    enforcement="advisory",
    rationale="Each trial of a sweep takes trial.resources.instance_count nodes; max_concurrent_trials of them "
    "at once need that many times the nodes (left out, Azure ML starts up to max_total_trials at once). Trials "
    "beyond what the cluster's max_instances holds wait in its queue: the sweep takes longer than its limits "
    "suggest, and its timeout may cancel trials that never started. Advisory: the trials still run.",
    remediation="Lower limits.max_concurrent_trials to the trials the cluster holds at once, or raise the "
    "cluster's max_instances.",
    reference=SWEEP_GUIDE,
    config_key=("limits", "max_concurrent_trials"),
)
def sweep_concurrent_trials_exceed_cluster(stack: Stack) -> list[Violation]:
    out = []
    for sweep in stack.sweeps:
        trial = sweep.trial
        limits = sweep.spec.get("limits") or {}
        concurrent = limits.get("max_concurrent_trials") or limits.get("max_total_trials") or 1
        nodes = trial.instance_count
        cluster = trial.cluster
        if nodes > cluster.max_instances or concurrent * nodes <= cluster.max_instances:
            continue  # a trial that never fits is run-instance-count-exceeds-max-nodes's finding
        fit = cluster.max_instances // nodes
        out.append(Violation(sweep.subject, (
            f"{concurrent} concurrent trial(s) of {nodes} node(s) need {concurrent * nodes} nodes; cluster "
            f"{cluster.name} scales to {cluster.max_instances}: {fit} trial(s) run at once, the other "
            f"{concurrent - fit} wait in the queue"
        )))
    return out


@stack_rule(
    id="sweep-timeout-below-trial-timeout",
    title="A sweep's timeout leaves its trials their own timeout",
    severity="low",
    enforcement="advisory",
    rationale="limits.timeout cancels the whole sweep, running trials included; below limits.trial_timeout no "
    "trial can run as long as its own timeout allows, and trials cut off early report no final metric.",
    remediation="Make limits.timeout at least limits.trial_timeout (times the rounds of concurrent trials), or "
    "lower trial_timeout.",
    reference=SWEEP_GUIDE,
    config_key=("limits", "timeout"),
)
def sweep_timeout_below_trial_timeout(stack: Stack) -> list[Violation]:
    out = []
    for sweep in stack.sweeps:
        limits = sweep.spec.get("limits") or {}
        timeout, trial = limits.get("timeout"), limits.get("trial_timeout")
        if timeout and trial and timeout < trial:
            out.append(Violation(sweep.subject, f"limits.timeout {timeout}s cancels the sweep before a trial "
                                                f"reaches its trial_timeout of {trial}s"))
    return out


def opens_no_gpu(run: ResolvedRun) -> bool:
    """Whether every process ``run`` starts is known to leave the GPUs alone: Azure ML starts Python scripts
    itself (no per-node launcher, nothing in the command left unread), each read whole and importing nothing
    that opens a GPU (:data:`analysis.pyscan.GPU_MODULES`). Unknown is not "no GPU"."""
    if run.launcher not in PER_GPU_LAUNCHERS or run.launch_unknowns or not run.scripts_without_gpu:
        return False
    scripts = command_scripts(str(run.spec.get("command", "")))
    return bool(scripts) and all(kind == "python" and path in run.scripts_without_gpu for kind, path in scripts)


@run_rule(
    id="run-gpu-nodes-unused",
    title="A run that opens no GPU does not hold GPU nodes",
    severity="low",
    enforcement="advisory",
    rationale="A step that only prepares data (Microsoft's pipelines start with one: python prep.py, importing "
    "pandas or mlflow but no deep learning framework) runs as well on a CPU node, at a fraction of a GPU node's "
    "price; on the GPU cluster it holds and bills whole GPU nodes while it runs, and keeps them from the training "
    "steps. Judged only when every script the command starts was read whole and imports nothing that opens a GPU. "
    "Advisory: the step still runs.",
    remediation="Run the step on CPU compute (a CPU cluster or serverless compute of the workspace; this stack's "
    "clusters are GPU clusters), or fold it into the step that uses the GPUs.",
    reference=COMPUTE_TARGETS,
    config_key=("compute",),
)
def run_gpu_nodes_unused(run: ResolvedRun) -> list[str]:
    if run.cluster.gpus < 1 or not opens_no_gpu(run):
        return []
    scripts = ", ".join(run.scripts_without_gpu)
    return [f"{scripts} import(s) nothing that opens a GPU, yet the run holds {run.instance_count} "
            f"{run.cluster.size} node(s) of {run.cluster.gpus} GPU(s) each on cluster {run.cluster.name}: "
            "CPU compute does this work for less"]


_RUNS_OWN = {"pipeline": ("jobs",), "sweep": ("trial", "inputs", "outputs")}
"""What of a pipeline's or sweep's spec is its runs' own (each step, the trial: judged as runs)."""


@stack_rule(
    id="pipeline-secrets-in-definition",
    title="Pipelines and sweeps carry no secrets in their own fields",
    severity="critical",
    enforcement="mandatory",
    rationale="A pipeline's inputs, a sweep's search space (every choice reaches every trial's command line), "
    "settings, tags, description, display and experiment names are part of the job definition: written to the "
    "job file, shown in the studio and kept with the job. Judged by the walk that masks them in every artifact "
    "(known token shapes, also base64-encoded or split; high-entropy literals under a credential name; any "
    "literal under a password name); each step and the trial are judged as runs.",
    remediation="Read the secret at run time from the workspace key vault with the job's identity; pass its "
    "name, not its value.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-use-secrets-in-runs",
    config_key=("inputs",),
)
def pipeline_secrets_in_definition(stack: Stack) -> list[Violation]:
    out = []
    for resource, job in stack.composites:
        for found in secrets_in_definition(job.spec, skip=_RUNS_OWN.get(job.kind, ())):
            out.append(Violation(resource, f"{job.kind} {found}"))
        for step, node in (job.spec.get("jobs") or {}).items() if job.kind == "pipeline" else ():
            if node.get("type") == "sweep":  # its trial is judged as a run; its search space is the sweep's own
                for found in secrets_in_definition(node, skip=_RUNS_OWN["sweep"]):
                    out.append(Violation(resource, f"sweep step {step!r} {found}"))
    return out
