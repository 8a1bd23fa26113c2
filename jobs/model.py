"""A LLaMA-style decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU), plain
enough to read top to bottom; with num_experts > 0 the MoE layers' MLPs are mixtures of experts
(jobs/moe.py). Parallelism is applied from outside (jobs/parallelize.py), so the model only
assumes that a tensor-parallel split keeps whole heads on a rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from jobs.moe import FeedForward, MoE, is_moe_layer


@dataclass
class ModelArgs:
    num_layers: int = 4
    hidden: int = 256
    num_heads: int = 4
    num_kv_heads: int | None = None
    ffn_hidden: int = 688
    vocab_size: int = 2048
    seq_len: int = 128
    gated_mlp: bool = True
    tied_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # The head dim when it is not hidden / num_heads (Megatron's --kv-channels).
    kv_channels: int | None = None
    # Mixture of experts (0 experts: dense); the same fields as the cost model's ModelShape.
    num_experts: int = 0
    experts_per_token: int = 2
    moe_ffn_hidden: int | None = None
    shared_expert_ffn_hidden: int = 0
    first_dense_layers: int = 0
    moe_layer_freq: int = 1

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels; x is (batch, seq, heads, head_dim)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.hidden, args.num_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.hidden, args.kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.hidden, args.kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.num_heads * args.head_dim, args.hidden, bias=False)
        # Context parallelism (jobs/context_layout.py) sets the attention across a sequence's
        # shards: (batch, seq, heads, head_dim) q, k, v in, the same layout out.
        self.attention_fn = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds only its share of the heads.
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rotary(q, cos[:s], sin[:s]), apply_rotary(k, cos[:s], sin[:s])
        if self.attention_fn is not None:
            return self.wo(self.attention_fn(q, k, v).reshape(b, s, -1))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if k.shape[1] != q.shape[1]:  # grouped-query attention
            repeat = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, args: ModelArgs, index: int = 0):
        super().__init__()
        self.attention_norm = RMSNorm(args.hidden, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.hidden, args.norm_eps)
        self.feed_forward = (MoE(args) if is_moe_layer(args, index)
                             else FeedForward(args.hidden, args.ffn_hidden, args.gated_mlp))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.hidden)
        # A dict keyed by layer index keeps names stable when pipeline stages drop layers.
        self.layers = nn.ModuleDict({str(i): Block(args, i) for i in range(args.num_layers)})
        self.norm = RMSNorm(args.hidden, args.norm_eps)
        self.output = nn.Linear(args.hidden, args.vocab_size, bias=False)
        if args.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rotary_tables(args.head_dim, args.seq_len, args.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # Under context parallelism: the global positions of this rank's tokens.
        self.rope_positions: torch.Tensor | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 style init, scaled down on the residual projections."""
        std = 0.02
        for name, param in self.named_parameters():
            if param.dim() < 2:
                continue
            residual = name.endswith(("wo.weight", "w2.weight"))
            scale = std / math.sqrt(2 * self.args.num_layers) if residual else std
            nn.init.normal_(param, mean=0.0, std=scale)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tokens to logits. A pipeline stage lacks the parts it does not own (set to None):
        then it takes or returns hidden states instead."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        cos, sin = self.rope_cos, self.rope_sin
        if self.rope_positions is not None:
            cos, sin = cos[self.rope_positions], sin[self.rope_positions]
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.norm is not None:
            h = self.norm(h)
        return self.output(h) if self.output is not None else h


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
