"""All-reduce bandwidth and correctness, in the manner of nccl-tests' ``all_reduce_perf``.

Run it on a cluster right after provisioning to check the fabric: every process all-reduces
buffers over a sweep of sizes (``--min-bytes`` to ``--max-bytes``, times ``--step-factor``),
``--warmup-iters`` untimed then ``--iters`` timed, and rank 0 prints one row per size:

* time: the slowest rank's mean time per all-reduce;
* algbw = size / time;
* busbw = algbw * 2(n-1)/n, the bandwidth each link must carry in a ring all-reduce, comparable
  across rank counts and with the hardware's link speed (nccl-tests' definition);
* #wrong: elements that differ from the exact expected sum after one checked all-reduce.

NCCL on GPUs, gloo on the CPU (see ``distenv.py`` for how the process group is joined).
Exit status: 0; 1 when any value is wrong; 3 when the bus bandwidth at the largest size is below
``--min-busbw`` GB/s.

What a run can measure decides what it checks (``amlgpu run-local`` scales a cluster's run down to one
machine): one rank crosses no link, so it has no bus bandwidth and ``--min-busbw`` is not checked; on
the CPU (gloo) the figure measures memory copies, never the fabric, so the floor is not checked either
and the sweep stops at :data:`CPU_MAX_BYTES` (16 ranks sweeping to 1 GiB took 6.6 GB and 125 s). Each
such case prints a note saying so.
"""

from __future__ import annotations

import argparse
import re
import socket
import time

import distenv
import torch
import torch.distributed as dist

EXIT_WRONG = 1
EXIT_SLOW = 3
CPU_MAX_BYTES = 64 * 1024**2
"""The largest buffer swept on the CPU (gloo), whatever ``--max-bytes`` asks."""
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.I)


def parse_size(text: str) -> int:
    """``8``, ``64K``, ``128M``, ``1G`` -> bytes (powers of 1024, as nccl-tests reads them)."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 8, 64K, 128M or 1G")
    return int(match.group(1)) * int(1024 ** " KMG".index((match.group(2) or " ").upper()))


def sweep(min_bytes: int, max_bytes: int, factor: int, element_size: int) -> list[int]:
    """Buffer sizes in bytes, whole elements only, from ``min_bytes`` up to ``max_bytes``."""
    sizes = []
    size = max(min_bytes, element_size)
    while size <= max_bytes:
        sizes.append(size - size % element_size)
        size *= factor
    return sizes


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: what each link carries in a ring."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


def pattern(count: int, rank: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Rank ``rank``'s check values: 1 or 2, so every sum stays exactly representable (even bf16)."""
    return (1 + (torch.arange(count, device=device) + rank) % 2).to(dtype)


def expected_sum(count: int, ranks: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    index = torch.arange(count, device=device)
    odd_ranks = ranks // 2  # ranks r where (i + r) is odd for even i
    total_even = ranks + odd_ranks
    total_odd = ranks + (ranks - odd_ranks)
    return torch.where(index % 2 == 0, total_even, total_odd).to(dtype)


def measure(size: int, args: argparse.Namespace, env: distenv.Dist) -> tuple[float, int]:
    """(seconds per all-reduce on the slowest rank, wrong elements on any rank) for one size."""
    dtype = DTYPES[args.dtype]
    count = size // torch.tensor([], dtype=dtype).element_size()
    device: torch.device = env.device
    buffer = torch.zeros(count, dtype=dtype, device=device)
    for _ in range(args.warmup_iters):
        dist.all_reduce(buffer)
    synchronize(device)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(buffer)
    synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - started) / args.iters], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)

    buffer.copy_(pattern(count, env.rank, dtype, device))
    dist.all_reduce(buffer)
    wrong = torch.tensor([int((buffer != expected_sum(count, env.world_size, dtype, device)).sum())], device=device)
    dist.all_reduce(wrong)
    return elapsed.item(), int(wrong.item())


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-b", "--min-bytes", type=parse_size, default=parse_size("1K"))
    parser.add_argument("-e", "--max-bytes", type=parse_size, default=parse_size("64M"))
    parser.add_argument("-f", "--step-factor", type=int, default=2)
    parser.add_argument("-w", "--warmup-iters", type=int, default=5)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-d", "--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--min-busbw", type=float, default=0.0,
                        help="GB/s the bus bandwidth at the largest size must reach (0: no threshold)")
    parser.add_argument("--init-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.step_factor < 2 or args.iters < 1 or args.warmup_iters < 0 or args.min_bytes > args.max_bytes:
        parser.error("need --step-factor >= 2, --iters >= 1, --warmup-iters >= 0 and --min-bytes <= --max-bytes")
    return args


def scaled_to(args: argparse.Namespace, world_size: int, backend: str) -> tuple[argparse.Namespace, list[str]]:
    """``args`` cut to what a run of ``world_size`` ranks on ``backend`` can measure, and the notes saying how."""
    notes = []
    if backend == "gloo" and args.max_bytes > CPU_MAX_BYTES:
        notes.append(f"on the CPU (gloo) the sweep stops at {CPU_MAX_BYTES} B instead of --max-bytes {args.max_bytes}")
        args = argparse.Namespace(**{**vars(args), "max_bytes": CPU_MAX_BYTES,
                                     "min_bytes": min(args.min_bytes, CPU_MAX_BYTES)})
    if args.min_busbw and world_size == 1:
        notes.append("one rank: an all-reduce crosses no link, so there is no bus bandwidth to measure; "
                     f"--min-busbw {args.min_busbw} is not checked")
        args = argparse.Namespace(**{**vars(args), "min_busbw": 0.0})
    elif args.min_busbw and backend == "gloo":
        notes.append("on the CPU (gloo) the bus bandwidth measures memory copies, not the fabric; "
                     f"--min-busbw {args.min_busbw} (for NCCL on GPUs) is not checked")
        args = argparse.Namespace(**{**vars(args), "min_busbw": 0.0})
    return args, notes


def main() -> None:
    args = parse_args()
    env = distenv.init(args.init_timeout)
    args, notes = scaled_to(args, env.world_size, env.backend)
    where: list[tuple[str, str]] = [("", "")] * env.world_size
    dist.all_gather_object(where, (socket.gethostname(), str(env.device)))
    say = print if env.is_main else (lambda *a, **k: None)
    say(f"# all_reduce_perf (torch.distributed {env.backend}): {env.world_size} ranks, {args.dtype}, sum, "
        f"{args.warmup_iters} warmup + {args.iters} timed iterations")
    for rank, (host, device) in enumerate(where):
        say(f"#  rank {rank:>3} on {host} device {device}")
    for note in notes:
        say(f"# note: {note}")
    say(f"# {'size(B)':>12} {'count':>12} {'type':>9} {'redop':>6} {'time(us)':>11} {'algbw(GB/s)':>12} "
        f"{'busbw(GB/s)':>12} {'#wrong':>7}")
    element = torch.tensor([], dtype=DTYPES[args.dtype]).element_size()
    wrong_total, busbws = 0, []
    for size in sweep(args.min_bytes, args.max_bytes, args.step_factor, element):
        seconds, wrong = measure(size, args, env)
        algbw = size / seconds / 1e9
        busbw = bus_bandwidth(algbw, env.world_size)
        busbws.append(busbw)
        wrong_total += wrong
        say(f"  {size:>12} {size // element:>12} {args.dtype:>9} {'sum':>6} {seconds * 1e6:>11.1f} "
            f"{algbw:>12.3f} {busbw:>12.3f} {wrong:>7}", flush=True)
    say(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    say(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.3f} GB/s")
    code, message = verdict(wrong_total, busbws[-1], args)
    if message:
        say(f"all_reduce_perf: {message}", flush=True)
    distenv.finish(code)


def verdict(wrong_total: int, last_busbw: float, args: argparse.Namespace) -> tuple[int, str | None]:
    """The exit status and, when not 0, why: wrong values first, then a bus bandwidth below the floor."""
    if wrong_total:
        return EXIT_WRONG, f"{wrong_total} wrong values: the all-reduce does not compute the sum"
    if args.min_busbw and last_busbw < args.min_busbw:
        return EXIT_SLOW, (f"bus bandwidth {last_busbw:.3f} GB/s at {args.max_bytes} B is below "
                           f"--min-busbw {args.min_busbw} GB/s")
    return 0, None


if __name__ == "__main__":
    main()
