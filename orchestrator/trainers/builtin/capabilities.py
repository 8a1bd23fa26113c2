"""Which layouts the built-in trainer (jobs/) runs, each refusal with its reason and the code that
says so:

- FP8 through torchao's Float8Linear recipes (jobs/fp8_recipes.py) on CUDA devices of compute
  capability 8.9+ (a CPU cluster has no FP8 peak, so the cost model records an FP8 layout there
  `infeasible`);
- optimizer offload (states and their step on the host) and, with FSDP, FSDP2's
  CPUOffloadPolicy for weights too;
- PyTorch's DDP and FSDP2 always overlap their collectives;
- `bucket_size` is DDP's `bucket_cap_mb`, and the job builds DDP only for ZeRO 0 and 1 over more
  than one gradient replica with tp 1 and pp 1 (jobs/trainer.py: FSDP2 reduces per unit with no
  bucket, and tensor-parallel or pipelined gradients are averaged by hand), so a bucket size
  elsewhere would change nothing and is refused;
- mixture of experts: what the job implements (its `check_experts_feasible`): experts whole
  (etp 1), none over context-parallel ranks, routing to any expert.
"""

from __future__ import annotations

from jobs.fp8_recipes import FP8_RECIPES
from orchestrator.layout import expert_tp
from orchestrator.trainers.capabilities import (
    bucket_refusal,
    first_refusal,
    fp8_refusal,
    offload_refusal,
    overlap_refusal,
)

NAME = "builtin"
FP8_SOURCE = "torchao's Float8Linear recipes"
OFFLOADS = ("optimizer", "optimizer+params")
ALWAYS_OVERLAP = "PyTorch's DDP and FSDP2 always overlap their collectives"


def _moe(model, layout) -> str | None:
    etp = expert_tp(layout.knob_values())
    if etp != 1:
        unset = ", tp's when unset" if layout.etp is None else ""
        return (f"builtin: etp({etp}{unset}): the built-in trainer keeps experts whole; set "
                "space.etp to [1]")
    if layout.cp > 1:
        return (f"builtin: cp({layout.cp}) with MoE layers: experts over context-parallel ranks "
                "are not implemented; set space.cp to [1]")
    return None


def no_ddp_bucket(layout, gpus_per_node: int) -> str | None:
    """Why the job builds no DDP, so no bucket, for this layout (jobs/trainer.py), or None."""
    if layout.tp > 1 or layout.pp > 1:
        which = f"tp({layout.tp})" if layout.tp > 1 else f"pp({layout.pp})"
        return (f"with {which} the built-in trainer averages gradients itself, without DDP's "
                "bucket (jobs/trainer.py)")
    if layout.sharding is not None:
        f = layout.factors(gpus_per_node)
        if f.sp > 1 or f.sg > 1:
            return ("with parameters or gradients sharded the built-in trainer runs FSDP2, "
                    "which reduces per unit with no bucket (jobs/layout.py)")
    elif layout.zero_stage >= 2 and layout.dims.gradient_group > 1:
        return (f"zero_stage {layout.zero_stage} is FSDP2 in the built-in trainer, which reduces "
                "per unit with no bucket (jobs/layout.py)")
    if layout.dims.gradient_group == 1:
        return "one gradient replica: the built-in trainer builds no DDP (jobs/trainer.py)"
    return None


def refusal(spec, layout) -> str | None:
    """Why the built-in trainer cannot run this layout, or None."""
    return first_refusal(
        lambda: _moe(spec.model, layout) if spec.model.is_moe else None,
        lambda: fp8_refusal(NAME, layout, tuple(FP8_RECIPES), FP8_SOURCE),
        lambda: offload_refusal(NAME, layout, OFFLOADS),
        lambda: overlap_refusal(NAME, layout, ALWAYS_OVERLAP),
        lambda: bucket_refusal(NAME, layout, no_ddp_bucket(layout, spec.gpus_per_node)))


def space_problems(spec) -> list[str]:
    """A model the built-in trainer cannot build."""
    if spec.model.moe_router_num_groups:
        return ["model.moe_router_num_groups: the built-in trainer routes each token to any "
                "expert (no group-limited routing); remove it, or use trainer megatron-lm"]
    return []
