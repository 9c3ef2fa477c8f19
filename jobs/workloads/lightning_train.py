"""PyTorch Lightning as the per-node launcher: Azure ML starts one process per node, Lightning the rest.

Declare the run with ``process_count_per_instance: 1`` and give Lightning the node's GPUs
(``--devices 8``) and the node count (``--num-nodes``). Lightning then needs MASTER_ADDR,
MASTER_PORT and NODE_RANK, which Azure ML's ``pytorch`` distribution sets per node. Azure ML also
sets RANK, LOCAL_RANK and WORLD_SIZE for its own (one-per-node) processes; Lightning would read
LOCAL_RANK as "processes were started for me" and start no devices, so :func:`per_node_environment`
removes them before the Trainer starts. Under ``distribution: mpi`` (one rank per node) it derives
the three variables from Open MPI's and AZ_BATCH_MASTER_NODE.

The model: a small CNN on synthetic MNIST-shaped digits (see ``digits.py``) or ``--data mnist.npz``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from pathlib import Path

import digits
import lightning as L
import torch
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset

AZURE_MASTER_PORT = "6105"
_PER_PROCESS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1, help="GPU processes Lightning starts on each node")
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--max-epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128, help="per device")
    parser.add_argument("--samples", type=int, default=60000, help="synthetic training images")
    parser.add_argument("--data", type=Path, help="mnist.npz (x_train, y_train, x_test, y_test) instead of synthetic")
    parser.add_argument("--default-root-dir", type=Path, default=Path("outputs"))
    return parser.parse_args(argv)


def per_node_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` as Lightning's own launcher needs it on a node Azure ML started once.

    Keeps MASTER_ADDR, MASTER_PORT and NODE_RANK (deriving them under MPI); removes the per-process
    variables of Azure ML's single process, which would stop Lightning from starting its devices.
    """
    env = dict(environ)
    if "OMPI_COMM_WORLD_RANK" in env:  # distribution: mpi, one rank per node
        master = env.get("AZ_BATCH_MASTER_NODE", "127.0.0.1")
        addr, _, port = master.partition(":")
        env.setdefault("MASTER_ADDR", addr)
        env.setdefault("MASTER_PORT", port or AZURE_MASTER_PORT)
        env["NODE_RANK"] = env["OMPI_COMM_WORLD_RANK"]
    if "LOCAL_RANK" in env and int(env.get("LOCAL_RANK", "0")) == 0 and "NODE_RANK" in env:
        env.setdefault("MASTER_PORT", AZURE_MASTER_PORT)
        for name in _PER_PROCESS:
            env.pop(name, None)
    return env


class DigitClassifier(L.LightningModule):
    def __init__(self, learning_rate: float = 1e-3) -> None:
        super().__init__()
        self.learning_rate = learning_rate
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, digits.CLASSES),
        )

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        images, labels = batch
        loss = functional.cross_entropy(self.net(images), labels)
        self.log("train_loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        images, labels = batch
        self.log("val_accuracy", (self.net(images).argmax(1) == labels).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


def main() -> None:
    args = parse_args()
    wanted = per_node_environment(os.environ)
    for name in set(os.environ) - set(wanted):
        del os.environ[name]
    os.environ.update(wanted)
    x_train, y_train, x_test, y_test = digits.load(args.data, args.samples)
    train = TensorDataset(torch.from_numpy(x_train).unsqueeze(1), torch.from_numpy(y_train))
    test = TensorDataset(torch.from_numpy(x_test).unsqueeze(1), torch.from_numpy(y_test))
    on_gpu = torch.cuda.is_available()
    trainer = L.Trainer(
        accelerator=args.accelerator, devices=args.devices, num_nodes=args.num_nodes, strategy="ddp",
        max_epochs=args.max_epochs, precision="bf16-mixed" if on_gpu else "32-true",
        default_root_dir=args.default_root_dir, enable_progress_bar=False,
    )
    # Lightning adds the DistributedSampler (set_epoch included) and checkpoints from rank 0.
    trainer.fit(
        DigitClassifier(),
        DataLoader(train, batch_size=args.batch_size, shuffle=True, num_workers=2, pin_memory=on_gpu,
                   persistent_workers=True),
        DataLoader(test, batch_size=args.batch_size, num_workers=1, persistent_workers=True),
    )
    if trainer.is_global_zero:
        metrics = {k: round(float(v), 4) for k, v in trainer.callback_metrics.items()}
        print(json.dumps({**metrics, "world_size": trainer.world_size}, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
