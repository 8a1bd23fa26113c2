"""Every layout knob, declared once, in the order of fields, ranges and keys; and what is
derived from the whole list: a layout's problems and its short name."""

from __future__ import annotations

from typing import Any

from orchestrator.layout.choices import (
    CHECKPOINT_MODES,
    CP_COMM_TYPES,
    OFFLOADS,
    PIPELINE_SPLITS,
    PP_SCHEDULES,
    PRECISIONS,
)
from orchestrator.layout.knob import MAX_COUNT, Knob, Values
from orchestrator.layout.rules import (
    expert_ranks_fit,
    heads_split_over_cp,
    offload_needs_sharding,
    pipelined,
    sequence_splits,
)

_SPLIT_KEYS = {"even": "", "embedding_loss": "-embloss", "first_last": "-firstlast"}

_KNOBS: list[Knob] = [
    Knob("tp", int, 1, "tensor-parallel degree", space=(1,), key=lambda v: f"tp{v['tp']}"),
    Knob("pp", int, 1, "pipeline-parallel degree (stages)", space=(1,),
         key=lambda v: f"-pp{v['pp']}"),
    Knob("dp", int, 1, "data-parallel degree: the world over tp x pp x cp",
         key=lambda v: f"-dp{v['dp']}"),
    Knob("zero_stage", int, 0, "ZeRO stage over the dp ranks: 0 DDP, 1 optimizer states, "
         "2 + gradients, 3 + parameters (FSDP full shard)", choices=(0, 1, 2, 3),
         space=(0, 1, 2, 3), key=lambda v: f"-z{v['zero_stage']}"),
    Knob("micro_batch_size", int, 1, "sequences per rank per micro-batch", space=(1, 2, 4, 8),
         key=lambda v: f"-mbs{v['micro_batch_size']}"),
    Knob("grad_accum_steps", int, 1, "micro-batches per optimizer step: the global batch "
         "over micro_batch_size x dp", maximum=MAX_COUNT,
         key=lambda v: f"-gas{v['grad_accum_steps']}"),
    Knob("activation_checkpointing", str, "none", "which activations the backward recomputes",
         choices=CHECKPOINT_MODES, space=CHECKPOINT_MODES,
         key=lambda v: f"-ac{v['activation_checkpointing']}"),
    Knob("recompute_num_layers", int, None, "with full recompute, only the first this many "
         "layers of each pipeline stage recompute", nullable=True,
         none_means="to recompute every layer", space=(None,), range_words=("fit",),
         rule=lambda v: (f"recompute_num_layers({v['recompute_num_layers']}) needs "
                         "activation_checkpointing 'full'")
         if v["recompute_num_layers"] is not None and v["activation_checkpointing"] != "full"
         else None,
         redundant=lambda v, r: v["recompute_num_layers"] is not None
         and v["activation_checkpointing"] != "full",
         key=lambda v: "" if v["recompute_num_layers"] is None
         else str(v["recompute_num_layers"])),
    Knob("sequence_parallel", bool, False, "Megatron sequence parallelism within the tp group",
         space=(False,),
         rule=lambda v: "sequence_parallel needs tp > 1"
         if v["sequence_parallel"] and v["tp"] == 1 else None,
         redundant=lambda v, r: v["sequence_parallel"] and v["tp"] == 1,
         active_when=("tp", lambda tp: tp > 1),
         key=lambda v: "-sp" if v["sequence_parallel"] else ""),
    Knob("pp_schedule", str, "1f1b", "pipeline schedule", choices=PP_SCHEDULES,
         space=("1f1b",),
         # Without a pipeline the schedules are one layout: keep the first listed.
         redundant=lambda v, r: v["pp"] == 1 and v["pp_schedule"] != r.pp_schedule[0],
         active_when=("pp", lambda pp: pp > 1),
         key=lambda v: f"-{v['pp_schedule']}" if pipelined(v) else ""),
    Knob("virtual_stages", int, 1, "model chunks per pipeline rank (interleaved schedule)",
         space=(1,),
         rule=lambda v: (f"virtual_stages({v['virtual_stages']}) > 1 needs pp_schedule "
                         "'interleaved'")
         if v["virtual_stages"] > 1 and v["pp_schedule"] != "interleaved" else None,
         redundant=lambda v, r: (v["pp"] == 1 and v["virtual_stages"] > 1)
         or (v["pp_schedule"] == "interleaved") != (v["virtual_stages"] > 1),
         active_when=("pp_schedule", lambda schedule: schedule == "interleaved"),
         key=lambda v: str(v["virtual_stages"])
         if pipelined(v) and v["virtual_stages"] > 1 else ""),
    Knob("pipeline_split", str, "even", "how stages share layers: " + "|".join(PIPELINE_SPLITS),
         choices=PIPELINE_SPLITS, space=("even",),
         redundant=lambda v, r: v["pp"] == 1 and v["pipeline_split"] != r.pipeline_split[0],
         active_when=("pp", lambda pp: pp > 1),
         key=lambda v: _SPLIT_KEYS[v["pipeline_split"]] if v["pp"] > 1 else ""),
    Knob("compile", bool, False, "torch.compile the model", space=(False,),
         key=lambda v: "-compile" if v["compile"] else ""),
    # Context parallelism splits each sequence over cp ranks (Megatron-Core, torchtitan,
    # DeepSpeed-Ulysses); the world is tp x pp x cp x dp.
    Knob("cp", int, 1, "context-parallel degree: each sequence split over cp ranks", space=(1,),
         fits=sequence_splits,
         key=lambda v: f"-cp{v['cp']}" if v["cp"] > 1 else ""),
    Knob("cp_comm_type", str, "p2p", "how context-parallel attention exchanges keys and "
         "values: p2p ring, a2a (Ulysses) or allgather", choices=CP_COMM_TYPES, space=("p2p",),
         fits=heads_split_over_cp,
         # Without context parallelism the types are one layout: keep the first listed.
         redundant=lambda v, r: v["cp"] == 1 and v["cp_comm_type"] != r.cp_comm_type[0],
         active_when=("cp", lambda cp: cp > 1),
         key=lambda v: f"-{v['cp_comm_type']}" if v["cp"] > 1 else ""),
    # Expert parallelism is carved out of the tp x cp x dp ranks of a pipeline stage, as
    # Megatron-Core folds it (MoE Parallel Folding, arXiv 2504.14960): the experts of each
    # MoE layer split over ep ranks, each expert's matrices over etp, and the remaining
    # tp x cp x dp / (ep x etp) ranks are the experts' data-parallel group.
    Knob("ep", int, 1, "expert-parallel degree: a MoE layer's experts split over ep ranks",
         space=(1,), rule=expert_ranks_fit, key=lambda v: f"-ep{v['ep']}" if v["ep"] > 1 else ""),
    Knob("etp", int, None, "expert tensor-parallel degree: each expert's matrices split over "
         "etp ranks", nullable=True, none_means="for the same as tp", space=(None,),
         key=lambda v: "" if v["etp"] is None else f"-etp{v['etp']}"),
    Knob("precision", str, "bf16", "GEMM precision: bf16 mixed precision (float32 on CPU "
         "clusters) or an FP8 recipe", choices=PRECISIONS, space=("bf16",),
         key=lambda v: "" if v["precision"] == "bf16" else f"-{v['precision']}"),
    Knob("offload", str, "none", "model states kept in host memory: none, the optimizer states "
         "(stepped on the host), or those and the weights", choices=OFFLOADS, space=("none",),
         rule=offload_needs_sharding,
         # The space varies zero_stage apart (its sharding), so the rule is the filter there.
         redundant=lambda v, r: "zero_stage" in v and bool(offload_needs_sharding(v)),
         key=lambda v: {"none": "", "optimizer": "-offopt"}.get(v["offload"], "-offall")),
    # Overlap and bucket sizes: what DeepSpeed's autotuner searches besides the layout. None
    # keeps what the trainer's own base config says (DeepSpeed overlaps by default at ZeRO-3
    # only; Megatron-LM only with its overlap flags; PyTorch's DDP and FSDP2 always overlap).
    Knob("overlap_comm", bool, None, "overlap gradient reduction and weight gathers with "
         "compute: DeepSpeed's overlap_comm, Megatron-LM's --overlap-grad-reduce and "
         "--overlap-param-gather", nullable=True, none_means="for the trainer's own setting",
         space=(None,),
         key=lambda v: {None: "", True: "-ovl", False: "-noovl"}[v["overlap_comm"]]),
    Knob("bucket_size", int, None, "elements per gradient-reduction and weight-gather bucket: "
         "DeepSpeed's reduce_bucket_size and allgather_bucket_size, Megatron-LM's "
         "--ddp-bucket-size", nullable=True, none_means="for the trainer's default",
         maximum=10**12, space=(None,),
         key=lambda v: "" if v["bucket_size"] is None else f"-bkt{v['bucket_size']:.0e}"
         .replace("e+0", "e").replace("e+", "e")),
]
_derived = False


def declare(knob: Knob) -> None:
    """Add a knob to the schema; only before anything has derived from it."""
    if _derived:
        raise RuntimeError(f"knob {knob.name!r} declared after the layout classes were built; "
                           "declare it before importing the rest of ParaTune")
    if any(k.name == knob.name for k in _KNOBS):
        raise ValueError(f"knob {knob.name!r} is already declared")
    _KNOBS.append(knob)


def knobs() -> tuple[Knob, ...]:
    """Every declared knob, in declaration order (the order of fields, ranges and keys)."""
    global _derived
    _derived = True
    return tuple(_KNOBS)


def searched_knobs() -> tuple[Knob, ...]:
    return tuple(k for k in knobs() if k.searched)


def layout_problems(values: Values, model: Any = None) -> list[str]:
    """Why these knob values are no layout: each value outside its knob's domain, then each
    broken rule in declaration order, with the rules that see the model's shape when `model`
    is given."""
    found = [p for k in knobs() if k.kind is not bool and (p := k.problem(values[k.name]))]
    if found:
        return found
    broken = []
    for k in knobs():
        if k.rule and (reason := k.rule(values)):
            broken.append(reason)
        if model is not None and k.fits and (reason := k.fits(values, model)):
            broken.append(reason)
    return broken


def layout_key(values: Values) -> str:
    """A layout's short name from its knob values (sharding appended by the caller)."""
    return "".join(k.key_part(values) for k in knobs())
