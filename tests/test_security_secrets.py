"""A value the gate flags as a secret reaches no artifact and no printed line, wherever it sits.

Each case plans (or runs) a stack holding one secret, as a user would, and reads back every file under
``build/`` and everything printed: the value must not be in any of them, and ``[secret]`` stands where it
was. The secrets are of both kinds the detector knows: a known shape (a Hugging Face token) and a
high-entropy literal under a credential name, which only the stack's own keys reveal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import secrets
from tests.conftest import NS, make_project
from tests.test_reliability_corpus import STACK, amlgpu, good_config, snapshot

HF = "hf_" + "Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya"
"""A known shape: found by value wherever it is."""
WANDB = "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c"
"""A W&B key: 40 hex characters, a secret only by the name it is given (or by `wandb login` before it)."""
PASSWORD = "hunter22-Tr0ub4dor"
"""A person's password under a password name: neither a shape nor high entropy."""
FRAGMENTS = (HF, WANDB, "Zq8Lm2Nx4Rt6Vb1Kc3Jd5", "3f9a0c1e7b5d2a8c4e6f1b3d", "hunter22")


def _run(config: dict[str, Any]) -> dict[str, Any]:
    run: dict[str, Any] = config[f"{NS}:jobs"][0]
    return run


PLACES: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("environment variable (shape)", lambda c: _run(c).update(environment_variables={"HF_TOKEN": HF})),
    ("environment variable (by name)", lambda c: _run(c).update(environment_variables={"WANDB_API_KEY": WANDB})),
    ("command (shape)", lambda c: _run(c).update(command=f"python train_ddp.py --epochs 1 --hf-token {HF}")),
    ("command (wandb login)", lambda c: _run(c).update(command=f"wandb login {WANDB} && python train_ddp.py")),
    ("command (by flag)", lambda c: _run(c).update(command=f"python train_ddp.py --wandb-api-key={WANDB}")),
    ("command (quoted password)", lambda c: _run(c).update(command=f"python train_ddp.py --db-password '{PASSWORD}'")),
    ("input (shape)", lambda c: _run(c).update(inputs={"token": HF})),
    ("input (by name)", lambda c: _run(c).update(inputs={"wandb_api_key": WANDB})),
    ("tag (shape)", lambda c: _run(c).update(tags={"owner": HF})),
    ("tag (by name)", lambda c: _run(c).update(tags={"db_password": PASSWORD})),
    ("workspace tag", lambda c: c[f"{NS}:workspace"]["tags"].update(api_token=WANDB)),
]


def _everything(project: Path, out: str, err: str) -> dict[str, str]:
    files = {name: data.decode("utf-8") for name, data in snapshot(project / "build").items()}
    assert files, "the plan wrote nothing"
    return {**files, "stdout": out, "stderr": err}


def _assert_nowhere(texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for fragment in FRAGMENTS:
            assert fragment not in text, f"{where} shows the secret"


@pytest.mark.parametrize("mutate", [p[1] for p in PLACES], ids=[p[0] for p in PLACES])
def test_a_flagged_secret_is_masked_in_every_artifact_and_message(
        tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> None:
    config = good_config()
    mutate(config)
    project = make_project(tmp_path / "project", config, stack=STACK)

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert outcome.code in (0, 1), outcome.err  # 1: a run's secret is a mandatory finding
    texts = _everything(project, outcome.out, outcome.err)
    _assert_nowhere(texts)
    assert any(secrets.MASK in text for name, text in texts.items() if name.endswith((".json", ".yml")))
    job = yaml.safe_load((project / "build" / STACK / "jobs" / "ddp.yml").read_text())
    assert isinstance(job, dict)  # masked before rendering: still the job file azure-ai-ml reads


def test_submit_dry_run_prints_the_masked_job_and_accepts_the_masked_plan(tmp_path: Path) -> None:
    config = good_config()
    _run(config).update(environment_variables={"HF_TOKEN": HF, "WANDB_API_KEY": WANDB})
    project = make_project(tmp_path / "project", config, stack=STACK)
    assert amlgpu(project, "plan", "--stack", STACK).code == 1

    outcome = amlgpu(project, "submit", "ddp", "--stack", STACK, "--dry-run",
                     env={"AZURE_SUBSCRIPTION_ID": "11111111-1111-1111-1111-111111111111"})

    assert outcome.code == 0, outcome.err
    assert "HF_TOKEN: [secret]" in outcome.out
    _assert_nowhere({"stdout": outcome.out, "stderr": outcome.err})


# ------------------------------------------------------------------------------------- error messages

BAD: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("a secret as the compute", lambda c: _run(c).update(compute=HF)),
    ("a secret as the environment", lambda c: _run(c).update(environment=f"azureml:{HF}")),
    ("a secret as the code folder", lambda c: _run(c).update(code=f"src/{HF}")),
    ("a secret as a number", lambda c: _run(c).update(resources={"instance_count": WANDB, "shm_size": "8g"},
                                                       environment_variables={"WANDB_API_KEY": WANDB})),
    ("a secret as a distribution type", lambda c: _run(c).update(distribution={"type": HF})),
    ("a secret as a cluster size", lambda c: c[f"{NS}:clusters"][0].update(size=HF)),
    ("a secret as a region", lambda c: c.__setitem__("azure-native:location", HF)),
    ("a secret as an input type", lambda c: _run(c).update(inputs={"data": {"type": HF, "path": "azureml:d:1"}})),
    ("a misspelt key holding a secret", lambda c: _run(c).update(environment_varaibles={"HF_TOKEN": HF})),
    ("a secret as a waiver's rule", lambda c: c.__setitem__(f"{NS}:waivers", [
        {"rule": HF, "resource": "ddp", "reason": "accepted for the migration window, see ticket", "owner": "a",
         "expires": "2030-01-01"}])),
    ("a password beside a broken line", lambda c: _run(c).update(
        environment_variables={"DB_PASSWORD": PASSWORD}, resources={"instance_count": "two"})),
]


@pytest.mark.parametrize("mutate", [b[1] for b in BAD], ids=[b[0] for b in BAD])
def test_no_error_message_quotes_a_secret(tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> None:
    config = good_config()
    mutate(config)
    project = make_project(tmp_path / "project", config, stack=STACK)

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert outcome.code in (0, 1, 2), outcome.err  # a region or a size is only checked against Azure
    assert "Traceback" not in outcome.err
    _assert_nowhere({"stdout": outcome.out, "stderr": outcome.err})


def test_a_yaml_error_on_the_secrets_line_does_not_quote_it(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project", good_config(), stack=STACK)
    stack = project / f"Pulumi.{STACK}.yaml"
    stack.write_text(stack.read_text() + f"  broken: [WANDB_API_KEY: {WANDB}\n")

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert outcome.code == 2
    _assert_nowhere({"stdout": outcome.out, "stderr": outcome.err})


def test_run_local_never_prints_the_secret(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: aml-gpu-training\nruntime: python\n")
    (project / "src" / "echo.py").write_text("import os, sys\nprint(sys.argv[1:], os.environ.get('WANDB_API_KEY'))\n")
    config = {
        "azure-native:location": "westeurope",
        f"{NS}:workspace": {"name": "mlw-emulate"},
        f"{NS}:clusters": [{"name": "gpu-a100", "size": "Standard_ND96asr_v4", "max_instances": 1}],
        f"{NS}:jobs": [{
            "name": "echo", "code": "src",
            "command": f"python echo.py --hf-token {HF} --password ${{{{inputs.db_password}}}}",
            "environment": "azureml:AzureML-ACPT-pytorch-1.13-py38-cuda11.7-gpu:1", "compute": "gpu-a100",
            "inputs": {"db_password": "given-at-run-time"}, "environment_variables": {"WANDB_API_KEY": WANDB},
            "distribution": {"type": "pytorch", "process_count_per_instance": 1},
        }],
    }
    (project / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    (project / "work").mkdir()

    done = subprocess.run(
        [sys.executable, "-m", "amlgpu", "run-local", "echo", "--stack", STACK, "--input", f"db_password={PASSWORD}"],
        cwd=project, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TMPDIR": str(project / "work")},
    )

    assert done.returncode == 0, done.stderr
    assert "command       python echo.py --hf-token [secret]" in done.stderr
    _assert_nowhere({"stdout": done.stdout, "stderr": done.stderr})
