"""How long ``analysis.shell.evaluate`` and ``analysis.dockerfile.evaluate`` take on hostile and ordinary input.

The evaluators are bounded by size, steps, depth and nesting (see their docstrings); the wall-time cap
is only a safety net. This measures, per case, the median wall time of ``--repeat`` evaluations in
this process and the outcome (complete, or the bound that stopped it), so the bounds can be checked to
stop hostile input well inside the time cap on the 2-core CI machine.

Usage::

    .venv/bin/python bench/shell_bench.py            # 5 repeats
    .venv/bin/python bench/shell_bench.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis import dockerfile, shell

LOOP = "for a in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do "
CASES: dict[str, Callable[[], object]] = {
    "ordinary 40-line script": lambda: shell.evaluate(
        "set -e\ncd src\nexport NCCL_DEBUG=INFO\n" + "python prepare.py --part $i || exit 1\n" * 36
        + "torchrun --nproc_per_node 8 train.py\n"),
    "8 MiB of text": lambda: shell.evaluate("echo x\n" * (1 << 20)),
    "1 MiB of exports and echoes": lambda: shell.evaluate("export A=1; echo $A\n" * 52_000),
    "5,000 nested $(": lambda: shell.evaluate("echo " + "$(" * 5_000 + "x" + ")" * 5_000),
    "loops nested 6 deep": lambda: shell.evaluate(LOOP * 6 + "echo $a; " + "done; " * 6),
    "A=$A$A forty times": lambda: shell.evaluate("A=x\n" + "A=$A$A\n" * 40),
    "Dockerfile, 400 RUNs of nested loops": lambda: dockerfile.evaluate(
        "FROM x\n" + f"RUN {LOOP * 2}echo $a; done; done\n" * 400),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, run in CASES.items():
        times = []
        outcome = ""
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - start)
            unknowns = getattr(result, "unknowns", ())
            bounds = sorted({u.kind for u in unknowns if u.kind in ("too large", "too deep", "timeout")})
            outcome = ", ".join(bounds) or "complete"
        print(f"{name:40s} {statistics.median(times):7.3f} s  {outcome}")


if __name__ == "__main__":
    main()
