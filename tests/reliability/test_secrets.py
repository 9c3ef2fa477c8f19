"""Values set with ``pulumi config set --secret`` (stored as ``secure: v1:...``) never show: not encrypted, not
in plain text, in no output file, stack output or message.

Where a secret may go, and where it may not (the design, from the code's own evidence):

* provider credentials (``azure-native:clientSecret``): the plan succeeds and the value shows nowhere;
* tags and other workspace or cluster settings: refused (exit 2). They become resource properties and
  tags, readable by anyone with Reader access (and, under `pulumi up`, stored in plain text in the state);
* a run: refused (exit 2). Azure ML keeps a job's environment variables and inputs in its definition,
  readable by everyone with workspace access (the policy pack's run-secrets-in-environment-variables says
  the same), and the job file and ``amlgpu submit`` would carry the placeholder instead of the value;
* a value the plan must read (a region, a subnet id, a size): refused (exit 2); offline it cannot be
  decrypted, and none of them is a secret.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime.config import set_all_config

from kernel.errors import ConfigError
from stack.config import from_pulumi_config
from stack.stackfile import StackFile
from tests.conftest import NS, ROOT, make_project
from tests.reliability.test_corpus import STACK, amlgpu, good_config, names, plan_in_process, snapshot

CIPHERTEXT = "v1:ZW5jcnlwdGVkLWJ5LXB1bHVtaQ==:Q2lwaGVydGV4dA=="
"""What `pulumi config set --secret` stores (base64 salt and ciphertext); none of it may ever show."""
FRAGMENTS = (CIPHERTEXT, "ZW5jcnlwdGVk", "Q2lwaGVydGV4dA")


def secure() -> dict[str, str]:
    return {"secure": CIPHERTEXT}


def _assert_nowhere(texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for fragment in FRAGMENTS:
            assert fragment not in text, f"{where} shows the secret"


def _everything(project: Path, out: str, err: str) -> dict[str, str]:
    files = {name: data.decode("utf-8") for name, data in snapshot(project / "build").items()}
    return {**files, "stdout": out, "stderr": err}


@pytest.mark.slow
def test_provider_credentials_are_masked_everywhere(tmp_path: Path) -> None:
    config = good_config()
    config["azure-native:clientSecret"] = secure()
    project = make_project(tmp_path / "project", config, stack=STACK)
    # A provider credential in a stack file is the platform's to allow (stack-provider-settings-allowed).
    (project / "policies").mkdir()
    (project / "policies" / "config.json").write_text(json.dumps({"stack-provider-settings-allowed": {
        "allowed_keys": ["azure-native:location", "azure-native:clientSecret"]}}))

    outcome = amlgpu(project, "plan", "--stack", STACK)

    assert outcome.code == 0, outcome.err
    _assert_nowhere(_everything(project, outcome.out, outcome.err))
    outputs = json.loads((project / "build" / STACK / "outputs.json").read_text())
    assert outputs["workspace"]["name"] == config[f"{NS}:workspace"]["name"]
    assert outputs["jobs"]["ddp"]["compute"] == "azureml:gpu-a100"


def _run(config: dict[str, Any]) -> dict[str, Any]:
    return config[f"{NS}:jobs"][0]


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("run environment variable", lambda c: _run(c).update(environment_variables={"WANDB_API_KEY": secure()}),
     f"{NS}:jobs[0].environment_variables.WANDB_API_KEY", "key vault"),
    ("run literal input", lambda c: _run(c).update(inputs={"hf_token": secure()}),
     f"{NS}:jobs[0].inputs.hf_token", "key vault"),
    ("run command", lambda c: _run(c).update(command=secure()), f"{NS}:jobs[0].command", "key vault"),
    ("region", lambda c: c.__setitem__("azure-native:location", secure()), "azure-native:location",
     "set it in plain text"),
    ("subnet id", lambda c: c.__setitem__(f"{NS}:network", {"subnet_id": secure()}), f"{NS}:network.subnet_id",
     "set it in plain text"),
    ("cluster size", lambda c: c[f"{NS}:clusters"][0].update(size=secure()), f"{NS}:clusters[0].size",
     "set it in plain text"),
    ("workspace tag", lambda c: c[f"{NS}:workspace"]["tags"].update(owner=secure()),
     f"{NS}:workspace.tags.owner", "Reader access"),
    ("cluster tag", lambda c: c[f"{NS}:clusters"][0].update(tags={"budget-code": secure()}),
     f"{NS}:clusters[0].tags.budget-code", "Reader access"),
]


@pytest.mark.parametrize(("case", "mutate", "key", "says"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_secret_where_it_cannot_stay_secret_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, mutate: Callable[[dict[str, Any]], None],
    key: str, says: str,
) -> None:
    config = good_config()
    mutate(config)
    project = make_project(tmp_path / "project", config, stack=STACK)

    outcome = plan_in_process(project, capsys)

    assert outcome.code == 2, outcome.err
    assert "Traceback" not in outcome.err
    assert names(outcome.error_line, key), outcome.error_line
    assert says in outcome.error_line
    _assert_nowhere({"stdout": outcome.out, "stderr": outcome.err})
    assert not (project / "build").exists()


# ---------------------------------------------------------------------------------- under `pulumi up`
# The Pulumi CLI decrypts secrets and hands the program plain values plus the list of secret keys.


def _decrypted(config: dict[str, Any], secret_keys: list[str]) -> StackFile:
    return StackFile(path=Path(f"Pulumi.{STACK}.yaml"), config=config, secret_keys=frozenset(secret_keys), lines={})


def test_under_pulumi_up_a_secret_run_is_refused_without_echoing_it() -> None:
    config = good_config()
    _run(config)["environment_variables"] = {"WANDB_API_KEY": "hunter2-plaintext"}
    stack = _decrypted(config, [f"{NS}:jobs"])
    set_all_config(stack.cli_config(), sorted(stack.secret_keys))
    with pytest.raises(ConfigError) as raised:
        from_pulumi_config(STACK, ROOT)
    assert raised.value.key == f"{NS}:jobs"
    assert "key vault" in raised.value.message
    assert "hunter2" not in str(raised.value)


def test_under_pulumi_up_a_secret_tag_is_refused_without_echoing_it() -> None:
    config = good_config()
    config[f"{NS}:workspace"]["tags"]["owner"] = "alice-plaintext"
    stack = _decrypted(config, [f"{NS}:workspace"])
    set_all_config(stack.cli_config(), sorted(stack.secret_keys))
    with pytest.raises(ConfigError) as raised:
        from_pulumi_config(STACK, ROOT)
    assert raised.value.key == f"{NS}:workspace"
    assert "alice-plaintext" not in str(raised.value)
