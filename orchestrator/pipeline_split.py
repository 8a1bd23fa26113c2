"""How a pipeline splits a model's transformer layers over its stages and model chunks.

- `even`: each of the pp x v model chunks holds num_layers / (pp x v) layers.
- `embedding_loss`: the embedding and the loss count as one layer each, so the first chunk of
  the first stage and the last chunk of the last stage hold one transformer layer fewer
  (Megatron-Core's --account-for-embedding-in-pipeline-split and
  --account-for-loss-in-pipeline-split; megatron/core/transformer/transformer_block.py,
  get_num_layers_to_build). This is how Llama 3 405B's 126 layers ran on 16 stages: one
  transformer layer fewer on each of the first and last stages (The Llama 3 Herd of Models,
  arXiv 2407.21783, §3.3.2), so no stage waits on a layer more than the others.

The rules are Megatron-Core's (TransformerConfig.__post_init__ and Megatron-LM's validate_args):
the slots (layers, plus the embedding and the loss when they count) divide by pp, and a rank's
slots by its virtual stages. The cost model prices the busiest stage and chunk (their layers).
Standard library only, and no other module of ParaTune: the trial job splits its model by it.
The split's values are the knob's (layout.py, PIPELINE_SPLITS).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["busiest_chunk_layers", "layer_chunks", "split_problem", "stage_layers"]


def _extra_slots(split: str) -> int:
    return 2 if split == "embedding_loss" else 0


def split_problem(num_layers: int, pp: int, virtual_stages: int, split: str) -> str | None:
    """Why these layers cannot be split so over pp stages of `virtual_stages` chunks, or None."""
    if split == "even" or pp == 1:
        if num_layers % pp:
            return f"pp({pp}) does not divide num_layers({num_layers})"
        if num_layers % (pp * virtual_stages):
            return (f"pp({pp}) * virtual_stages({virtual_stages}) does not divide "
                    f"num_layers({num_layers})")
        return None
    slots = num_layers + _extra_slots(split)
    if slots % pp or (slots // pp) % virtual_stages:
        return (f"pipeline_split embedding_loss: num_layers({num_layers}) + 2 (the embedding and "
                f"the loss) must divide by pp({pp}) * virtual_stages({virtual_stages})")
    if slots // pp < 2:
        return (f"pipeline_split embedding_loss: pp({pp}) leaves the first stage no transformer "
                f"layer of num_layers({num_layers})")
    return None


def layer_chunks(num_layers: int, pp: int, virtual_stages: int, split: str) -> list[int]:
    """The model chunk of each transformer layer, in layer order: chunk c runs on pipeline
    rank c % pp (Megatron-Core's interleaved order: all ranks' first chunks, then their
    second). The embedding, when it counts, takes the first slot."""
    chunks = pp * virtual_stages
    offset = 1 if _extra_slots(split) and pp > 1 else 0
    size = (num_layers + (2 * offset)) // chunks
    return [(i + offset) // size for i in range(num_layers)]


@lru_cache(maxsize=4096)  # the cost model asks for every estimate
def stage_layers(num_layers: int, pp: int, virtual_stages: int, split: str) -> tuple[int, ...]:
    """Transformer layers on each pipeline rank."""
    counts = [0] * pp
    for chunk in layer_chunks(num_layers, pp, virtual_stages, split):
        counts[chunk % pp] += 1
    return tuple(counts)


@lru_cache(maxsize=4096)
def busiest_chunk_layers(num_layers: int, pp: int, virtual_stages: int, split: str) -> int:
    """Transformer layers in the largest model chunk."""
    counts: dict[int, int] = {}
    for chunk in layer_chunks(num_layers, pp, virtual_stages, split):
        counts[chunk] = counts.get(chunk, 0) + 1
    return max(counts.values())
