"""Evaluate a ``train_ddp.py`` checkpoint across every rank: the gate step after training in a pipeline.

Loads ``checkpoint.pt`` from ``--checkpoint-dir`` (the training step's output, bound as this step's input),
computes the model's mean squared error over the synthetic data it was trained on (the same
``--samples``, ``--features`` and ``--seed``), each rank on its shard, all-reduced; rank 0 prints the result
and writes ``evaluation.json`` into ``--report-dir``. Exit status 0, or 3 when the loss is above
``--max-loss`` (the pipeline then fails at this step, before anything uses the model).

Starts as ``train_ddp.py`` does: Azure ML's ``pytorch`` or ``mpi`` distribution, torchrun, ``amlgpu
run-local`` or plain ``python`` (see ``distenv.py``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import distenv
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from train_ddp import build_model, synthetic_dataset

EXIT_ABOVE_MAX = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="the folder holding checkpoint.pt")
    parser.add_argument("--report-dir", type=Path, required=True, help="where rank 0 writes evaluation.json")
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-loss", type=float, help="exit 3 when the loss is above this")
    parser.add_argument("--init-timeout", type=float, default=1800.0, help="seconds to wait for every rank")
    return parser.parse_args(argv)


def evaluate(args: argparse.Namespace, env: distenv.Dist) -> dict[str, Any]:
    """The checkpoint's loss over all ranks, and the epoch it was saved after."""
    checkpoint = args.checkpoint_dir / "checkpoint.pt"
    if not checkpoint.is_file():
        raise SystemExit(f"no checkpoint.pt in {args.checkpoint_dir}")
    state = torch.load(checkpoint, map_location=env.device, weights_only=True)
    model = build_model(args.features, args.hidden).to(env.device)
    model.load_state_dict(state["model"])
    model.eval()
    dataset = synthetic_dataset(args.samples, args.features, args.seed)
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=env.world_size, rank=env.rank,
                                                          shuffle=False)
    totals = torch.zeros(2, dtype=torch.float64, device=env.device)  # squared error sum, samples
    loss_fn = nn.MSELoss(reduction="sum")
    with torch.no_grad():
        for x, y in DataLoader(dataset, batch_size=args.batch_size, sampler=sampler):
            x, y = x.to(env.device), y.to(env.device)
            totals += torch.tensor([loss_fn(model(x).float(), y).item(), len(x)], dtype=torch.float64,
                                   device=env.device)
    dist.all_reduce(totals)
    return {"loss": round((totals[0] / totals[1]).item(), 6), "epoch": int(state["epoch"]),
            "samples": int(totals[1].item()), "world_size": env.world_size}


def main() -> None:
    args = parse_args()
    env = distenv.init(args.init_timeout)
    result = evaluate(args, env)
    code = 0
    if args.max_loss is not None and not result["loss"] <= args.max_loss:
        code = EXIT_ABOVE_MAX
    if env.is_main:
        print(json.dumps(result, sort_keys=True), flush=True)
        args.report_dir.mkdir(parents=True, exist_ok=True)
        (args.report_dir / "evaluation.json").write_text(json.dumps(result, sort_keys=True) + "\n", encoding="utf-8")
        if code:
            print(f"loss {result['loss']} is above --max-loss {args.max_loss}", flush=True)
    distenv.finish(code)


if __name__ == "__main__":
    main()
