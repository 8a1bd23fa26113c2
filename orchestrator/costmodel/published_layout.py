"""A published row's layout as a `Layout`: the degrees it publishes, and the framework's
defaults for what it does not (micro-batches, ZeRO stage, pipeline schedule and split), each
default recorded in the row's assumptions (published_rows.py).

An unpublished recompute is not the framework's default (none): a framework's recipes set it so
the run fits, and a row that ran priced without it can be predicted far over its device
(Llama 3.1 70B on 64 GB200 at 425 GB on 186 GB). It is the least of none, selective and full
recompute that the cost model's own memory verdict (`CostModel.fits`) says fits, else full.
That uses no measured figure of any row, only the model's verdict on the layout, so it fits
nothing to the rows; but such a row then fits by construction, and its memory is no evidence
of the memory model's error (`unpublished_memory_settings`, benchmarks/memory_margin.py).
torchtitan's rows keep the recompute of its llama3 recipe (selective), which is known, and
Megatron-Bridge's and NeMo 24.07's the recompute their launch code set, read from it
(published_recipes.py).
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.costmodel.estimate import CostModel
from orchestrator.costmodel.published_names import Framework, NotPriced, RowText
from orchestrator.costmodel.published_recipes import recompute_from_launch_code
from orchestrator.layout import PIPELINE_SPLITS, ParallelDims
from orchestrator.pipeline_split import split_problem
from orchestrator.space import Layout
from orchestrator.space.errors import InvalidConfig


RECOMPUTE_LEAST_FIRST = ("none", "selective", "full")


def layout(row: RowText, cost: CostModel, gpus: int, framework: Framework,
           precision: str) -> Layout:
    model = cost.model
    tp, pp, cp = row.count("tp"), row.count("pp"), row.count("cp")
    fsdp_only = framework.family in ("fsdp", "torchtitan")
    if tp is None or pp is None:
        if not fsdp_only:
            raise NotPriced("layout: tp/pp not published")
        tp, pp = tp or 1, pp or 1
    cp = cp or 1
    ep = row.count("ep") or 1
    filled = ParallelDims.filling(gpus, tp=tp, pp=pp, cp=cp)
    if filled is None:
        spans = ParallelDims(tp=tp, pp=pp, cp=cp).model_parallel
        raise NotPriced(f"layout: tp·pp·cp = {spans} does not divide gpus {gpus}")
    dp = filled.dp
    published_dp = row.count("dp")
    if published_dp is not None and published_dp != dp:
        raise NotPriced(f"layout: dp {published_dp} as published: tp·pp·cp·dp = "
                         f"{ParallelDims(tp=tp, pp=pp, cp=cp, dp=published_dp).world} is not "
                         f"gpus {gpus}")
    vp = row.count("vp") or 1
    if pp == 1:
        vp = 1
    elif row.text("vp") == "" and framework.family == "megatron":
        vp = _submission_virtual_stages(row)
    micro, accum = _batch(row, filled, pp, framework)
    zero = _zero_stage(row, framework)
    recompute = _recompute(row, framework)
    schedule, vp = _schedule(row, pp, vp, framework)
    sp = framework.sequence_parallel and tp > 1
    etp = None
    if model.is_moe and ep > 1 and tp > 1 and framework.family == "megatron":
        etp = 1
        row.assumptions.append("expert tensor parallel 1 (the MoE recipes of NeMo and "
                                "Megatron-Bridge); attention keeps tp")
    split = _split(row, model.num_layers, pp, vp)
    try:
        config = Layout(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero_stage=zero, micro_batch_size=micro,
            grad_accum_steps=accum, activation_checkpointing=recompute or "none",
            sequence_parallel=sp, pp_schedule=schedule, virtual_stages=vp,
            pipeline_split=split, precision=precision,
            cp_comm_type="allgather" if framework.family == "torchtitan" else "p2p")
        config.validate(world_size=gpus, num_heads=model.num_heads,
                        num_layers=model.num_layers,
                        global_batch_size=config.global_batch_size(),
                        num_experts=model.num_experts, seq_len=model.seq_len)
    except InvalidConfig as e:
        raise NotPriced(f"layout: {e}") from None
    if cp > 1 and framework.family == "torchtitan":
        row.assumptions.append("context parallel: torchtitan's default rotation, "
                                "all-gathered K/V")
    return config if recompute else _least_recompute_that_fits(row, cost, config)


def _least_recompute_that_fits(row: RowText, cost: CostModel,
                               layout: Layout) -> Layout:
    """The layout with the least recompute the model says fits (full if none does)."""
    choice = next((mode for mode in RECOMPUTE_LEAST_FIRST
                   if cost.fits(replace(layout, activation_checkpointing=mode))), "full")
    row.assumptions.append(f"recompute not published: the least the model says fits, {choice}")
    row.unpublished_memory_settings.append("recompute")
    return replace(layout, activation_checkpointing=choice)


def _batch(row: RowText, dims: ParallelDims, pp: int, framework: Framework
           ) -> tuple[int, int]:
    """(micro_batch_size, grad_accum_steps), derived where one is not published."""
    dp = dims.dp
    micro_text = row.text("micro_batch")
    micro, accum = row.count("micro_batch"), row.count("grad_accum")
    global_batch = row.count("global_batch")
    if micro is not None and ("local batch" in micro_text
                              or framework.family == "torchtitan"):
        # torchtitan's local batch is a rank's share of the global batch; a pipeline
        # splits it into as many micro-batches as it has stages (its default then).
        local = micro
        if pp > 1:
            if local % pp:
                raise NotPriced(f"local batch {local} does not split into {pp} micro-batches")
            row.assumptions.append(f"local batch {local} in {pp} pipeline micro-batches "
                                    "(torchtitan's default: one per stage)")
            return local // pp, pp
        return local, 1
    if micro is not None and accum is not None:
        if global_batch is not None and dims.samples_per_step(micro, accum) != global_batch:
            raise NotPriced(f"micro_batch {micro} x grad_accum {accum} x dp {dp} is not "
                             f"global_batch {global_batch}")
        return micro, accum
    if global_batch is None:
        raise NotPriced("global_batch: not published (nor micro_batch and grad_accum)")
    if micro is not None:
        if global_batch % dims.samples_per_micro_batch(micro):
            raise NotPriced(f"global_batch {global_batch} is not a multiple of "
                             f"micro_batch {micro} x dp {dp}")
        return micro, global_batch // dims.samples_per_micro_batch(micro)
    if accum is not None:
        one_sample_micro_batches = dims.samples_per_step(1, accum)  # grad_accum x dp
        if global_batch % one_sample_micro_batches:
            raise NotPriced(f"global_batch {global_batch} is not a multiple of "
                             f"grad_accum {accum} x dp {dp}")
        row.assumptions.append("micro_batch derived: global_batch / (grad_accum x dp)")
        return global_batch // one_sample_micro_batches, accum
    if global_batch % dp:
        raise NotPriced(f"global_batch {global_batch} is not a multiple of dp {dp}")
    row.assumptions.append("micro_batch not published: 1 (Megatron's default)")
    row.unpublished_memory_settings.append("micro_batch")
    return 1, global_batch // dp

def _zero_stage(row: RowText, framework: Framework) -> int:
    text = row.text("zero_or_fsdp").lower()
    if "zero-1" in text:
        return 1
    if "zero-0" in text:
        return 0
    if "shard_grad_op" in text:
        return 2
    if "full_shard" in text or "megatron-fsdp" in text:
        return 3
    if framework.family == "torchtitan":
        return 3  # FSDP2's fully_shard over the dp ranks
    if "fsdp" in text and "fsdp=0" not in text and framework.family != "megatron":
        return 3
    if framework.family == "megatron":
        return 1 if framework.distributed_optimizer else 0
    if framework.family == "fsdp":
        return 3
    return 0

def _recompute(row: RowText, framework: Framework) -> str | None:
    text = row.text("recompute").lower()
    if text.startswith("full") or "full ac" in text or "full activation" in text:
        return "full"
    if "selective" in text:
        if framework.family == "torchtitan":
            row.assumptions.append("selective AC: torchtitan's per-op policy (its llama3 "
                                    "tomls' selective_ac_option = 'op'), over the wq, wk "
                                    "and wv its Llama of 2024-2025 projects apart")
        return "selective"
    if text in ("none",):
        return "none"
    if text == "null" and "ACT_CKPT_GRANULARITY=null" in row.text("config_kv"):
        row.assumptions.append("recompute: the submission's ACT_CKPT_GRANULARITY=null, none")
        return "none"
    if text in ("", "null"):
        from_code = recompute_from_launch_code(row.v)
        if from_code is not None:
            mode, assumptions = from_code
            row.assumptions.extend(assumptions)
            return mode
        if framework.family == "torchtitan":
            row.assumptions.append("activation checkpointing not published: "
                                    "torchtitan's llama3 toml, selective")
            row.unpublished_memory_settings.append("recompute")
            return "selective"
        return None  # the least that fits: _least_recompute_that_fits
    raise NotPriced(f"recompute {row.text('recompute')}: not understood")

# MLPerf submissions whose config scripts leave INTERLEAVED_PIPELINE unset run the default of
# their implementation's Hydra config: training_results_v3.1's gpt3 implementation (NVIDIA's
# and Azure+NVIDIA's) reads `virtual_pipeline_model_parallel_size:
# ${oc.env:INTERLEAVED_PIPELINE,12}` in conf/custom.yaml, and no config_*.sh sets it.
SUBMISSION_VIRTUAL_STAGES = {"benchmarks/gpt3/implementations/pytorch/": (
    12, "conf/custom.yaml's INTERLEAVED_PIPELINE default")}


def _submission_virtual_stages(row: RowText) -> int:
    """Virtual stages of a Megatron row that publishes none: its submission's configured
    default where the row names a config that has one, else Megatron's (no interleaving)."""
    config = row.text("config_file")
    for path, (stages, where) in SUBMISSION_VIRTUAL_STAGES.items():
        if path in config and "INTERLEAVED_PIPELINE" not in row.text("config_kv"):
            row.assumptions.append(f"virtual stages not in the run's config script: {stages}, "
                                   f"the submission's {where}")
            return stages
    row.assumptions.append("virtual stages not published: 1, no interleaving (Megatron's "
                           "default)")
    return 1


def _schedule(row: RowText, pp: int, vp: int, framework: Framework) -> tuple[str, int]:
    if pp == 1:
        return "1f1b", 1
    if framework.family == "torchtitan":
        text = (row.text("pp_schedule") + " " + row.text("technique")).lower()
        if "interleaved" in text:
            row.assumptions.append("torchtitan's interleaved 1F1B: 2 stages per rank "
                                    "(its default of the time)")
            return "interleaved", 2
        return "1f1b", 1
    if vp > 1:
        return "interleaved", vp
    return "1f1b", 1

def _split(row: RowText, layers: int, pp: int, vp: int) -> str:
    """The first of the splits Megatron-Core offers that takes these layers: an even split
    where it divides, else the embedding and the loss as layers, else sized end stages."""
    for split in PIPELINE_SPLITS:
        if split_problem(layers, pp, vp, split) is None:
            if split != "even":
                row.assumptions.append(f"{layers} layers on pp {pp} x vp {vp}: pipeline "
                                        f"split {split}")
            return split
    raise NotPriced(f"layout: {layers} layers do not split over pp {pp} x vp {vp}")

# -- measurements -----------------------------------------------------------------------
