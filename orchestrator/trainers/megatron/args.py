"""Megatron-LM and Megatron-DeepSpeed: the user's pretraining script under torchrun, with its base
arguments (data, tokenizer, optimizer) followed by the model shape and the layout as the tool's
own flags, so ParaTune's flags win where both set one.

Model shapes: GPT is LayerNorm, GELU, learned positions, biases and tied embeddings (each tool's
defaults, stated anyway); LLaMA (`gated_mlp`) is SwiGLU, RMSNorm, rotary positions, no biases,
untied embeddings, and grouped-query attention when `model.num_kv_heads` differs from
`num_heads`. Megatron-LM spells these `--normalization RMSNorm`, `--position-embedding-type
rope` and `--group-query-attention --num-query-groups`; Megatron-DeepSpeed `--normalization
rmsnorm`, `--use-rotary-position-embeddings --no-position-embedding` and `--num-key-value-heads`.

ZeRO: Megatron-LM's distributed optimizer shards the optimizer states over the data-parallel
ranks, which is ZeRO stage 1; it has no stage 2 or 3. Stage 1 renders --use-distributed-optimizer
and stages 2 and 3 are refused (the spec already refuses a space that asks for them, and narrows
the default space.zero_stage to [0, 1]). Megatron-DeepSpeed gets the stage both in its
DeepSpeed config and in --zero-stage; DeepSpeed's pipeline engine refuses stages 2 and 3 with
pp > 1, so such trials fail in their own words. With pp = 1 it runs without the DeepSpeed
pipeline (--no-pipeline-parallel), as its examples do. Megatron-DeepSpeed has no interleaved
schedule, and neither tool a GPipe one: the spec refuses those layouts for these trainers.

Mixture of experts: the experts and their layout (ep, etp) as each tool's flags
(moe.py); `--kv-channels` where the head dim is not hidden / heads. Context
parallelism: `--context-parallel-size` and, with cp > 1, `--cp-comm-type` and TransformerEngine's
attention on Megatron-LM; `--ds-sequence-parallel-size` (Ulysses) on Megatron-DeepSpeed
(context.py). FP8 recipes, optimizer offload, overlap and bucket size on
Megatron-LM: precision.py. Megatron-LM's parser asserts CUDA_DEVICE_MAX_CONNECTIONS=1
with TP or CP on GPUs before Blackwell, so trials set it for either.

The adapters (adapter.py) and the export formats `megatron-lm` and `megatron-deepspeed` render the same flags
(`megatron_args`); a trial adds its length and logging (`trial_args`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.common.errors import SpecError
from orchestrator.trainers.megatron.capabilities import ds_refusal, lm_refusal
from orchestrator.trainers.megatron.context import context_args
from orchestrator.trainers.megatron.flags import (
    DS,
    LM,
    MEGATRON_DEEPSPEED_FLAGS,
    MEGATRON_DEEPSPEED_SOURCE,
    MEGATRON_LM_FLAGS,
    MEGATRON_LM_SOURCE,
    Flag,
)
from orchestrator.trainers.megatron.moe import ffn_hidden, moe_args
from orchestrator.trainers.megatron.precision import precision_args
from orchestrator.trial.folder import DEEPSPEED_CONFIG_FILE



@dataclass(frozen=True)
class MegatronTool:
    """What differs between the two tools: their name, source and flag table."""

    name: str
    source: str
    flags: dict[str, Flag]


TOOLS = {LM: MegatronTool(LM, MEGATRON_LM_SOURCE, MEGATRON_LM_FLAGS),
         DS: MegatronTool(DS, MEGATRON_DEEPSPEED_SOURCE, MEGATRON_DEEPSPEED_FLAGS)}


def _check_layout(tool: str, spec, layout) -> None:
    if layout.sharding is not None:
        raise SpecError(f"{tool}: AMSP sharding factors have no {tool} flags; use "
                        "space.kind megatron-3d")
    if layout.pp_schedule == "gpipe" and layout.pp > 1:
        raise SpecError(f"{tool}: no GPipe schedule (its pipeline runs 1F1B); set "
                        "space.pp_schedule to [1f1b]")
    if tool == LM and layout.zero_stage > 1:
        raise SpecError(f"space.zero_stage: megatron-lm has no ZeRO stage {layout.zero_stage} "
                        "(its distributed optimizer is ZeRO-1); use stages 0 and 1")
    if tool == DS and layout.recompute_num_layers is not None:
        raise SpecError("space.recompute_num_layers: megatron-deepspeed recomputes every layer "
                        "or none; remove it, or use trainer megatron-lm")
    if tool == DS and layout.virtual_stages > 1:
        raise SpecError("space.virtual_stages: megatron-deepspeed's pipeline has no interleaved "
                        "schedule; use [1]")
    refusal = (lm_refusal if tool == LM else ds_refusal)(spec, layout)
    if refusal:
        raise SpecError(f"layout {layout.key()}: {refusal}")


def _shape(tool: str, model) -> list[str]:
    args = [f"--num-layers={model.num_layers}", f"--hidden-size={model.hidden}",
            f"--ffn-hidden-size={ffn_hidden(tool, model)}",
            f"--num-attention-heads={model.num_heads}"]
    if model.kv_channels is not None:
        args.append(f"--kv-channels={model.kv_channels}")
    return args + [f"--seq-length={model.seq_len}", f"--max-position-embeddings={model.seq_len}"]


def _architecture(tool: str, model) -> list[str]:
    gqa = model.kv_heads != model.num_heads
    if tool == LM:
        args = ["--group-query-attention", f"--num-query-groups={model.kv_heads}"] if gqa else []
        args += (["--swiglu", "--normalization=RMSNorm", "--position-embedding-type=rope",
                  "--disable-bias-linear"] if model.gated_mlp else
                 ["--normalization=LayerNorm", "--position-embedding-type=learned_absolute"])
    else:
        args = [f"--num-key-value-heads={model.kv_heads}"] if gqa else []
        args += (["--swiglu", "--normalization=rmsnorm", "--use-rotary-position-embeddings",
                  "--no-position-embedding", "--disable-bias-linear"] if model.gated_mlp else
                 ["--normalization=layernorm"])
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    return args


def _recompute(tool: str, layout) -> list[str]:
    mode = layout.activation_checkpointing
    if mode == "selective":
        return ["--recompute-granularity=selective"]
    if mode != "full":
        return []
    if layout.recompute_num_layers is not None:  # the first N layers of each stage (chunk)
        return ["--recompute-granularity=full", "--recompute-method=block",
                f"--recompute-num-layers={layout.recompute_num_layers}"]
    every_layer = ["--recompute-granularity=full", "--recompute-method=uniform",
                   "--recompute-num-layers=1"]
    if tool == LM:
        return every_layer
    # The DeepSpeed pipeline reads --checkpoint-activations (older models only it), the
    # Megatron model the --recompute-* flags; both name one layer per checkpoint.
    return ["--checkpoint-activations", "--checkpoint-num-layers=1", *every_layer,
            "--deepspeed-activation-checkpointing"]


def _pipeline_split(layout, num_layers: int) -> list[str]:
    """Megatron-LM's flags for the layout's split (orchestrator/pipeline_split.py)."""
    if layout.pipeline_split == "embedding_loss":
        return ["--account-for-embedding-in-pipeline-split",
                "--account-for-loss-in-pipeline-split"]
    if layout.pipeline_split == "first_last":
        layers = layout.stage_layers(num_layers)
        return [f"--decoder-first-pipeline-num-layers={layers[0]}",
                f"--decoder-last-pipeline-num-layers={layers[-1]}"]
    return []


def megatron_args(tool: str, spec, layout, deepspeed_config_path: str = DEEPSPEED_CONFIG_FILE
                  ) -> list[str]:
    """The model shape and the layout as `tool`'s flags (`--flag=value`, switches bare)."""
    _check_layout(tool, spec, layout)
    args = [f"--tensor-model-parallel-size={layout.tp}",
            f"--pipeline-model-parallel-size={layout.pp}", *context_args(tool, layout)]
    if tool == LM and layout.virtual_stages > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank={layout.virtual_stages}")
    if tool == LM and layout.pp > 1:
        args += _pipeline_split(layout, spec.model.num_layers)
    if tool == DS and layout.pp == 1:
        args.append("--no-pipeline-parallel")
    args += [f"--micro-batch-size={layout.micro_batch_size}",
             f"--global-batch-size={layout.global_batch_size()}",
             *_shape(tool, spec.model), *_architecture(tool, spec.model),
             *moe_args(tool, spec, layout)]
    if spec.cluster.device != "cpu":
        args.append("--bf16")
    if layout.sequence_parallel:
        args.append("--sequence-parallel")
    args += _recompute(tool, layout)
    if tool == LM:
        args.append(f"--attention-backend={'flash' if spec.trial.flash_attention else 'unfused'}")
        if layout.zero_stage == 1:
            args.append("--use-distributed-optimizer")
        args += precision_args(tool, spec, layout)
    else:
        if spec.trial.flash_attention:
            args.append("--use-flash-attn-v2")
        args += ["--deepspeed", f"--deepspeed_config={deepspeed_config_path}",
                 f"--zero-stage={layout.zero_stage}"]
    return args


def trial_args(tool: str, total_steps: int) -> list[str]:
    """A trial's length and a training_log line per iteration (with throughput on Megatron-LM;
    Megatron-DeepSpeed prints its throughput always)."""
    args = [f"--train-iters={total_steps}", "--log-interval=1"]
    return args + (["--log-throughput"] if tool == LM else [])


def megatron_env(spec, layout) -> dict[str, str]:
    env = {}
    # Both parsers refuse TP (or sequence parallelism) without it on GPUs, Megatron-LM also CP.
    if layout.tp > 1 or layout.cp > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if spec.cluster.device == "cpu":
        env["DS_ACCELERATOR"] = "cpu"
    return env
