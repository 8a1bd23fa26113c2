"""How a pipeline splits a model's transformer layers over its stages and model chunks.

- `even`: each of the pp x v model chunks holds num_layers / (pp x v) layers.
- `embedding_loss`: the embedding and the loss count as one layer each, so the first chunk of
  the first stage and the last chunk of the last stage hold one transformer layer fewer
  (Megatron-Core's --account-for-embedding-in-pipeline-split and
  --account-for-loss-in-pipeline-split; megatron/core/transformer/transformer_block.py,
  get_num_layers_to_build). This is how Llama 3 405B's 126 layers ran on 16 stages: one
  transformer layer fewer on each of the first and last stages (The Llama 3 Herd of Models,
  arXiv 2407.21783, §3.3.2), so no stage waits on a layer more than the others.
- `first_last`: every middle stage holds the fewest layers that leave the first and last
  stages no more than it (ceil(num_layers / pp), rounded up to the virtual stages), and the
  first and last share the rest, the last the smaller part since it also runs the output
  layer (Megatron-LM's --decoder-first-pipeline-num-layers and
  --decoder-last-pipeline-num-layers). DeepSeek-V3's 61 layers on 16 stages are 3 + 14 x 4 + 2.

The rules are Megatron-Core's (TransformerConfig.__post_init__ and Megatron-LM's validate_args):
for `embedding_loss` the slots (layers, the embedding and the loss) divide by pp, and a rank's
slots by its virtual stages; for `first_last` each stage's layers divide by its virtual stages.
A rank's layers are spread evenly over its chunks (Megatron-Core's interleaved order: all
ranks' first chunks, then their second). The cost model prices the busiest stage and chunk.
Standard library only, and no other module of ParaTune: the trial job splits its model by it.
The split's values are the knob's (layout.py, PIPELINE_SPLITS).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["busiest_chunk_layers", "end_stage_layers", "layer_chunks", "split_problem",
           "stage_layers"]


def end_stage_layers(num_layers: int, pp: int, virtual_stages: int) -> tuple[int, int, int]:
    """`first_last`'s (first, middle, last) stage layers; any may be < 1 where it cannot
    split so (split_problem says why)."""
    v = virtual_stages
    middle = v * -(-num_layers // (pp * v)) if pp > 2 else 0
    rest = num_layers - (pp - 2) * middle
    first = v * -(-rest // (2 * v))
    return first, middle, rest - first


def _first_last_problem(num_layers: int, pp: int, v: int) -> str | None:
    first, _, last = end_stage_layers(num_layers, pp, v)
    if num_layers % v:
        return (f"pipeline_split first_last: virtual_stages({v}) does not divide "
                f"num_layers({num_layers})")
    if pp == 2 and v > 1:  # Megatron-Core spreads its interleaved chunks over the middle ones
        return "pipeline_split first_last: virtual_stages > 1 needs pp > 2 (a middle stage)"
    if last < v:
        return (f"pipeline_split first_last: pp({pp}) * virtual_stages({v}) leaves the last "
                f"stage no transformer layer of num_layers({num_layers})")
    return None


def split_problem(num_layers: int, pp: int, virtual_stages: int, split: str) -> str | None:
    """Why these layers cannot be split so over pp stages of `virtual_stages` chunks, or None."""
    if split == "even" or pp == 1:
        if num_layers % pp:
            return f"pp({pp}) does not divide num_layers({num_layers})"
        if num_layers % (pp * virtual_stages):
            return (f"pp({pp}) * virtual_stages({virtual_stages}) does not divide "
                    f"num_layers({num_layers})")
        return None
    if split == "first_last":
        return _first_last_problem(num_layers, pp, virtual_stages)
    slots = num_layers + 2
    if slots % pp or (slots // pp) % virtual_stages:
        return (f"pipeline_split embedding_loss: num_layers({num_layers}) + 2 (the embedding and "
                f"the loss) must divide by pp({pp}) * virtual_stages({virtual_stages})")
    if slots // pp < 2:
        return (f"pipeline_split embedding_loss: pp({pp}) leaves the first stage no transformer "
                f"layer of num_layers({num_layers})")
    return None


@lru_cache(maxsize=4096)  # the cost model asks for every estimate
def stage_layers(num_layers: int, pp: int, virtual_stages: int, split: str) -> tuple[int, ...]:
    """Transformer layers on each pipeline rank."""
    if pp == 1:
        return (num_layers,)
    if split == "first_last":
        first, middle, last = end_stage_layers(num_layers, pp, virtual_stages)
        return (first, *[middle] * (pp - 2), last)
    if split == "even":
        return (num_layers // pp,) * pp
    per_rank = (num_layers + 2) // pp  # the embedding and the loss hold a slot each
    return (per_rank - 1, *[per_rank] * (pp - 2), per_rank - 1)


def _chunk_sizes(num_layers: int, pp: int, virtual_stages: int, split: str) -> list[int]:
    """Transformer layers in each model chunk, in layer order (chunk c runs on rank c % pp)."""
    v = virtual_stages
    if split == "embedding_loss" and pp > 1:  # the embedding and the loss take a chunk's slot
        size = (num_layers + 2) // (pp * v)
        return [size - (c == 0) - (c == pp * v - 1) for c in range(pp * v)]
    ranks = stage_layers(num_layers, pp, v, split)
    return [ranks[c % pp] // v for c in range(pp * v)]


def layer_chunks(num_layers: int, pp: int, virtual_stages: int, split: str) -> list[int]:
    """The model chunk of each transformer layer, in layer order: chunk c runs on pipeline
    rank c % pp (Megatron-Core's interleaved order: all ranks' first chunks, then their
    second)."""
    sizes = _chunk_sizes(num_layers, pp, virtual_stages, split)
    return [chunk for chunk, size in enumerate(sizes) for _ in range(size)]


@lru_cache(maxsize=4096)
def busiest_chunk_layers(num_layers: int, pp: int, virtual_stages: int, split: str) -> int:
    """Transformer layers in the largest model chunk."""
    return max(_chunk_sizes(num_layers, pp, virtual_stages, split))
