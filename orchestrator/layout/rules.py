"""The rules knobs add to a layout: each returns why a layout breaks it, or None."""

from __future__ import annotations

from orchestrator.layout.knob import Values


def pipelined(values: Values) -> bool:
    """Whether the pipeline schedule names the layout (pp > 1 and not the default 1F1B)."""
    return values["pp"] > 1 and values["pp_schedule"] != "1f1b"


def expert_tp(values: Values) -> int:
    """The expert tensor-parallel degree: etp, or tp when unset (Megatron-Core's default)."""
    return values["tp"] if values["etp"] is None else values["etp"]


def expert_ranks_fit(values: Values) -> str | None:
    ep, etp = values["ep"], expert_tp(values)
    ranks = values["tp"] * values["cp"] * values["dp"]
    if ranks % (ep * etp):
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
