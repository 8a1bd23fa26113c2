"""A mixture-of-experts model and its expert layout as Megatron-LM's and Megatron-DeepSpeed's
flags; the layouts either tool cannot run are refused first (capabilities.py).

Megatron-LM (megatron-core 0.19.2; megatron_flags.py says which flags its parser generates
from TransformerConfig): `--num-experts`, `--moe-router-topk`, `--moe-ffn-hidden-size`, shared
experts by `--moe-shared-expert-intermediate-size`, which layers are MoE by `--moe-layer-freq`
(an int N makes layer i MoE when i % N == 0, as ParaTune's moe_layer_freq does; with dense
first layers a Python list expression such as "([0]*3+[1]*58)", the one form its parser's
moe_freq_type evaluates), `--expert-model-parallel-size`, `--expert-tensor-parallel-size`
(etp, or tp where unset, Megatron's own default, stated), group-limited routing by
`--moe-router-num-groups` and `--moe-router-group-topk`, the all-to-all token dispatcher unless
the base arguments choose one (`--moe-token-dispatcher-type=flex` for DeepEP), and grouped GEMMs
on GPUs (they need compute capability 8 or newer).

Megatron-DeepSpeed (f1feb887) builds DeepSpeed's MoE layer from its MLP: `--num-experts`,
`--topk`, `--expert-interval=1` (every layer; its default is 2), `--moe-expert-parallel-size`,
`--enable-expert-tensor-parallelism` where experts split over tp, and
`--create-moe-param-group`, the optimizer groups ZeRO needs for expert weights. Its experts
are copies of the dense MLP, so --ffn-hidden-size is the experts' width (every layer is MoE:
other patterns are refused).
"""

from __future__ import annotations

from orchestrator.layout import expert_tp
from orchestrator.trainers.megatron.flags import LM



def moe_layer_pattern(model) -> list[int]:
    """1 for each MoE layer, 0 for a dense one, from the first layer on."""
    return [1 if i >= model.first_dense_layers and i % model.moe_layer_freq == 0 else 0
            for i in range(model.num_layers)]


def moe_layer_freq(model) -> str | None:
    """Megatron-LM's --moe-layer-freq for the model's MoE layers; None where every layer is."""
    if model.first_dense_layers == 0:
        return None if model.moe_layer_freq == 1 else str(model.moe_layer_freq)
    runs: list[list[int]] = []  # [value, count], run-length encoded
    for value in moe_layer_pattern(model):
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return "(" + "+".join(f"[{value}]*{count}" for value, count in runs) + ")"


def _megatron_lm(spec, layout) -> list[str]:
    model = spec.model
    args = [f"--num-experts={model.num_experts}", f"--moe-router-topk={model.experts_per_token}",
            f"--moe-ffn-hidden-size={model.expert_ffn_hidden}"]
    if model.shared_expert_ffn_hidden:
        args.append(f"--moe-shared-expert-intermediate-size={model.shared_expert_ffn_hidden}")
    freq = moe_layer_freq(model)
    if freq is not None:
        args.append(f"--moe-layer-freq={freq}")
    if model.moe_router_num_groups:
        args += [f"--moe-router-num-groups={model.moe_router_num_groups}",
                 f"--moe-router-group-topk={model.moe_router_group_topk}"]
    args += [f"--expert-model-parallel-size={layout.ep}",
             f"--expert-tensor-parallel-size={expert_tp(layout.knob_values())}"]
    base = spec.trial.megatron.args if spec.trial.megatron else ()
    if not any(a.startswith("--moe-token-dispatcher-type") for a in base):
        args.append("--moe-token-dispatcher-type=alltoall")  # unless the user chose one
    if spec.cluster.device != "cpu":
        args.append("--moe-grouped-gemm")
    return args


def _megatron_deepspeed(spec, layout) -> list[str]:
    model = spec.model
    args = [f"--num-experts={model.num_experts}", f"--topk={model.experts_per_token}",
            "--expert-interval=1", f"--moe-expert-parallel-size={layout.ep}",
            "--create-moe-param-group"]
    if layout.tp > 1 and expert_tp(layout.knob_values()) == layout.tp:
        args.append("--enable-expert-tensor-parallelism")
    return args


def moe_args(tool: str, spec, layout) -> list[str]:
    """The MoE flags of `tool` for this layout; none for a dense model."""
    if not spec.model.is_moe:
        return []
    return _megatron_lm(spec, layout) if tool == LM else _megatron_deepspeed(spec, layout)


def ffn_hidden(tool: str, model) -> int:
    """--ffn-hidden-size: Megatron-DeepSpeed's experts are its MLP, so the experts' width there."""
    return model.expert_ffn_hidden if tool != LM and model.is_moe else model.ffn_hidden
