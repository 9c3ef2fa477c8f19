"""Which GPUs each emulated node gets.

On Azure ML every process of a node sees all of the node's GPUs and picks ``cuda:LOCAL_RANK``.
Several emulated nodes share one machine here, so each gets its own slice through
CUDA_VISIBLE_DEVICES; otherwise two nodes' rank 0 would share a GPU and NCCL would stop with
"Duplicate GPU detected". When there are too few GPUs for one per process the run uses the CPU
(gloo), never a shared GPU.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass


def visible_gpus(environ: Mapping[str, str]) -> list[str]:
    """The GPUs this machine offers the run: CUDA_VISIBLE_DEVICES when set, else ``nvidia-smi -L``."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(ln for ln in listing.stdout.splitlines() if ln.startswith("GPU "))]


@dataclass(frozen=True)
class GpuAssignment:
    per_node: tuple[str | None, ...]
    """CUDA_VISIBLE_DEVICES for each emulated node; None leaves the variable as it is (no GPUs)."""
    note: str | None
    """Said to the user when GPUs exist but the run falls back to the CPU."""

    @property
    def uses_gpus(self) -> bool:
        return any(self.per_node)


def assign_gpus(gpus: list[str], *, nodes: int, gpus_per_node: int) -> GpuAssignment:
    """Give each emulated node ``gpus_per_node`` GPUs of its own, or hide them all when too few."""
    if not gpus:
        return GpuAssignment(per_node=(None,) * nodes, note=None)
    needed = nodes * gpus_per_node
    if len(gpus) < needed:
        return GpuAssignment(
            per_node=("",) * nodes,
            note=f"{needed} processes need {needed} GPUs and {len(gpus)} are visible: running on the CPU (gloo)",
        )
    slices = tuple(",".join(gpus[n * gpus_per_node:(n + 1) * gpus_per_node]) for n in range(nodes))
    return GpuAssignment(per_node=slices, note=None)
