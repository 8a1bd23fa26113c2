"""Pipeline splits a trainer cannot run, refused before any trial in one line that names the
field and the fix (applied beside the other layout rules, trainer_layouts.py).

`embedding_loss` (orchestrator/pipeline_split.py) is Megatron-LM's --account-for-embedding-in-
pipeline-split and --account-for-loss-in-pipeline-split (megatron-core 0.19.2), and torchtitan
0.3.0's pipeline_parallel_first_stage_less_layers and _last_stage_less_layers at 1 (its
default; ParaTune renders 0 for `even`); the built-in trainer (jobs/) splits its model so too,
and a user's command takes {pipeline_split}. `first_last` is Megatron-LM's
--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers, and torchtitan's
less-layers over a stage of the busiest stage's layers, which it can express only with one
model chunk a stage; a user's command also takes {stage_layers}. DeepSpeed's and
Megatron-DeepSpeed's pipelines partition their own way (PipelineModule's partition_method),
which ParaTune does not set.
"""

from __future__ import annotations

SPLITTING_TRAINERS = ("builtin", "megatron-lm", "torchtitan", "command")


def pipeline_refusal(trainer: str | None, config) -> str | None:
    """Why `trainer` cannot split this layout's pipeline so, or None."""
    trainer = trainer or "builtin"
    if config.pp == 1 or config.pipeline_split == "even":
        return None
    if (trainer == "torchtitan" and config.pipeline_split == "first_last"
            and config.virtual_stages > 1):
        return ("torchtitan: pipeline_split first_last with virtual_stages > 1: torchtitan "
                "shortens only the first and last model chunks, not every chunk of the first "
                "and last stages; set space.pipeline_split to [embedding_loss] or [even], or "
                "use pp_schedule 1f1b")
    if trainer in SPLITTING_TRAINERS:
        return None
    return (f"{trainer}: pipeline_split {config.pipeline_split}: its pipeline partitions the "
            "layers its own way; set space.pipeline_split to [even], or use trainer builtin, "
            "megatron-lm or torchtitan")
