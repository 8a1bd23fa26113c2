"""Apply parallelism to the model in small steps, run in a fixed order: AC, then data parallel.

Each `apply_*` reads on its own. How ZeRO stages map onto PyTorch:
- zero 0: DistributedDataParallel (every rank holds weights, gradients, optimizer states).
- zero 1: DDP + ZeroRedundancyOptimizer: optimizer states sharded over the dp group.
- zero 2: FSDP2 `fully_shard(reshard_after_forward=False)`: gradients and optimizer states
  sharded; weights stay gathered between forward and backward (ZeRO-2-like; FSDP2 still frees
  them after backward, so weights are sharded at rest).
- zero 3: FSDP2 `fully_shard` (full shard): weights gathered per block and freed after use.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from jobs.model import Transformer


class Checkpointed(nn.Module):
    """Runs the wrapped module under activation checkpointing (recomputed in backward)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.module, *args, use_reentrant=False)


def apply_ac(model: Transformer, mode: str) -> None:
    """full: recompute each whole block; selective: recompute only the attention sublayer."""
    if mode == "none":
        return
    for name, block in model.layers.items():
        if mode == "full":
            model.layers[name] = Checkpointed(block)
        elif mode == "selective":
            block.attention = Checkpointed(block.attention)
        else:
            raise ValueError(f"activation_checkpointing must be none, selective or full, not {mode!r}")


def apply_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def apply_fsdp(model: Transformer, *, reshard_after_forward: bool, mixed_precision: bool) -> nn.Module:
    """FSDP2: shard each block, then the root (embeddings, final norm, output)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers.values():
        fully_shard(block, reshard_after_forward=reshard_after_forward, **kwargs)
    fully_shard(model, reshard_after_forward=reshard_after_forward, **kwargs)
    return model


def build_optimizer(model: nn.Module, zero_stage: int, lr: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if zero_stage == 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=lr)
    return torch.optim.AdamW(params, lr=lr)


def parallelize(
    model: Transformer, *, zero_stage: int, checkpointing: str, device: torch.device
) -> tuple[nn.Module, Callable[[bool], None]]:
    """Wrap the model for its data-parallel mode; also return a `sync_grads(enabled)` switch
    that skips the gradient reduction on all but the last micro-batch of an accumulation."""
    apply_ac(model, checkpointing)
    if dist.get_world_size() == 1:
        return model, lambda enabled: None
    if zero_stage in (0, 1):
        wrapped = apply_ddp(model, device)
        return wrapped, lambda enabled: setattr(wrapped, "require_backward_grad_sync", enabled)
    wrapped = apply_fsdp(
        model, reshard_after_forward=zero_stage == 3, mixed_precision=device.type == "cuda"
    )
    return wrapped, lambda enabled: wrapped.set_requires_gradient_sync(enabled)
