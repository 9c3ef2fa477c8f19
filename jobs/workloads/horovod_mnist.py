"""MNIST with Horovod and PyTorch over MPI, as in Azure ML's distributed Horovod example.

Azure ML's ``distribution: mpi`` runs ``mpirun`` with one rank per GPU (process_count_per_instance =
GPUs per node); Horovod reads its rank and size from Open MPI and all-reduces gradients over NCCL.
The practices Horovod's own guide asks for: pin one GPU per local rank, scale the learning rate by
the number of ranks, broadcast the initial weights and optimizer state from rank 0, shard the data
with a DistributedSampler, average metrics with ``hvd.allreduce``, save from rank 0 only.
Data: synthetic MNIST-shaped digits (see ``digits.py``) or ``--data mnist.npz``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import digits
import torch
from torch import nn
from torch.nn import functional
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128, help="per rank")
    parser.add_argument("--learning-rate", type=float, default=0.01, help="per rank; multiplied by the rank count")
    parser.add_argument("--samples", type=int, default=60000, help="synthetic training images")
    parser.add_argument("--data", type=Path, help="mnist.npz (x_train, y_train, x_test, y_test) instead of synthetic")
    parser.add_argument("--model-dir", type=Path, default=Path("outputs"))
    return parser.parse_args(argv)


def network() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, digits.CLASSES),
    )


def main() -> None:
    import horovod.torch as hvd

    args = parse_args()
    hvd.init()
    device = torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", hvd.local_rank())
        torch.cuda.set_device(device)
    torch.manual_seed(0)

    x_train, y_train, x_test, y_test = digits.load(args.data, args.samples)
    train_set = TensorDataset(torch.from_numpy(x_train).unsqueeze(1), torch.from_numpy(y_train))
    test_set = TensorDataset(torch.from_numpy(x_test).unsqueeze(1), torch.from_numpy(y_test))
    shard = {"num_replicas": hvd.size(), "rank": hvd.rank()}
    sampler: DistributedSampler[Any] = DistributedSampler(train_set, shuffle=True, **shard)
    test_sampler: DistributedSampler[Any] = DistributedSampler(test_set, shuffle=False, **shard)
    on_gpu = device.type == "cuda"
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, num_workers=2, pin_memory=on_gpu)
    test_loader = DataLoader(test_set, batch_size=args.batch_size, sampler=test_sampler, pin_memory=on_gpu)

    model = network().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for images, labels in train_loader:
            optimizer.zero_grad()
            loss = functional.cross_entropy(model(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
        model.eval()
        correct = torch.zeros(2)
        with torch.no_grad():
            for images, labels in test_loader:
                predicted = model(images.to(device)).argmax(1).cpu()
                correct += torch.tensor([(predicted == labels).sum().item(), len(labels)])
        totals = hvd.allreduce(correct, average=False, name="accuracy")
        if hvd.rank() == 0:
            print(json.dumps({"epoch": epoch, "ranks": hvd.size(), "loss": round(loss.item(), 4),
                              "test_accuracy": round((totals[0] / totals[1]).item(), 4)}, sort_keys=True), flush=True)
    if hvd.rank() == 0:
        args.model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), args.model_dir / "mnist.pt")


if __name__ == "__main__":
    main()
