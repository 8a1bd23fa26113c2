"""Context parallelism as Megatron-LM's and Megatron-DeepSpeed's flags; the layouts either tool
cannot run are refused first (capabilities.py).

Megatron-LM (megatron-core 0.19.2): `--context-parallel-size` (ModelParallelConfig's
context_parallel_size, a generated flag) on every layout, so a base argument never outvotes the
layout; with cp > 1 `--cp-comm-type` (written by hand in megatron/training/arguments.py:
nargs="+", no choices, TransformerConfig.cp_comm_type excluded from generation) and
`--transformer-impl=transformer_engine`, since only TransformerEngine's attention runs CP.
Megatron-Core passes the comm type to TransformerEngine as it is, and TE's
attn_forward_func_with_cp takes "p2p", "a2a", "a2a+p2p" and "all_gather" only ("Unsupported
communication type"), so ParaTune's allgather is rendered all_gather, although the parser's help
text spells it "allgather". a2a+p2p, which needs --hierarchical-context-parallel-sizes, is no
ParaTune comm type and is never rendered.

Megatron-DeepSpeed (f1feb887): `--ds-sequence-parallel-size`, DeepSpeed-Ulysses (its only
context parallelism, a2a), on every layout; its parser places it beside TP and PP in the world
(world = tp x pp x sp x dp, megatron/arguments.py).
"""

from __future__ import annotations
from orchestrator.trainers.megatron.flags import LM

# ParaTune's cp_comm_type -> the name Megatron-Core hands TransformerEngine.
MEGATRON_CP_COMM_TYPES = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather"}


def context_args(tool: str, layout) -> list[str]:
    """The context-parallel flags of `tool` for this layout."""
    if tool != LM:
        return [f"--ds-sequence-parallel-size={layout.cp}"]
    args = [f"--context-parallel-size={layout.cp}"]
    if layout.cp > 1:
        args += [f"--cp-comm-type={MEGATRON_CP_COMM_TYPES[layout.cp_comm_type]}",
                 "--transformer-impl=transformer_engine"]
    return args
