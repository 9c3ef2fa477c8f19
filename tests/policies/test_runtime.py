"""What a run meets on its nodes, and what its code does: the image's CUDA against the GPU (azurefacts/cuda.py and
its NVIDIA-sourced table), runtime overrides, Batch AI variables, scripts that never join a process group
(read with ast), and the precision fixes for counts that no GPU sees (echo, Lightning under MPI, TensorFlow
parameter servers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis import pyscan
from azurefacts import cuda, skus
from importer import Context, import_files
from jobs.resolve import resolve_run
from policies.rules import launch, runtime
from policies.rules.runs import gpus, tensorflow
from stack.config import build
from stack.project import load_stack
from tests.conftest import NS, ROOT, dev_config, make_project
from tests.jobs.test_resolve import resolve_one as _run
from tests.policies.test_precision import _check


@pytest.fixture
def root(tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(ROOT / "environments", tmp_path / "environments")
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import torch.distributed as dist\ndist.init_process_group('nccl')\n")
    (src / "prep.py").write_text("import pandas\nfrom helpers import clean\nclean()\n")
    (src / "helpers.py").write_text("import os\ndef clean():\n    print(os.environ.get('RANK'))\n")
    (src / "fit.py").write_text("from lightning import Trainer\nTrainer(devices=8).fit(None)\n")
    (src / "old.py").write_text("import os\nmaster = os.environ['AZ_BATCHAI_MPI_MASTER_NODE']\n")
    return tmp_path


# ------------------------------------------------------------------ CUDA against the GPU


def test_every_nvidia_size_of_the_catalogue_has_an_architecture() -> None:
    nvidia = {sku.gpu_model for sku in skus.CATALOGUE.values() if sku.vendor == "nvidia"}
    assert nvidia <= cuda.models(), sorted(nvidia - cuda.models())


@pytest.mark.parametrize(("reference", "version", "certain"), [
    ("nvidia/cuda:10.2-cudnn7-devel-ubuntu18.04", (10, 2), True),
    ("nvcr.io/nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04", (12, 8), True),
    ("mcr.microsoft.com/azureml/openmpi3.1.2-cuda10.1-cudnn7-ubuntu18.04:20210615.v1", (10, 1), True),
    ("mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:20250701.v1", (11, 8), True),
    ("pytorch/pytorch:1.6.0-cuda10.1-cudnn7-runtime", (10, 1), True),
    # names that are hints only: curated names have disagreed with their content
    ("azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest", (12, 6), False),
    ("azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/versions/18", (12, 1), False),
    ("azureml:AzureML-tensorflow-2.12-cuda11@latest", (11,), False),
    ("myacr.azurecr.io/team/train:torch2.1-cu118", (11, 8), False),
    ("azureml:AzureML-Minimal:3", None, None),
    ("nvcr.io/nvidia/pytorch:24.05-py3", None, None),
])
def test_an_images_cuda_is_read_from_its_name(reference: str, version: tuple[int, ...] | None,
                                              certain: bool | None) -> None:
    found = cuda.image_cuda(reference)
    assert (found.version if found else None, found.certain if found else None) == (version, certain)


@pytest.mark.parametrize(("model", "version", "verdict"), [
    ("A100", (10, 2), False), ("A100", (11, 0), True), ("A100", (11,), True),
    ("H100 SXM", (11, 7), False), ("H100 SXM", (11, 8), True), ("H100 SXM", (11,), None), ("H200", (12,), True),
    ("GB200", (12, 6), False), ("GB200", (12, 8), True), ("B300", (12, 8), True),
    ("V100", (12, 9), True), ("V100", (13, 0), False), ("V100", (13,), False), ("V100", (8, 0), False),
    ("K80", (12, 1), False),
])
def test_which_cuda_drives_which_gpu(model: str, version: tuple[int, ...], verdict: bool | None) -> None:
    arch = cuda.architecture(model)
    assert arch is not None
    assert cuda.supports(arch, version) is verdict


@pytest.mark.parametrize(("environment", "mandatory", "advisory"), [
    # an image used as it is, its CUDA stated by its publisher: certain
    ({"image": "mcr.microsoft.com/azureml/openmpi3.1.2-cuda10.1-cudnn7-ubuntu18.04:20210615.v1"}, True, False),
    ({"image": "nvidia/cuda:10.2-cudnn7-devel-ubuntu18.04"}, True, False),
    ({"image": "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04"}, False, False),
    # a conda file on top may bring its own CUDA libraries (PyTorch wheels carry theirs): a hint only
    ({"image": "nvidia/cuda:10.2-cudnn7-devel-ubuntu18.04", "conda_file": "environments/conda.yml"}, False, True),
    # a curated environment's name: a hint only
    ("azureml:AzureML-pytorch-1.6-ubuntu18.04-py37-cuda10.1-gpu:3", False, True),
    ("azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest", False, False),
    # SDK v1's curated PyTorch 1.6 environment: PyTorch built 1.6 for CUDA 10.2 at most
    ("azureml:AzureML-PyTorch-1.6-GPU:3", False, True),
    ("azureml:AzureML-PyTorch-1.10-GPU:3", False, False),  # 11.3 at most, and A100 needs 11.0: cannot tell
])
def test_an_image_too_old_for_the_gpu_is_blocked_only_when_certain(root: Path, environment: Any, mandatory: bool,
                                                                   advisory: bool) -> None:
    (root / "environments" / "conda.yml").write_text("dependencies: [python=3.10]\n")
    run = _run(root, environment=environment, command="python train.py")
    assert run.cluster.gpu_model == "A100"
    assert bool(_check(runtime.run_image_cuda_supports_gpu, run)) is mandatory
    assert bool(_check(runtime.run_image_cuda_hint, run)) is advisory


# ------------------------------------------------------------------ runtime overrides, Batch AI variables

OVERRIDE = json.dumps({"capabilities_registry": {"registry": {"url": "commonruntimedev.azurecr.io"},
                                                 "repo_prefix": "user/x/fix", "regional_tag_prefix": False}})


@pytest.mark.parametrize(("variables", "found"), [
    ({"AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE": OVERRIDE},
     ["sets AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE: Azure ML's job runtime is pulled from another registry to "
      "commonruntimedev.azurecr.io"]),
    ({"AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE": "not json"},
     ["sets AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE: Azure ML's job runtime is pulled from another registry"]),
    ({"AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE": "[" * 30_000 + "]" * 30_000},  # nested deeper than json reads
     ["sets AZUREML_CR_BOOTSTRAPPER_CONFIG_OVERRIDE: Azure ML's job runtime is pulled from another registry"]),
    # Microsoft's own examples set these; they choose Azure ML's runtime, not where it comes from
    ({"AZUREML_COMPUTE_USE_COMMON_RUNTIME": "True", "AZUREML_COMMON_RUNTIME_USE_INTERACTIVE_CAPABILITY": "True"}, []),
])
def test_runtime_overrides_are_named_with_their_registry(root: Path, variables: dict[str, str],
                                                          found: list[str]) -> None:
    run = _run(root, environment_variables=variables)
    assert _check(runtime.run_runtime_override, run) == found


def test_batchai_reads_without_a_fallback_are_reported_with_file_and_line(root: Path, tmp_path: Path) -> None:
    (root / "src" / "fallback.py").write_text(
        "import os\n"
        "a = os.environ.get('AZ_BATCH_MASTER_NODE') or os.environ.get('AZ_BATCHAI_MPI_MASTER_NODE')\n"
        "b = os.environ.get('AZ_BATCHAI_TASK_INDEX', '0')\n"
        "NAMES = ('AZ_BATCHAI_MPI_MASTER_NODE', 'AZ_BATCH_MASTER_NODE')\n"
        "c = os.getenv('AZ_BATCHAI_NUM_GPUS')\n")
    run = _run(root)
    assert run.legacy_variables == ("fallback.py:5 AZ_BATCHAI_NUM_GPUS", "old.py:2 AZ_BATCHAI_MPI_MASTER_NODE")
    assert "old.py:2 AZ_BATCHAI_MPI_MASTER_NODE" in _check(runtime.run_legacy_batchai_variables, run)[0]
    assert pyscan.legacy_variable_reads(ROOT / "jobs" / "workloads") == ()  # the shipped ones fall back
    (root / "src" / "start.sh").write_text('MASTER=${AZ_BATCHAI_MPI_MASTER_NODE:-localhost}\n'
                                           'python train.py --master "$AZ_BATCHAI_JOB_MOUNT_ROOT"\n')
    run = _run(root, command="python train.py --world $AZ_BATCHAI_NUM_NODES && bash start.sh")
    assert run.legacy_variables[:2] == ("the command $AZ_BATCHAI_NUM_NODES",
                                        "start.sh line 2 $AZ_BATCHAI_JOB_MOUNT_ROOT")


# ------------------------------------------------------------------ scripts that never join a process group


@pytest.mark.parametrize(("source", "frameworks", "opaque"), [
    ("import torch\ntorch.distributed.init_process_group('nccl')\n", {"torch.distributed"}, False),
    ("from torch.nn.parallel import DistributedDataParallel as DDP\n", {"torch.distributed"}, False),
    ("from torch import nn\nm = nn.parallel.DistributedDataParallel\n", {"torch.distributed"}, False),
    ("import deepspeed\n", {"DeepSpeed"}, False),
    ("import horovod.torch as hvd\n", {"Horovod"}, False),
    ("import pytorch_lightning as pl\n", {"Lightning"}, False),
    ("from accelerate import Accelerator\n", {"accelerate"}, False),
    ("from transformers import Trainer, TrainingArguments\n", {"Hugging Face Trainer"}, False),
    ("import transformers\nt = transformers.Seq2SeqTrainer\n", {"Hugging Face Trainer"}, False),
    ("import tensorflow as tf\ns = tf.distribute.MultiWorkerMirroredStrategy()\n", {"tf.distribute"}, False),
    ("import tensorflow as tf\nm = tf.keras.Sequential()\n", set(), False),
    ("import pandas as pd\npd.read_csv('x').to_parquet('y')\n", set(), False),
    ("import os\nos.system('torchrun train.py')\n", set(), True),
    ("import subprocess\n", set(), True),
    ("__import__('torch.distributed')\n", set(), True),
    ("def broken(:\n", set(), True),
    ('"""Only a docstring."""\n', set(), True),
])
def test_a_script_is_read_for_process_group_use(tmp_path: Path, source: str, frameworks: set[str],
                                                opaque: bool) -> None:
    (tmp_path / "s.py").write_text(source)
    reading = pyscan.process_group_use(tmp_path, "s.py")
    assert (set(reading.frameworks), reading.opaque is not None) == (frameworks, opaque)


@pytest.mark.parametrize(("tail", "opaque"), [
    ("x = a" + ".b" * 600 + "\n", False),  # deeper than a recursive walk follows (about 450), as deep as Python builds
    ("if a:\n    pass\n" + "elif a:\n    pass\n" * 600, False),
    ("x = a" + ".b" * 100_000 + "\n", True),  # deeper than Python's own parser builds
])
def test_deep_scripts_are_read_without_recursion(tmp_path: Path, tail: str, opaque: bool) -> None:
    (tmp_path / "s.py").write_text("import torch.distributed\n" + tail)
    reading = pyscan.process_group_use(tmp_path, "s.py")
    assert (set(reading.frameworks), reading.opaque is not None) == ({"torch.distributed"} if not opaque else set(),
                                                                      opaque)


def test_code_folder_modules_are_followed_within_bounds(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "dist.py").write_text("import torch.distributed\n")
    (tmp_path / "main.py").write_text("from pkg import dist\n")
    (tmp_path / "rel.py").write_text("from pkg.dist import x\n")
    assert pyscan.process_group_use(tmp_path, "main.py").frameworks == {"torch.distributed"}
    assert pyscan.process_group_use(tmp_path, "rel.py").frameworks == {"torch.distributed"}
    for i in range(pyscan.MAX_MODULES + 1):
        (tmp_path / f"m{i}.py").write_text(f"import m{i + 1}\n")
    assert "more than" in (pyscan.process_group_use(tmp_path, "m0.py").opaque or "")


def test_a_file_changed_between_two_readings_is_read_again(tmp_path: Path) -> None:
    # pyscan keeps each file's facts per path and content (pyscan._module): a file edited between two plans in one
    # process (amlgpu plan --all, a test session) answers as it now reads, for both questions, and back again.
    script, helper = tmp_path / "s.py", tmp_path / "helper.py"
    helper.write_text("import os\n")
    head = "import helper\nimport os\n"
    versions: list[tuple[str, set[str], tuple[str, ...]]] = [
        (head + "rank = os.environ['AZ_BATCHAI_TASK_INDEX']\n", set(), ("s.py:3 AZ_BATCHAI_TASK_INDEX",)),
        (head + "rank = os.environ['AZ_BATCHAI_JOB_NAME']\n", set(), ("s.py:3 AZ_BATCHAI_JOB_NAME",)),
        (head + "rank = os.environ.get('RANK')\n", set(), ()),
    ]
    for _ in range(2):
        for source, frameworks, reads in versions:
            script.write_text(source)
            assert pyscan.process_group_use(tmp_path, "s.py").frameworks == frameworks
            assert pyscan.legacy_variable_reads(tmp_path) == reads
        helper.write_text("import torch.distributed\n")  # a module the script imports changes too
        script.write_text("import helper\n")
        assert pyscan.process_group_use(tmp_path, "s.py").frameworks == {"torch.distributed"}
        helper.write_text("import os\n")
        assert pyscan.process_group_use(tmp_path, "s.py").frameworks == set()
        script.write_text('"""only a docstring"""\n')
        assert pyscan.process_group_use(tmp_path, "s.py").opaque == "s.py holds no code"
        script.write_text("def broken(:\n")
        assert pyscan.process_group_use(tmp_path, "s.py").opaque == "s.py does not parse as Python"


@pytest.mark.parametrize(("command", "nodes", "per_node", "copies"), [
    ("python prep.py && python train.py", 2, 8, 16),  # the preprocessing step runs on every GPU
    ("python prep.py", 1, 8, 8),
    ("python train.py", 2, 8, None),
    ("python prep.py", 1, 1, None),  # started once
    ("torchrun --nproc_per_node 8 prep.py", 2, 1, 16),
])
def test_a_script_without_a_process_group_started_more_than_once_is_advised(
        root: Path, command: str, nodes: int, per_node: int, copies: int | None) -> None:
    run = _run(root, command=command, resources={"instance_count": nodes},
               distribution={"type": "pytorch", "process_count_per_instance": per_node})
    found = _check(launch.run_copies_without_process_group, run)
    if copies is None:
        assert found == []
    else:
        assert found == [f"prep.py joins no process group and is started {copies} times: {copies - 1} duplicate "
                         "copies doing the same work"]


# ------------------------------------------------------------------ counts no GPU sees


@pytest.mark.parametrize(("command", "exceeds"), [
    # azureml-examples' pipelines-with-components/basics/6b_pytorch_hello_world: 2 processes per node that echo
    ('echo "RANK: $RANK LOCAL_RANK: $LOCAL_RANK NODE_RANK: $NODE_RANK"', False),
    ("hostname", False),
    ("python train.py", True),
])
def test_processes_that_open_no_gpu_may_outnumber_the_gpus(root: Path, command: str, exceeds: bool) -> None:
    run = _run(root, command=command, compute="gpu-a100",
               distribution={"type": "pytorch", "process_count_per_instance": 16})
    assert bool(_check(gpus.run_processes_exceed_gpus, run)) is exceeds


@pytest.mark.parametrize(("command", "idle"), [
    ("python fit.py", False),  # Lightning starts its own processes per node, under MPI too
    ("python train.py", True),
])
def test_lightning_under_mpi_leaves_no_gpu_idle(root: Path, command: str, idle: bool) -> None:
    run = _run(root, command=command, distribution={"type": "mpi", "process_count_per_instance": 1})
    assert bool(_check(gpus.run_gpus_left_idle, run)) is idle


@pytest.mark.parametrize(("distribution", "nodes", "blocked"), [
    ({"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1}, 2, False),  # azure-ai-ml's example
    ({"type": "tensorflow", "parameter_server_count": 2}, 2, False),
    ({"type": "tensorflow", "worker_count": 3}, 2, True),
])
def test_tensorflow_parameter_servers_run_beside_the_workers(root: Path, distribution: dict[str, Any], nodes: int,
                                                             blocked: bool) -> None:
    run = _run(root, distribution=distribution, resources={"instance_count": nodes}, environment="tf-gpu")
    assert bool(_check(tensorflow.run_tensorflow_task_count, run)) is blocked


def test_the_importer_and_the_gate_agree_on_parameter_servers(tmp_path: Path) -> None:
    """SDK v1's TensorflowConfiguration(worker_count=2, parameter_server_count=1) (Microsoft Learn's v1 guide)
    imports as 2 workers and 1 parameter server on 2 nodes, and the gate passes what the importer wrote."""
    config = dev_config()
    config[f"{NS}:clusters"].append({"name": "gpu-cluster", "size": "Standard_ND96asr_v4", "max_instances": 4})
    import_project = make_project(tmp_path / "project", config)
    (import_project / "imports" / "v1" / "src").mkdir(parents=True)
    (import_project / "imports" / "v1" / "src" / "train.py").write_text("import tensorflow as tf\n")
    script = ROOT / "tests" / "fixtures" / "import" / "v1" / "tensorflow_parameter_server.py"
    (import_project / "imports" / "v1" / script.name).write_text(script.read_text())
    ctx = Context(root=import_project, stack=load_stack("test", import_project), compute="gpu-cluster")
    (draft,) = import_files([import_project / "imports" / "v1" / "tensorflow_parameter_server.py"], ctx)
    assert draft.run["distribution"] == {"type": "tensorflow", "worker_count": 2, "parameter_server_count": 1}
    assert draft.run["resources"]["instance_count"] == 2
    values = {k.removeprefix(f"{NS}:"): v for k, v in load_stack("test", import_project).file.config.items()
              if k.startswith(f"{NS}:")}
    values["jobs"] = [draft.run]
    values["environments"] = [*values.get("environments", []), *draft.environments]
    planned = build(values, location="westeurope", file="Pulumi.test.yaml", root=import_project)
    run = resolve_run(planned.jobs[0], planned, import_project)
    assert _check(tensorflow.run_tensorflow_task_count, run) == []
