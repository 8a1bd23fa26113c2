"""Expert parallelism: the experts of each MoE layer split over the ep ranks of an expert mesh
(jobs/layout.py `build_expert_mesh`), the token exchange between them, and the reduction of
the experts' gradients over their own data-parallel group.

Token exchange (as Megatron-Core's all-to-all dispatcher): each rank sorts its (token, expert)
pairs by expert, tells every peer how many rows it will send to each of the peer's experts
(`all_to_all_single` of the counts), sends the rows (`all_to_all_single` with uneven splits),
runs its own experts on what it received, and sends the results back by the reverse
all-to-all. The row exchanges are torch's functional collectives with autograd, so the
backward sends the gradients the opposite way.

Gradients: a rank's copy of an expert sees the tokens of every rank in its ep group, so its
gradient is a partial sum over the dp replicas' losses. Summing the copies over the
expert-data-parallel group and dividing by dp gives the mean over the dp replicas that every
other parameter gets (DDP's average), exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed._functional_collectives import all_to_all_single_autograd

from jobs.moe import Experts


def dispatch(routed: torch.Tensor, send: list[int], receive: list[int], group) -> torch.Tensor:
    """Rows to the ranks holding their experts: `send[r]` rows to rank r, `receive[r]` back."""
    return all_to_all_single_autograd(routed, receive, send, group)


def combine(results: torch.Tensor, send: list[int], receive: list[int], group) -> torch.Tensor:
    """The reverse of `dispatch`: each result row back to the rank its token came from."""
    return all_to_all_single_autograd(results, send, receive, group)


def exchange(routed: torch.Tensor, per_expert: torch.Tensor,
             run_local: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
             group) -> torch.Tensor:
    """Rows of `routed`, sorted by global expert with `per_expert` rows each, run through the
    experts wherever they live; the results in the same row order."""
    ranks = dist.get_world_size(group)
    local = per_expert.numel() // ranks
    incoming = torch.empty_like(per_expert)
    dist.all_to_all_single(incoming, per_expert, group=group)  # rows per (source, my expert)
    send = per_expert.view(ranks, local).sum(1).tolist()
    receive = incoming.view(ranks, local).sum(1).tolist()
    received = dispatch(routed, send, receive, group)
    # Rows arrive by source rank, then by expert: regroup them by expert for the MLPs.
    segment = torch.repeat_interleave(torch.arange(ranks * local, device=routed.device), incoming)
    by_expert = ((segment % local) * ranks + segment // local).argsort(stable=True)
    out = run_local(received[by_expert], incoming.view(ranks, local).sum(0))
    return combine(out[by_expert.argsort()], send, receive, group)


def expert_modules(model: nn.Module) -> list[Experts]:
    return [m for m in model.modules() if isinstance(m, Experts)]


def expert_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for experts in expert_modules(model) for p in experts.parameters()]


def apply_ep(model: nn.Module, ep_mesh) -> None:
    """Keep this rank's contiguous share of each layer's experts (rank r of ep holds experts
    r * E/ep ... (r + 1) * E/ep - 1) and route tokens to the others over the ep group."""
    ep, rank = ep_mesh.size(), ep_mesh.get_local_rank()
    if ep == 1:
        return
    for experts in expert_modules(model):
        share = experts.num_experts // ep
        mine = {str(e) for e in range(rank * share, (rank + 1) * share)}
        for name in list(experts.mlps):
            if name not in mine:
                del experts.mlps[name]
        experts.exchange = functools.partial(exchange, group=ep_mesh.get_group())


def sync_expert_gradients(model: nn.Module, edp_group, dp: int) -> None:
    """Sum the experts' gradients over the expert-data-parallel group, then divide by dp: the
    mean over dp replicas (see the module docstring)."""
    for param in expert_parameters(model):
        if param.grad is None:
            continue
        if dist.get_world_size(edp_group) > 1:
            dist.all_reduce(param.grad, group=edp_group)
        param.grad.div_(dp)


class Optimizers:
    """Several optimizers stepped as one: the experts' states shard over another group (or
    mesh) than the other parameters'."""

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    def step(self) -> None:
        for optimizer in self.optimizers:
            optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def state(self) -> dict:
        """Every state this rank holds (ZeroRedundancyOptimizer: its shard)."""
        return {k: v for o in self.optimizers for k, v in getattr(o, "optim", o).state.items()}
