"""Which data-parallel mode a trial runs, and the device mesh it runs on.

How AMSP's (s_p, s_g, s_os) choices map onto PyTorch modes (dp = data-parallel size):

| AMSP factors              | mode here                                             | exact? |
|---------------------------|-------------------------------------------------------|--------|
| (1, 1, 1)                 | DDP (tp = pp = 1) or gradients all-reduced over dp    | yes    |
| (1, 1, s), s = dp         | ZeRO-1: ZeroRedundancyOptimizer over dp               | yes    |
| (1, 1, s), s < dp         | ZeroRedundancyOptimizer over groups of s, gradients   | yes    |
|                           | all-reduced over all dp (AMSP partial OS sharding)    |        |
| (s, s, s), s = dp         | FSDP2 fully_shard (ZeRO-3)                            | yes    |
| (s, s, s), s < dp         | HSDP: replicate dp/s × shard s (MiCS)                 | yes    |
| (1, s, s)                 | FSDP2 reshard_after_forward=False over s (ZeRO-2)     | approx: weights are sharded at rest too, gathered once per micro-batch |
| (p, g, o), p < o          | HSDP with shard group p                               | approx: gradients and optimizer states sharded over p, not g and o |
| ZeRO++ secondary shard h  | FSDP2 reshard_after_forward=h                         | yes (hpZ without quantization) |

zero_stage 0-3 are the rows with s = dp. Mesh dimensions, outermost first: the layout's rank
order (orchestrator/layout/dims.py) with dp split in two,
("pp", "dp_replicate", "dp_shard", "cp", "tp"), so TP ranks are neighbours (inside a node), then
the context-parallel ranks of a sequence, and pipeline stages are farthest apart (across nodes),
as Megatron lays them out.

Context parallelism (jobs/context_parallel.py) gives the cp ranks of a dp replica the same rows,
each a 1/cp share of every sequence, so parameters see gradients from dp x cp ranks: they
reduce over the flattened "dp_cp" (DDP, the manual all-reduce, the loss), and every sharded
mode takes the cp ranks into its shard group, "dp_shard_cp" (torchtitan's mesh; Megatron's
distributed optimizer shards over data x context ranks alike). "dp" still says which rows a
rank trains on. With dp 1 and cp > 1, zero_stage 1-3 shard over the cp ranks alone.

A model with MoE layers gets a second mesh over the same ranks, ("pp", "edp", "ep", "etp"):
Megatron-Core's MoE parallel folding. The tp x dp ranks of a pipeline stage, in rank order,
are regrouped as expert-data-parallel x ep x etp, so ep groups are runs of neighbouring ranks
(the tp group first, then neighbouring dp replicas). Experts are not tensor-split (etp = 1):
a rank's experts are whole, and under tensor parallelism each TP rank sends only its share of
the tokens (jobs/parallelize.py). The experts' gradients reduce over "edp", tp x dp / ep ranks
(jobs/expert_parallel.py); every other parameter keeps the mode above.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.layout import RANK_ORDER

DP_SPLIT = ("dp_replicate", "dp_shard")  # dp as replicated copies x shard groups
MESH_DIMS = tuple(part for name in RANK_ORDER for part in (DP_SPLIT if name == "dp" else (name,)))
EXPERT_MESH_DIMS = ("pp", "edp", "ep", "etp")


@dataclass(frozen=True)
class DataParallelPlan:
    kind: str  # "ddp" | "zero1" | "fsdp"
    shard: int  # FSDP shard group, or the ZeRO-1 optimizer group (1 for ddp)
    replicate: int
    reshard_after_forward: bool | int = True
    approximation: str | None = None


def data_parallel_plan(config) -> DataParallelPlan:
    """The mode for a JobConfig: from its AMSP factors when set, else from zero_stage."""
    dp = config.dp
    if config.s0p is None:
        return _stage_plan(config.zero_stage, dp, config.dims.gradient_group > 1)
    sp = config.s0p * config.s1p
    sg = config.s0g * config.s1g
    sos = config.s0os * config.s1os
    secondary = config.secondary or 1
    if dp == 1 or sos == 1:
        return DataParallelPlan("ddp", 1, dp)
    if sp == sg == 1:
        return DataParallelPlan("zero1", sos, dp // sos)
    reshard: bool | int = True if secondary <= 1 else secondary
    if sp == sg == sos:
        return DataParallelPlan("fsdp", sp, dp // sp, reshard)
    if sp == 1:
        return DataParallelPlan("fsdp", sg, dp // sg, False, approximation=ZERO2_AS_FSDP)
    return DataParallelPlan(
        "fsdp", sp, dp // sp, reshard,
        approximation=f"HSDP over shard groups of {sp}: gradients and optimizer states sharded "
        f"over {sp}, not s_g={sg} and s_os={sos}",
    )


ZERO2_AS_FSDP = "ZeRO-2 as FSDP2 reshard_after_forward=False: weights also sharded at rest"


def _stage_plan(stage: int, dp: int, shared: bool) -> DataParallelPlan:
    """ZeRO stage 1-3 over all dp (x cp) ranks; `shared`: more than one rank holds a copy."""
    if stage == 0 or not shared:
        return DataParallelPlan("ddp", 1, dp)
    if stage == 1:
        return DataParallelPlan("zero1", dp, 1)
    if stage == 2:
        return DataParallelPlan("fsdp", dp, 1, False, approximation=ZERO2_AS_FSDP)
    return DataParallelPlan("fsdp", dp, 1, True)


def mesh_shape(config, plan: DataParallelPlan) -> tuple[int, ...]:
    """The sizes of MESH_DIMS: the layout's mesh, its dp as the plan splits it."""
    sizes = dict(zip(RANK_ORDER, config.dims.mesh_shape), dp_replicate=plan.replicate,
                 dp_shard=plan.shard)
    return tuple(sizes[name] for name in MESH_DIMS)


def build_mesh(config, plan: DataParallelPlan, device_type: str):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, mesh_shape(config, plan), mesh_dim_names=MESH_DIMS)
    mesh["dp_replicate", "dp_shard"]._flatten("dp")  # one group over all data-parallel ranks
    mesh["dp_replicate", "dp_shard", "cp"]._flatten("dp_cp")  # ranks that sum gradients
    mesh["dp_shard", "cp"]._flatten("dp_shard_cp")  # ranks that shard states
    return mesh


def expert_mesh_shape(config) -> tuple[int, int, int, int]:
    # Experts whole on each rank (etp 1), the only expert tensor-parallel degree implemented.
    whole = replace(config.dims, etp=1)
    return (config.pp, whole.expert_dp, config.ep, whole.expert_tp)


def build_expert_mesh(config, device_type: str):
    """The experts' mesh: the same ranks as `build_mesh`'s, regrouped (see the module doc)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, expert_mesh_shape(config),
                            mesh_dim_names=EXPERT_MESH_DIMS)
