"""Transformer shapes: the typed `ModelShape` and the named presets a spec may use."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.result import moe_layer_count


class ModelShape(BaseModel):
    """A decoder-only transformer, described by what memory, FLOPs and sharding depend on."""

    # Strict: numbers are numbers (`num_layers: true` is an error); sizes are bounded far
    # beyond any real model, so absurd ones are errors rather than overflows.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str = Field(default="custom", max_length=200)
    num_layers: int = Field(gt=0, le=100_000)
    hidden: int = Field(gt=0, le=10_000_000)
    num_heads: int = Field(gt=0, le=100_000)
    num_kv_heads: int | None = Field(default=None, gt=0, le=100_000)
    ffn_hidden: int = Field(gt=0, le=100_000_000)
    vocab_size: int = Field(gt=0, le=100_000_000)
    seq_len: int = Field(gt=0, le=100_000_000)
    # LLaMA: SwiGLU MLP (3 matrices), RMSNorm, untied embeddings. GPT: GELU MLP (2 matrices).
    gated_mlp: bool = True
    tied_embeddings: bool = False
    # The head dim when it is not hidden / num_heads (Megatron's --kv-channels; Qwen3, gpt-oss).
    kv_channels: int | None = Field(default=None, gt=0, le=100_000)
    # Mixture of experts (Megatron-LM's names): 0 experts is a dense model. Each MoE layer
    # routes a token to `experts_per_token` of `num_experts` experts of `moe_ffn_hidden`
    # (default ffn_hidden), plus shared experts of `shared_expert_ffn_hidden` in all. The
    # first `first_dense_layers` layers are dense (DeepSeek), then every `moe_layer_freq`-th.
    num_experts: int = Field(default=0, ge=0, le=1_000_000)
    experts_per_token: int = Field(default=2, gt=0, le=1_000_000)
    moe_ffn_hidden: int | None = Field(default=None, gt=0, le=100_000_000)
    shared_expert_ffn_hidden: int = Field(default=0, ge=0, le=100_000_000)
    first_dense_layers: int = Field(default=0, ge=0, le=100_000)
    moe_layer_freq: int = Field(default=1, gt=0, le=100_000)
    # Group-limited routing (Megatron-Core's names; DeepSeek-V3's node-limited routing): the
    # experts in `moe_router_num_groups` equal groups, a token's experts from at most
    # `moe_router_group_topk` of them.
    moe_router_num_groups: int | None = Field(default=None, gt=0, le=1_000_000)
    moe_router_group_topk: int | None = Field(default=None, gt=0, le=1_000_000)

    @model_validator(mode="after")
    def _heads_fit(self) -> "ModelShape":
        if self.kv_channels is None and self.hidden % self.num_heads:
            raise ValueError(
                f"hidden={self.hidden} is not divisible by num_heads={self.num_heads}; "
                "set kv_channels to the head dim"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not divisible by num_kv_heads={self.kv_heads}"
            )
        return self

    @model_validator(mode="after")
    def _experts_fit(self) -> "ModelShape":
        moe_only = ("moe_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers",
                    "moe_layer_freq", "moe_router_num_groups", "moe_router_group_topk")
        if self.num_experts == 0:
            fields = type(self).model_fields
            given = [k for k in moe_only if getattr(self, k) != fields[k].default]
            if given:
                raise ValueError(f"{given[0]} is for mixture-of-experts models; set "
                                 "num_experts, or remove it")
            return self
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token={self.experts_per_token} is more than "
                             f"num_experts={self.num_experts}")
        if self.moe_layers == 0:
            raise ValueError(f"no layer is a mixture of experts: first_dense_layers="
                             f"{self.first_dense_layers} of num_layers={self.num_layers}")
        return self._groups_fit()

    def _groups_fit(self) -> "ModelShape":
        groups, picked = self.moe_router_num_groups, self.moe_router_group_topk
        if (groups is None) != (picked is None):
            raise ValueError("moe_router_num_groups and moe_router_group_topk go together; "
                             "set both, or neither")
        if groups is not None and (self.num_experts % groups or picked > groups):
            raise ValueError(f"moe_router_num_groups={groups} must divide num_experts="
                             f"{self.num_experts}, and moe_router_group_topk={picked} be at "
                             "most that many")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_layers(self) -> int:
        return moe_layer_count(self.num_layers, self.num_experts, self.first_dense_layers,
                               self.moe_layer_freq)

    @property
    def expert_ffn_hidden(self) -> int:
        return self.moe_ffn_hidden or self.ffn_hidden

    @property
    def attention_params(self) -> int:
        """q, k, v and output projections of one layer."""
        q_dim = self.num_heads * self.head_dim
        return 2 * self.hidden * q_dim + 2 * self.hidden * self.kv_heads * self.head_dim

    def _mlp(self, ffn: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * ffn

    @property
    def expert_params(self) -> int:
        """One routed expert's weights."""
        return self._mlp(self.expert_ffn_hidden)

    @property
    def expert_params_total(self) -> int:
        """Every routed expert's weights over all MoE layers: what expert parallelism shards."""
        return self.moe_layers * self.num_experts * self.expert_params

    @property
    def params_per_layer(self) -> int:
        """A layer's parameters, averaged over dense and MoE layers; routed experts count
        whole (see `params_per_layer_outside_experts` for what EP does not shard)."""
        return self.params_per_layer_outside_experts + self.expert_params_total // self.num_layers

    @property
    def params_per_layer_outside_experts(self) -> int:
        """Attention, norms, the dense MLP or the router and shared experts, averaged."""
        dense = self.num_layers - self.moe_layers
        moe_rest = self.hidden * self.num_experts + self._mlp(self.shared_expert_ffn_hidden)
        mlp = (dense * self._mlp(self.ffn_hidden) + self.moe_layers * moe_rest) // self.num_layers
        return self.attention_params + mlp + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden

    @property
    def num_params(self) -> int:
        """Total parameters: layers, the final norm and the input (and output) embedding."""
        head = 0 if self.tied_embeddings else self.embedding_params
        return self.num_layers * self.params_per_layer + self.hidden + self.embedding_params + head

    @property
    def activated_params(self) -> int:
        """Parameters one token passes through: the routed experts it is sent to only."""
        unrouted = self.num_experts - self.experts_per_token if self.is_moe else 0
        return self.num_params - self.moe_layers * unrouted * self.expert_params


def _llama(name: str, layers: int, hidden: int, heads: int, ffn: int, **kw) -> ModelShape:
    kw.setdefault("vocab_size", 32000)
    kw.setdefault("seq_len", 2048)
    return ModelShape(
        name=name, num_layers=layers, hidden=hidden, num_heads=heads, ffn_hidden=ffn, **kw
    )


def _gpt(name: str, layers: int, hidden: int, heads: int, **kw) -> ModelShape:
    kw.setdefault("vocab_size", 51200)
    kw.setdefault("seq_len", 2048)
    return ModelShape(
        name=name, num_layers=layers, hidden=hidden, num_heads=heads, ffn_hidden=4 * hidden,
        gated_mlp=False, tied_embeddings=True, **kw,
    )


MODEL_PRESETS: dict[str, ModelShape] = {
    # About 4.2M parameters: trains at a few steps per second on one CPU core.
    "tiny": _llama("tiny", 4, 256, 4, 688, vocab_size=2048, seq_len=128),
    # LLaMA 1 (Touvron et al. 2023, arXiv 2302.13971, Table 2); vocab 32000, context 2048.
    "llama-7b": _llama("llama-7b", 32, 4096, 32, 11008),
    "llama-13b": _llama("llama-13b", 40, 5120, 40, 13824),
    "llama-30b": _llama("llama-30b", 60, 6656, 52, 17920),
    # Llama 2 70B (Touvron et al. 2023, arXiv 2307.09288): GQA with 8 KV heads, context 4096.
    "llama-70b": _llama("llama-70b", 80, 8192, 64, 28672, num_kv_heads=8, seq_len=4096),
    # Llama 3.1 (The Llama 3 Herd of Models, arXiv 2407.21783, Table 3): vocabulary 128,256,
    # 8 KV heads; pre-trained at 8,192 tokens (then extended to 131,072).
    "llama-3.1-8b": _llama("llama-3.1-8b", 32, 4096, 32, 14336, num_kv_heads=8,
                           vocab_size=128256, seq_len=8192),
    "llama-3.1-70b": _llama("llama-3.1-70b", 80, 8192, 64, 28672, num_kv_heads=8,
                            vocab_size=128256, seq_len=8192),
    "llama-3.1-405b": _llama("llama-3.1-405b", 126, 16384, 128, 53248, num_kv_heads=8,
                             vocab_size=128256, seq_len=8192),
    # GPT shapes used on Frontier (Dash et al. 2023, arXiv 2312.12705, Table 1) and by
    # Megatron-LM (Narayanan et al. 2021, arXiv 2104.04473, Table 1): ffn = 4h, vocab 51200.
    "gpt-22b": _gpt("gpt-22b", 48, 6144, 48),
    "gpt-175b": _gpt("gpt-175b", 96, 12288, 96),
    "gpt-1t": _gpt("gpt-1t", 128, 25600, 160),
    # About 10.6M parameters (4.2M activated), 8 experts, 2 a token: the CPU's mixture of experts.
    "tiny-moe": _llama("tiny-moe", 4, 256, 4, 688, vocab_size=2048, seq_len=128, num_experts=8,
                       experts_per_token=2, moe_ffn_hidden=344),
    # Mixtral (Jiang et al. 2024, arXiv 2401.04088, Table 1; the models' config.json on the
    # Hugging Face hub): 8 experts, top-2, every layer MoE, GQA with 8 KV heads.
    "mixtral-8x7b": _llama("mixtral-8x7b", 32, 4096, 32, 14336, num_kv_heads=8, seq_len=4096,
                           num_experts=8, experts_per_token=2),
    "mixtral-8x22b": _llama("mixtral-8x22b", 56, 6144, 48, 16384, num_kv_heads=8,
                            seq_len=4096, num_experts=8, experts_per_token=2),
    # Qwen2-57B-A14B (Qwen2 report, arXiv 2407.10671, Table 1; config.json): 64 experts of
    # 2,560, top-8, shared experts of 20,480 in all, 4 KV heads.
    "qwen2-57b-a14b": _llama("qwen2-57b-a14b", 28, 3584, 28, 18944, num_kv_heads=4,
                             vocab_size=151936, seq_len=4096, num_experts=64,
                             experts_per_token=8, moe_ffn_hidden=2560,
                             shared_expert_ffn_hidden=20480),
    # Qwen3-30B-A3B (Qwen3 report, arXiv 2505.09388, Table 2; config.json): 128 experts of
    # 768, top-8, no shared expert, head dim 128 (not hidden / heads).
    "qwen3-30b-a3b": _llama("qwen3-30b-a3b", 48, 2048, 32, 6144, num_kv_heads=4,
                            kv_channels=128, vocab_size=151936, seq_len=4096, num_experts=128,
                            experts_per_token=8, moe_ffn_hidden=768),
    # DeepSeek-V3 (arXiv 2412.19437, §4.2; config.json): 61 layers, the first 3 dense
    # (ffn 18,432), then 256 routed experts of 2,048, top-8, and 1 shared expert. Its
    # multi-head latent attention is approximated by 128-head attention of head dim 56
    # (7,168 / 128): 205M attention parameters a layer against MLA's 187M, and fewer
    # attention-score FLOPs than MLA's 192-wide query-key heads; multi-token prediction
    # is left out. Node-limited routing: 8 groups, a token's experts in at most 4 (n_group,
    # topk_group in its config.json; §2.1.2: "at most M = 4 nodes").
    "deepseek-v3-671b": _llama("deepseek-v3-671b", 61, 7168, 128, 18432, vocab_size=129280,
                               seq_len=4096, num_experts=256, experts_per_token=8,
                               moe_ffn_hidden=2048, shared_expert_ffn_hidden=2048,
                               first_dense_layers=3, moe_router_num_groups=8,
                               moe_router_group_topk=4),
    # gpt-oss-120b (OpenAI model card, arXiv 2508.10925; config.json): 36 layers, 128 experts
    # of 2,880, top-4, head dim 64 over 64 heads, 8 KV heads; its alternating banded
    # attention and attention sinks are priced as full causal attention.
    "gpt-oss-120b": _llama("gpt-oss-120b", 36, 2880, 64, 2880, num_kv_heads=8, kv_channels=64,
                           vocab_size=201088, seq_len=4096, num_experts=128,
                           experts_per_token=4),
    # The models of the published measurements (benchmarks/measured/), each from its paper or
    # released config.
    # NeMo's GPT-3 5B and 20B (NeMo-Framework-Launcher conf/training/gpt3/5b.yaml, 20b.yaml).
    "gpt3-5b": _gpt("gpt3-5b", 24, 4096, 32),
    "gpt3-20b": _gpt("gpt3-20b", 44, 6144, 48),
    # Nemotron-4 (arXiv 2402.16819 Table 1; arXiv 2406.11704 §2): squared-ReLU MLP (2
    # matrices), GQA with 8 KV heads, untied embeddings, vocabulary 256,000, context 4,096.
    "nemotron-4-15b": _llama("nemotron-4-15b", 32, 6144, 48, 24576, num_kv_heads=8,
                             gated_mlp=False, vocab_size=256000, seq_len=4096),
    "nemotron-4-340b": _llama("nemotron-4-340b", 96, 18432, 96, 73728, num_kv_heads=8,
                              gated_mlp=False, vocab_size=256000, seq_len=4096),
    # Grok-1 (xai-org/grok-1 run.py): 64 layers of 6,144 (48 query, 8 KV heads), 8 experts of
    # 32,768 (widening factor 8, gated), top-2, vocabulary 131,072, context 8,192.
    "grok-1-314b": _llama("grok-1-314b", 64, 6144, 48, 32768, num_kv_heads=8,
                          vocab_size=131072, seq_len=8192, num_experts=8, experts_per_token=2),
    # Llama 4 Maverick (meta-llama/Llama-4-Maverick-17B-128E config.json): 48 layers of 5,120,
    # 40 heads, 8 KV heads; every second layer a MoE of 128 experts of 8,192, top-1, with a
    # shared expert of 8,192; dense layers' MLP 16,384; vocabulary 202,048. Chunked attention
    # is priced as full causal attention.
    "llama-4-maverick": _llama("llama-4-maverick", 48, 5120, 40, 16384, num_kv_heads=8,
                               vocab_size=202048, seq_len=8192, num_experts=128,
                               experts_per_token=1, moe_ffn_hidden=8192,
                               shared_expert_ffn_hidden=8192, moe_layer_freq=2),
    # Qwen3-235B-A22B (Qwen3 report, arXiv 2505.09388, Table 2; config.json): 94 layers,
    # 64 heads of 128, 4 KV heads, 128 experts of 1,536, top-8, no shared expert.
    "qwen3-235b-a22b": _llama("qwen3-235b-a22b", 94, 4096, 64, 12288, num_kv_heads=4,
                              kv_channels=128, vocab_size=151936, seq_len=4096,
                              num_experts=128, experts_per_token=8, moe_ffn_hidden=1536),
    # Kimi K2 (moonshotai/Kimi-K2-Instruct config.json): DeepSeek-V3's design with 384 routed
    # experts of 2,048, top-8, 1 shared, the first layer dense, 64 heads (MLA approximated as
    # DeepSeek-V3's is, head dim 7,168 / 64), vocabulary 163,840.
    "kimi-k2": _llama("kimi-k2", 61, 7168, 64, 18432, vocab_size=163840, seq_len=4096,
                      num_experts=384, experts_per_token=8, moe_ffn_hidden=2048,
                      shared_expert_ffn_hidden=2048, first_dense_layers=1),
}
