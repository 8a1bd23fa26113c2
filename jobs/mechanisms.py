"""What a layout really does on this rank, measured rather than assumed: how much optimizer
state it holds (ZeRO shards it), how often each attention layer runs forward per micro-batch
(activation checkpointing runs it again in backward), how long a sequence it sees (1/cp of
one under context parallelism), and how many graphs torch.compile built. The mode tests check these, so a mode that silently became a no-op fails them even
where its losses still match."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from jobs.model import Attention


def _local_numel(tensor: torch.Tensor) -> int:
    return (tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor).numel()


def optimizer_state_fraction(optimizer: torch.optim.Optimizer, whole_params: int) -> float:
    """Optimizer-state elements this rank holds, over AdamW's two moments of every
    parameter: 1.0 unsharded, 1/s when ZeRO shards them over s ranks."""
    state = getattr(optimizer, "optim", optimizer).state  # ZeroRedundancyOptimizer: its shard
    held = sum(_local_numel(v) for per_param in state.values() for v in per_param.values()
               if isinstance(v, torch.Tensor) and v.dim() > 0)
    return held / (2 * whole_params)


@contextmanager
def attention_forwards(modules: list[nn.Module]) -> Iterator[list[int]]:
    """Count forward passes of this rank's attention layers while the block runs, and the
    longest sequence one was given; yields [calls, layers, tokens]. Counted on entry: a
    recomputation may stop as soon as it has what the backward needs, before the layer's
    forward returns."""
    layers = [m for module in modules for m in module.modules() if isinstance(m, Attention)]
    counted = [0, len(layers), 0]

    def count(_: nn.Module, args: tuple) -> None:
        counted[0] += 1
        counted[2] = max(counted[2], args[0].shape[1])

    hooks = [layer.register_forward_pre_hook(count) for layer in layers]
    try:
        yield counted
    finally:
        for hook in hooks:
            hook.remove()


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process."""
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))
