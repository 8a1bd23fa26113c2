"""Cost-model landscapes for the search benchmark over expert and context parallelism.

Mixture of experts: Mixtral 8x22B on 128 H100s and DeepSeek-V3 on 2,048 H800s, searched over
ep, etp, tp, pp, ZeRO, micro-batch, recomputation and the pipeline schedule. Long context:
Llama 3 405B on 16,384 H100s at 128k tokens (the published setup) and at 32k (the same
16M-token batch as 512 sequences), searched over cp, cp_comm_type, tp, pp and recomputation.
Each entry reads as benchmarks/search_efficiency.py's LANDSCAPES: (spec, overrides, per-knob
perturbation, interaction strength). The `-parallel-quirks` ones are generated landscapes whose
truth departs from the model on ep, etp, cp, cp_comm_type and virtual_stages themselves
(orchestrator/backends/parallel_quirks.py: thresholds, three knobs together, effects that grow
with scale), not one factor per knob value.
"""

from __future__ import annotations

MIXTRAL = "examples/mixtral-8x22b.yaml"
DEEPSEEK = "examples/deepseek-v3.yaml"
LLAMA3_405B = "examples/llama3-405b-128k.yaml"

# ep 1-8 (8 experts), etp unset or 1, tp 2-8, pp 2-8, ZeRO 0-1, micro-batch 1-4: 2,448 layouts.
MIXTRAL_SPACE = ["space.pp=[2, 4, 8]", "space.micro_batch_size=[1, 2, 4]",
                 "space.zero_stage=[0, 1]"]
# The DeepSeek-V3 landscapes keep the 64-layer, evenly split stand-in they were first drawn on
# (the example now has its own 61 layers, split 3 + 14 x 4 + 2 on 16 stages).
DEEPSEEK_STAND_IN = ["model.num_layers=64", "space.pipeline_split=[even]"]
# ep 4-64 (256 experts), etp unset or 1, tp 1-4, pp 4-16, micro-batch 1-4: 1,542 layouts.
DEEPSEEK_SPACE = [*DEEPSEEK_STAND_IN, "space.tp=[1, 2, 4]", "space.pp=[4, 8, 16]",
                  "space.ep=[4, 8, 16, 32, 64]", "space.etp=[null, 1]",
                  "space.micro_batch_size=[1, 2, 4]",
                  "space.activation_checkpointing=[none, selective, full]",
                  "space.pp_schedule=[1f1b, interleaved]", "space.virtual_stages=[1, 2]"]
# The landscapes keep the 128-layer, evenly split stand-in they were first drawn on (the
# example now has Llama 3's own 126 layers, split with the embedding and the loss as layers:
# the same busiest stage of 8 layers, so the same step within 0.1%).
LLAMA3_STAND_IN = ["model.num_layers=128", "space.pipeline_split=[even]"]
# cp 1-32 × p2p, a2a or allgather × tp 2-8 × pp 8-16 × recomputation: 462 layouts.
LLAMA3_128K_SPACE = [*LLAMA3_STAND_IN, "space.tp=[2, 4, 8]",
                     "space.cp_comm_type=[allgather, p2p, a2a]"]
# 32k tokens, 512 sequences a batch; cp 1-16, micro-batch 1-2, recomputation: 1,341 layouts.
LLAMA3_32K_SPACE = ["model.seq_len=32768", "scale.global_batch_size=512",
                    "space.cp=[1, 2, 4, 8, 16]", "space.micro_batch_size=[1, 2]",
                    *LLAMA3_128K_SPACE, "space.activation_checkpointing=[none, selective, full]"]

# At twice the sizes parallel_quirks.py describes: at its sizes the model's own pick is
# within 3% of the best on most seeds, and the landscape would test nothing.
PARALLEL_QUIRKS = ["backend.parallel_quirks=2.0"]

MOE_LANDSCAPES = {
    "mixtral-8x22b": (MIXTRAL, MIXTRAL_SPACE, 0.0, 0.0),
    "deepseek-v3": (DEEPSEEK, DEEPSEEK_SPACE, 0.0, 0.0),
    "mixtral-8x22b-perturbed": (MIXTRAL, MIXTRAL_SPACE, 0.2, 0.0),
    "deepseek-v3-interactions": (DEEPSEEK, DEEPSEEK_SPACE, 0.0, 1.0),
    "deepseek-v3-parallel-quirks": (DEEPSEEK, DEEPSEEK_SPACE + PARALLEL_QUIRKS, 0.0, 0.0),
}
LONG_CONTEXT_LANDSCAPES = {
    "llama3-405b-128k": (LLAMA3_405B, LLAMA3_128K_SPACE, 0.0, 0.0),
    "llama3-405b-32k": (LLAMA3_405B, LLAMA3_32K_SPACE, 0.0, 0.0),
    "llama3-405b-128k-interactions": (LLAMA3_405B, LLAMA3_128K_SPACE, 0.0, 1.0),
    "llama3-405b-32k-perturbed": (LLAMA3_405B, LLAMA3_32K_SPACE, 0.2, 0.0),
    "llama3-405b-32k-parallel-quirks": (LLAMA3_405B, LLAMA3_32K_SPACE + PARALLEL_QUIRKS, 0.0,
                                        0.0),
}
