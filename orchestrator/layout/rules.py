"""The rules knobs add to a layout: each returns why a layout breaks it, or None."""

from __future__ import annotations

from typing import Any

from orchestrator.layout.dims import ParallelDims
from orchestrator.layout.knob import Values


def pipelined(values: Values) -> bool:
    """Whether the pipeline schedule names the layout (pp > 1 and not the default 1F1B)."""
    return values["pp"] > 1 and values["pp_schedule"] != "1f1b"


def expert_tp(values: Values) -> int:
    """The expert tensor-parallel degree: etp, or tp when unset (Megatron-Core's default)."""
    return ParallelDims.of(values).expert_tp


def expert_ranks_fit(values: Values) -> str | None:
    dims = ParallelDims.of(values)
    ep, etp = dims.ep, dims.expert_tp
    if not dims.experts_fit:
        cp = f"cp({values['cp']}) x " if values["cp"] > 1 else ""
        return (f"ep({ep}) x etp({etp}) must divide tp({values['tp']}) x {cp}dp({values['dp']}), "
                "the ranks of a pipeline stage the experts are laid out on")
    return None


def offload_needs_sharding(values: Values) -> str | None:
    if values["offload"] == "optimizer+params" and values["zero_stage"] != 3:
        return (f"offload 'optimizer+params' needs zero_stage 3 (zero_stage "
                f"{values['zero_stage']}): weights live on the host only when sharded "
                "(DeepSpeed's offload_param, FSDP2's CPU offload)")
    return None


def sequence_splits(values: Values, model: Any) -> str | None:
    """Context parallelism splits each sequence into 2 x cp chunks (Megatron-Core's and
    torchtitan's head-tail load balancing), so the model's seq_len (where known) must divide
    by them."""
    dims = ParallelDims.of(values)
    if dims.cp > 1 and model.seq_len is not None and model.seq_len % dims.context_chunks:
        return (f"cp({dims.cp}) splits a sequence into 2 x cp = {dims.context_chunks} chunks: "
                f"2 x cp must divide seq_len({model.seq_len})")
    return None


def heads_split_over_cp(values: Values, model: Any) -> str | None:
    """Ulysses (cp_comm_type a2a) gives each cp rank whole attention heads of its tp shard."""
    cp, tp = values["cp"], values["tp"]
    heads = model.num_heads // tp
    if cp > 1 and values["cp_comm_type"] == "a2a" and heads % cp:
        return (f"cp({cp}) with cp_comm_type a2a (Ulysses) splits heads over cp: cp({cp}) must "
                f"divide the {heads} heads of a tp({tp}) rank; use p2p or allgather")
    return None
