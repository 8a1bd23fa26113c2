"""The DeepSpeed config a layout runs with: the user's base config, changed only in documented
keys, with every change and every contradiction said in words.

ParaTune sets the layout's batch split and ZeRO stage, the precision the device trains in, the
context-parallel degree where a layout has one, the layout's offload, overlap and bucket size
where it sets them, and, for trials only, a throughput line at every
step (DeepSpeed's ThroughputTimer, read back as the trial's result). Exports keep the user's own
`steps_per_print` and `log_level`.

`sequence_parallel_size` is a top-level key DeepSpeed 0.19.8 reads from the raw config, with no
field in its config classes: with no `mpu` DeepSpeedConfig counts its data-parallel ranks as the
world over it, so a Ulysses script's batch (micro-batch x accumulation x dp) checks out
(runtime/config.py); `deepspeed.initialize` builds a (data_parallel, sequence_parallel) mesh from
it only beside a `data_parallel_size` key, which ParaTune leaves to the user, as a script given
an mpu or a mesh makes its own groups.

Offload, overlap and buckets (runtime/zero/config.py, engine.py, autotuning/constants.py in
0.19.8) are set only where the layout says so; otherwise the base's keys stand. `offload`
optimizer sets `offload_optimizer` to the host (pinned on GPU clusters unless the base says
otherwise; on a CPU cluster the host is the device, so nothing is pinned), optimizer+params
`offload_param` too; "none" leaves the base's offload as written. `bucket_size` sets
`reduce_bucket_size` and `allgather_bucket_size`, the two bucket keys DeepSpeed's autotuner
varies (independently, 5e7/5e8/1e9, at stages 1-3). ZeRO-3's engine reads only the first of
them (its weight gathers go by `stage3_prefetch_bucket_size`, which the autotuner fixes from
the hidden size and ParaTune leaves to the base), and stage 0 reads neither, nor overlap_comm.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.common.errors import SpecError
from orchestrator.space import ShardingFactors, dp_mesh
from orchestrator.trial.folder import DEEPSPEED_CHANGES_FILE, DEEPSPEED_CONFIG_FILE

# Keys every trial's config gets from its layout, and why.
TOOL = "DeepSpeed 0.19.8"  # the release whose config keys these are
LAYOUT_KEYS = {
    "train_batch_size": "the layout's global batch (micro-batch x accumulation x dp)",
    "train_micro_batch_size_per_gpu": "the layout's micro-batch",
    "gradient_accumulation_steps": "the layout's accumulation steps",
    "zero_optimization.stage": "the layout's ZeRO stage",
    "sequence_parallel_size": "the layout's cp, the DeepSpeed-Ulysses degree: DeepSpeed counts "
                              "world / sequence_parallel_size data-parallel ranks without an mpu",
    "bf16.enabled": "bf16 on GPUs unless the base chose fp16; off on CPU clusters, "
                    "whose trials the cost model prices in float32",
    "zero_optimization.offload_optimizer.device": "the layout's offload: optimizer states "
                                                  "and their step on the host",
    "zero_optimization.offload_optimizer.pin_memory": "the layout's offload: pinned host "
                                                      "buffers on GPUs, none on a CPU cluster",
    "zero_optimization.offload_param.device": "the layout's offload: optimizer+params keeps "
                                              "the weights on the host too (ZeRO-3)",
    "zero_optimization.offload_param.pin_memory": "the layout's offload: pinned host buffers "
                                                  "on GPUs, none on a CPU cluster",
    "zero_optimization.overlap_comm": "the layout's overlap_comm (null keeps the base's)",
    "zero_optimization.reduce_bucket_size": "the layout's bucket_size, in elements (null "
                                            "keeps the base's)",
    "zero_optimization.allgather_bucket_size": "the layout's bucket_size, in elements (read "
                                               "at stages 1-2; null keeps the base's)",
}
# Keys set for the trial's measurement only: DeepSpeed logs its throughput line at INFO, every
# `steps_per_print` steps. Exports restore the base config's values.
TRIAL_ONLY = {"steps_per_print": 1, "log_level": "info"}
TRIAL_ONLY_WHY = "trials only, for DeepSpeed's per-step throughput line; exports keep yours"
UNSET = "(unset)"


@dataclass(frozen=True)
class Change:
    """One value of the base config a trial's config holds differently."""

    key: str  # dotted path
    before: Any
    after: Any
    why: str

    def line(self) -> str:
        return f"{self.key}: {_shown(self.before)} -> {_shown(self.after)} ({self.why})"


def _shown(value: Any) -> str:
    return value if value is UNSET else json.dumps(value)


def zero_stage(spec, layout) -> int:
    """A layout's ZeRO stage; AMSP's sharding factors only where they are one of ZeRO's
    points on the layout's data-parallel mesh (DeepSpeed shards no other way)."""
    if layout.sharding is None:
        return layout.zero_stage
    mesh = dp_mesh(layout.dp, layout.tp, spec.gpus_per_node)
    for stage in (0, 1, 2, 3):
        if ShardingFactors.from_zero_stage(stage, *mesh).as_tuple() == layout.sharding.as_tuple():
            return stage
    raise SpecError(f"deepspeed: AMSP sharding factors {layout.sharding.as_tuple()} are no ZeRO "
                    "stage, and DeepSpeed shards weights, gradients and optimizer states no other "
                    "way; export the built-in trainer's formats (torchrun, sbatch, yaml), which "
                    "run them")


def deepspeed_config(spec, layout, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A trial's DeepSpeed config for a layout: the base config with LAYOUT_KEYS and
    TRIAL_ONLY set (sequence_parallel_size where cp > 1 or the base has it), every other key as
    the user wrote it."""
    data = dict(base or {})
    data.update({
        "train_batch_size": layout.global_batch_size(),
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.grad_accum_steps,
        **TRIAL_ONLY,
    })
    data["zero_optimization"] = zero_section(spec, layout, data.get("zero_optimization", {}))
    if layout.cp > 1 or "sequence_parallel_size" in data:  # a base's value never outvotes cp
        data["sequence_parallel_size"] = layout.cp
    if not data.get("fp16", {}).get("enabled"):
        data["bf16"] = {**data.get("bf16", {}), "enabled": spec.cluster.device != "cpu"}
    return data


def zero_section(spec, layout, base_zero: dict[str, Any]) -> dict[str, Any]:
    """The base's `zero_optimization` with the layout's stage, and its offload, overlap and
    bucket size where the layout sets them."""
    zero = {**base_zero, "stage": zero_stage(spec, layout)}
    pinned = spec.cluster.device != "cpu"  # on a CPU cluster the host is the device
    wanted = {"optimizer": ("offload_optimizer",),
              "optimizer+params": ("offload_optimizer", "offload_param")}
    for key in wanted.get(layout.offload, ()):
        own = zero.get(key) or {}
        zero[key] = {**own, "device": "cpu", "pin_memory": own.get("pin_memory", pinned)}
    if layout.overlap_comm is not None:
        zero["overlap_comm"] = layout.overlap_comm
    if layout.bucket_size is not None:  # stages 1-2 assert an even allgather bucket
        zero["reduce_bucket_size"] = layout.bucket_size
        zero["allgather_bucket_size"] = layout.bucket_size
    return zero


def production_config(trial_config: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any]:
    """A trial's config for a production run: the trial-only keys back to the base's values
    (or left out where the base had none)."""
    data = dict(trial_config)
    for key in TRIAL_ONLY:
        if base and key in base:
            data[key] = base[key]
        else:
            data.pop(key, None)
    return data


def flat_keys(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(flat_keys(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def changes(base: dict[str, Any] | None, trial_config: dict[str, Any]) -> list[Change]:
    """Every value the trial's config holds differently from the base, with its reason."""
    before, after = flat_keys(base or {}), flat_keys(trial_config)
    found = []
    for key, value in after.items():
        if before.get(key, UNSET) != value:
            why = TRIAL_ONLY_WHY if key in TRIAL_ONLY else LAYOUT_KEYS.get(key, "not documented")
            found.append(Change(key, before.get(key, UNSET), value, why))
    found += [Change(key, value, UNSET, "not documented") for key, value in before.items()
              if key not in after]
    return found


def contradictions(trial_config: dict[str, Any]) -> list[str]:
    """Settings of the base config that the layout's ZeRO stage makes DeepSpeed ignore."""
    zero = trial_config.get("zero_optimization", {})
    stage = zero.get("stage", 0)
    found = []
    for key, lowest in (("offload_optimizer", 1), ("offload_param", 3)):
        device = (zero.get(key) or {}).get("device", "none")
        if device != "none" and stage < lowest:
            found.append(f"zero_optimization.{key} (device {device}): DeepSpeed offloads it only "
                         f"under ZeRO stage {lowest} or above, so layouts of stage {stage} run "
                         "without it")
    return found


def base_config(spec) -> dict[str, Any] | None:
    """The user's base ds_config (`trial.deepspeed.config`, or `trial.megatron.deepspeed_config`
    for Megatron-DeepSpeed), read relative to the trial's working directory."""
    if spec.trial.deepspeed:
        path, key = spec.trial.deepspeed.config, "trial.deepspeed.config"
    elif spec.trial.megatron:
        path, key = spec.trial.megatron.deepspeed_config, "trial.megatron.deepspeed_config"
    else:
        return None
    if path is None:
        return None
    full = Path(spec.trial.workdir or ".") / path
    try:
        data = json.loads(full.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"{key}: cannot read {full} as JSON ({exc}); "
                        "give the path of your ds_config.json") from None
    if not isinstance(data, dict):
        raise SpecError(f"{key}: {full} holds no JSON object")
    return data


def trial_files(spec, layout) -> dict[str, str]:
    """A trial's DeepSpeed config and, beside it, what it changed from the base config."""
    base = base_config(spec)
    data = deepspeed_config(spec, layout, base)
    notes = [c.line() for c in changes(base, data)] + contradictions(data)
    return {DEEPSPEED_CONFIG_FILE: json.dumps(data, indent=2),
            DEEPSPEED_CHANGES_FILE: "".join(line + "\n" for line in notes)}


def campaign_notes(spec, configs) -> list[str]:
    """Each value of the user's base config that the campaign's trials override, one line per
    key (a key the layouts set differently reads "per layout"), then each contradiction once;
    keys the base left unset are only written beside each trial's config."""
    base = base_config(spec)
    if base is None:
        return []
    seen: dict[str, Change] = {}
    values: dict[str, set[str]] = {}  # every value a layout gives each key
    conflicts: list[str] = []
    for config in configs:
        data = deepspeed_config(spec, config, base)
        for change in changes(base, data):
            if change.before is not UNSET:
                seen.setdefault(change.key, change)
        for key, value in flat_keys(data).items():
            values.setdefault(key, set()).add(json.dumps(value))
        conflicts += [c for c in contradictions(data) if c not in conflicts]
    lines = [change.line() if len(values.get(key, ())) <= 1 else
             f"{key}: {_shown(change.before)} -> per layout ({change.why})"
             for key, change in seen.items()]
    return lines + conflicts
