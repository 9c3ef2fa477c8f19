"""Run rules on consistency: a run's cluster and environment are the ones the stack plans, and the script
its command starts is in its code folder."""

from __future__ import annotations

from azurefacts.resource_types import COMPUTE, ENVIRONMENT_VERSION
from policies.rule import Violation, run_rule, stack_rule
from policies.rules.runs import JOB_YAML
from policies.stack import Owner, Stack
from policies.wire import get, inputs, known, same
from stack.resolved import ResolvedRun


@run_rule(
    id="run-entry-script-exists",
    title="The script a run's command starts is in its code folder",
    severity="critical",
    enforcement="mandatory",
    rationale="Azure ML uploads the code folder and runs the command in it; a script that is not there (a git "
    "submodule not checked out, a renamed file) fails with 'No such file or directory' after every node has "
    "started and been billed.",
    remediation="Add the script to the code folder (git submodule update --init), or fix the path in command.",
    reference=JOB_YAML,
    config_key=("command",),
)
def run_entry_script_exists(run: ResolvedRun) -> list[str]:
    folder = run.spec.get("code", ".")
    return [f"the command runs {script}, which is not in code folder {folder!r}" for script in run.missing_scripts]


@stack_rule(
    id="run-cluster-matches-plan",
    title="A run's cluster facts are those of the cluster the stack plans",
    severity="high",
    enforcement="mandatory",
    rationale="Run rules judge a run by its cluster's size, node cap and tier as resolved from the stack "
    "config; if the planned AmlCompute differs (or is missing) the run rules judged the wrong cluster and "
    "the run targets something that will not exist.",
    remediation="Plan runs and infrastructure from the same stack file; make the run's compute a cluster of "
    "this stack.",
    reference=JOB_YAML,
    config_key=("compute",),
)
def run_cluster_matches_plan(stack: Stack) -> list[Violation]:
    computes = {str(get(inputs(c), "computeName", c["name"])).lower(): c for c in stack.of_type(COMPUTE)}
    out = []
    for run in stack.runs:
        compute = computes.get(run.cluster.name.lower())
        if compute is None:
            out.append(Violation(run, f"cluster {run.cluster.name} is not planned in this stack"))
            continue
        aml = get(inputs(compute), "properties.properties", {})
        planned = {
            "size": (get(aml, "vmSize"), run.cluster.size),
            "max nodes": (get(aml, "scaleSettings.maxNodeCount"), run.cluster.max_instances),
            "priority": (get(aml, "vmPriority"), "LowPriority" if run.cluster.tier == "low_priority" else "Dedicated"),
        }
        for what, (actual, resolved) in planned.items():
            if actual is not None and known(actual) and not (actual == resolved or same(actual, resolved)):
                out.append(Violation(run, f"resolved against {what} {resolved} of cluster {run.cluster.name}, "
                                          f"but the stack plans {actual}"))
    return out


@stack_rule(
    id="run-environment-matches-plan",
    title="A run's stack environment is the version the stack registers",
    severity="high",
    enforcement="mandatory",
    rationale="A run naming a stack environment is submitted with azureml:<name>:<version>; if the stack does "
    "not register that version (or registers a different image under it) the submission fails or runs other "
    "libraries than the run rules checked.",
    remediation="Reference environments by their stack name, and bump the environment's version when its "
    "image changes.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/concept-environments",
    config_key=("environment",),
)
def run_environment_matches_plan(stack: Stack) -> list[Violation]:
    versions = stack.of_type(ENVIRONMENT_VERSION)
    out = []
    for run in stack.runs:
        env = run.environment
        if env.name is None or env.source not in ("image", "build"):
            continue
        version = env.id.rsplit(":", 1)[-1]
        match = [v for v in versions
                 if stack.owner(v) == Owner("environment", env.name) and str(get(inputs(v), "version")) == version]
        if not match:
            out.append(Violation(run, f"environment {env.id} is not registered by this stack"))
        elif env.image and get(inputs(match[0]), "properties.image") not in (env.image, None):
            out.append(Violation(run, f"environment {env.id} registers image "
                                      f"{get(inputs(match[0]), 'properties.image')}, not {env.image}"))
    return out
