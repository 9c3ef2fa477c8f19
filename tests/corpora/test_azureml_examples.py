"""The gate on Microsoft's own distributed jobs (Azure/azureml-examples, see the corpus README).

Each job YAML is converted mechanically into a run of one stack: every key copied as written, only
``compute`` (and an ``environment`` the example leaves as a placeholder to fill in) mapped to the
stack's names. Then, per job:

1. render equality: ``load_job`` of the original and of the rendered job file, compared field by field
   (paths compared where they lead; the values the project adds, which the plan lists per run, left out);
2. the verdict in the default profile against a reviewed expectation: passes, or is blocked by exactly
   the real defect written here;
3. the strict profile still blocks hygiene (unpinned environments, no timeout).

The figures in docs/policies.md ("Measured on azureml-examples") are this test's.
"""

from __future__ import annotations

import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.render import job_yaml
from jobs.resolve import resolve_all
from planning.engine import run_program
from policies.engine import Report, evaluate
from policies.packconfig import STRICT_CONFIG, load
from stack.config import StackConfig, from_stackfile
from stack.resolved import RUN_TYPE, ResolvedRun
from stack.stackfile import read
from tests.conftest import NS, ROOT, dev_config, make_project

CORPUS = ROOT / "tests" / "fixtures" / "azureml-examples"
HISTORY = ROOT / "tests" / "fixtures" / "azureml-examples-history"
"""Jobs of the same repository at other commits (its README names each), copied under ``history/``."""
ACPT = "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"
"""What cli/jobs/nebulaml recommends for its placeholder environment (its README: an ACPT environment)."""


@dataclass(frozen=True)
class Job:
    path: str
    """The job YAML, relative to the corpus (the repository's own path)."""
    name: str
    blocked_by: tuple[str, ...] = ()
    """Reviewed expectation: the mandatory rules that block it in the default profile (empty: it passes)."""
    compute: str | None = None
    environment: str | None = None
    """Stack names for the example's placeholders (``< your compute name >``)."""
    why: str = ""


# The examples' clusters, by the names the jobs use. Sizes from the repository where it says them
# (infra/bootstrapping/bootstrap.sh: gpu-v100-cluster = Standard_ND40rs_v2; the Bert README: ND40rs_v2;
# the Bloom README: ND96amsr_A100_v4); gpu-cluster is Standard_NC12 in setup/setup-repo/create-compute.sh,
# retired, so a current one-GPU size stands in; low-pri-nc24s (NC24s_v3, retired 2025-09-30) -> a current
# 4-GPU size without InfiniBand, low priority; the nebulaml DeepSpeed job runs 4 processes per node -> 4-GPU size.
CLUSTERS = [
    {"name": "gpu-cluster", "size": "Standard_NC24ads_A100_v4", "max_instances": 4},
    {"name": "gpu-v100-cluster", "size": "Standard_ND40rs_v2", "max_instances": 2},
    {"name": "gpu-v100-1GPU-cluster", "size": "Standard_NC24ads_A100_v4", "max_instances": 1},
    {"name": "low-pri-nc24s", "size": "Standard_NC96ads_A100_v4", "max_instances": 2, "tier": "low_priority"},
    {"name": "nc96ads-a100", "size": "Standard_NC96ads_A100_v4", "max_instances": 4},
    {"name": "nd40rs-v2", "size": "Standard_ND40rs_v2", "max_instances": 2},
    {"name": "MegatronCompute", "size": "Standard_ND40rs_v2", "max_instances": 2},
    {"name": "bloom", "size": "Standard_ND96amsr_A100_v4", "max_instances": 2},
]

SECRET_KEY = "run-secrets-in-code"
PER_NODE_TWICE = "run-launcher-on-per-process-launch"

JOBS = [
    Job("cli/jobs/single-step/pytorch/cifar-distributed/job.yml", "cifar-distributed"),
    Job("cli/jobs/single-step/tensorflow/mnist-distributed/job.yml", "tf-mnist-distributed"),
    Job("cli/jobs/deepspeed/deepspeed-training/job.yml", "deepspeed-training"),
    Job("cli/jobs/deepspeed/deepspeed-autotuning/job.yml", "deepspeed-autotuning", (PER_NODE_TWICE, SECRET_KEY),
        why="generate-yml.sh writes an SSH private key into src/ (uploaded as the run's snapshot), and "
        "start-deepspeed.sh (a per-node deepspeed launch) is started 8 times per node"),
    Job("cli/jobs/single-step/gpu_perf/gpu_perf_job.yml", "gpu-perf"),
    Job("cli/jobs/nebulaml/cifar10_deepspeed/job.yml", "nebula-cifar10-deepspeed", compute="nc96ads-a100",
        environment=ACPT),
    Job("best-practices/largescale-deep-learning/Debugging/Compute/health_job.yaml", "node-health-check",
        ("run-docker-args-confined",),
        why="docker_args --volume=/var/log/syslog:... bind-mounts the node's syslog into the container: by design "
        "for a node health check, still a path out of the container that a reviewer waives with the reason"),
    Job("best-practices/largescale-deep-learning/Training/Bert-Pretrain/AML-submit.yml", "bert-pretrain",
        compute="nd40rs-v2"),
    Job("best-practices/largescale-deep-learning/Training/Bert-Pretrain/AML-DeepSpeed-submit.yml",
        "bert-pretrain-deepspeed", compute="nd40rs-v2"),
    Job("best-practices/largescale-deep-learning/Training/Bloom-Pretrain/src/deepspeed-BLOOM-AML-SDKv2.yaml",
        "bloom-pretrain", ("run-entry-script-exists",),
        why="Megatron-DeepSpeed/pretrain_gpt.py is in a git submodule, absent from a plain clone"),
    Job("best-practices/largescale-deep-learning/Training/DeepSpeed-Autotuning/job.yml", "bert-deepspeed-autotuning",
        (PER_NODE_TWICE, SECRET_KEY), why="as deepspeed-autotuning"),
    # Other commits of the same repository (history/<commit>/..., see its README).
    Job("history/bc167ffb/cli/jobs/single-step/tensorflow/mnist-distributed-horovod/job.yml",
        "tf-mnist-horovod-2024",
        why="Horovod under MPI, one rank per node of a 1-GPU size: 2 ranks, no launcher inside; deleted in 2024"),
    Job("history/941a98e1/cli/jobs/nebulaml/bert-pretrain-deepspeed/job.yml", "nebula-bert-deepspeed-2023",
        compute="nc96ads-a100", environment=ACPT,
        why="DeepSpeed per process (4 x 4, --local_rank $RANK) on a 4-GPU size, an ACPT environment as its README "
        "asks"),
    Job("history/6eb684f0/best-practices/largescale-deep-learning/Training/Bert-Pretrain/AML-DeepSpeed-submit.yml",
        "bert-pretrain-deepspeed-2023", compute="nd40rs-v2",
        why="the 2023 version opened JupyterLab, TensorBoard and VS Code on every node with the identity unset: "
        "advised (run-notebook-service-user-identity), not blocked"),
]

EXCLUDED = {
    "cli/jobs/single-step/tensorflow/mnist/job.yml": "not distributed (no distribution key)",
    "cli/jobs/nebulaml/PyTorch_CNN_MNIST/job.yml": "not distributed (no distribution key)",
    "cli/jobs/single-step/pytorch/iris/job.yml": "CPU cluster, not distributed",
    "cli/jobs/single-step/pytorch/word-language-model/job.yml": "not distributed; uploads a local data folder",
}
"""Jobs of the same folders left out of the corpus, and why (the README lists what was copied)."""

HYGIENE_IN_STRICT = {"run-environment-pinned", "run-timeout-set", "run-shm-size-sufficient"}


def _generate(project: Path, folder: str) -> None:
    """What the example's generate-yml.sh does, mechanically: the job.yml of its here-document with
    num_gpus_per_node=8, and ssh-keygen's private key file in src/ (a throwaway key of the same format)."""
    script = (project / folder / "generate-yml.sh").read_text()
    body = re.search(r"cat > job\.yml << EOF\n(.*?)\nEOF", script, re.S)
    assert body is not None
    text = body.group(1).replace("${num_gpus_per_node}", "8").replace("\\$schema", "$schema")
    (project / folder / "job.yml").write_text(text + "\n")
    key = "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAA",
                     "-----END OPENSSH PRIVATE KEY-----", ""])
    (project / folder / "src" / "generated-key").write_text(key)


def _load(path: Path) -> dict[str, Any]:
    from azure.ai.ml import load_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(load_job(path)._to_dict())


def _original(project: Path, job: Job) -> tuple[Path, dict[str, Any]]:
    """The job YAML with only its placeholders mapped (written beside it, so relative paths still hold)."""
    path = project / "corpus" / job.path
    data = yaml.safe_load(path.read_text())
    if job.compute:
        data["compute"] = f"azureml:{job.compute}"
    if job.environment:
        data["environment"] = job.environment
    mapped = path.with_name(f"{path.stem}.mapped.yml")
    mapped.write_text(yaml.safe_dump(data, sort_keys=False))
    return mapped, data


def _relative_to_project(folder: Path, value: str, project: Path) -> str:
    return (folder / value).resolve().relative_to(project.resolve()).as_posix()


def convert(project: Path, job: Job) -> dict[str, Any]:
    """The job as a stack run: its keys as written, paths made relative to the project root."""
    mapped, data = _original(project, job)
    folder = mapped.parent
    run = {k: v for k, v in data.items() if k not in ("$schema", "type")}
    run["name"] = job.name
    run["compute"] = str(run["compute"]).removeprefix("azureml:")
    if "code" in run:
        run["code"] = _relative_to_project(folder, run["code"], project)
    env = run["environment"]
    if isinstance(env, str) and env.startswith("file:"):
        run["environment"] = "file:" + _relative_to_project(folder, env.removeprefix("file:"), project)
    elif isinstance(env, dict):
        env = dict(env)
        if "build" in env:
            env["build"] = {**env["build"], "path": _relative_to_project(folder, env["build"]["path"], project)}
        if "conda_file" in env:
            env["conda_file"] = _relative_to_project(folder, env["conda_file"], project)
        run["environment"] = env
    return run


@dataclass
class Corpus:
    project: Path
    config: StackConfig
    runs: dict[str, ResolvedRun]
    default: Report
    strict: Report
    rendered: dict[str, Path]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    project = tmp_path_factory.mktemp("corpus-project")
    shutil.copytree(CORPUS, project / "corpus")
    shutil.copytree(HISTORY, project / "corpus" / "history")
    for folder in ("cli/jobs/deepspeed/deepspeed-autotuning",
                   "best-practices/largescale-deep-learning/Training/DeepSpeed-Autotuning"):
        _generate(project / "corpus", folder)
    config = dev_config()
    config[f"{NS}:clusters"] = CLUSTERS
    config[f"{NS}:environments"] = []
    config[f"{NS}:jobs"] = [convert(project, job) for job in JOBS]
    config.pop(f"{NS}:waivers", None)
    make_project(project, config, stack="corpus")
    stack_file = read(project / "Pulumi.corpus.yaml")
    stack = from_stackfile(stack_file, project)
    plan = run_program("corpus", stack_file, project)
    resources = [r.to_json() for r in plan.resources]
    runs = {r.name: r for r in resolve_all(stack, project)}
    planned = [ResolvedRun.from_props(r["inputs"]) for r in resources if r["type"] == RUN_TYPE]
    out = project / "build" / "jobs"
    out.mkdir(parents=True)
    rendered = {}
    for job in JOBS:
        rendered[job.name] = out / f"{job.name}.yml"
        rendered[job.name].write_text(job_yaml(runs[job.name].spec, code_relative_to=out, root=project))
    return Corpus(
        project, stack, runs,
        evaluate(resources, planned, stack),
        evaluate(resources, planned, stack, pack_config=load(STRICT_CONFIG)),
        rendered,
    )


def _mandatory(report: Report, run: str) -> set[str]:
    return {f.rule.id for f in report.findings if f.owner.name == run and f.enforcement == "mandatory"
            and not f.waived}


_ADDED = {
    "resources.shm_size": ("resources", "shm_size"),
    "distribution.process_count_per_instance": ("distribution", "process_count_per_instance"),
    "distribution.worker_count": ("distribution", "worker_count"),
}


def _comparable(job: dict[str, Any], added: tuple[str, ...]) -> dict[str, Any]:
    """The job fields that define what runs, with paths as where they lead, the project's listed additions
    and azure-ai-ml's bookkeeping (anonymous component name/version, the job name) left out."""
    out: dict[str, Any] = {}
    component = job.get("component") or {}
    for key in ("command", "code"):
        if component.get(key) is not None:
            out[key] = component[key]
    for key in ("environment", "environment_variables", "resources", "distribution", "inputs", "outputs",
                "compute", "limits", "display_name", "experiment_name", "description", "services", "tags",
                "identity", "queue_settings"):
        value = job.get(key)
        if value not in (None, {}, []):
            out[key] = yaml.safe_load(yaml.safe_dump(value))  # plain data
    if "code" in out:
        out["code"] = str(Path(out["code"]).resolve())
    env = out.get("environment")
    if isinstance(env, dict) and "build" in env:
        env["build"]["path"] = str(Path(env["build"]["path"]).resolve())
    for note in added:
        field = _ADDED.get(note.split(":", 1)[0])
        if field and field[0] in out:
            out[field[0]].pop(field[1], None)
    for mapping in ("outputs", "inputs"):
        for value in (out.get(mapping) or {}).values():
            if isinstance(value, dict):
                value.pop("mode", None) if value.get("mode") is None else None
    return out


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.name)
def test_render_equals_the_original_field_by_field(corpus: Corpus, job: Job) -> None:
    mapped, _ = _original(corpus.project, job)
    original = _comparable(_load(mapped), ())
    ours = _comparable(_load(corpus.rendered[job.name]), corpus.runs[job.name].defaults)
    for key in sorted(set(original) | set(ours)):
        assert ours.get(key) == original.get(key), key


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.name)
def test_verdict_is_the_reviewed_expectation(corpus: Corpus, job: Job) -> None:
    assert _mandatory(corpus.default, job.name) == set(job.blocked_by), job.why


@pytest.mark.parametrize("job", [j for j in JOBS if not j.blocked_by], ids=lambda j: j.name)
def test_strict_profile_still_blocks_hygiene(corpus: Corpus, job: Job) -> None:
    blocking = _mandatory(corpus.strict, job.name)
    advisory = {f.rule.id for f in corpus.default.findings if f.owner.name == job.name}
    assert blocking == advisory & HYGIENE_IN_STRICT | _mandatory(corpus.default, job.name)


def test_every_example_is_blocked_by_hygiene_in_strict(corpus: Corpus) -> None:
    # Every example uses @latest or an untagged image: strict blocks each one, default blocks none for it.
    for job in JOBS:
        assert _mandatory(corpus.strict, job.name) & HYGIENE_IN_STRICT, job.name


def test_corpus_figures(corpus: Corpus) -> None:
    """The numbers docs/policies.md reports."""
    passed = [j for j in JOBS if not _mandatory(corpus.default, j.name)]
    blocked = [j for j in JOBS if _mandatory(corpus.default, j.name)]
    assert (len(JOBS), len(passed), len(blocked)) == (14, 10, 4)
    false = [(j.name, r) for j in JOBS for r in _mandatory(corpus.default, j.name) - set(j.blocked_by)]
    assert false == []
    docs = (ROOT / "docs" / "policies.md").read_text()
    assert f"{len(JOBS)} distributed jobs" in docs and f"| default | {len(passed)} | {len(blocked)} " in docs
    names = {j.name for j in JOBS}
    advisory = sum(1 for f in corpus.default.findings if f.owner.name in names and f.enforcement == "advisory")
    hygiene = sum(1 for f in corpus.strict.findings if f.owner.name in names and f.rule.hygiene
                  and f.enforcement == "mandatory")
    assert f"give {advisory} advisory findings" in docs and f"{hygiene} hygiene findings over" in docs


def test_excluded_jobs_are_named_in_the_corpus_readme() -> None:
    readme = (CORPUS / "README.md").read_text()
    for path in EXCLUDED:
        assert path in readme, path
