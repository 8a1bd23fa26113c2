"""Context parallelism in the trainer: which layouts it runs, the attention and rotary positions
each model (or pipeline stage) gets, and the shard of a batch's sequences a rank trains on.

The attention itself is jobs/context_parallel.py. Each of the cp ranks of a data-parallel
replica holds the same rows and two of the 2 x cp chunks of every sequence (head-tail), so
everything outside attention (embeddings, norms, MLPs, the loss, pipeline sends) runs on
(batch, seq / cp) tokens unchanged; only attention crosses the shards, and rotary embeddings
need the tokens' global positions.
"""

from __future__ import annotations

import torch
from torch import nn

from jobs.context_parallel import ATTENTION, context_parallel_attention, local_positions, shard_sequence
from jobs.model import Attention, Transformer


def context_problem(config) -> str | None:
    """Why this job cannot run the layout's context parallelism, or None. The layout schema
    has checked that seq_len splits into the 2 x cp chunks and, for a2a, the heads over cp
    (JobConfig.layout_problem)."""
    cp, tp, m = config.cp, config.tp, config.model
    if config.cp_comm_type not in ATTENTION:
        return f"cp_comm_type({config.cp_comm_type!r}) must be one of {', '.join(ATTENTION)}"
    if cp == 1:
        return None
    if config.compile:
        return f"compile with cp({cp}) > 1: context-parallel attention is not compiled here"
    if config.sequence_parallel and (m.seq_len // cp) % tp:
        return (f"sequence_parallel needs tp({tp}) dividing a cp rank's seq_len({m.seq_len}) "
                f"/ cp({cp})")
    return None


def apply_context_parallel(modules: list[nn.Module], config, mesh, device: torch.device) -> None:
    """Give every attention layer the layout's cross-shard attention, and every model chunk the
    global positions of this rank's tokens. Before TP, recompute and FSDP wrap the layers."""
    if config.cp == 1:
        return
    cp_mesh = mesh["cp"]
    attention = context_parallel_attention(config.cp_comm_type, cp_mesh.get_group())
    positions = local_positions(config.model.seq_len, config.cp, cp_mesh.get_local_rank(), device)
    for module in modules:
        for layer in module.modules():
            if isinstance(layer, Attention):
                layer.attention_fn = attention
            elif isinstance(layer, Transformer):
                layer.rope_positions = positions


def shard_tokens(tokens: torch.Tensor, mesh, cp: int) -> torch.Tensor:
    """This rank's head-tail share of each sequence, (rows, seq) -> (rows, seq / cp)."""
    if cp == 1:
        return tokens
    return shard_sequence(tokens, cp, mesh["cp"].get_local_rank(), dim=1)
