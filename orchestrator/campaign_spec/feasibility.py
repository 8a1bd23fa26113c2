"""Why a spec's search space holds no valid layout, in the spec's own key names, so an empty
space is an error that says what to change rather than a campaign of zero trials."""

from __future__ import annotations

from orchestrator.layout import ParallelDims
from orchestrator.space import SearchSpace


def _shown(values: tuple) -> str:
    return "[" + ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values) + "]"


def explain_empty(space: SearchSpace) -> str:
    """The first reason, checked in the order the search space filters, that nothing is left."""
    s, world = space.ranges, space.world_size
    # The degrees whose model copies fill the world, each with its dp.
    pairs = [filled for tp in s.tp for cp in s.cp for pp in s.pp
             if (filled := ParallelDims.filling(world, tp=tp, cp=cp, pp=pp))]
    if not pairs:
        cp = f" × space.cp {_shown(s.cp)}" if tuple(s.cp) != (1,) else ""
        return (f"no space.tp {_shown(s.tp)}{cp} × space.pp {_shown(s.pp)} divides the world "
                f"size {world} (scale.nodes × scale.gpus_per_node); use divisors of {world}")
    if all(sp for sp in s.sequence_parallel) and all(d.tp == 1 for d in pairs):
        return "space.sequence_parallel [true] needs tp > 1; add false, or a tp > 1 to space.tp"
    pipelines = [d for d in pairs
                 if any((sched == "interleaved") == (v > 1) and (d.pp > 1 or v == 1)
                        for sched in s.pp_schedule for v in s.virtual_stages)]
    if not pipelines:
        return ("space.pp_schedule / space.virtual_stages: 'interleaved' needs virtual_stages "
                "> 1 and pp > 1, the other schedules virtual_stages 1")
    batch = space.global_batch_size
    fitting = [d for d in pipelines
               if any(batch % d.samples_per_micro_batch(mbs) == 0 for mbs in s.micro_batch_size)]
    if not fitting:
        dps = sorted({d.dp for d in pipelines})
        return (f"scale.global_batch_size {batch} is not a multiple of micro_batch_size × dp for "
                f"any space.micro_batch_size {_shown(s.micro_batch_size)} (dp: "
                f"{', '.join(map(str, dps))}); make it a multiple")
    if s.kind == "megatron-3d" and 0 not in s.zero_stage and all(
            d.dp == 1 for d in fitting):
        return (f"space.zero_stage {_shown(s.zero_stage)}: stages above 0 shard over dp ranks, "
                "and every layout here has dp = 1; add 0")
    refused: list[str] = []
    space.candidates(refused)
    first = f"; the first refused: {refused[0]}" if refused else ""
    return ("no layout passes the layout checks (space ranges against model.num_heads, "
            f"model.num_layers, scale.gpus_per_node){first}")
