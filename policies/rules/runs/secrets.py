"""Run rules on secrets: none in environment variables, the command, inputs, tags, metadata or the code folder,
and code folders and build contexts scanned to the end. Every value is judged by :func:`kernel.secrets.walk`,
the walk the masker hides by: what any artifact shows as ``[secret]`` is a finding here (or in
:mod:`policies.rules.pipelines` for what only a pipeline or sweep carries)."""

from __future__ import annotations

from collections.abc import Sequence

from analysis.secret_scan import BUDGET_BYTES
from jobs.pipelines import PIPELINE_TYPE, SWEEP_TYPE
from kernel.secrets import secrets_in_definition, walk
from policies.rule import Violation, run_rule, stack_rule
from policies.rules.environments import ENVIRONMENT_COMPONENT
from policies.rules.runs import environment_variables
from policies.stack import Stack
from policies.wire import inputs
from stack.resolved import RUN_TYPE, ResolvedRun


@run_rule(
    id="run-secrets-in-environment-variables",
    title="Runs do not carry secrets in environment variables",
    severity="critical",
    enforcement="mandatory",
    rationale="environment_variables are stored in the job definition, shown in the studio to everyone with "
    "workspace access, written to the job YAML and the stack's outputs. Judged by value (known token shapes, "
    "high-entropy literals under a credential name), not by name: AZUREML_SSH_KEY: generated-key is a file name.",
    remediation="Keep the secret in the workspace key vault and read it at run time with the job's identity "
    "(azureml secrets / DefaultAzureCredential); never put the value in the stack.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-use-secrets-in-runs",
    config_key=("environment_variables",),
)
def run_secrets_in_environment_variables(run: ResolvedRun) -> list[str]:
    found = sorted((f for f in walk(dict(environment_variables(run))) if not f.covered), key=lambda f: str(f.path[0]))
    return list(dict.fromkeys(f"environment variable {f.field} ({f.why})" for f in found))


@run_rule(
    id="run-secrets-in-command",
    title="Runs do not carry secrets in their command, inputs, tags or any other field",
    severity="critical",
    enforcement="mandatory",
    rationale="The command line, literal inputs, tags, properties, services, description, display and "
    "experiment names are part of the job definition: written to the job file, shown on the run's page in the "
    "studio and kept with the job. Judged by value (known token shapes, also base64-encoded or split into "
    "concatenated pieces; high-entropy literals after a credential-named flag or URL query parameter; any "
    "literal under a password name), not by name alone: --ssh-key-file generated-key is a file name.",
    remediation="Read the secret at run time from the workspace key vault with the job's identity; pass its "
    "name, not its value.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-use-secrets-in-runs",
    config_key=("command",),
)
def run_secrets_in_command(run: ResolvedRun) -> list[str]:
    return secrets_in_definition(run.spec)


@run_rule(
    id="run-secrets-in-code",
    title="Run code folders hold no private keys or tokens",
    severity="critical",
    enforcement="mandatory",
    rationale="The code folder is uploaded as the run's snapshot, readable by everyone with workspace "
    "access. A public DeepSpeed example ships an SSH private key that way.",
    remediation="Delete the file from the code folder (and rotate the credential); generate SSH keys at run "
    "time if the launcher needs them.",
    reference="https://github.com/Azure/azureml-examples/tree/main/cli/jobs/deepspeed",
    config_key=("code",),
)
def run_secrets_in_code(run: ResolvedRun) -> list[str]:
    return [f"code folder {run.spec.get('code', '.')!r} holds a credential in {path}" for path in run.code_findings]


@stack_rule(
    id="secrets-scan-incomplete",
    title="Code folders and build contexts are scanned for secrets to the end",
    severity="medium",
    enforcement="advisory",
    rationale="Code folders and build contexts are read for credentials up to a byte budget per folder, so a "
    "hostile pull request cannot hold the gate for ever; the files past it were not checked and are uploaded "
    "all the same. What the gate cannot see is unknown, not a finding: advisory.",
    remediation="Keep data and checkpoints out of the folder (a data input or a datastore instead), or leave "
    "them out of the upload with .amlignore.",
    reference="https://learn.microsoft.com/en-us/azure/machine-learning/how-to-save-write-experiment-files",
    config_key=("code",),
)
def secrets_scan_incomplete(stack: Stack) -> list[Violation]:
    out = [Violation(run, _unscanned(f"code folder {run.spec.get('code')!r}", run.code_unscanned))
           for run in stack.runs if run.code_unscanned]
    for environment in stack.of_type(ENVIRONMENT_COMPONENT):
        left = inputs(environment).get("context_unscanned") or []
        if left:
            out.append(Violation(environment, _unscanned(
                f"build context {inputs(environment).get('build_path')!r}", left)))
    return out


def _unscanned(folder: str, paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return (f"{folder}: {len(paths)} file(s) past the {BUDGET_BYTES >> 20} MiB scan budget were not read to the "
            f"end: {shown}")


_JUDGED_AS_JOBS = frozenset({RUN_TYPE, PIPELINE_TYPE, SWEEP_TYPE})


@stack_rule(
    id="resource-secrets-in-settings",
    title="Workspace, cluster and other resource settings carry no secrets",
    severity="critical",
    enforcement="mandatory",
    rationale="Tags and settings of the workspace, its clusters and every other resource are readable by anyone "
    "with Reader access to the resource group (tags also in cost exports) and stored in plain text in the "
    "Pulumi state. Judged by the walk that masks them in every artifact, so a value shown as [secret] is a "
    "finding; runs, pipelines and sweeps have rules of their own.",
    remediation="Keep the secret in the workspace key vault; put its name in a tag, never its value.",
    reference="https://learn.microsoft.com/en-us/azure/azure-resource-manager/management/tag-resources",
    config_key=("tags",),
)
def resource_secrets_in_settings(stack: Stack) -> list[Violation]:
    out = []
    for resource in stack.resources:
        if resource["type"] in _JUDGED_AS_JOBS:
            continue
        found = [f for f in walk(resource.get("inputs") or {}) if not f.covered]
        for message in dict.fromkeys(f"{f.field} ({f.why})" for f in found):
            out.append(Violation(resource, message))
    return out
