"""Model states in host memory: the layout's `offload` knob.

- `optimizer`: `HostOffloadAdamW` (jobs/host_adamw.py) keeps fp32 master weights and AdamW's
  moments and step count on the host, ZeRO-Offload's split.
- `optimizer+params`: FSDP2's `CPUOffloadPolicy` keeps the weight shards, their gradients and
  so the optimizer's states on the host; FSDP copies each unit's shards to the device to gather
  them and the reduced gradients back. It needs fully sharded data parallelism.
"""

from __future__ import annotations

import torch


def offload_problem(config, plan) -> str | None:
    """Why this job cannot run the layout's offload, or None. The layout schema has checked
    the value and its rule (zero_stage 3); AMSP factors may still plan less than full FSDP."""
    if config.offload != "optimizer+params":
        return None
    if plan.kind != "fsdp" or plan.reshard_after_forward is not True:
        return ("offload optimizer+params needs FSDP fully sharded (zero_stage 3): FSDP2's "
                "CPUOffloadPolicy keeps the weight shards on the host between uses")
    return None


def cpu_offload_policy(offload: str, device: torch.device):
    """FSDP2's offload policy for `offload`, or None (keep the shards on the device)."""
    if offload != "optimizer+params":
        return None
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(pin_memory=device.type == "cuda")
