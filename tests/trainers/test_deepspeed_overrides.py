"""The user's base ds_config is theirs: a trial's config differs from it only in documented
keys (the layout's batch split and ZeRO stage, the device's precision, the trial-only
throughput logging), every value it overrides is said on stderr and written beside the trial's
config, settings the layout contradicts are named, and the export keeps the user's own
trial-only values."""

from __future__ import annotations

import json
import logging

from conftest import EXAMPLES

from orchestrator.export import export
from orchestrator.campaign_spec import load_spec
from orchestrator.trainers import DeepSpeedTrainer
from orchestrator.trainers.deepspeed.config import LAYOUT_KEYS, TRIAL_ONLY, flat_keys
from orchestrator.trial.folder import DEEPSPEED_CHANGES_FILE, DEEPSPEED_CONFIG_FILE, TrialFolder

BASE = {"train_batch_size": 8, "steps_per_print": 10, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                              "overlap_comm": True},
        "wall_clock_breakdown": False}


def differing(a: dict, b: dict) -> set[str]:
    fa, fb = flat_keys(a), flat_keys(b)
    return {k for k in fa.keys() | fb.keys() if fa.get(k, "unset") != fb.get(k, "unset")}


def spec_with_base(tmp_path, *extra):
    (tmp_path / "base.json").write_text(json.dumps(BASE))
    return load_spec(EXAMPLES / "deepspeed.yaml", [
        f"trial.workdir={tmp_path}", "trial.deepspeed.config=base.json",
        "space.zero_stage=[0, 2]", "backend.kind=simulated", "tracking.enabled=false", *extra])


def test_only_documented_keys_differ_and_each_override_is_written_beside_it(tmp_path):
    spec = spec_with_base(tmp_path)
    config = next(c for c in spec.candidates() if c.zero_stage == 0)
    files = DeepSpeedTrainer().run(spec, config, "t0001", TrialFolder(tmp_path / "t"), 3).files
    trial = json.loads(files[DEEPSPEED_CONFIG_FILE])
    changed = differing(BASE, trial)
    assert changed <= set(LAYOUT_KEYS) | set(TRIAL_ONLY), changed - set(LAYOUT_KEYS)
    assert "gradient_clipping" not in trial and trial["zero_optimization"]["overlap_comm"]
    said = files[DEEPSPEED_CHANGES_FILE]
    for key in changed:
        assert f"{key}: " in said, key
    assert "bf16.enabled: true -> false" in said and "steps_per_print: 10 -> 1" in said
    assert "offload_optimizer (device cpu)" in said and "stage 0" in said

    exported = json.loads(export("deepspeed", spec, "t0001", config))
    exported.pop("_paratune")
    assert differing(BASE, exported) <= set(LAYOUT_KEYS)
    assert exported["steps_per_print"] == 10 and "log_level" not in exported


def test_overrides_are_said_on_stderr_when_the_campaign_starts(tmp_path, runs_dir, cli,
                                                               monkeypatch, caplog):
    """Said as warnings (the CLI prints them on stderr as `paratune: ...`)."""
    monkeypatch.chdir(EXAMPLES.parent)
    caplog.set_level(logging.WARNING)
    (tmp_path / "base.json").write_text(json.dumps(BASE))
    code, _, err = cli("run", str(EXAMPLES / "deepspeed.yaml"), "--set", f"trial.workdir={tmp_path}",
                       "--set", "trial.deepspeed.config=base.json", "--set",
                       "space.zero_stage=[0, 2]", "--set", "backend.kind=simulated",
                       "--set", "budget.max_trials=1")
    assert code == 0, err
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("trial.deepspeed.config: ")]
    assert any("train_batch_size: 8 -> 16" in line for line in lines), err
    assert any("zero_optimization.stage: 2 -> per layout" in line for line in lines), err
    assert any("bf16.enabled: true -> false" in line for line in lines), err
    assert sum("offload_optimizer" in line for line in lines) == 1, err
    assert not any("optimizer.params" in line or "overlap_comm" in line for line in lines)
