"""Pipeline parallelism with torch.distributed.pipelining: split the model, build a schedule.

The full model is built on every rank with the same seed, then each rank keeps the layers of
its stage(s), so the weights equal a single process's. With the interleaved schedule a rank
holds v chunks, stage indices rank, rank + pp, ... (Megatron's looped placement).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from jobs.model import Transformer

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def stage_ids(pp_rank: int, pp: int, virtual_stages: int) -> list[int]:
    return [pp_rank + k * pp for k in range(virtual_stages)]


def split_stage(model: Transformer, stage: int, num_stages: int, layer_stages: list[int]
                ) -> Transformer:
    """A copy of `model` that keeps only stage `stage`'s layers (`layer_stages`: each layer's
    stage of `num_stages`, as the layout splits them: orchestrator/pipeline_split.py); the
    first stage keeps the embedding, the last the norm and the output."""
    chunk = copy.deepcopy(model)
    keep = {str(i) for i, s in enumerate(layer_stages) if s == stage}
    for name in list(chunk.layers):
        if name not in keep:
            del chunk.layers[name]
    if stage > 0:
        chunk.tok_embeddings = None
    if stage < num_stages - 1:
        chunk.norm = None
        chunk.output = None
    return chunk


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def build_schedule(name: str, stages: list, n_microbatches: int):
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    if name == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches, loss_fn=cross_entropy)
    (stage,) = stages
    schedule = ScheduleGPipe if name == "gpipe" else Schedule1F1B
    return schedule(stage, n_microbatches, loss_fn=cross_entropy)
