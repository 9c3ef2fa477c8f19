"""DeepSpeed ZeRO training that starts the three ways Azure ML can start it.

* ``distribution: pytorch`` with one process per GPU (Azure ML's DeepSpeed example): Azure ML sets
  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT; ``deepspeed.init_distributed`` reads them. No SSH,
  no hostfile, any number of nodes.
* the ``deepspeed`` CLI as the per-node launcher (``deepspeed --num_gpus 8 deepspeed_train.py ...``,
  process_count_per_instance 1): on one node it starts the GPU processes itself. Across nodes it
  needs SSH between them, so multi-node runs use the per-process launch instead.
* ``distribution: mpi``: DeepSpeed discovers ranks through mpi4py (the environment must have it).

``--deepspeed --deepspeed_config ds_config.json`` select the engine and its config (ZeRO stage 2,
bf16, AdamW with warm-up). The model: an MLP learning a synthetic regression (same data on every
rank, sharded by the DistributedSampler). Every rank calls ``save_checkpoint`` (ZeRO shards the
optimizer state); rank 0 prints the metrics.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import deepspeed
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=262144)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("outputs/checkpoints"))
    parser.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed CLI")
    parser = deepspeed.add_config_arguments(parser)  # --deepspeed, --deepspeed_config
    args: argparse.Namespace = parser.parse_args(argv)
    return args


def synthetic(samples: int, features: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, 1, generator=generator) / features**0.5
    return TensorDataset(x, torch.tanh(x @ w) + 0.05 * torch.randn(samples, 1, generator=generator))


def main() -> None:
    args = parse_args()
    deepspeed.init_distributed()  # NCCL; env:// from Azure ML or the CLI, mpi4py under mpirun
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = synthetic(args.samples, args.features)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.GELU(), nn.Linear(args.hidden, args.hidden),
                          nn.GELU(), nn.Linear(args.hidden, 1))
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=engine.train_micro_batch_size_per_gpu(), sampler=sampler,
                        num_workers=2, pin_memory=True, drop_last=True)
    dtype = next(engine.module.parameters()).dtype  # bf16 when the config enables it
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        totals = torch.zeros(2, device=engine.device, dtype=torch.float64)
        for x, y in loader:
            prediction = engine(x.to(engine.device, dtype=dtype))
            loss = nn.functional.mse_loss(prediction.float(), y.to(engine.device))
            engine.backward(loss)
            engine.step()
            totals += torch.tensor([loss.item() * len(x), len(x)], device=engine.device, dtype=torch.float64)
        dist.all_reduce(totals)
        engine.save_checkpoint(str(args.checkpoint_dir), tag=f"epoch-{epoch}")
        if rank == 0:
            print(json.dumps({"epoch": epoch, "loss": round((totals[0] / totals[1]).item(), 6), "world_size": world},
                             sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
