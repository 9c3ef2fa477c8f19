"""Resolving declared runs against their stack: references, GPU-aware defaults, facts, code findings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from analysis import code_scan, interconnect
from analysis.secret_scan import scan_folder
from jobs.resolve import resolve_all, resolve_run
from stack.config import StackConfig, build
from tests.conftest import NS, ROOT, dev_config


def stack(root: Path, jobs: list[dict[str, Any]], **sections: Any) -> StackConfig:
    config = {k.removeprefix(f"{NS}:"): v for k, v in dev_config().items() if k.startswith(f"{NS}:")}
    config.update(sections, jobs=jobs)
    return build(config, location="westeurope", file="Pulumi.test.yaml", root=root)


def declared(**fields: Any) -> dict[str, Any]:
    return {"name": "r", "code": "src", "command": "python train.py", "environment": "acpt-pytorch",
            "compute": "gpu-a100", "distribution": {"type": "pytorch"}, **fields}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('training')\n")
    shutil.copytree(ROOT / "environments", tmp_path / "environments")  # the stack's build contexts
    return tmp_path


def resolve_one(root: Path, **fields: Any) -> Any:
    config = stack(root, [declared(**fields)])
    return resolve_run(config.jobs[0], config, root)


@pytest.mark.parametrize(
    ("command", "distribution", "expected"),
    [
        ("python train.py", {"type": "pytorch"}, {"type": "pytorch", "process_count_per_instance": 8}),
        ("python train.py", {"type": "pytorch", "process_count_per_instance": 4},
         {"type": "pytorch", "process_count_per_instance": 4}),
        ("torchrun --nproc_per_node 8 train.py", {"type": "pytorch"},
         {"type": "pytorch", "process_count_per_instance": 1}),
        ("accelerate launch --num_processes 8 train.py", {"type": "pytorch"},
         {"type": "pytorch", "process_count_per_instance": 1}),
        ("deepspeed --num_gpus 8 train.py", {"type": "pytorch"}, {"type": "pytorch", "process_count_per_instance": 1}),
        ("python horovod_train.py", {"type": "mpi"}, {"type": "mpi", "process_count_per_instance": 8}),
        ("python lightning_train.py --devices 8", {"type": "mpi"}, {"type": "mpi", "process_count_per_instance": 1}),
        ("python mnist.py", {"type": "tensorflow"},
         {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 0}),
        ("python mnist.py", {"type": "tensorflow", "worker_count": 1, "parameter_server_count": 1},
         {"type": "tensorflow", "worker_count": 1, "parameter_server_count": 1}),
    ],
)
def test_distribution_defaults_follow_the_launch_style(root: Path, command: str, distribution: dict[str, Any],
                                                       expected: dict[str, Any]) -> None:
    run = resolve_one(root, command=command, distribution=distribution, resources={"instance_count": 2})
    assert run.spec["distribution"] == expected


@pytest.mark.parametrize(
    ("size", "shm"),
    [("Standard_ND96asr_v4", "32g"), ("Standard_NC96ads_A100_v4", "16g"), ("Standard_NC4as_T4_v3", "4g"),
     ("Standard_ND128isr_NDR_GB200_v6", "16g")],
)
def test_shm_size_defaults_to_4g_per_gpu(root: Path, size: str, shm: str) -> None:
    clusters = [{"name": "gpu-a100", "size": size, "max_instances": 2}]
    config = stack(root, [declared()], clusters=clusters)
    assert resolve_run(config.jobs[0], config, root).spec["resources"]["shm_size"] == shm


def test_declared_shm_size_is_kept(root: Path) -> None:
    assert resolve_one(root, resources={"shm_size": "8g"}).spec["resources"] == {"instance_count": 1, "shm_size": "8g"}


def test_every_declared_setting_reaches_the_spec(root: Path) -> None:
    run = resolve_one(
        root,
        name="cifar",
        display_name="CIFAR",
        experiment_name="cifar-exp",
        description="Two nodes",
        tags={"team": "vision"},
        code="./src/",
        command="python train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}",
        environment="acpt-pytorch",
        compute="azureml:gpu-a100",
        inputs={
            "data": {"type": "uri_file", "path": "https://example.org/cifar.tar.gz", "mode": "download"},
            "lr": 0.2, "epochs": 3, "tag": "x",
        },
        outputs={"model": {"type": "uri_folder", "mode": "rw_mount"}},
        environment_variables={"NCCL_DEBUG": "INFO"},
        resources={"instance_count": 2, "shm_size": "16g", "docker_args": "--ulimit memlock=-1"},
        distribution={"type": "pytorch", "process_count_per_instance": 8},
        limits={"timeout": 7200},
        identity={"type": "managed", "client_id": "00000000-0000-0000-0000-0000000000aa"},
        services={"ssh": {"type": "ssh", "nodes": "all", "ssh_public_keys": "ssh-ed25519 AAAA x"},
                  "tb": {"type": "tensor_board", "log_dir": "outputs/tb"}},
        queue_settings={"job_tier": "standard", "priority": "high"},
    )
    assert run.spec == {
        "type": "command",
        "name": "cifar",
        "display_name": "CIFAR",
        "experiment_name": "cifar-exp",
        "description": "Two nodes",
        "tags": {"team": "vision"},
        "code": "src",
        "command": "python train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}",
        "environment": "azureml:acpt-pytorch:1",
        "compute": "azureml:gpu-a100",
        "inputs": {
            "data": {"type": "uri_file", "path": "https://example.org/cifar.tar.gz", "mode": "download"},
            "epochs": 3, "lr": 0.2, "tag": "x",
        },
        "outputs": {"model": {"type": "uri_folder", "mode": "rw_mount"}},
        "environment_variables": {"NCCL_DEBUG": "INFO"},
        "resources": {"instance_count": 2, "shm_size": "16g", "docker_args": "--ulimit memlock=-1"},
        "distribution": {"type": "pytorch", "process_count_per_instance": 8},
        "limits": {"timeout": 7200},
        # azure-ai-ml writes "managed" back as "managed_identity"; the spec says what the job file says.
        "identity": {"type": "managed_identity", "client_id": "00000000-0000-0000-0000-0000000000aa"},
        "services": {"ssh": {"type": "ssh", "nodes": "all", "ssh_public_keys": "ssh-ed25519 AAAA x"},
                     "tb": {"type": "tensor_board", "log_dir": "outputs/tb"}},
        "queue_settings": {"job_tier": "standard", "priority": "high"},
    }


def _keys_sorted_and_nothing_empty(value: Any) -> bool:
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(
            v is not None and v != {} and _keys_sorted_and_nothing_empty(v) for v in value.values()
        )
    return True


def test_spec_states_only_what_is_set_in_a_stable_order(root: Path) -> None:
    run = resolve_one(root)
    assert run.spec == {
        "code": "src", "command": "python train.py", "compute": "azureml:gpu-a100",
        "distribution": {"process_count_per_instance": 8, "type": "pytorch"},
        "environment": "azureml:acpt-pytorch:1", "name": "r",
        "resources": {"instance_count": 1, "shm_size": "32g"}, "type": "command",
    }
    assert _keys_sorted_and_nothing_empty(run.spec)
    assert json.dumps(resolve_one(root).spec) == json.dumps(run.spec)


@pytest.mark.parametrize(("code", "spec_code"), [("src", "src"), ("./src/", "src"), ("src/../src", None), (".", ".")])
def test_code_stays_relative_to_the_project_root(root: Path, code: str, spec_code: str | None) -> None:
    if spec_code is None:
        with pytest.raises(Exception, match="inside the project"):
            resolve_one(root, code=code)
        return
    assert resolve_one(root, code=code).spec["code"] == spec_code


REGISTRY = "azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/versions/18"


@pytest.mark.parametrize(
    ("reference", "spec_env", "facts"),
    [
        ("acpt-image", "azureml:acpt-image:1",
         {"name": "acpt-image", "source": "image", "pinned": True,
          "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18"}),
        ("azureml:acpt-image:1", "azureml:acpt-image:1", {"name": "acpt-image", "source": "image"}),
        ("acpt-pytorch", "azureml:acpt-pytorch:1", {"name": "acpt-pytorch", "source": "build", "image": None}),
        ("tf-gpu", "azureml:tf-gpu:1", {"name": "tf-gpu", "source": "build", "image": None,
                                         "capabilities": ("cuda", "horovod", "infiniband", "mpi", "nccl", "tensorflow"),
                                         "absent": ("deepspeed", "mpi4py", "pytorch")}),
        ("registry-acpt", REGISTRY, {"name": "registry-acpt", "source": "reference", "pinned": True}),
        ("azureml:team-env:7", "azureml:team-env:7", {"name": None, "source": "external", "pinned": True,
                                                     "capabilities": ()}),
        ("azureml:team-env@latest", "azureml:team-env@latest", {"source": "external", "pinned": False}),
        ("azureml:team-env:latest", "azureml:team-env:latest", {"pinned": False}),
        ("azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/labels/latest",
         "azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/labels/latest",
         {"pinned": False, "capabilities": ("cuda", "deepspeed", "mpi", "nccl", "pytorch")}),
    ],
)
def test_environment_references_and_facts(root: Path, reference: str, spec_env: str, facts: dict[str, Any]) -> None:
    image = {"name": "acpt-image", "version": "1",
             "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18"}
    environments = [*dev_config()[f"{NS}:environments"], {"name": "registry-acpt", "reference": REGISTRY}, image]
    config = stack(root, [declared(environment=reference)], environments=environments)
    run = resolve_run(config.jobs[0], config, root)
    assert run.spec["environment"] == spec_env
    assert run.environment.id == spec_env
    for key, value in facts.items():
        assert getattr(run.environment, key) == value, key


def test_cluster_facts_come_from_the_stack_and_the_sku_catalogue(root: Path) -> None:
    facts = resolve_one(root).cluster
    assert (facts.name, facts.size, facts.gpus, facts.gpu_vendor) == ("gpu-a100", "Standard_ND96asr_v4", 8, "nvidia")
    assert (facts.rdma, facts.sriov, facts.infiniband) == (True, True, True)
    assert (facts.min_instances, facts.max_instances, facts.tier) == (0, 2, "dedicated")


def test_launcher_and_its_count_are_recorded(root: Path) -> None:
    run = resolve_one(root, command="torchrun --nproc_per_node gpu train.py")
    assert (run.launcher, run.launcher_nproc_per_node) == ("torchrun", 8)


def test_resolve_all_is_sorted_by_name(root: Path) -> None:
    config = stack(root, [declared(name="zeta"), declared(name="alpha"), declared(name="mid")])
    assert [r.name for r in resolve_all(config, root)] == ["alpha", "mid", "zeta"]


def test_a_dockerfile_is_evaluated_once_per_plan_and_read_again_by_the_next(root: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    baked = interconnect.baked

    def counted(text: str, context: Path | None) -> interconnect.Baked:
        calls.append(text)
        return baked(text, context)

    monkeypatch.setattr(interconnect, "baked", counted)
    inline = {"build": {"path": "environments/horovod"}}
    runs = [declared(name="a", environment="horovod"), declared(name="b", environment="horovod"),
            declared(name="c", environment=inline), declared(name="d", environment="tf-gpu")]
    config = stack(root, runs)
    first = resolve_all(config, root)
    assert len(calls) == 3  # a and b share horovod; c (the same build, no provides) and d are read once each
    assert first[0].environment == first[1].environment
    assert first[2].environment.fabric_settings == first[0].environment.fabric_settings
    dockerfile = root / "environments" / "horovod" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "ENV NCCL_IB_DISABLE=1\n")
    second = resolve_all(config, root)  # a later plan in the same process reads the files again
    assert len(calls) == 6
    assert ("NCCL_IB_DISABLE", "1") in {s[:2] for s in second[0].environment.fabric_settings}
    assert [r.environment for r in second[3:]] == [r.environment for r in first[3:]]


PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----\n"


@pytest.mark.parametrize(
    ("path", "content", "found"),
    [
        ("id_rsa", "anything", True),
        ("keys/id_ed25519", "anything", True),
        ("keys/id_ed25519.pub", "ssh-ed25519 AAAA", False),
        ("certs/server.pem", PEM, True),
        ("certs/ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", False),
        ("ssh/key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n", True),
        ("ssh/enc.key", "-----BEGIN ENCRYPTED PRIVATE KEY-----\n", True),
        ("config.py", "TOKEN = 'ghp_" + "a" * 36 + "'\n", True),
        ("settings.ini", "aws_access_key_id = AKIA" + "ABCDEFGHIJKLMNOP" + "\n", True),
        ("notes.md", "hf_" + "x" * 34, True),
        ("conn.txt", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + "A" * 86 + "==;", True),
        ("store.pfx", "binary", True),
        ("train.py", "import torch\nprint('no secrets here: ghp_short')\n", False),
        # No folder, size or encoding is skipped: each of these was, and is uploaded all the same.
        ("weights.bin", "\0\0" + PEM, True),
        ("big.txt", "x" * (3 << 20) + PEM, True),
        (".venv/lib/id_rsa", "anything", True),
        ("node_modules/pkg/.npmrc", "//registry.npmjs.org/:_authToken=npm_" + "a1B2" * 9 + "\n", True),
        (".git/config", "[remote]\n  url = https://bot:" + "p4ssw0rd" + "@github.com/org/repo\n", True),
        ("utf16.txt", ("x = 'hf_" + "Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya" + "'").encode("utf-16"), True),
        # A secret across the boundary of two read chunks is read whole.
        ("across.txt", "x" * ((1 << 20) - 20) + " hf_" + "Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7Gs9Pw0Ya", True),
        # Assignments are judged by name and value in .env files and Dockerfiles, as the stack's own are.
        (".env", "WANDB_API_KEY=3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c\nDEBUG=1\n", True),
        ("prod.env", "export DB_PASSWORD='hunter22'\n", True),
        (".env.example", "WANDB_API_KEY=${WANDB_API_KEY}\nDB_PASSWORD=\n", False),
        ("Dockerfile", "FROM python:3.11\nENV WANDB_API_KEY 3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c\n", True),
        ("docker/Dockerfile.gpu", "FROM python:3.11\nARG API_TOKEN=Zq8Lm2Nx4Rt6Vb1Kc3Jd5Hf7\n", True),
        ("Dockerfile.cpu", "FROM python:3.11\nRUN wandb login 3f9a0c1e7b5d2a8c4e6f1b3d5a7c9e0f2b4d6a8c\n", True),
        ("Dockerfile.ok", "FROM python:3.11\nARG HF_TOKEN\nENV TOKENIZERS_PARALLELISM=false\n", False),
    ],
)
def test_code_scan_reports_private_keys_and_tokens(tmp_path: Path, path: str, content: str | bytes,
                                                   found: bool) -> None:
    target = tmp_path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    assert code_scan.scan(tmp_path).findings == ((path,) if found else ())


def test_a_folder_past_the_budget_names_what_was_not_read(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"x" * 1000)
    (tmp_path / "b.bin").write_bytes(b"y" * 1000 + PEM.encode())
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "id_rsa").write_text("by its name, read or not")
    scanned = scan_folder(tmp_path, budget=1500)
    assert scanned.findings == ("c/id_rsa",)
    assert scanned.unscanned == ("b.bin",)
    assert scan_folder(tmp_path).findings == ("b.bin", "c/id_rsa")


def test_code_findings_are_relative_sorted_paths_never_content(root: Path) -> None:
    (root / "src" / "z_id_rsa_copy").write_text(PEM)
    (root / "src" / "deploy").mkdir()
    (root / "src" / "deploy" / "id_rsa").write_text("x")
    run = resolve_one(root)
    assert run.code_findings == ("deploy/id_rsa", "z_id_rsa_copy")
    assert "PRIVATE" not in json.dumps(run.to_props())


def test_the_code_folder_files_the_interconnect_reading_reads_travel_with_the_run(root: Path) -> None:
    """A multi-node InfiniBand run carries the code folder's files its interconnect reading read (what it
    sources, ``BASH_ENV``, an ``NCCL_CONF_FILE``), and nothing else; through the props and back, as the policy
    pack receives it. A single-node run, or one that reads no file, carries nothing and its props have no key."""
    from stack.resolved import CODE_TEXTS_FILES, ResolvedRun

    (root / "src" / "env.sh").write_text("export NCCL_IB_DISABLE=1\n")
    (root / "src" / "unread.sh").write_text("export NCCL_NET=Socket\n")
    (root / "src" / "nccl.conf").write_text("NCCL_IB_DISABLE=1\n")
    command = "BASH_ENV=./env.sh bash -c 'python train.py'"
    run = resolve_one(root, command=command, resources={"instance_count": 2},
                      environment_variables={"NCCL_CONF_FILE": "nccl.conf"})
    assert run.code_texts == (("env.sh", "export NCCL_IB_DISABLE=1\n"), ("nccl.conf", "NCCL_IB_DISABLE=1\n"))
    props = json.loads(json.dumps(run.to_props()))
    assert ResolvedRun.from_props(props).code_texts == run.code_texts
    for single in (resolve_one(root, command=command), resolve_one(root, resources={"instance_count": 2})):
        assert single.code_texts == () and "code_texts" not in single.to_props()
    for i in range(CODE_TEXTS_FILES + 4):
        (root / "src" / f"s{i}.sh").write_text("true\n")
    many = resolve_one(root, resources={"instance_count": 2},
                       command="; ".join(f"source s{i}.sh" for i in range(CODE_TEXTS_FILES + 4)) + "; python train.py")
    assert len(many.code_texts) == CODE_TEXTS_FILES
