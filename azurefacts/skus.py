"""The GPU VM size catalogue: one row per Azure size, the facts a distributed run depends on.

Source: Microsoft's VM size pages (azure-compute-docs, sizes/gpu-accelerated) and the Azure ML
distributed-training guide, as summarised in ``shared/reference/azure-gpu-skus.md``.

Rules encoded here rather than guessed elsewhere:

* an ``r`` in a size name marks RDMA hardware, but only sizes with SR-IOV carry InfiniBand traffic
  for NCCL/MPI in Azure ML images (``Standard_NC24r`` is RDMA without SR-IOV: not usable);
* InfiniBand links VMs of one scale set, i.e. nodes of one AmlCompute cluster, never across clusters;
* AMD sizes run ROCm/RCCL, not CUDA/NCCL.

Prices are deliberately absent: they change and differ by region.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Literal

Vendor = Literal["nvidia", "amd"]


@dataclass(frozen=True)
class GpuSku:
    """One GPU VM size and the facts a distributed run depends on."""

    size: str
    gpus: int
    gpu_model: str
    gpu_memory_gb: int
    vendor: Vendor
    vcpus: int
    ram_gib: int
    rdma: bool
    """The size has RDMA hardware (an ``r`` in its name)."""
    sriov: bool
    """InfiniBand is exposed through SR-IOV, which NCCL/MPI in Azure ML images need."""
    ib_generation: str | None
    """FDR, EDR, HDR or NDR; None without InfiniBand."""
    ib_gbps_per_vm: int | None
    retired: str | None
    """Retirement date or the word 'retired'; None while the size is current."""
    family: str | None = None
    """The VM family quota is counted in (the ``family`` of Microsoft.Compute resource SKUs and of Azure ML's
    VM sizes API); None where no public source names it: the preflight then reads it from the region."""

    @property
    def infiniband(self) -> bool:
        """InfiniBand usable for training: RDMA hardware reachable through SR-IOV."""
        return self.rdma and self.sriov

    @property
    def collective_library(self) -> Literal["nccl", "rccl"]:
        return "rccl" if self.vendor == "amd" else "nccl"


def _sku(size: str, gpus: int, model: str, mem: int, vendor: Vendor, vcpus: int, ram: int,
         rdma: bool, sriov: bool, ib: str | None, gbps: int | None, retired: str | None = None) -> GpuSku:
    return GpuSku(size, gpus, model, mem, vendor, vcpus, ram, rdma, sriov, ib, gbps, retired)


QUOTA_FAMILIES: dict[str, str] = {
    # The VM family each size's quota is counted in: the ``family`` of Microsoft.Compute resource SKUs and of
    # Azure ML's VM sizes API, as Microsoft's quota documentation spells it (casing varies by family and is not
    # significant). Left out where no public source names it (MI300X, GB200, GB300): the preflight reads those
    # from the region's resource SKUs.
    "Standard_NC24r": "standardNCFamily",
    "Standard_NC24s_v3": "standardNCSv3Family",
    "Standard_NC24rs_v3": "standardNCSv3Family",
    "Standard_ND40rs_v2": "standardNDSv2Family",
    "Standard_ND96asr_v4": "standardNDASv4_A100Family",
    "Standard_ND96amsr_A100_v4": "standardNDAMSv4_A100Family",
    "Standard_ND96isr_H100_v5": "standardNDSH100v5Family",
    "Standard_ND96isr_H200_v5": "standardNDISRH200V5Family",
    "Standard_NC24ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC48ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC96ads_A100_v4": "StandardNCADSA100v4Family",
    "Standard_NC40ads_H100_v5": "StandardNCadsH100v5Family",
    "Standard_NC80adis_H100_v5": "StandardNCadsH100v5Family",
    "Standard_NC4as_T4_v3": "StandardNCASv3_T4Family",
}

CPU_SIZES: dict[str, tuple[int, str]] = {
    # CPU sizes the stack itself may create (the image-build cluster): vCPUs and quota family, from Azure ML's
    # VM sizes API (azure-rest-api-specs, machinelearningservices 2024-10-01 VirtualMachineSize/list.json).
    "Standard_DS2_v2": (2, "standardDSv2Family"),
    "Standard_DS3_v2": (4, "standardDSv2Family"),
    "Standard_DS4_v2": (8, "standardDSv2Family"),
    "Standard_DS5_v2": (16, "standardDSv2Family"),
}

CATALOGUE: dict[str, GpuSku] = {
    s.size: dataclasses.replace(s, family=QUOTA_FAMILIES.get(s.size))
    for s in (
        # size, GPUs, model, GB per GPU, vendor, vCPU, RAM GiB, RDMA, SR-IOV, IB generation, IB Gb/s per VM, retired
        _sku("Standard_NC24r", 4, "K80", 12, "nvidia", 24, 224, True, False, "FDR", 56, "retired"),
        _sku("Standard_NC24s_v3", 4, "V100", 16, "nvidia", 24, 448, False, False, None, None, "2025-09-30"),
        _sku("Standard_NC24rs_v3", 4, "V100", 16, "nvidia", 24, 448, True, True, "FDR", 56, "2025-09-30"),
        _sku("Standard_ND40rs_v2", 8, "V100 NVLink", 32, "nvidia", 40, 672, True, True, "EDR", 100),
        _sku("Standard_ND96asr_v4", 8, "A100", 40, "nvidia", 96, 900, True, True, "HDR", 1600),
        _sku("Standard_ND96amsr_A100_v4", 8, "A100", 80, "nvidia", 96, 1900, True, True, "HDR", 1600),
        _sku("Standard_ND96isr_H100_v5", 8, "H100 SXM", 80, "nvidia", 96, 1900, True, True, "NDR", 3200),
        _sku("Standard_ND96isr_H200_v5", 8, "H200", 141, "nvidia", 96, 1850, True, True, "NDR", 3200),
        _sku("Standard_ND96isr_MI300X_v5", 8, "MI300X", 192, "amd", 96, 1850, True, True, "NDR", 3200),
        _sku("Standard_ND128isr_NDR_GB200_v6", 4, "GB200", 192, "nvidia", 128, 900, True, True, "NDR", 1600),
        _sku("Standard_ND128isr_GB300_v6", 4, "B300", 288, "nvidia", 128, 864, True, True, "XDR", 3200),
        _sku("Standard_NC24ads_A100_v4", 1, "A100 PCIe", 80, "nvidia", 24, 220, False, False, None, None),
        _sku("Standard_NC48ads_A100_v4", 2, "A100 PCIe", 80, "nvidia", 48, 440, False, False, None, None),
        _sku("Standard_NC96ads_A100_v4", 4, "A100 PCIe", 80, "nvidia", 96, 880, False, False, None, None),
        _sku("Standard_NC40ads_H100_v5", 1, "H100 NVL", 94, "nvidia", 40, 320, False, False, None, None),
        _sku("Standard_NC80adis_H100_v5", 2, "H100 NVL", 94, "nvidia", 80, 640, False, False, None, None),
        _sku("Standard_NC4as_T4_v3", 1, "T4", 16, "nvidia", 4, 28, False, False, None, None),
    )
}

_BY_LOWER = {name.lower(): sku for name, sku in CATALOGUE.items()}


class UnknownSizeError(ValueError):
    """A size that is not in the catalogue; the message lists the closest known sizes."""


def lookup(size: str) -> GpuSku:
    """Return the catalogue row for ``size`` (Azure treats size names case-insensitively)."""
    sku = _BY_LOWER.get(size.lower())
    if sku is not None:
        return sku
    close = difflib.get_close_matches(size, list(CATALOGUE), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known sizes: {', '.join(CATALOGUE)}"
    raise UnknownSizeError(f"unknown GPU size {size!r}{hint}")
