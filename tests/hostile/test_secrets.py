"""A value the gate flags as a secret reaches no artifact and no printed line, wherever it sits.

Each case plans (or runs) a stack holding one secret, as a user would, and reads back every file under
``build/`` and everything printed: the value must not be in any of them, and ``[secret]`` stands where it
was. The secrets are of both kinds the detector knows: a known shape (a Hugging Face token) and a
high-entropy literal under a credential name, which only the stack's own keys reveal.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel import secrets
from tests import cli
from tests.conftest import NS, make_project
from tests.reliability.test_corpus import STACK, amlgpu, good_config, snapshot

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


def _hf(n: int) -> str:
    return HF[:-2] + f"{n:02d}"


def _hex(n: int) -> str:
    return WANDB[:-2] + f"{n:02x}"


PLACES: list[tuple[str, str, Callable[[dict[str, Any], str], None]]] = [
    ("environment variable (shape)", _hf(1), lambda c, v: _env(c).update(HF_TOKEN=v)),
    ("environment variable (by name)", _hex(2), lambda c, v: _env(c).update(WANDB_API_KEY=v)),
    ("command (shape)", _hf(3), lambda c, v: _command(c, f"--hf-token {v}")),
    ("command (wandb login)", _hex(4), lambda c, v: _command(c, f"&& wandb login {v}")),
    ("command (by flag)", _hex(5), lambda c, v: _command(c, f"--wandb-api-key={v}")),
    ("command (quoted password)", PASSWORD + "6", lambda c, v: _command(c, f"--db-password '{v}'")),
    ("input (shape)", _hf(7), lambda c, v: _run(c).setdefault("inputs", {}).update(token=v)),
    ("input (by name)", _hex(8), lambda c, v: _run(c).setdefault("inputs", {}).update(wandb_api_key=v)),
    ("tag (shape)", _hf(9), lambda c, v: _run(c).setdefault("tags", {}).update(owner=v)),
    ("tag (by name)", PASSWORD + "10", lambda c, v: _run(c).setdefault("tags", {}).update(db_password=v)),
    ("workspace tag", _hex(11), lambda c, v: c[f"{NS}:workspace"]["tags"].update(api_token=v)),
]
"""Where a secret can sit, each with a value of its own (one plan holds them all)."""


def _env(config: dict[str, Any]) -> dict[str, Any]:
    variables: dict[str, Any] = _run(config).setdefault("environment_variables", {})
    return variables


def _command(config: dict[str, Any], words: str) -> None:
    _run(config)["command"] += " " + words


def _everything(project: Path, out: str, err: str) -> dict[str, str]:
    files = {name: data.decode("utf-8") for name, data in snapshot(project / "build").items()}
    assert files, "the plan wrote nothing"
    return {**files, "stdout": out, "stderr": err}


def _assert_nowhere(texts: dict[str, str], fragments: tuple[str, ...] = FRAGMENTS) -> None:
    for where, text in texts.items():
        for fragment in fragments:
            assert fragment not in text, f"{where} shows the secret {fragment[:6]}..."


@pytest.mark.slow
def test_a_flagged_secret_is_masked_in_every_artifact_and_message(tmp_path: Path) -> None:
    config = good_config()
    for _, value, place in PLACES:
        place(config, value)
    project = make_project(tmp_path / "project", config, stack=STACK)

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert outcome.code == 1, outcome.err  # a run's secret is a mandatory finding
    found = outcome.out.count("run-secrets-in-")
    assert found >= len(PLACES) - 1, outcome.out  # every run placement is flagged (the workspace tag is not a run's)
    texts = _everything(project, outcome.out, outcome.err)
    for (where, value, _) in PLACES:
        assert all(value not in text for text in texts.values()), f"{where}: shown"
    job = yaml.safe_load((project / "build" / STACK / "jobs" / "ddp.yml").read_text())
    assert job["environment_variables"] == {"HF_TOKEN": secrets.MASK, "WANDB_API_KEY": secrets.MASK}
    assert job["tags"]["db_password"] == secrets.MASK  # masked before rendering: still a job file
    assert "--hf-token [secret]" in job["command"] and "wandb login [secret]" in job["command"]


@pytest.mark.slow
def test_submit_dry_run_accepts_the_masked_plan_and_refuses_the_secret_unprinted(tmp_path: Path) -> None:
    config = good_config()
    _run(config).update(environment_variables={"HF_TOKEN": HF, "WANDB_API_KEY": WANDB})
    project = make_project(tmp_path / "project", config, stack=STACK)
    assert amlgpu(project, "plan", "--stack", STACK).code == 1

    outcome = amlgpu(project, "submit", "ddp", "--stack", STACK, "--dry-run",
                     env={"AZURE_SUBSCRIPTION_ID": "11111111-1111-1111-1111-111111111111"})

    # Exit 1, not 2: the run matched the plan's masked outputs.json (a mismatch is refused as bad input
    # first), then the gate refused it for the secrets it holds, naming them, never printing them.
    assert outcome.code == 1, outcome.err
    assert "run-secrets-in-environment-variables" in outcome.err and "environment variable HF_TOKEN" in outcome.err
    assert "submit refused: run 'ddp' fails a mandatory policy" in outcome.err
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

    done = cli.amlgpu(project, "run-local", "echo", "--stack", STACK, "--input", f"db_password={PASSWORD}",
                      env={**os.environ, "TMPDIR": str(project / "work")}, timeout=120)

    assert done.returncode == 0, done.stderr
    assert "command       python echo.py --hf-token [secret]" in done.stderr
    _assert_nowhere({"stdout": done.stdout, "stderr": done.stderr})


def test_a_file_of_thousands_of_tokens_is_refused_not_searched_for_each(tmp_path: Path) -> None:
    config = good_config()
    _env(config).update({f"HF_TOKEN_{n}": _hf(n % 100) + f"{n:05d}" for n in range(secrets.MAX_REMEMBERED + 1)})
    project = make_project(tmp_path / "project", config, stack=STACK)

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert outcome.code == 2
    assert f"more than {secrets.MAX_REMEMBERED} distinct values look like secrets" in outcome.err
    assert not (project / "build").exists()
    _assert_nowhere({"stdout": outcome.out, "stderr": outcome.err}, ("Zq8Lm2Nx4Rt6Vb1Kc3Jd5",))
