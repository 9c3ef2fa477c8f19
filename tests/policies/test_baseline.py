"""The compliant baseline every policy test mutates: the dev stack plus five runs, one per launch style, a
pipeline (a distributed training step, then an evaluation bound to its output) and a sweep over distributed
trials, as the real program plans it (``tests/fixtures/policy-baseline.json``).

The fixture is the recorded output of the real plan; the test below re-plans the baseline stack and
fails when the program's wire shape drifts from it. Regenerate after an intended change with
``AMLGPU_UPDATE_FIXTURES=1 .venv/bin/pytest tests/policies/test_baseline.py``.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planning.engine import run_program
from policies.engine import Report, evaluate
from stack import config as stack_config
from stack.config import StackConfig
from stack.resolved import RUN_TYPE, ResolvedRun
from stack.stackfile import read
from tests.conftest import ROOT, make_project

FIXTURE = ROOT / "tests" / "fixtures" / "policy-baseline.json"
TODAY = dt.date(2026, 6, 1)
"""The evaluation date of the policy tests (waiver expiry, size retirement)."""

_RUNS: list[dict[str, Any]] = [
    {
        "name": "ddp-per-process", "code": "jobs/workloads", "command": "python train_ddp.py --epochs 2",
        "environment": "acpt-pytorch", "compute": "gpu-a100", "resources": {"instance_count": 2},
        "distribution": {"type": "pytorch", "process_count_per_instance": 8}, "limits": {"timeout": 7200},
    },
    {
        "name": "torchrun-per-node", "code": "jobs/workloads",
        "command": "torchrun --nproc_per_node 8 --nnodes 2 --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
                   "--master_port $MASTER_PORT train_ddp.py",
        "environment": "acpt-pytorch", "compute": "gpu-a100", "resources": {"instance_count": 2},
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
        "environment_variables": {"NCCL_IB_PCI_RELAXED_ORDERING": "1", "OMPI_MCA_btl_tcp_if_include": "eth0"},
        "limits": {"timeout": 7200},
    },
    {
        "name": "horovod-mpi", "code": "jobs/workloads", "command": "python horovod_mnist.py",
        "environment": "horovod", "compute": "gpu-a100", "resources": {"instance_count": 2},
        "distribution": {"type": "mpi", "process_count_per_instance": 8}, "limits": {"timeout": 7200},
    },
    {
        "name": "deepspeed-per-process", "code": "jobs/workloads",
        "command": "python deepspeed_train.py --deepspeed ds_config.json",
        "environment": "acpt-pytorch", "compute": "gpu-a100", "resources": {"instance_count": 2, "shm_size": "64g"},
        "distribution": {"type": "pytorch", "process_count_per_instance": 8}, "limits": {"timeout": 7200},
    },
    {
        "name": "tf-multiworker", "code": "jobs/workloads", "command": "python tf_mnist_multiworker.py",
        "environment": "tf-gpu", "compute": "gpu-a100", "resources": {"instance_count": 2},
        "distribution": {"type": "tensorflow", "worker_count": 2}, "limits": {"timeout": 7200},
    },
    {
        "name": "train-eval", "type": "pipeline", "settings": {"default_compute": "gpu-a100"},
        "inputs": {"epochs": 2},
        "jobs": {
            "train": {
                "code": "jobs/workloads",
                "command": "python train_ddp.py --epochs ${{inputs.epochs}} --checkpoint-dir ${{outputs.checkpoints}}",
                "environment": "acpt-pytorch", "inputs": {"epochs": "${{parent.inputs.epochs}}"},
                "outputs": {"checkpoints": {"type": "uri_folder"}}, "resources": {"instance_count": 2},
                "distribution": {"type": "pytorch", "process_count_per_instance": 8}, "limits": {"timeout": 7200},
            },
            "evaluate": {
                "code": "jobs/workloads",
                "command": "python evaluate.py --checkpoint-dir ${{inputs.checkpoints}} "
                           "--report-dir ${{outputs.report}}",
                "environment": "acpt-pytorch", "inputs": {"checkpoints": "${{parent.jobs.train.outputs.checkpoints}}"},
                "outputs": {"report": {"type": "uri_folder"}},
                "distribution": {"type": "pytorch", "process_count_per_instance": 8}, "limits": {"timeout": 3600},
            },
        },
    },
    {
        "name": "lr-sweep", "type": "sweep", "compute": "gpu-a100",
        "trial": {
            "code": "jobs/workloads", "command": "python train_ddp.py --epochs 2 --lr ${{search_space.lr}}",
            "environment": "acpt-pytorch", "resources": {"instance_count": 2},
            "distribution": {"type": "pytorch", "process_count_per_instance": 8},
        },
        "search_space": {"lr": {"type": "loguniform", "min_value": -9.2, "max_value": -4.6}},
        "sampling_algorithm": "random", "objective": {"goal": "minimize", "primary_metric": "loss"},
        "limits": {"max_total_trials": 4, "max_concurrent_trials": 1, "trial_timeout": 7200, "timeout": 28800},
    },
]


def baseline_stack_config() -> dict[str, Any]:
    """The baseline stack file's ``config`` mapping: the shipped dev stack plus the five runs, the pipeline and
    the sweep."""
    config = json.loads(json.dumps(_dev_config()))
    config["aml-gpu-training:jobs"] = copy.deepcopy(_RUNS)
    # The secure default: a storage account without public access. The dev stack's operator range is its path
    # for build-context uploads, not a default the rules start from.
    config["aml-gpu-training:network"].pop("operator_ip_ranges", None)
    return config


def _dev_config() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]


def _portable(resources: list[dict[str, Any]], project: Path) -> list[dict[str, Any]]:
    """Asset paths relative to the project, so the fixture is the same on every machine."""
    text = json.dumps(resources, sort_keys=True).replace(str(project) + "/", "")
    return json.loads(text)


def plan_baseline(tmp_path: Path) -> list[dict[str, Any]]:
    config = baseline_stack_config()
    project = make_project(tmp_path / "project", config, stack="baseline")
    plan = run_program("baseline", read(project / "Pulumi.baseline.yaml"), project)
    return _portable([r.to_json() for r in plan.resources], project)


@dataclass
class Baseline:
    """A mutable copy of the baseline: ``resources`` in wire shape; runs are read from their components."""

    config: dict[str, Any]
    resources: list[dict[str, Any]]

    def one(self, token: str, name: str | None = None) -> dict[str, Any]:
        found = [r for r in self.resources if r["type"] == token and (name is None or r["name"] == name)]
        assert len(found) == 1, f"{token} {name}: {[r['name'] for r in found]}"
        return found[0]

    def inputs(self, token: str, name: str | None = None) -> dict[str, Any]:
        return self.one(token, name)["inputs"]

    def run(self, name: str) -> dict[str, Any]:
        """The props of run ``name`` (what ``ResolvedRun.from_props`` reads), to mutate."""
        return self.one(RUN_TYPE, name)["inputs"]

    def job(self, token: str, name: str) -> dict[str, Any]:
        """The spec of pipeline or sweep ``name`` (its component's props), to mutate."""
        spec: dict[str, Any] = self.one(token, name)["inputs"]["spec"]
        return spec

    def drop(self, token: str, name: str) -> None:
        self.resources.remove(self.one(token, name))

    @property
    def runs(self) -> list[ResolvedRun]:
        return [ResolvedRun.from_props(r["inputs"]) for r in self.resources if r["type"] == RUN_TYPE]

    def stack(self) -> StackConfig:
        values = {k.split(":", 1)[1]: v for k, v in self.config.items() if k.startswith("aml-gpu-training:")}
        return stack_config.build(values, location=self.config["azure-native:location"],
                                  file="Pulumi.baseline.yaml", root=ROOT)

    def evaluate(self, *, pack_config: dict[str, Any] | None = None, today: dt.date = TODAY) -> Report:
        settings = {k: v for k, v in self.config.items() if not k.startswith("aml-gpu-training:")}
        return evaluate(self.resources, self.runs, self.stack(), pack_config=pack_config, today=today,
                        stack_name=STACK_NAME, stack_settings=settings)


STACK_NAME = "baseline"
"""The baseline's stack name (CrossGuard reads it from the resource URNs)."""


def fingerprint_of(b: Baseline, rule: str, owner: str | None = None) -> str:
    """The fingerprint of ``b``'s one finding of ``rule`` (for ``owner``): what a waiver of it names."""
    found = [f for f in b.evaluate().findings if f.rule.id == rule and owner in (None, f.owner.name)]
    assert len(found) == 1, [f.text for f in found]
    return found[0].fingerprint


def sarif_fingerprint(folder: Path, rule: str) -> str:
    """The fingerprint of the one finding of ``rule`` in a plan folder's ``policy.sarif``."""
    results = json.loads((folder / "policy.sarif").read_text())["runs"][0]["results"]
    (found,) = [r for r in results if r["ruleId"] == rule]
    return str(found["partialFingerprints"]["amlgpuFinding/v1"])


def baseline() -> Baseline:
    data = json.loads(FIXTURE.read_text())
    return Baseline(config=data["config"], resources=data["resources"])


def test_fixture_is_the_real_plan_of_the_baseline_stack(tmp_path: Path) -> None:
    planned = plan_baseline(tmp_path)
    recorded = {"config": baseline_stack_config(), "resources": planned}
    if os.environ.get("AMLGPU_UPDATE_FIXTURES"):
        FIXTURE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    assert json.loads(FIXTURE.read_text()) == recorded, (
        "the program's plan of the baseline stack changed; if intended, regenerate the fixture "
        "(AMLGPU_UPDATE_FIXTURES=1 .venv/bin/pytest tests/policies/test_baseline.py)"
    )


def test_baseline_has_no_mandatory_finding_and_covers_every_launch_style() -> None:
    base = baseline()
    report = base.evaluate()
    assert report.mandatory_failures == 0, [f.text for f in report.findings if f.enforcement == "mandatory"]
    assert {r.launcher for r in base.runs} == {"per-process", "torchrun", "horovod", "tf-multiworker"}
    assert {r.distribution["type"] for r in base.runs} == {"pytorch", "mpi", "tensorflow"}
