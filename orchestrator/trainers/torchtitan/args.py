"""torchtitan 0.3.0: `torchrun -m torchtitan.train --module M --config C` with the user's
overrides, then the layout's in torchtitan's own argument names, and its metrics log read back.

Arguments (torchtitan/config/configs.py, TrainingConfig and ParallelismConfig; the subcommand
from torchtitan/distributed/activation_checkpoint.py; parsed by torchtitan/config/manager.py with
tyro, where a later flag wins and arguments after a subcommand belong to it, so the
`activation-checkpoint:MODE` subcommand comes last). The layout's flags follow the user's
overrides, so the layout wins. Batch: torchtitan runs global / (local x dp) accumulation steps,
each split into local / pipeline_parallel_microbatch_size pipeline micro-batches
(torchtitan/trainer.py). Without PP, local_batch_size is ParaTune's micro-batch and torchtitan
derives our accumulation; with PP, ParaTune's accumulation steps are the pipeline's micro-batches
(as in jobs/), so local_batch_size = micro x accumulation, split into micro-batches of the
micro-batch size, and torchtitan accumulates once.

Sharding: ZeRO 3 -> FSDP over dp with `fsdp_reshard_after_forward = "always"`; ZeRO 2 -> FSDP
with "never" (parameters stay gathered between forward and backward; gradients and optimizer
states sharded); ZeRO 0 and 1 -> `data_parallel_replicate_degree = dp` (replicated, DDP-like:
torchtitan has no optimizer-only sharding); AMSP factors equal for parameters, gradients and
optimizer states over a group g < dp -> HSDP (shard g, replicate dp / g).

Mixture of experts: an MoE campaign names one of torchtitan's MoE configs (deepseek_v3, qwen3's
MoE ones, gpt_oss: configs.py) and gets the layout's
`--parallelism.expert-parallel-degree` over the config's own. Expert parallelism borrows the
dp_shard x cp x tp ranks and has no expert tensor parallelism; with ep > 1 CUDA graphs are off,
as Trainer.Config refuses them with the all-to-all token dispatcher (and with pipelines).

Context parallelism: `--parallelism.context-parallel-degree` on every layout and, with cp > 1,
`--parallelism.context-parallel-load-balancer=headtail` (ParallelismConfig's default, stated:
2 x cp chunks, an early and a late one per rank, the split ParaTune's layouts assume). torchtitan
0.3 all-gathers keys and values (allgather; p2p and a2a are refused, as are its variable-length
attention configs: capabilities.py). Its FSDP mesh is dp_shard x cp, so with cp > 1
parameters are sharded over the cp ranks too, whatever the layout's ZeRO stage.

Pipeline split: `--parallelism.pipeline-parallel-first-stage-less-layers` and
`-last-stage-less-layers` are 1 with `pipeline_split: embedding_loss` (the embedding and the loss
count as a layer each, torchtitan's default) and 0 with `even`, so torchtitan's split is the
one the cost model priced (orchestrator/pipeline_split.py); the interleaved schedule names the
layers of a model chunk.

Precision and offload (precision.py): an FP8 layout names ParaTune's config
registry as `--module`, whose config function loads the campaign's config and runs torchtitan's
Float8 or MX converters on its model; optimizer+params offload is
`--training.enable-cpu-offload` (FSDP2's CPU offload), with CUDA graphs off.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from orchestrator.common.errors import SpecError
from orchestrator.trainers.torchtitan.capabilities import refusal
from orchestrator.trainers.torchtitan.configs import torchtitan_data_parallel as data_parallel
from orchestrator.trainers.torchtitan.section import TorchtitanSection
from orchestrator.trainers.arguments import fill, placeholder_values
from orchestrator.trainers.torchtitan.precision import module_and_config, offload_args

TOOL = "torchtitan 0.3.0"
SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "Interleaved1F1B"}
def _pipeline_split(layout, num_layers: int) -> list[str]:
    """torchtitan's split of the layout's (orchestrator/pipeline_split.py): its stages hold
    layers_per_stage slots, less the first and last stages' less-layers (the embedding and the
    loss as a layer each: its default of 1; 0 for `even`). For `first_last`, every stage has
    the busiest stage's slots and the ends fewer layers (1F1B only: capabilities.py)."""
    if layout.pipeline_split == "first_last":
        layers = layout.stage_layers(num_layers)
        first, last = max(layers) - layers[0], max(layers) - layers[-1]
    else:
        first = last = int(layout.pipeline_split == "embedding_loss")
    args = []
    if layout.pp_schedule == "interleaved":  # exactly pp x v stages
        per_stage = layout.busiest_chunk_layers(num_layers)
        args.append(f"--parallelism.pipeline-parallel-layers-per-stage={per_stage}")
    return [*args, f"--parallelism.pipeline-parallel-first-stage-less-layers={first}",
            f"--parallelism.pipeline-parallel-last-stage-less-layers={last}"]


def layout_args(spec, layout) -> list[str]:
    """The layout as torchtitan 0.3.0 overrides; the activation-checkpoint subcommand last."""
    if layout.recompute_num_layers is not None:
        raise SpecError("space.recompute_num_layers: torchtitan recomputes every block or none; "
                        "remove it, or use trainer builtin or megatron-lm")
    reason = refusal(spec, layout)
    if reason:
        raise SpecError(f"layout {layout.key()}: {reason}")
    shard, replicate, reshard = data_parallel(layout, spec.gpus_per_node)
    mbs, gas = layout.micro_batch_size, layout.grad_accum_steps
    local = mbs * gas if layout.pp > 1 else mbs
    args = [
        f"--parallelism.tensor-parallel-degree={layout.tp}",
        f"--parallelism.pipeline-parallel-degree={layout.pp}",
        f"--parallelism.data-parallel-shard-degree={shard}",
        f"--parallelism.data-parallel-replicate-degree={replicate}",
        f"--parallelism.context-parallel-degree={layout.cp}",
    ]
    if layout.cp > 1:
        args.append("--parallelism.context-parallel-load-balancer=headtail")
    if reshard:
        args.append(f"--parallelism.fsdp-reshard-after-forward={reshard}")
    args.append("--parallelism.enable-sequence-parallel" if layout.sequence_parallel
                else "--parallelism.no-enable-sequence-parallel")
    if spec.model.is_moe:  # the layout's degree over the registry config's own
        args.append(f"--parallelism.expert-parallel-degree={layout.ep}")
    if layout.pp > 1:
        args += [f"--parallelism.pipeline-parallel-schedule={SCHEDULES[layout.pp_schedule]}",
                 f"--parallelism.pipeline-parallel-microbatch-size={mbs}"]
        args += _pipeline_split(layout, spec.model.num_layers)
    offload = offload_args(layout)
    if (layout.pp > 1 or layout.ep > 1) and "--training.disable-cuda-graphs" not in offload:
        args.append("--training.disable-cuda-graphs")  # Trainer.Config refuses either with them
    args += [*offload,
        f"--training.local-batch-size={local}",
        f"--training.global-batch-size={layout.global_batch_size()}",
        f"--training.seq-len={spec.model.seq_len}",
        "--compile.enable" if layout.compile else "--compile.no-enable",
        f"activation-checkpoint:{layout.activation_checkpointing}",
    ]
    return args


def torchtitan_section(spec) -> TorchtitanSection:
    """The spec's `trial.torchtitan`, or its defaults for a campaign tuned with another trainer."""
    return spec.trial.torchtitan or TorchtitanSection()


def torchtitan_args(spec, layout, values: dict, trial_args: list[str] = ()) -> list[str]:
    """`--module M --config C`, the user's overrides (filled), the trial's own flags, then the
    layout: the arguments after `-m torchtitan.train`, for trials and launch files alike."""
    section = torchtitan_section(spec)
    module, name = module_and_config(section.module, section.config, layout.precision)
    return ["--module", module, "--config", name,
            *fill(section.overrides, values), *trial_args, *layout_args(spec, layout)]


def export_values(spec, layout, trial_id: str) -> dict:
    """Placeholder values for a launch file: the spec's timed steps, run from the current folder."""
    here = SimpleNamespace(path=Path("."), deepspeed_config=Path("ds_config.json"))
    return placeholder_values(spec, layout, trial_id, here, spec.trial.steps)
