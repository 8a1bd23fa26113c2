"""The feed-forward blocks: the dense MLP, and the mixture of experts that replaces it in MoE
layers (Mixtral's routing, dropless as Megatron-Core's and torchtitan's).

A router (a linear map without bias) scores the experts of each token; the softmax over all
experts is cut to the top k and renormalised, which equals Mixtral's softmax over the top-k
logits. Every token reaches its k experts (no capacity, nothing dropped), so a token's result
does not depend on the other tokens of its batch, and every layout computes the same function.
Optional shared experts (DeepSeek, Qwen2-MoE) are one dense MLP added to every token's output.

There is no auxiliary load-balancing loss: the loss is the language-model loss alone, so it
compares with dense runs and equals a single process's under any layout.

With expert parallelism each rank keeps a contiguous share of the experts, and tokens travel
to them and back by all-to-all (jobs/expert_parallel.py); see `Experts.forward`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class FeedForward(nn.Module):
    """SwiGLU MLP (gated), or a GELU MLP when not gated: the dense layers' feed-forward, each
    routed expert, and the shared experts."""

    def __init__(self, hidden: int, ffn_hidden: int, gated: bool):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn_hidden, bias=False) if gated else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


def is_moe_layer(args, index: int) -> bool:
    """Layer `index` is a mixture of experts (orchestrator/result.py `moe_layer_count`'s rule:
    every moe_layer_freq-th layer after the first dense ones)."""
    return (args.num_experts > 0 and index >= args.first_dense_layers
            and index % args.moe_layer_freq == 0)


class Experts(nn.Module):
    """The routed experts of one layer, keyed by their global index so names stay stable when
    expert parallelism keeps only this rank's share (as pipeline stages keep layers).

    `exchange` (set by jobs/expert_parallel.py `apply_ep`) carries the routed tokens to the
    ranks that hold their experts and the results back; None when this rank holds them all.
    Tensor parallelism hands this module only its rank's share of the tokens (jobs/parallelize.py
    `apply_tp`)."""

    def __init__(self, num_experts: int, hidden: int, ffn_hidden: int, gated: bool):
        super().__init__()
        self.num_experts = num_experts
        self.mlps = nn.ModuleDict(
            {str(e): FeedForward(hidden, ffn_hidden, gated) for e in range(num_experts)})
        self.exchange = None

    def forward(self, tokens: torch.Tensor, weights: torch.Tensor,
                chosen: torch.Tensor) -> torch.Tensor:
        """tokens (T, hidden), their routing weights and chosen experts (T, k): the weighted
        sum of each token's k expert outputs, (T, hidden)."""
        count, k = chosen.shape
        # Permute the T x k (token, expert) pairs so each expert's tokens are contiguous; a
        # stable sort keeps token order inside an expert, the same in every layout.
        order = chosen.flatten().argsort(stable=True)
        per_expert = torch.bincount(chosen.flatten(), minlength=self.num_experts)
        routed = tokens[order // k]
        if self.exchange is None:
            out = self.run_local(routed, per_expert)
        else:
            out = self.exchange(routed, per_expert, self.run_local)
        out = out[order.argsort()].view(count, k, -1)
        return (out * weights.unsqueeze(-1).to(out.dtype)).sum(1)

    def run_local(self, routed: torch.Tensor, per_expert: torch.Tensor) -> torch.Tensor:
        """Run this rank's experts, in order, on their contiguous runs of `routed` rows. Every
        expert runs, on no rows if none came, so each has a gradient (zero) in every layout."""
        chunks = routed.split(per_expert.tolist())
        return torch.cat([mlp(chunk) for mlp, chunk in zip(self.mlps.values(), chunks)])


class MoE(nn.Module):
    """A mixture-of-experts feed-forward: router, routed experts, optional shared experts."""

    def __init__(self, args):
        super().__init__()
        self.top_k = args.experts_per_token
        ffn = args.moe_ffn_hidden or args.ffn_hidden
        self.router = nn.Linear(args.hidden, args.num_experts, bias=False)
        self.experts = Experts(args.num_experts, args.hidden, ffn, args.gated_mlp)
        self.shared_expert = (FeedForward(args.hidden, args.shared_expert_ffn_hidden,
                                          args.gated_mlp)
                              if args.shared_expert_ffn_hidden else None)

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's top-k experts and their weights (summing to 1), in float32."""
        probs = self.router(tokens).float().softmax(dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), chosen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        weights, chosen = self.route(tokens)
        out = self.experts(tokens, weights, chosen)
        if self.shared_expert is not None:
            out = out + self.shared_expert(tokens)
        return out.view(x.shape)
