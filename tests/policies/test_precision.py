"""Precision of the gate: secrets by value wherever they sit, profiles, unknown is not missing, the shape of
the cluster decides, and the defects it used to miss (entry script, launcher in a shell script, FROM latest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from azurefacts import capabilities
from jobs.resolve import resolve_run
from kernel.errors import ConfigError
from kernel.secrets import judge, secrets_in_definition
from policies.packconfig import STRICT_CONFIG, load, resolve
from policies.rules.runs import capabilities as capability_rules
from policies.rules.runs import consistency, gpus
from tests.conftest import ROOT
from tests.jobs.test_resolve import declared, stack

HF = "hf_" + "Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya"
AWS = "AKIA" + "Q3E7R2T9Y4U8I1O6"
GH = "ghp_" + "a" * 12 + "B7c9D2e4F6g8H1j3K5m7N9p2Q4"
SAS = ("https://acct.blob.core.windows.net/c/f?sv=2022-11-02&se=2030-01-01&sp=r&sig="
       "Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ2kL4=")
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
CONNECTION = ("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + "Zm9vYmFy" * 11
              + "==;EndpointSuffix=core.windows.net")


@pytest.mark.parametrize(("key", "value", "kind"), [
    ("AZUREML_SSH_KEY", "generated-key", None),  # a file name: the DeepSpeed autotuning example
    ("NHC_ARGS", "-v -d -a", None),
    ("MODEL", "bert-large-uncased", None),
    ("CHECKPOINT", "/tmp/outputs/checkpoint", None),
    ("HF_TOKEN", "${{inputs.hf_token}}", None),
    ("ANY", HF, "holds a Hugging Face token"),
    ("ANY", AWS, "holds an AWS access key id"),
    ("ANY", GH, "holds a GitHub token"),
    ("ANY", SAS, "holds a SAS token"),
    ("ANY", PEM, "holds a private key"),
    ("ANY", CONNECTION, "holds a storage connection string with an account key"),
    ("WANDB_API_KEY", "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c",
     "a credential name with a high-entropy literal value"),
    ("--api-key", "3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f", "a credential name with a high-entropy literal value"),
    ("DB_PASSWORD", "hunter2", "a password name with a literal value"),
    ("DB_PASSWORD", "secrets/db-password.txt", None),
    # Formats the detector used to miss.
    ("ANY", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey="
     "Ab3dE5gH7jK9mN1pQ3sT5vX7zB9dF1hJ2kL4mN6pQ8=", "holds a Service Bus or Event Hubs shared access key"),
    ("ANY", "Ab3dE5gH" * 10 + "7jK9mN==", "holds a storage account key"),
    ("ANY", "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "holds a Google API key"),
    ("ANY", "https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/" + "a1B2c3D4e5F6g7H8i9J0k1L2",
     "holds a Slack webhook"),
    ("ANY", "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "holds an npm token"),
    ("ANY", "pypi-AgEIcHlwaS5vcmc" + "Ab3dE5gH" * 9, "holds a PyPI token"),
    ("ANY", "sk_" + "live_" + "a1B2c3D4e5F6g7H8i9J0k1L2", "holds a Stripe key"),
    ("--repo", "https://bot:s3cr3tP4ss@github.com/org/repo.git", "holds a password in a URL"),
    ("-H", "Authorization: Bearer a1B2c3D4e5F6g7H8", "holds an Authorization header"),
    ("ANY", "Xy18Q~" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7", "holds a Microsoft Entra client secret"),
    # References and published values are not secrets.
    ("HF_TOKEN", "@Microsoft.KeyVault(SecretUri=https://kv.vault.azure.net/secrets/hf-token)", None),
    ("--repo", "https://bot:${GH_TOKEN}@github.com/org/repo.git", None),
    ("-H", "Authorization: Bearer $TOKEN", None),
    ("AZURE_STORAGE_KEY",
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==", None),
])
def test_secrets_are_judged_by_value(key: str, value: str, kind: str | None) -> None:
    assert judge(key, value) == kind


@pytest.mark.parametrize(("spec", "found"), [
    ({"command": f"python train.py --hf-token {HF} --key {AWS}"},
     ["command argument --hf-token (holds a Hugging Face token)",
      "command argument --key (holds an AWS access key id)"]),
    ({"command": f"HF_TOKEN={HF} python train.py"}, ["command argument HF_TOKEN (holds a Hugging Face token)"]),
    ({"command": f"python train.py --token={GH}"}, ["command argument --token (holds a GitHub token)"]),
    ({"command": "python train.py --data ${{inputs.data}}", "inputs": {"data": {"type": "uri_file", "path": SAS}}},
     ["input data (holds a SAS token)"]),
    ({"command": "python train.py", "inputs": {"token": HF}}, ["input token (holds a Hugging Face token)"]),
    ({"command": "python train.py", "tags": {"owner": "team", "aws": AWS}}, ["tag aws (holds an AWS access key id)"]),
    ({"command": "python train.py --deepspeed_config ds_config.json --ssh-key generated-key --lr 3e-05"}, []),
    ({"command": "wandb login 3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c && python train.py"},
     ["command argument (holds a Weights & Biases API key)"]),
    ({"command": "curl -H 'Authorization: Bearer a1B2c3D4e5F6g7H8' https://x && python train.py --password $PW"},
     ["command argument -H (holds an Authorization header)"]),
])
def test_one_detector_reads_command_inputs_and_tags(spec: dict[str, Any], found: list[str]) -> None:
    assert secrets_in_definition(spec) == found
    assert all(HF not in f and AWS not in f for f in found)  # never the value


def test_strict_profile_makes_hygiene_mandatory_and_nothing_else() -> None:
    default, strict = resolve(None), resolve(load(STRICT_CONFIG))
    changed = {rule for rule in default if default[rule].enforcement != strict[rule].enforcement}
    assert changed == {"run-environment-pinned", "run-timeout-set", "run-shm-size-sufficient",
                       "environment-image-pinned"}
    assert all(strict[rule].enforcement == "mandatory" for rule in changed)
    # A rule's own entry wins over the profile.
    assert resolve({"profile": "strict", "run-timeout-set": "advisory"})["run-timeout-set"].enforcement == "advisory"


def test_unknown_profile_names_the_key() -> None:
    with pytest.raises(ConfigError, match="profile 'strcit' is not one of default, strict"):
        resolve({"profile": "strcit"})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("import torch\nprint('training')\n")  # a training script: it opens a GPU
    (tmp_path / "src" / "launch.sh").write_text('#!/bin/bash\ncmd="deepspeed --hostfile /job/hostfile "\n'
                                                 'if [[ $RANK == 0 ]]; then eval $cmd train.py; fi\n')
    (tmp_path / "src" / "torchrun.sh").write_text("torchrun --nproc_per_node 8 train.py\n")
    (tmp_path / "src" / "health.sh").write_text("nvidia-smi\nibstat\n")
    (tmp_path / "ctx").mkdir()
    return tmp_path


def _run(root: Path, **fields: Any) -> Any:
    config = stack(root, [declared(**fields)])
    return resolve_run(config.jobs[0], config, root)


def _check(rule: Any, run: Any) -> list[str]:
    return list(rule.check(run, **rule.parameters))


@pytest.mark.parametrize(("command", "missing"), [
    ("python train.py", ()),
    ("python Megatron-DeepSpeed/pretrain_gpt.py --tp 8", ("Megatron-DeepSpeed/pretrain_gpt.py",)),
    ("pip list && python missing.py", ("missing.py",)),
    ("bash absent.sh", ("absent.sh",)),
    ("python ${{inputs.script}} --x 1", ()),  # known at run time only
    ("python /opt/app/train.py", ()),  # in the image, not the code folder
    ("echo hello", ()),
])
def test_entry_script_must_be_in_the_code_folder(root: Path, command: str, missing: tuple[str, ...]) -> None:
    if "inputs.script" in command:
        run = _run(root, command=command, inputs={"script": "train.py"})
    else:
        run = _run(root, command=command)
    assert run.missing_scripts == missing
    assert bool(_check(consistency.run_entry_script_exists, run)) == bool(missing)


@pytest.mark.parametrize(("command", "launcher", "script"), [
    ("bash launch.sh 8 train.py", "deepspeed", "launch.sh"),
    ("sh torchrun.sh", "torchrun", "torchrun.sh"),
    ("bash health.sh", "per-process", None),
])
def test_a_launcher_in_a_shell_script_counts_as_per_node(root: Path, command: str, launcher: str,
                                                         script: str | None) -> None:
    run = _run(root, command=command, distribution={"type": "pytorch", "process_count_per_instance": 8})
    assert (run.launcher, run.launcher_script) == (launcher, script)
    assert bool(_check(gpus.run_launcher_on_per_process_launch, run)) == (script is not None)


@pytest.mark.parametrize(("command", "idle"), [
    ("python train.py", True),  # a per-process training script on one of 8 GPUs
    ("bash health.sh", False),  # a health check: one process per node by design
    ("echo done", False),
    ("nvidia-smi", False),
])
def test_one_process_per_node_is_a_finding_only_when_it_leaves_gpus_idle(root: Path, command: str,
                                                                         idle: bool) -> None:
    run = _run(root, command=command, distribution={"type": "pytorch", "process_count_per_instance": 1})
    assert bool(_check(gpus.run_gpus_left_idle, run)) == idle


def test_from_latest_in_a_build_context_is_judged_like_image_latest(root: Path) -> None:
    (root / "ctx" / "Dockerfile").write_text("FROM mcr.microsoft.com/azureml/curated/"
                                             "acpt-pytorch-1.11-py38-cuda11.3-gpu"
                                             ":latest\nRUN pip install deepspeed==0.12.6\n")
    run = _run(root, environment={"build": {"path": "ctx"}})
    assert _check(capability_rules.run_environment_pinned, run) == [
        "environment inline (build ctx) builds FROM "
        "mcr.microsoft.com/azureml/curated/acpt-pytorch-1.11-py38-cuda11.3-gpu:latest, a moving tag"]
    assert run.environment.state("deepspeed") == "present"


@pytest.mark.parametrize(("dockerfile", "present", "absent"), [
    ("FROM mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20250701.v1\n",
     {"mpi", "nccl", "cuda"}, {"deepspeed", "horovod", "pytorch", "tensorflow", "mpi4py"}),
    ("FROM mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20250701.v1\n"
     "RUN pip install torch==2.3.1 deepspeed mpi4py\n", {"mpi", "pytorch", "deepspeed", "mpi4py"},
     {"horovod", "tensorflow"}),
    ("FROM mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20250701.v1\n"
     "RUN pip install -r https://example.com/req.txt\n", {"mpi"}, set()),  # what it installs cannot be seen
    ("FROM mcr.microsoft.com/azureml/curated/acpt-pytorch-2.8-cuda12.6:15\n", {"deepspeed", "pytorch"}, set()),
    ("FROM example.com/own/image:1\n", set(), set()),
])
def test_build_context_capabilities_are_tri_state(dockerfile: str, present: set[str], absent: set[str]) -> None:
    caps = capabilities.read_dockerfile(dockerfile).capabilities
    assert present <= caps.present
    assert caps.absent == frozenset(absent)


def test_acpt_infiniband_is_unknown_not_present() -> None:
    # No public evidence of InfiniBand user-space libraries in ACPT (shared reference, azureml-assets).
    caps = capabilities.of_reference("mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18")
    assert caps.state("infiniband") == "unknown" and caps.state("deepspeed") == "present"
    assert capabilities.of_reference("azureml/openmpi5.0-cuda12.4-ubuntu22.04").state("nccl") == "unknown"
