"""Pipeline splits a trainer cannot run, refused before any trial in one line that names the
field and the fix (applied beside the other layout rules, trainer_layouts.py).

`embedding_loss` (space/pipeline_split.py) is Megatron-LM's --account-for-embedding-in-
pipeline-split and --account-for-loss-in-pipeline-split (megatron-core 0.19.2), and torchtitan
0.3.0's pipeline_parallel_first_stage_less_layers and _last_stage_less_layers at 1 (its
default; ParaTune renders 0 for `even`). A user's command takes {pipeline_split}. The built-in
trainer splits evenly; DeepSpeed's and Megatron-DeepSpeed's pipelines partition their own way
(PipelineModule's partition_method), which ParaTune does not set.
"""

from __future__ import annotations

SPLITS_EMBEDDING_AND_LOSS = ("megatron-lm", "torchtitan", "command")


def pipeline_refusal(trainer: str | None, config) -> str | None:
    """Why `trainer` cannot split this layout's pipeline so, or None."""
    trainer = trainer or "builtin"
    if config.pp == 1 or config.pipeline_split == "even" or trainer in SPLITS_EMBEDDING_AND_LOSS:
        return None
    return (f"{trainer}: pipeline_split {config.pipeline_split}: it splits the layers evenly; "
            "set space.pipeline_split to [even], or use trainer megatron-lm or torchtitan")
