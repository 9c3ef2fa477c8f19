"""A value the gate flags as a secret reaches no artifact and no printed line, wherever it sits.

Each case plans (or runs) a stack holding one secret, as a user would, and reads back every file under
``build/`` and everything printed: the value must not be in any of them, and ``[secret]`` stands where it
was. The secrets are of both kinds the detector knows: a known shape (a Hugging Face token) and a
high-entropy literal under a credential name, which only the stack's own keys reveal.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel import secrets
from tests import cli
from tests.conftest import NS, make_project
from tests.reliability.test_corpus import STACK, amlgpu, good_config, plan_in_process, snapshot

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
    assert "resource-secrets-in-settings" in outcome.out and "tags.api_token" in outcome.out  # the workspace tag
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


# ------------------------------------------------------------------------------ one walk: no false alarms

NOT_SECRETS: list[tuple[str, str]] = [
    ("HF_TOKEN", "${{secrets.HF_TOKEN}}"),
    ("data", "azureml://datastores/workspaceblobstore/paths/train/"),
    ("HF_TOKEN", "@Microsoft.KeyVault(SecretUri=https://kv.vault.azure.net/secrets/hf-token)"),
    ("command", 'python train.py --token $HF_TOKEN --password "$DB_PASSWORD" --secret ${API_SECRET} '
                "--db-pass=$(cat /run/secrets/db)"),
    ("description", "Fine-tunes the model on support tickets; the token policy is on the wiki."),
    ("commit", "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c"),
    ("image", "mcr.microsoft.com/azureml/curated/acpt@sha256:9b2a3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7"),
    ("DB_PASSWORD_FILE", "/run/secrets/db-password"),
    ("secret_name", "hf-token.v2"),
    ("PWD", "/mnt/azureml/cr/j/abc"),
    ("data", "https://data.example.com/train.csv?version=2&format=parquet&page=3"),
    ("command", "python -c 'print(\"loss\" \"=\" \"0.1\")'"),
    ("command", "echo dGhpcyBpcyBqdXN0IGEgcGxhaW4gc2VudGVuY2UgaW4gYmFzZTY0 | base64 -d"),
    ("run_id", "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6"),
    ("password", "<your password>"),
]
"""References, reads of the environment, ordinary text, hashes and ids: nothing to flag, nothing to hide."""


@pytest.mark.parametrize(("key", "value"), NOT_SECRETS, ids=[f"{k}={v[:24]}" for k, v in NOT_SECRETS])
def test_references_prose_and_hashes_are_neither_flagged_nor_masked(key: str, value: str) -> None:
    assert list(secrets.walk({key: value})) == []
    assert secrets.mask_data({key: value}) == {key: value}


@pytest.mark.parametrize(("data", "field", "why"), [
    ({"tags": {"db_pwd": "a.b-c/d"}}, "tag db_pwd", "a password name with a literal value"),
    ({"inputs": {"conn": {"type": "uri_file", "path": "https://x.blob.core.windows.net/c/f?sv=2022&api_key="
                          "Q2x7Vb9Kd4Lm8Np3Rt6Wz1Yc5"}}}, "input conn", "a URL query parameter api_key"),
    ({"command": "python train.py --passphrase 'correct.horse-battery'"}, "command argument --passphrase",
     "a password name with a literal value"),
    ({"display_name": "hf_" + "Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya"}, "display_name", "holds a Hugging Face token"),
])
def test_the_walk_names_the_field(data: dict[str, Any], field: str, why: str) -> None:
    (found,) = secrets.secrets_in_definition(data)
    assert found.startswith(f"{field} (") and why in found


def test_what_the_walk_finds_is_what_mask_data_hides() -> None:
    """The same walk: each value found is gone from the masked data, and the rest of it is kept."""
    spec = {"command": f"python t.py --db-password=s3cr.et-pa55 --epochs 3 --token {HF}",
            "environment_variables": {"CLIENT_SECRET": "x.y-z~w.v"}, "tags": {"team": "vision"}}
    found = list(secrets.walk(spec))
    masked = json.dumps(secrets.mask_data(spec))
    assert {f.secret for f in found} >= {"s3cr.et-pa55", "x.y-z~w.v", HF}
    assert all(f.secret not in masked for f in found)
    assert "--epochs 3" in masked and "vision" in masked


def test_a_stack_of_references_and_ordinary_text_plans_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    """No false alarm: the plan's findings and job file (in process; the console script's masking of what is
    flagged is the test above)."""
    config = good_config()
    _run(config).update(
        description="Fine-tunes on the support tickets; reads its token from the key vault at run time.",
        tags={"commit": "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c", "secret_name": "hf-token"},
        environment_variables={"HF_TOKEN_SECRET_NAME": "hf-token", "DB_PASSWORD_FILE": "/run/secrets/db"},
    )
    _run(config)["command"] += ' --token "$HF_TOKEN" --data ${{inputs.data}}'
    _run(config)["inputs"] = {"data": {"type": "uri_folder", "path": "azureml://datastores/blob/paths/train/"}}
    project = make_project(tmp_path / "project", config, stack=STACK)

    outcome = plan_in_process(project, capsys)

    assert outcome.code == 0, outcome.out[-3000:]
    assert "secrets-in-" not in outcome.out
    assert secrets.MASK not in (project / "build" / STACK / "jobs" / "ddp.yml").read_text()


# ------------------------------------------------------------------------------ submit refuses what is flagged


def test_submit_refuses_a_pipeline_input_token_before_any_request(
    tmp_path: Path, azure: Callable[[dict[str, Any]], Any], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.jobs.test_pipelines import pipeline
    from tests.jobs.test_submit import submit_command
    from tests.reliability.test_corpus import plan_in_process

    config = good_config()
    config[f"{NS}:jobs"].append(pipeline(name="train-pipe", inputs={"epochs": 3, "token": HF}))
    project = make_project(tmp_path / "project", config, stack=STACK)
    assert plan_in_process(project, capsys).code == 1
    monkeypatch.chdir(project)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Pulumi CLI: the workspace comes from the plan's outputs.json
    replay = azure({})  # no route: any request would fail the test, and none may be made

    assert submit_command("train-pipe", "--stack", STACK) == 1
    captured = capsys.readouterr()
    assert "pipeline-secrets-in-definition" in captured.err and "pipeline input token" in captured.err
    assert "submit refused: run 'train-pipe' fails a mandatory policy" in captured.err
    assert replay.calls == []
    _assert_nowhere({"stdout": captured.out, "stderr": captured.err})
