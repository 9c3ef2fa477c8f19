"""``amlgpu init``: write a commented stack file that plans clean on the first try.

``amlgpu init --stack NAME [--sku SIZE] [--nodes N] [--region REGION] [--operator-ip-range CIDR]...`` writes
``Pulumi.<NAME>.yaml``
into the project: a private workspace, one GPU cluster of SIZE that scales from zero to N nodes, the
curated PyTorch environment and one distributed run, each key commented. The run trains with the
project's sample trainer (``jobs/workloads/train_ddp.py``); in a project without it, a starter script
is written to ``src/train.py`` (the folder the stack names). Nothing is overwritten: an existing
stack file is refused unless ``--force`` is given.

The stack creates its own network, which nothing is inside during its first ``pulumi up``: an environment built
from a context in this repository is uploaded from the deploying machine through the storage firewall, so
``--operator-ip-range`` (repeatable) states that machine's public egress address or range
(``network.operator_ip_ranges``); without it the file says where to put one when a build context is added.

Then ``amlgpu plan --stack NAME`` plans it offline (exit 0), and ``amlgpu run-local ddp-train --stack
NAME`` runs it on this machine. Exit 0 when written, 2 on bad input (nothing written). A size that Microsoft's
products-by-region table does not list in the region is written with a warning naming where it is sold.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from kernel import regex as linear
from kernel.errors import EXIT_OK, UserError

DEFAULT_SKU = "Standard_ND96asr_v4"
DEFAULT_REGION = "westeurope"
IMAGE = "mcr.microsoft.com/azureml/curated/acpt-pytorch-2.8-cuda12.6:15"
"""Azure Container for PyTorch, the current curated release (azureml-assets tag
environment/acpt-pytorch-2.8-cuda12.6/15, 2026-07-23): PyTorch, DeepSpeed and NCCL, as the dev stack's
environments/pytorch starts from."""
SAMPLE_CODE = "jobs/workloads"
STARTER_CODE = "src"
STARTER_SCRIPT = '''"""Starter training script written by `amlgpu init`: each rank joins the process group and
takes part in one all-reduce. Replace it with your training; Azure ML sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT for each process."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    value = torch.ones(1, device="cuda" if cuda else "cpu")
    dist.all_reduce(value)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: all-reduce sum {value.item():.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

_STACK_NAME = linear.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,28}$")  # $: the end, not a final newline


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "init",
        help="write a commented stack file (Pulumi.<stack>.yaml) that plans clean",
        description=__doc__,
    )
    parser.add_argument("--stack", "-s", required=True, help="stack name: writes Pulumi.<stack>.yaml")
    parser.add_argument("--sku", default=DEFAULT_SKU, help=f"GPU VM size of the cluster (default {DEFAULT_SKU})")
    parser.add_argument("--nodes", type=int, help="most nodes the cluster scales to, and the run's node count "
                        "(default: 2 on InfiniBand sizes, else 1)")
    parser.add_argument("--region", default=DEFAULT_REGION, help=f"Azure region (default {DEFAULT_REGION})")
    parser.add_argument("--operator-ip-range", action="append", default=[], metavar="CIDR",
                        help="public IPv4 address or range `pulumi up` uploads build contexts from (repeatable; "
                        "network.operator_ip_ranges)")
    parser.add_argument("--force", action="store_true", help="replace an existing stack file")
    parser.set_defaults(func=run)


def _cluster_name(model: str) -> str:
    """``gpu-h100`` for "H100 SXM": a valid cluster name from the GPU model."""
    return "gpu-" + re.sub(r"[^a-z0-9]+", "-", model.lower().split()[0]).strip("-")[:20]


def _upload_path(ranges: list[str], region: str) -> str:
    """The network section's lines that state how ``pulumi up`` reaches the storage for build-context uploads."""
    if ranges:
        lines = ["# The deploying machine's public egress address or range: build contexts are uploaded from it",
                 f"# through the storage firewall (not from an Azure host in {region}: IP rules ignore those).",
                 f"operator_ip_ranges: [{', '.join(ranges)}]"]
    else:
        lines = ["# An environment built from a folder here (`build:`) is uploaded by `pulumi up` to the workspace",
                 "# storage, which only this network (created by that same `pulumi up`) reaches privately: list the",
                 "# deploying machine's public egress range as operator_ip_ranges: [<address or CIDR>]",
                 "# (`amlgpu preflight` shows this machine's address)."]
    return "".join(f"    {line}\n" for line in lines)


def stack_text(stack: str, *, sku: Any, nodes: int, region: str, code: str, ranges: list[str] | None = None) -> str:
    """The commented stack file (its values are validated by the caller before anything is written)."""
    cluster = _cluster_name(sku.gpu_model)
    fabric = f"InfiniBand {sku.ib_generation}" if sku.infiniband else "no InfiniBand"
    if code == SAMPLE_CODE:
        command = ("python train_ddp.py --epochs 2 --samples 65536 --batch-size 256 --num-workers 4 "
                   "--checkpoint-dir ./outputs/checkpoints")
    else:
        command = "python train.py"
    return f"""\
# yaml-language-server: $schema=schema/stack.schema.json
# Stack {stack!r}, written by `amlgpu init`. Keys follow Azure ML CLI v2; every key and its default:
# docs/config.md. Plan it offline with `amlgpu plan --stack {stack}`; create it with `pulumi up --stack {stack}`.
config:
  # The Azure region of every resource.
  azure-native:location: {region}
  aml-gpu-training:workspace:
    # Workspace names are unique per resource group; the storage account, key vault and registry get
    # names derived from it.
    name: mlw-{stack.lower().replace('_', '-').replace('.', '-')}
    resource_group: rg-aml-{stack.lower().replace('_', '-').replace('.', '-')}
    # Private by default: reached through private endpoints in the network below. `Enabled` opens it.
    public_network_access: Disabled
    tags:
      environment: {stack}
  # A new virtual network for the clusters (or give subnet_id of an existing subnet instead).
  aml-gpu-training:network:
    address_space: 10.40.0.0/16
    subnet_prefix: 10.40.0.0/20
{_upload_path(ranges or [], region)}  aml-gpu-training:clusters:
    # {sku.gpus}x {sku.gpu_model} {sku.gpu_memory_gb} GB per node, {fabric}. Scales to zero when idle: you pay
    # only while a run is on it.
    - name: {cluster}
      size: {sku.size}
      min_instances: 0
      max_instances: {nodes}
      tier: dedicated
      idle_time_before_scale_down: 900
  aml-gpu-training:environments:
    # Azure Container for PyTorch (the current curated release): PyTorch, DeepSpeed and NCCL, pinned to a tag.
    - name: acpt-pytorch
      version: "1"
      image: {IMAGE}
  # Declared runs (CLI v2 command job keys). `amlgpu plan` writes each to build/{stack}/jobs/<name>.yml,
  # `amlgpu run-local <name> --stack {stack}` runs it here, `amlgpu submit <name> --stack {stack}` sends it.
  aml-gpu-training:jobs:
    # Per-process launch: Azure ML starts one process per GPU on each node ({nodes} x {sku.gpus} ranks).
    - name: ddp-train
      display_name: DDP trainer, {nodes} x {sku.gpus} {sku.gpu_model}
      experiment_name: ddp
      code: {code}
      command: {command}
      environment: acpt-pytorch
      compute: {cluster}
      resources:
        instance_count: {nodes}
      distribution:
        type: pytorch
        process_count_per_instance: {sku.gpus}
      # Azure ML cancels the run after this many seconds (a run without a limit runs until cancelled).
      limits:
        timeout: 3600
"""


def run(args: argparse.Namespace) -> int:
    from azurefacts import availability, regions, skus
    from stack.config import from_stackfile
    from stack.infrastructure import Network
    from stack.project import find_root
    from stack.stackfile import read

    if not _STACK_NAME.match(args.stack):
        raise UserError(f"stack name {args.stack!r} is invalid: 1-29 letters, digits, '_', '.' or '-'",
                        key="--stack")
    try:
        sku = skus.lookup(args.sku)
    except ValueError as err:
        raise UserError(str(err), key="--sku") from None
    if sku.vendor != "nvidia":
        raise UserError(f"{sku.size} has {sku.gpu_model} GPUs (ROCm): init writes a CUDA environment; start from an "
                        "NVIDIA size and change the environment (docs/frameworks.md)", key="--sku")
    if sku.retired:
        raise UserError(f"{sku.size} is retired ({sku.retired}): choose a current size", key="--sku")
    nodes = args.nodes if args.nodes is not None else (2 if sku.infiniband else 1)
    if not 1 <= nodes <= 64:
        raise UserError(f"--nodes {nodes}: give 1 to 64 nodes", key="--nodes")
    try:
        regions.check(args.region)
    except ValueError as err:
        raise UserError(str(err), key="--region") from None
    region = regions.load().canonical(args.region)  # "West Europe" is written as westeurope
    ranges = list(args.operator_ip_range)
    try:
        Network(operator_ip_ranges=ranges)
    except ValueError as err:  # pydantic's ValidationError: the model's own words for the first bad range
        first = err.errors()[0]["msg"] if hasattr(err, "errors") else str(err)
        raise UserError(first.removeprefix("Value error, "), key="--operator-ip-range") from None
    root = find_root()
    path = root / f"Pulumi.{args.stack}.yaml"
    if path.exists() and not args.force:
        raise UserError(f"{path.name} exists; give --force to replace it, or choose another --stack", key="--stack")
    code = SAMPLE_CODE if (root / SAMPLE_CODE / "train_ddp.py").is_file() else STARTER_CODE
    text = stack_text(args.stack, sku=sku, nodes=nodes, region=str(region), code=code, ranges=ranges)

    staged = path.with_name(f".{path.name}.init")
    try:
        written = []
        if code == STARTER_CODE and not (root / STARTER_CODE / "train.py").exists():
            (root / STARTER_CODE).mkdir(exist_ok=True)
            (root / STARTER_CODE / "train.py").write_text(STARTER_SCRIPT, encoding="utf-8")
            written.append(f"{STARTER_CODE}/train.py")
        staged.write_text(text, encoding="utf-8")
        from_stackfile(read(staged), root)  # what init writes must validate: checked before it replaces anything
        staged.replace(path)
    except OSError as err:
        raise UserError(f"cannot write {path.name}: {err.strerror or err}") from None
    finally:
        staged.unlink(missing_ok=True)
    print(f"Wrote {path.name}" + (f" and {', '.join(written)}" if written else "") + ".")
    unsold = availability.not_offered(sku.size, str(region))
    if unsold:  # written anyway (the table can lag Azure), but the plan's gate will say the same
        sys.stdout.flush()
        print(f"warning: {unsold}. `amlgpu plan` fails compute-size-offered-in-region until the stack moves "
              "(azure-native:location) or the size changes, or a waiver names the table's date", file=sys.stderr)
    print(f"Next: amlgpu plan --stack {args.stack}", file=sys.stdout)
    return EXIT_OK
