"""Accelerator facts used by the roofline model (loaded from profiles/hardware.yaml by planner.catalog)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    bf16_flops: float  # dense
    fp8_flops: float | None  # dense; None where the GPU has no FP8 tensor cores
    link_bytes_per_s: float  # intra-node GPU-GPU, per GPU, one direction
    nic_gbps: float  # typical scale-out NIC per GPU
    vendor: str = ""
    source: str = ""

    def flops(self, dtype_bytes: int) -> float:
        if dtype_bytes == 1 and self.fp8_flops:
            return self.fp8_flops
        return self.bf16_flops
