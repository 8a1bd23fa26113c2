"""Context parallelism on CPU: each sequence split over the ranks of a `cp` group, and causal
attention computed across the shards. torch's own `context_parallel` intercepts only the CUDA
SDPA kernels, so this path is built here from collectives that gloo runs.

A sequence splits into 2 x cp chunks and rank r holds chunks r and 2cp-1-r (the head-tail
balancer of Megatron-Core and torchtitan): under a causal mask early chunks attend to little and
late ones to much, so pairing them gives every rank the same work.

The attention functions take and return (batch, local_seq, heads, head_dim) tensors, the layout
of jobs/model.py's Attention before its SDPA call; k and v may have fewer (kv) heads than q:
- "allgather": gather K and V, attend the local queries to all keys with an offset causal mask;
- "a2a" (DeepSpeed-Ulysses): all-to-all to the whole sequence and heads / cp, plain causal
  attention, all-to-all back;
- "p2p" (ring): K/V blocks travel round the ring and partial results merge by log-sum-exp.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from orchestrator.layout import ParallelDims

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


# --- sequence sharding -------------------------------------------------------------------

def headtail_chunks(cp: int, rank: int) -> tuple[int, int]:
    """The two of the 2 x cp chunks a rank holds: one early, one late."""
    return rank, ParallelDims(cp=cp).context_chunks - 1 - rank


def check_seq_len(seq_len: int, cp: int) -> None:
    chunks = ParallelDims(cp=cp).context_chunks
    if seq_len % chunks:
        raise ValueError(f"context parallelism splits a sequence into 2 x cp = {chunks} equal "
                         f"chunks; sequence length {seq_len} does not divide")


def local_positions(seq_len: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """The global positions of a rank's tokens, in the order it holds them: what rotary
    embeddings and the causal mask need instead of 0..local_seq-1."""
    check_seq_len(seq_len, cp)
    chunk = seq_len // ParallelDims(cp=cp).context_chunks
    return torch.cat([torch.arange(i * chunk, (i + 1) * chunk, device=device)
                      for i in headtail_chunks(cp, rank)])


def headtail_order(seq_len: int, cp: int, device=None) -> torch.Tensor:
    """Global positions of the rank-ordered concatenation of all shards; index a global sequence
    with it to get that concatenation, or with its argsort to go back."""
    return torch.cat([local_positions(seq_len, cp, r, device) for r in range(cp)])


def shard_sequence(x: torch.Tensor, cp: int, rank: int, dim: int = 1) -> torch.Tensor:
    """This rank's head-tail shard of a whole sequence (a batch's tokens, labels or states)."""
    check_seq_len(x.shape[dim], cp)
    chunks = x.chunk(ParallelDims(cp=cp).context_chunks, dim)
    return torch.cat([chunks[i] for i in headtail_chunks(cp, rank)], dim)


def unshard_sequence(shards: torch.Tensor | list[torch.Tensor], cp: int,
                     dim: int = 1) -> torch.Tensor:
    """The whole sequence in global order from all ranks' shards (a list in rank order, or
    their concatenation along `dim`): the inverse of shard_sequence."""
    x = torch.cat(list(shards), dim) if isinstance(shards, (list, tuple)) else shards
    return x.index_select(dim, headtail_order(x.shape[dim], cp, x.device).argsort())


def gather_sequence(x: torch.Tensor, group: dist.ProcessGroup, dim: int = 1) -> torch.Tensor:
    """The whole sequence on every rank of the group, in global order. Autograd-aware: the
    backward reduce-scatters, so each shard gets the gradients of all ranks' uses of it."""
    full = funcol.all_gather_single_autograd(x.movedim(dim, 0).contiguous(), 0, group)
    return unshard_sequence(full.movedim(0, dim), dist.get_world_size(group), dim)


# --- attention pieces --------------------------------------------------------------------

def causal_mask(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """True where a query may attend a key: keys at or before the query's global position."""
    return q_pos[:, None] >= k_pos[None, :]


def repeat_kv(k: torch.Tensor, v: torch.Tensor, heads: int,
              dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention as in jobs/model.py: kv head j serves query heads
    j*g .. j*g+g-1 (g = heads // kv heads)."""
    if k.shape[dim] == heads:
        return k, v
    repeat = heads // k.shape[dim]
    return k.repeat_interleave(repeat, dim), v.repeat_interleave(repeat, dim)


def _attend(q, k, v, mask=None, causal=False) -> torch.Tensor:
    """SDPA over (batch, heads, seq, head_dim). An explicit boolean mask (True: attend) runs on
    CPU, where torch's context_parallel does not."""
    k, v = repeat_kv(k, v, q.shape[1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def _group_size_rank(group: dist.ProcessGroup) -> tuple[int, int]:
    return dist.get_world_size(group), dist.get_rank(group)


# --- all-gathered K/V --------------------------------------------------------------------

def allgather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        group: dist.ProcessGroup) -> torch.Tensor:
    """Local queries against every key: one all-gather of K and V (together) per layer."""
    cp, rank = _group_size_rank(group)
    seq = q.shape[1] * cp
    k_all, v_all = gather_sequence(torch.stack((k, v)), group, dim=2).unbind(0)
    mask = causal_mask(local_positions(seq, cp, rank, q.device),
                       torch.arange(seq, device=q.device))
    out = _attend(q.transpose(1, 2), k_all.transpose(1, 2), v_all.transpose(1, 2), mask=mask)
    return out.transpose(1, 2)


# --- Ulysses all-to-all ------------------------------------------------------------------

def _all_to_all(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Equal blocks of dim 0 to each rank, in rank order; autograd-aware."""
    return funcol.all_to_all_single_autograd(x.contiguous(), None, None, group)


def _seq_to_heads(x: torch.Tensor, group: dist.ProcessGroup, cp: int) -> torch.Tensor:
    """(b, s/cp, h, d), a sequence shard of all heads -> (b, s, h/cp, d), the whole sequence in
    global order for this rank's group of heads."""
    b, local, h, d = x.shape
    x = x.reshape(b, local, cp, h // cp, d).permute(2, 1, 0, 3, 4)  # dim 0: the head group
    x = _all_to_all(x, group).reshape(cp * local, b, h // cp, d)  # dim 0: the source's tokens
    x = x.index_select(0, headtail_order(cp * local, cp, x.device).argsort())
    return x.transpose(0, 1)


def _heads_to_seq(x: torch.Tensor, group: dist.ProcessGroup, cp: int) -> torch.Tensor:
    """The inverse of _seq_to_heads."""
    b, seq, h_local, d = x.shape
    x = x.transpose(0, 1).index_select(0, headtail_order(seq, cp, x.device))
    x = _all_to_all(x.reshape(cp, seq // cp, b, h_local, d), group)  # dim 0: the head group
    return x.permute(2, 1, 0, 3, 4).reshape(b, seq // cp, cp * h_local, d)


def check_ulysses_heads(heads: int, cp: int) -> None:
    if heads % cp:
        raise ValueError(f"a2a (Ulysses) context parallelism splits the heads over cp ranks: "
                         f"the {heads} query heads of a tensor-parallel rank do not divide by "
                         f"cp={cp}")


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      group: dist.ProcessGroup) -> torch.Tensor:
    """Four all-to-alls a layer (q, k, v, out). kv heads that do not divide by cp are first
    repeated up to lcm(kv heads, cp), which still divides the query heads."""
    cp = dist.get_world_size(group)
    heads, kv_heads = q.shape[2], k.shape[2]
    check_ulysses_heads(heads, cp)
    if kv_heads % cp:
        k, v = repeat_kv(k, v, math.lcm(kv_heads, cp), dim=2)
    q, k, v = (_seq_to_heads(t, group, cp).transpose(1, 2) for t in (q, k, v))
    out = _attend(q, k, v, causal=True)
    return _heads_to_seq(out.transpose(1, 2), group, cp)


# --- ring (p2p) --------------------------------------------------------------------------

def _ring_exchange(x: torch.Tensor, group: dist.ProcessGroup, step: int) -> torch.Tensor:
    """Send x `step` ranks on round the ring and receive from `step` ranks back."""
    cp, rank = _group_size_rank(group)
    x, out = x.contiguous(), torch.empty_like(x)
    ops = [dist.P2POp(dist.isend, x, dist.get_global_rank(group, (rank + step) % cp), group),
           dist.P2POp(dist.irecv, out, dist.get_global_rank(group, (rank - step) % cp), group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return out


class _RingShift(torch.autograd.Function):
    """A ring step whose gradient travels the ring the other way."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _ring_exchange(x, group, 1)

    @staticmethod
    def backward(ctx, grad):
        return _ring_exchange(grad, ctx.group, -1), None


def _attend_with_lse(q, k, v, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of one K/V block and its log-sum-exp, for merging blocks. A finite fill keeps
    fully masked rows (no key of the block is visible) free of NaN; their weight is exp(-huge)=0."""
    k, v = repeat_kv(k, v, q.shape[1])
    scores = (q.float() @ k.float().transpose(-2, -1)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    lse = torch.logsumexp(scores, -1, keepdim=True)
    return torch.softmax(scores, -1) @ v.float(), lse


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   group: dist.ProcessGroup) -> torch.Tensor:
    """cp-1 ring steps of K and V (sent together); autograd keeps each block for the backward,
    which sends the K/V gradients back round the ring."""
    cp, rank = _group_size_rank(group)
    seq = q.shape[1] * cp
    q_pos = local_positions(seq, cp, rank, q.device)
    qt, kv = q.transpose(1, 2), torch.stack((k, v))
    outs, lses = [], []
    for step in range(cp):
        if step:
            kv = _RingShift.apply(kv, group)
        k_pos = local_positions(seq, cp, (rank - step) % cp, q.device)
        out, lse = _attend_with_lse(qt, kv[0].transpose(1, 2), kv[1].transpose(1, 2),
                                    causal_mask(q_pos, k_pos))
        outs.append(out)
        lses.append(lse)
    total = torch.logsumexp(torch.stack(lses), 0)
    out = sum(o * torch.exp(lse - total) for o, lse in zip(outs, lses))
    return out.to(q.dtype).transpose(1, 2)


# --- choosing one ------------------------------------------------------------------------

ATTENTION: dict[str, Callable[..., torch.Tensor]] = {
    "allgather": allgather_attention, "a2a": ulysses_attention, "p2p": ring_attention}


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal attention in the same layout: the single-process reference and cp=1."""
    out = _attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    return out.transpose(1, 2)


def context_parallel_attention(comm_type: str, group: dist.ProcessGroup | None) -> AttentionFn:
    """The attention function for a layout's cp_comm_type over the cp group (None or one rank:
    plain causal attention)."""
    if comm_type not in ATTENTION:
        raise ValueError(f"cp_comm_type {comm_type!r} is not one of {sorted(ATTENTION)}")
    if group is None or dist.get_world_size(group) == 1:
        return causal_attention
    return functools.partial(ATTENTION[comm_type], group=group)
