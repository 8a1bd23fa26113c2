"""Transformer shapes: the typed `ModelShape` and the named presets a spec may use."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


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

    @model_validator(mode="after")
    def _heads_fit(self) -> "ModelShape":
        if self.hidden % self.num_heads:
            raise ValueError(
                f"hidden={self.hidden} is not divisible by num_heads={self.num_heads}"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} is not divisible by num_kv_heads={self.kv_heads}"
            )
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def params_per_layer(self) -> int:
        h = self.hidden
        kv_dim = self.kv_heads * self.head_dim
        attention = 2 * h * h + 2 * h * kv_dim
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_hidden
        norms = 2 * h
        return attention + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden

    @property
    def num_params(self) -> int:
        """Total parameters: layers, the final norm and the input (and output) embedding."""
        head = 0 if self.tied_embeddings else self.embedding_params
        return self.num_layers * self.params_per_layer + self.hidden + self.embedding_params + head


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
    # GPT shapes used on Frontier (Dash et al. 2023, arXiv 2312.12705, Table 1) and by
    # Megatron-LM (Narayanan et al. 2021, arXiv 2104.04473, Table 1): ffn = 4h, vocab 51200.
    "gpt-22b": _gpt("gpt-22b", 48, 6144, 48),
    "gpt-175b": _gpt("gpt-175b", 96, 12288, 96),
    "gpt-1t": _gpt("gpt-1t", 128, 25600, 160),
}
