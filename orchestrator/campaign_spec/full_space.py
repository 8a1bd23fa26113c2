"""The whole space a model, a cluster and a world size allow: what `paratune plan --model M
--cluster C --gpus N` searches when no space is given, and what it leaves out and why.

The ranges are the ones a person planning the run would try (NeMo's auto-configurator builds
its space from the model size and GPU count the same way): tensor parallelism within a node,
pipeline depths that split the layers (first and last stages sized to the middle ones where an
even split cannot), context parallelism where the sequence is long, expert parallelism on an
MoE model (the interleaved schedule at 2 virtual stages on a dense one), every ZeRO stage,
micro-batches up to 16 sequences, every recompute mode, and FP8 where the device has FP8 tensor
cores. Each range is kept to the values that can make a layout of this world, so the cost model
prices thousands of layouts, not the cross product.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.layout import ParallelDims
from orchestrator.pipeline_split import split_problem
from orchestrator.presets import Cluster, ModelShape

MICRO_BATCHES = (1, 2, 4, 8, 16)
# A sequence split over cp ranks keeps at least this many tokens a rank: shorter chunks
# spend more on the ring's key/value exchange than they save (Llama 3 405B ran 128k at cp 16).
MIN_TOKENS_PER_CP_RANK = 8192
MAX_EP = 64  # DeepSeek-V3 trained at EP 64; beyond it the all-to-all spans more nodes
FP8_RECIPE = "fp8-tensorwise"  # the recipe both the built-in trainer and Megatron-LM run


@dataclass(frozen=True)
class FullSpace:
    """`space`: the spec's space section; `left_out`: a line per knob or value not searched,
    each with why and the `--set` that searches it."""

    space: dict[str, Any]
    left_out: list[str] = field(default_factory=list)


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def _pipeline_depths(model: ModelShape, world_size: int) -> tuple[list[int], bool]:
    """The pp values that split the layers (at least two a stage) and divide the world, and
    whether any needs first and last stages sized to the middle ones."""
    depths, first_last = [], False
    for pp in range(1, model.num_layers // 2 + 1):
        if ParallelDims.filling(world_size, pp=pp) is None:
            continue
        if split_problem(model.num_layers, pp, 1, "even") is None:
            depths.append(pp)
        elif pp & (pp - 1) == 0 and split_problem(model.num_layers, pp, 1, "first_last") is None:
            depths.append(pp)
            first_last = True
    return depths, first_last


def full_space(model: ModelShape, cluster: Cluster, gpus_per_node: int,
               world_size: int) -> FullSpace:
    """The space section `plan` searches for this model on `world_size` GPUs of `cluster`."""
    tp = [t for t in _powers_of_two(gpus_per_node)
          if model.num_heads % t == 0 and world_size % t == 0]
    pp, first_last = _pipeline_depths(model, world_size)
    cp = [c for c in _powers_of_two(world_size)
          if c == 1 or (model.seq_len // c >= MIN_TOKENS_PER_CP_RANK
                        and model.seq_len % (2 * c) == 0)]
    ep = [e for e in _powers_of_two(min(model.num_experts, MAX_EP, world_size))
          if model.num_experts % e == 0] if model.num_experts else [1]
    fp8 = cluster.fp8_peak_tflops > 0 and cluster.device != "cpu"
    space = {
        "kind": "megatron-3d", "tp": tp, "pp": pp, "cp": cp, "ep": ep,
        "zero_stage": [0, 1, 2, 3], "micro_batch_size": list(MICRO_BATCHES),
        "activation_checkpointing": ["none", "selective", "full"],
        "sequence_parallel": [False, True] if max(tp) > 1 else [False],
        "pipeline_split": ["even", "first_last"] if first_last else ["even"],
        "precision": ["bf16", FP8_RECIPE] if fp8 else ["bf16"],
    }
    if model.num_experts:
        space["etp"] = [1]
    else:  # an MoE space is wide enough already (ep): interleaving would pass MAX_COMBINATIONS
        space.update(pp_schedule=["1f1b", "interleaved"], virtual_stages=[1, 2])
    return FullSpace(space, _left_out(model, cluster, fp8))


def _left_out(model: ModelShape, cluster: Cluster, fp8: bool) -> list[str]:
    """What the full space does not search, each with why and how to search it."""
    lines = [
        "sequence_parallel false at tp > 1: the same traffic as true, more activation "
        "memory; --set 'space.sequence_parallel=[false,true]'",
        "offload (optimizer, optimizer+params): host memory is a last resort, slower than a "
        "layout that fits; --set 'space.offload=[none,optimizer]'",
        "AMSP sharding factors: ZeRO stages stand for them; --amsp searches AMSP's plan",
        "recompute of only some layers: --set 'space.recompute_num_layers=[null,fit]'",
        "cp_comm_type a2a and allgather (p2p only), overlap_comm and bucket_size (each "
        "trainer's own), compile",
    ]
    if fp8:
        lines.append(f"FP8 recipes other than {FP8_RECIPE} (one recipe stands for FP8): "
                     "--set 'space.precision=[bf16,fp8-blockwise]'")
    else:
        lines.append(f"FP8: {cluster.device} has no FP8 tensor cores")
    if model.num_experts:
        lines += ["expert tensor parallelism (etp 1 only): --set 'space.etp=[1,null]'",
                  "the interleaved schedule, to keep an MoE space's count bounded: --set "
                  "'space.pp_schedule=[1f1b,interleaved]' --set 'space.virtual_stages=[1,2]' "
                  "with fewer ep values"]
    else:
        lines.append("more than 2 virtual stages: --set 'space.virtual_stages=[1,2,4]'")
    if model.seq_len < 2 * MIN_TOKENS_PER_CP_RANK:
        lines.append(f"context parallelism: seq_len {model.seq_len} is under "
                     f"{2 * MIN_TOKENS_PER_CP_RANK} (cp keeps {MIN_TOKENS_PER_CP_RANK} tokens a "
                     "rank); --set 'space.cp=[1,2]'")
    return lines
