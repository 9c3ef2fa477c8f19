"""Run rules for TensorFlow's TF_CONFIG: workers fit the nodes, parameter servers on purpose, no task named
``master``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernel import regex as linear
from policies.rule import run_rule
from policies.rules.runs import DISTRIBUTED_GUIDE, environment_variables
from stack.resolved import ResolvedRun


def _tf(run: ResolvedRun) -> Mapping[str, Any] | None:
    dist = run.distribution
    return dist if dist["type"] == "tensorflow" else None


TF_DISTRIBUTION = "https://learn.microsoft.com/en-us/python/api/azure-ai-ml/azure.ai.ml.tensorflowdistribution"


@run_rule(
    id="run-tensorflow-task-count",
    title="TensorFlow workers fit the run's nodes, one per node",
    severity="high",
    enforcement="mandatory",
    rationale="Azure ML runs one TensorFlow worker per node: worker_count defaults to instance_count (azure-ai-ml's "
    "TensorFlowDistribution), SDK v1 set the node count to worker_count, and parameter servers run beside the "
    "workers on the same nodes (azure-ai-ml's own example runs 2 workers and 1 parameter server with "
    "instance_count 2). More workers than nodes puts two workers on a node, and each TensorFlow process maps "
    "nearly all the memory of every GPU it sees (TensorFlow's GPU guide): the second one fails to allocate. "
    "Parameter servers are not counted against the nodes.",
    remediation="Make worker_count at most resources.instance_count (leave it out: it defaults to instance_count).",
    reference=TF_DISTRIBUTION,
    config_key=("distribution", "worker_count"),
)
def run_tensorflow_task_count(run: ResolvedRun) -> list[str]:
    dist = _tf(run)
    if dist is None:
        return []
    workers = dist.get("worker_count") or run.instance_count
    if workers <= run.instance_count:
        return []
    return [f"{workers} worker(s) on {run.instance_count} node(s): Azure ML runs one worker per node"]


@run_rule(
    id="run-tensorflow-parameter-servers",
    title="TensorFlow parameter servers are declared on purpose",
    severity="low",
    enforcement="advisory",
    rationale="Parameter-server training is rarely what GPU runs want (MultiWorkerMirroredStrategy all-reduces "
    "over NCCL); Azure ML also writes an empty 'ps' list into TF_CONFIG that TensorFlow >= 2.13 rejects unless "
    "the script removes it. Waive the rule for a run that uses parameter servers deliberately.",
    remediation="Drop parameter_server_count, or waive this rule for the run with the reason.",
    reference=DISTRIBUTED_GUIDE + "#tensorflow",
    config_key=("distribution", "parameter_server_count"),
)
def run_tensorflow_parameter_servers(run: ResolvedRun) -> list[str]:
    dist = _tf(run)
    servers = (dist.get("parameter_server_count") or 0) if dist else 0
    return [f"uses {servers} parameter server(s)"] if servers else []


_MASTER_TASK = linear.compile(r"(?i)(task[_-]?type|job[_-]?name|[\"']type[\"'])\s*[=: ]\s*[\"']?master\b")


@run_rule(
    id="run-tensorflow-task-names",
    title="TensorFlow tasks are named chief or worker, never master",
    severity="high",
    enforcement="mandatory",
    rationale="TF_CONFIG task types are chief, worker, ps and evaluator; TensorFlow 2 rejects 'master' (a "
    "TensorFlow 1 estimator name) and the run fails at strategy creation.",
    remediation="Use chief (or let Azure ML's worker 0 act as chief).",
    reference="https://www.tensorflow.org/guide/distributed_training#setting_up_the_tf_config_environment_variable",
    config_key=("command",),
)
def run_tensorflow_task_names(run: ResolvedRun) -> list[str]:
    if _tf(run) is None:
        return []
    texts = [str(run.spec.get("command", "")), *(f"{k}={v}" for k, v in sorted(environment_variables(run).items()))]
    if any(_MASTER_TASK.search(text) for text in texts):
        return ["names a TensorFlow task 'master'; TensorFlow 2 accepts chief, worker, ps and evaluator"]
    return []
