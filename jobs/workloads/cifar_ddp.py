"""CIFAR-10 classification with DistributedDataParallel, as in Azure ML's distributed PyTorch example.

``--data`` is the CIFAR-10 python archive as its authors publish it (``cifar-10-python.tar.gz``, a
``uri_file`` input) or its extracted folder (``uri_folder``). A ResNet-9 (the DAWNBench CIFAR network)
trains with SGD + one-cycle learning rate, random crop and flip on the device, bf16 autocast on GPUs;
the DistributedSampler reshuffles every epoch; test accuracy is all-reduced and logged by rank 0,
which alone writes ``model.pt`` into ``--model-dir``.

Starts under Azure ML's ``pytorch`` (one process per GPU) or ``mpi`` distribution, torchrun, or plain
``python`` (see ``distenv.py``). Exit 0, or 3 when the final accuracy is below ``--min-accuracy``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import tarfile
import time
from pathlib import Path
from typing import Any

import distenv
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

EXIT_BELOW_ACCURACY = 3
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="cifar-10-python.tar.gz or its extracted folder")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=0.2, help="peak of the one-cycle schedule")
    parser.add_argument("--batch-size", type=int, default=128, help="per process")
    parser.add_argument("--num-workers", type=int, default=4)
    parser.add_argument("--width", type=int, default=64, help="channels of the first ResNet-9 layer")
    parser.add_argument("--model-dir", type=Path, default=Path("outputs"))
    parser.add_argument("--limit", type=int, help="train on the first N images only (smoke tests)")
    parser.add_argument("--min-accuracy", type=float, help="exit 3 when the final test accuracy is below this")
    parser.add_argument("--init-timeout", type=float, default=1800.0)
    return parser.parse_args(argv)


def _batches(data: Path) -> dict[str, dict[bytes, object]]:
    """The archive's pickled batches by name. CIFAR-10 is distributed as pickles: load only the
    official archive (or a copy of it), never an untrusted file."""
    wanted = {*TRAIN_BATCHES, TEST_BATCH}
    found: dict[str, dict[bytes, object]] = {}
    if data.is_dir():
        for path in data.rglob("*"):
            if path.name in wanted:
                with path.open("rb") as handle:
                    found[path.name] = pickle.load(handle, encoding="bytes")
    else:
        with tarfile.open(data) as archive:
            for member in archive.getmembers():
                name = Path(member.name).name
                if member.isfile() and name in wanted:
                    found[name] = pickle.load(archive.extractfile(member), encoding="bytes")  # type: ignore[arg-type]
    missing = sorted(wanted - set(found))
    if missing:
        raise SystemExit(f"{data}: not a CIFAR-10 python archive (missing {', '.join(missing)})")
    return found


def load_cifar(data: Path) -> tuple[TensorDataset, TensorDataset]:
    """Train and test sets as uint8 images (N, 3, 32, 32) and int64 labels; normalised on the device."""
    batches = _batches(data)

    def tensors(names: tuple[str, ...]) -> TensorDataset:
        images = torch.cat([torch.tensor(batches[n][b"data"], dtype=torch.uint8).view(-1, 3, 32, 32) for n in names])
        labels = torch.cat([torch.tensor(batches[n][b"labels"], dtype=torch.int64) for n in names])
        return TensorDataset(images, labels)

    return tensors(TRAIN_BATCHES), tensors((TEST_BATCH,))


def conv_bn(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(channels_out), nn.ReLU(inplace=True))


class Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(channels, channels), conv_bn(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.body(x)
        return out


def resnet9(width: int, classes: int = 10) -> nn.Module:
    return nn.Sequential(
        conv_bn(3, width),
        conv_bn(width, 2 * width), nn.MaxPool2d(2), Residual(2 * width),
        conv_bn(2 * width, 4 * width), nn.MaxPool2d(2),
        conv_bn(4 * width, 8 * width), nn.MaxPool2d(2), Residual(8 * width),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(8 * width, classes),
    )


def prepare(images: torch.Tensor, device: torch.device, *, augment: bool) -> torch.Tensor:
    """uint8 -> normalised float on the device; random 4-pixel-padded crop and horizontal flip for training."""
    x = images.to(device, non_blocking=True).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    x = (x - mean) / std
    if augment:
        n = x.shape[0]
        padded = functional.pad(x, (4, 4, 4, 4), mode="reflect")
        rows, cols = torch.randint(0, 9, (2,)).tolist()  # one offset per batch keeps it a cheap slice
        x = padded[:, :, rows:rows + 32, cols:cols + 32]
        flip = torch.rand(n, device=device) < 0.5
        x = torch.where(flip.view(n, 1, 1, 1), x.flip(3), x)
    return x


def evaluate(model: nn.Module, loader: DataLoader[Any], env: distenv.Dist) -> float:
    """Test accuracy over all ranks' shards."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64, device=env.device)  # correct, seen
    with torch.no_grad():
        for images, labels in loader:
            logits = model(prepare(images, env.device, augment=False))
            counts[0] += (logits.argmax(1).cpu() == labels).sum().item()
            counts[1] += len(labels)
    dist.all_reduce(counts)
    return float((counts[0] / counts[1]).item())


def train(args: argparse.Namespace, env: distenv.Dist) -> float:
    """Train; returns the final test accuracy."""
    train_set, test_set = load_cifar(args.data)
    if args.limit:
        train_set = TensorDataset(*(t[: args.limit] for t in train_set.tensors))
    on_gpu = env.device.type == "cuda"
    loaders = []
    for dataset, shuffle in ((train_set, True), (test_set, False)):
        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=env.world_size, rank=env.rank, shuffle=shuffle
        )
        loaders.append(DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers,
                                  pin_memory=on_gpu, persistent_workers=args.num_workers > 0,
                                  prefetch_factor=2 if args.num_workers > 0 else None, drop_last=shuffle))
    train_loader, test_loader = loaders
    model = resnet9(args.width).to(env.device)
    ddp = DistributedDataParallel(model, device_ids=[env.local_rank] if on_gpu else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.learning_rate, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    steps = max(1, len(train_loader)) * args.epochs
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.learning_rate, total_steps=steps)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else contextlib.nullcontext()
    accuracy = 0.0
    for epoch in range(args.epochs):
        train_loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        ddp.train()
        started = time.perf_counter()
        for images, labels in train_loader:
            with autocast:
                logits = ddp(prepare(images, env.device, augment=True))
                loss = functional.cross_entropy(logits.float(), labels.to(env.device), label_smoothing=0.1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        accuracy = evaluate(ddp, test_loader, env)
        if env.is_main:
            print(json.dumps({"epoch": epoch, "test_accuracy": round(accuracy, 4), "world_size": env.world_size,
                              "seconds": round(time.perf_counter() - started, 1)}, sort_keys=True), flush=True)
    if env.is_main:
        args.model_dir.mkdir(parents=True, exist_ok=True)
        partial = args.model_dir / "model.pt.partial"
        torch.save(model.state_dict(), partial)
        partial.replace(args.model_dir / "model.pt")
    return accuracy


def main() -> None:
    args = parse_args()
    env = distenv.init(args.init_timeout)
    accuracy = train(args, env)
    code = 0
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        code = EXIT_BELOW_ACCURACY
        if env.is_main:
            print(f"final test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", flush=True)
    distenv.finish(code)


if __name__ == "__main__":
    main()
