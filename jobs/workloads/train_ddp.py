"""Distributed data-parallel training, as Azure ML's distributed GPU training guide recommends.

A small synthetic regression task (an MLP fitting a noisy non-linear function of generated inputs)
that converges in seconds on a CPU, so the whole data path of a real job can be checked end to end:

* ``init_process_group`` with ``init_method="env://"``, NCCL on GPUs and gloo on the CPU, and an
  explicit timeout (``--init-timeout``) for slow starts;
* a :class:`~torch.utils.data.distributed.DistributedSampler` with ``set_epoch`` every epoch;
* DataLoader ``--num-workers``, ``--pin-memory`` and ``--prefetch-factor``;
* gradient accumulation (``--grad-accum``) without all-reducing on the intermediate steps;
* bf16 autocast on GPUs that support it (``--precision``);
* checkpoints written by rank 0 only, atomically, and resumed from when present;
* metrics computed across all ranks and logged by rank 0 (stdout, ``metrics.jsonl`` and, in an Azure ML
  job, MLflow: the ``loss`` a sweep optimises).

Starts the same under Azure ML's ``pytorch`` or ``mpi`` distribution, torchrun, ``amlgpu
run-local`` or plain ``python`` (see ``distenv.py``). Exit status 0, or 3 when the final loss is
above ``--max-final-loss``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import distenv
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EXIT_NOT_CONVERGED = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64, help="per process, per micro-step")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-steps per optimizer step")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=None,
                        help="default: on when training on a GPU")
    parser.add_argument("--prefetch-factor", type=int, default=2, help="batches each loader worker prefetches")
    parser.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                        help="auto: bf16 autocast on GPUs that support it, fp32 otherwise")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("outputs/checkpoints"),
                        help="rank 0 writes checkpoint.pt and metrics.jsonl here; an existing checkpoint is resumed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init-timeout", type=float, default=1800.0, help="seconds to wait for every rank")
    parser.add_argument("--max-final-loss", type=float, help="exit 3 when the final loss is above this")
    return parser.parse_args(argv)


def synthetic_dataset(samples: int, features: int, seed: int) -> TensorDataset:
    """The same data on every rank (same seed): y = x.w + 0.5 sin(x0) + noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, 1, generator=generator) / features**0.5
    y = x @ w + 0.5 * torch.sin(x[:, :1]) + 0.05 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def build_model(features: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, 1))


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "fp32" or device.type != "cuda":
        return None
    if precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int, loss: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "loss": loss}
    torch.save(state, partial)
    partial.replace(path)  # a preempted node never leaves a half-written checkpoint behind


def log_metric(name: str, value: float, step: int) -> None:
    """Log a metric to the job's MLflow run when there is one (Azure ML sets MLFLOW_TRACKING_URI in a job): a
    sweep's objective and early termination read ``loss`` from there. Elsewhere (a local run) nothing."""
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        return
    try:
        import mlflow  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return
    mlflow.log_metric(name, value, step=step)


def train(args: argparse.Namespace, env: distenv.Dist) -> float:
    """Train; returns the last epoch's mean loss over all ranks."""
    torch.manual_seed(args.seed)  # identical initial weights everywhere (DDP broadcasts rank 0's anyway)
    dataset = synthetic_dataset(args.samples, args.features, args.seed)
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=args.seed
    )
    on_gpu = env.device.type == "cuda"
    loader = DataLoader(
        dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers,
        pin_memory=on_gpu if args.pin_memory is None else args.pin_memory,
        prefetch_factor=args.prefetch_factor if args.num_workers > 0 else None,
        persistent_workers=args.num_workers > 0,
    )
    model = build_model(args.features, args.hidden).to(env.device)
    ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if on_gpu else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    dtype = autocast_dtype(args.precision, env.device)

    checkpoint = args.checkpoint_dir / "checkpoint.pt"
    first_epoch = 0
    mean_loss = float("nan")
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location=env.device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_epoch, mean_loss = int(state["epoch"]) + 1, float(state["loss"])
        if env.is_main:
            print(f"resumed from {checkpoint} after epoch {state['epoch']}", flush=True)

    loss_fn = nn.MSELoss()
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        ddp.train()
        started = time.perf_counter()
        totals = torch.zeros(2, dtype=torch.float64, device=env.device)  # loss sum, samples
        optimizer.zero_grad(set_to_none=True)
        for step, (x, y) in enumerate(loader):
            x = x.to(env.device, non_blocking=True)
            y = y.to(env.device, non_blocking=True)
            boundary = (step + 1) % args.grad_accum == 0 or step + 1 == len(loader)
            # Gradients are all-reduced only on the micro-step that ends an accumulation window.
            sync = contextlib.nullcontext() if boundary else ddp.no_sync()
            cast = torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()
            with sync, cast:
                loss = loss_fn(ddp(x).float(), y)
                (loss / args.grad_accum).backward()
            if boundary:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            # Summed on the device: loss.item() here would wait for the GPU at every step.
            totals[0] += loss.detach().double() * len(x)
            totals[1] += len(x)
        dist.all_reduce(totals)
        mean_loss = (totals[0] / totals[1]).item()
        seconds = time.perf_counter() - started
        if env.is_main:
            metrics = {"epoch": epoch, "loss": round(mean_loss, 6),
                       "samples_per_s": round(totals[1].item() / seconds, 1), "world_size": env.world_size}
            print(json.dumps(metrics, sort_keys=True), flush=True)
            args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            with (args.checkpoint_dir / "metrics.jsonl").open("a", encoding="utf-8") as log:
                log.write(json.dumps(metrics, sort_keys=True) + "\n")
            log_metric("loss", mean_loss, epoch)
            save_checkpoint(checkpoint, model, optimizer, epoch, mean_loss)
    return mean_loss


def main() -> None:
    args = parse_args()
    env = distenv.init(args.init_timeout)
    if env.is_main:
        print(f"training on {env.world_size} process(es), backend {env.backend}, device {env.device}", flush=True)
    final = train(args, env)
    code = 0
    if args.max_final_loss is not None and not final <= args.max_final_loss:
        code = EXIT_NOT_CONVERGED
        if env.is_main:
            print(f"final loss {final:.6f} is above --max-final-loss {args.max_final_loss}", flush=True)
    elif env.is_main:
        print(f"final loss {final:.6f}", flush=True)
    distenv.finish(code)


if __name__ == "__main__":
    main()
