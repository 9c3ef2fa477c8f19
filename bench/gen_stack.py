"""Generate large, valid, policy-realistic stacks for the plan benchmark.

A generated stack looks like a big organisation's: ``clusters`` GPU clusters (InfiniBand sizes that scale
out, plus single-node sizes, some low-priority), ``environments`` pinned environments (curated images,
Docker build contexts, a registry reference) and ``runs`` runs cycling through every launch style the job
module knows (per-process DDP, torchrun, Lightning, Hugging Face Trainer, accelerate, DeepSpeed with and
without its CLI, Horovod and plain MPI, TensorFlow multi-worker). Multi-node runs go to InfiniBand
clusters within their node limit, process counts match the node's GPUs, every run has a timeout and
``shm_size``: the policy pack finds nothing mandatory, as in a stack that passes review.

The output is deterministic (no randomness): the same arguments give the same stack file.

Usage::

    .venv/bin/python bench/gen_stack.py --runs 100 --out /tmp/stack100   # then: cd /tmp/stack100 &&
    amlgpu plan --stack bench
    .venv/bin/python bench/gen_stack.py --teams 20 --runs 5 --out /tmp/teams   # then: amlgpu plan --all
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from azurefacts import availability
from azurefacts.skus import lookup

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "aml-gpu-training"
STACK = "bench"

# (size, short name, GPUs per node, InfiniBand): the catalogue's current NVIDIA sizes (azurefacts/skus.py).
INFINIBAND_SIZES = (
    ("Standard_ND96isr_H100_v5", "h100", 8),
    ("Standard_ND96isr_H200_v5", "h200", 8),
    ("Standard_ND96asr_v4", "a100", 8),
    ("Standard_ND96amsr_A100_v4", "a100x", 8),
    ("Standard_ND128isr_NDR_GB200_v6", "gb200", 4),
    ("Standard_ND40rs_v2", "v100", 8),
)
SINGLE_NODE_SIZES = (
    ("Standard_NC96ads_A100_v4", "nc-a100", 4),
    ("Standard_NC80adis_H100_v5", "nc-h100", 2),
    ("Standard_NC24ads_A100_v4", "nc-a100s", 1),
)


@dataclass(frozen=True)
class ClusterPlan:
    """What the run templates need to know about a generated cluster."""

    name: str
    gpus: int
    infiniband: bool
    max_instances: int


def clusters(count: int, region: str = "eastus2") -> list[dict[str, Any]]:
    """``count`` clusters: seven in ten InfiniBand (2..8 nodes), the rest single-node (every third low-priority),
    of the sizes Microsoft lists as sold in ``region`` (the table the gate's compute-size-offered-in-region reads)."""
    table = availability.load()
    offered = {kind: tuple(s for s in sizes if table.listed(s[0], region) is not False)
               for kind, sizes in (("ib", INFINIBAND_SIZES), ("single", SINGLE_NODE_SIZES))}
    out = []
    for i in range(count):
        infiniband = i % 10 < 7
        sizes = offered["ib" if infiniband else "single"]
        size, short, _ = sizes[i % len(sizes)]
        out.append({
            # Cluster names may not end in "-<digits>": the index goes first.
            "name": f"c{i:02d}-{short}",
            "size": size,
            "min_instances": 0,
            "max_instances": 2 + (i % 4) * 2 if infiniband else 1,
            "tier": "low_priority" if not infiniband and i % 3 == 0 else "dedicated",
            "idle_time_before_scale_down": 900 + 60 * (i % 5),
            "description": f"generated cluster {i} ({size})",
        })
    return out


# The ten environments a platform team might publish; `role` says which run templates may use each.
_ENVIRONMENTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("pytorch", {"name": "acpt-pytorch", "version": "18",
                 "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18"}),
    ("deepspeed", {"name": "deepspeed", "version": "3",
                   "build": {"path": "environments/deepspeed", "dockerfile_path": "Dockerfile"},
                   "provides": ["cuda", "nccl", "mpi", "mpi4py", "pytorch", "deepspeed", "transformers",
                                "accelerate", "infiniband"]}),
    ("horovod", {"name": "horovod", "version": "2",
                 "build": {"path": "environments/horovod"},
                 "provides": ["cuda", "nccl", "mpi", "horovod", "pytorch", "infiniband"]}),
    ("tensorflow", {"name": "tf-gpu", "version": "2",
                    "build": {"path": "environments/tensorflow"},
                    "provides": ["cuda", "nccl", "mpi", "tensorflow", "infiniband"]}),
    ("pytorch", {"name": "acpt-registry",
                 "reference": "azureml://registries/azureml/environments/acpt-pytorch-2.2-cuda12.1/versions/18",
                 "provides": ["cuda", "nccl", "mpi", "pytorch", "deepspeed", "infiniband"]}),
    ("pytorch", {"name": "ngc-pytorch", "version": "24.05",
                 "image": "nvcr.io/nvidia/pytorch:24.05-py3"}),
    ("lightning", {"name": "lightning", "version": "5",
                   "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
                   "provides": ["cuda", "nccl", "mpi", "pytorch", "lightning", "infiniband"]}),
    ("huggingface", {"name": "hf-transformers", "version": "7",
                     "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.2-cuda12.1:18",
                     "provides": ["cuda", "nccl", "mpi", "pytorch", "transformers", "accelerate", "deepspeed",
                                  "infiniband"]}),
    # acpt-pytorch-2.8-cuda12.6 version 15: released 2026-07-23 (azureml-assets release tags).
    ("pytorch", {"name": "acpt-pytorch-next", "version": "15",
                 "image": "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.8-cuda12.6:15"}),
    # Azure ML's Open MPI base for CUDA 12.8, the first CUDA that drives every size generated (GB200 included).
    ("mpi", {"name": "openmpi-cuda", "version": "1",
             "image": "mcr.microsoft.com/azureml/openmpi5.0-cuda12.8-ubuntu24.04:20260621.v1"}),
)


def environments(count: int) -> list[dict[str, Any]]:
    """The first ``count`` (at most 10) environments, every one pinned to a version or tag."""
    if not 4 <= count <= len(_ENVIRONMENTS):
        raise ValueError(f"environments must be between 4 and {len(_ENVIRONMENTS)}")
    return [dict(env) for _, env in _ENVIRONMENTS[:count]]


def _env_for(role: str, count: int, i: int) -> str:
    """An environment of ``role`` among the first ``count``, varied by ``i``; any PyTorch one if none fits."""
    names = [env["name"] for r, env in _ENVIRONMENTS[:count] if r == role]
    if not names:
        names = [env["name"] for r, env in _ENVIRONMENTS[:count] if r == "pytorch"]
    return names[i % len(names)]


Template = Callable[[int, ClusterPlan, int], dict[str, Any]]
"""(run index, cluster, nodes) -> the run's launch-specific keys."""


def _ddp(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": "python train_ddp.py --epochs ${{inputs.epochs}} --batch-size 256 --num-workers 4 "
                   "--checkpoint-dir ${{outputs.checkpoints}}",
        "role": "pytorch",
        "inputs": {"epochs": 4 + i % 5},
        "outputs": {"checkpoints": {"type": "uri_folder", "mode": "rw_mount"}},
        "distribution": {"type": "pytorch", "process_count_per_instance": c.gpus},
    }


def _torchrun(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": f"torchrun --nnodes {nodes} --nproc_per_node {c.gpus} --node_rank $NODE_RANK "
                   "--master_addr $MASTER_ADDR --master_port $MASTER_PORT train_ddp.py --epochs 8 --num-workers 4",
        "role": "pytorch",
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
    }


def _lightning(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": f"python lightning_train.py --devices {c.gpus} --num-nodes {nodes} --max-epochs 5",
        "role": "lightning",
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
    }


def _hf_trainer(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": "python hf_train.py --local_rank $LOCAL_RANK --output_dir ./outputs/hf "
                   "--per_device_train_batch_size 32 --num_train_epochs 2 --bf16 --report_to none",
        "role": "huggingface",
        "distribution": {"type": "pytorch", "process_count_per_instance": c.gpus},
    }


def _accelerate(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": f"accelerate launch --multi_gpu --num_machines {nodes} --num_processes {nodes * c.gpus} "
                   "--machine_rank $NODE_RANK --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT "
                   "hf_train.py --output_dir ./outputs/acc --per_device_train_batch_size 32 --report_to none",
        "role": "huggingface",
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
    }


def _deepspeed(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": "python deepspeed_train.py --deepspeed --deepspeed_config ds_config.json --epochs 3",
        "role": "deepspeed",
        "distribution": {"type": "pytorch", "process_count_per_instance": c.gpus},
    }


def _deepspeed_cli(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    # The deepspeed CLI reaches other nodes over SSH: one node only.
    return {
        "command": f"deepspeed --num_gpus {c.gpus} deepspeed_train.py --deepspeed --deepspeed_config ds_config.json",
        "role": "deepspeed",
        "nodes": 1,
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
    }


def _horovod(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": "python horovod_mnist.py --epochs ${{inputs.epochs}} --model-dir ${{outputs.model}}",
        "role": "horovod",
        "inputs": {"epochs": 5},
        "outputs": {"model": {"type": "uri_folder", "mode": "rw_mount"}},
        "distribution": {"type": "mpi", "process_count_per_instance": c.gpus},
    }


def _allreduce(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": "python allreduce_perf.py --min-bytes 8M --max-bytes 1G --step-factor 2 --iters 20",
        "role": "mpi",
        "environment_variables": {"NCCL_DEBUG": "WARN", "NCCL_IB_PCI_RELAXED_ORDERING": "1"},
        "distribution": {"type": "mpi", "process_count_per_instance": c.gpus},
    }


def _tensorflow(i: int, c: ClusterPlan, nodes: int) -> dict[str, Any]:
    return {
        "command": "python tf_mnist_multiworker.py --epochs 3 --data ${{inputs.data}} --model-dir ./outputs/model",
        "role": "tensorflow",
        "inputs": {"data": {"type": "uri_folder", "mode": "ro_mount",
                            "path": f"azureml://datastores/workspaceblobstore/paths/mnist/{i % 7}/"}},
        "distribution": {"type": "tensorflow", "worker_count": nodes},
    }


TEMPLATES: tuple[tuple[str, Template], ...] = (
    ("ddp", _ddp), ("torchrun", _torchrun), ("lightning", _lightning), ("hf-trainer", _hf_trainer),
    ("accelerate", _accelerate), ("deepspeed", _deepspeed), ("deepspeed-cli", _deepspeed_cli),
    ("horovod", _horovod), ("allreduce", _allreduce), ("tf-multiworker", _tensorflow),
)
"""One per launch style; run ``i`` uses template ``i % 10``."""


def runs(count: int, cluster_list: list[dict[str, Any]], environment_count: int) -> list[dict[str, Any]]:
    """``count`` runs spread over the clusters: multi-node on InfiniBand clusters, single-node elsewhere."""
    plans = [
        ClusterPlan(c["name"], lookup(c["size"]).gpus, lookup(c["size"]).infiniband, c["max_instances"])
        for c in cluster_list
    ]
    out = []
    for i in range(count):
        style, template = TEMPLATES[i % len(TEMPLATES)]
        # Stride through the clusters so each style meets every kind of cluster.
        cluster = plans[(i * 7 + i // len(TEMPLATES)) % len(plans)]
        nodes = min(2 + i % 3, cluster.max_instances) if cluster.infiniband else 1
        keys = template(i, cluster, nodes)
        nodes = keys.pop("nodes", nodes)
        role = keys.pop("role")
        run: dict[str, Any] = {
            "name": f"{style}-{i:04d}",
            "display_name": f"{style} run {i}, {nodes} x {cluster.gpus} GPU on {cluster.name}",
            "experiment_name": style,
            "code": "jobs/workloads",
            "environment": _env_for(role, environment_count, i),
            "compute": cluster.name,
            **keys,
            "resources": {"instance_count": nodes, "shm_size": f"{4 * cluster.gpus}g"},
            "limits": {"timeout": 3600 * (1 + i % 4)},
        }
        if i % 5 == 0:
            run["tags"] = {"team": f"team-{i % 13}", "cost-center": "ml-platform"}
        out.append(run)
    return out


def stack_config(run_count: int, *, cluster_count: int = 20, environment_count: int = 10,
                 region: str = "eastus2") -> dict[str, Any]:
    """The ``config:`` mapping of a generated stack file."""
    cluster_list = clusters(cluster_count, region)
    return {
        "azure-native:location": region,
        f"{NAMESPACE}:workspace": {
            "name": "mlw-gpu-bench",
            "resource_group": "rg-aml-gpu-bench",
            "public_network_access": "Disabled",
            "tags": {"environment": "bench", "cost-center": "ml-platform"},
        },
        f"{NAMESPACE}:network": {"address_space": "10.50.0.0/16", "subnet_prefix": "10.50.0.0/20"},
        f"{NAMESPACE}:clusters": cluster_list,
        f"{NAMESPACE}:environments": environments(environment_count),
        f"{NAMESPACE}:jobs": runs(run_count, cluster_list, environment_count),
    }


TEAM_REGIONS = ("eastus2", "westeurope", "swedencentral", "westus3")
"""Regions the team stacks cycle through."""


def team_name(index: int) -> str:
    return f"team-{index:03d}"


def team_config(index: int, *, runs: int = 5) -> dict[str, Any]:
    """Team ``index``'s stack, as an organisation with one stack per team has them: its own workspace,
    region and address space, three InfiniBand clusters, four environments (three of them built from a
    Docker context) and ``runs`` runs (each cluster's fabric check comes on top). Teams differ in names,
    region and network; their stacks are the same size, so N of them cost N times one."""
    if not 0 <= index < 250:
        raise ValueError("team index must be between 0 and 249 (one /16 of 10.0.0.0/8 each)")
    region = TEAM_REGIONS[index % len(TEAM_REGIONS)]
    config = stack_config(runs, cluster_count=3, environment_count=4, region=region)
    name = team_name(index)
    config[f"{NAMESPACE}:workspace"] = {
        **config[f"{NAMESPACE}:workspace"], "name": f"mlw-{name}", "resource_group": f"rg-ml-{name}",
        "tags": {"team": name, "cost-center": f"cc-{index:03d}"},
    }
    config[f"{NAMESPACE}:network"] = {"address_space": f"10.{index}.0.0/16", "subnet_prefix": f"10.{index}.0.0/20"}
    return config


def write_teams(folder: Path, count: int, *, runs: int = 5) -> list[str]:
    """A project holding ``count`` team stacks (:func:`team_config`); their names."""
    names = [team_name(i) for i in range(count)]
    for i, name in enumerate(names):
        write_project(folder, team_config(i, runs=runs), name)
    return names


def copy_program(folder: Path) -> None:
    """The real program and project file into ``folder`` (the program resolves paths against its own folder),
    and the folders runs and environments point into (``jobs/workloads/``, ``environments/``): a stack's paths
    must lead inside its project."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, folder / name)
    for name in ("environments", "jobs/workloads"):
        if not (folder / name).exists():
            shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))


def write_project(folder: Path, config: dict[str, Any], stack: str = STACK) -> Path:
    """A project folder holding the real program (:func:`copy_program`) and ``Pulumi.<stack>.yaml`` with
    ``config``."""
    copy_program(folder)
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, required=True, help="number of runs")
    parser.add_argument("--clusters", type=int, default=20, help="number of clusters (default 20)")
    parser.add_argument("--environments", type=int, default=10, help="number of environments, 4..10 (default 10)")
    parser.add_argument("--out", type=Path, required=True, help="project folder to create")
    parser.add_argument("--stack", default=STACK, help=f"stack name (default {STACK})")
    parser.add_argument("--teams", type=int, metavar="N",
                        help="write N team stacks (team-000...) of --runs runs each instead of one stack")
    args = parser.parse_args(argv)
    if args.teams is not None:
        if not 1 <= args.teams <= 250 or args.runs < 0:
            parser.error("--teams must be between 1 and 250 and --runs >= 0")
        names = write_teams(args.out, args.teams, runs=args.runs)
        print(f"{args.out}: {len(names)} stacks ({names[0]} ... {names[-1]})")
        return 0
    if args.runs < 0 or args.clusters < 1:
        parser.error("--runs must be >= 0 and --clusters >= 1")
    try:
        config = stack_config(args.runs, cluster_count=args.clusters, environment_count=args.environments)
    except ValueError as err:
        parser.error(str(err))
    write_project(args.out, config, args.stack)
    print(args.out / f"Pulumi.{args.stack}.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
