"""Held-out calibration error: each trial predicted by the model refit on all the others."""

from __future__ import annotations

import pytest

from orchestrator.costmodel import CostModel
from orchestrator.costmodel.calibration import calibrate, held_out_errors
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.result import TrialResult
from orchestrator.space import Layout

COST = CostModel(MODEL_PRESETS["llama-7b"], CLUSTER_PRESETS["a800-80g"], 8)
CONFIGS = [Layout(tp=t, dp=8 // t, zero_stage=1, micro_batch_size=m,
                          grad_accum_steps=8 // m) for t in (1, 2, 4, 8) for m in (1, 2, 8)]
TRUTH = COST.with_coefficients(COST.coefficients.with_(scale_compute=1.4,
                                                       scale_model_parallel_latency=20.0))


def held_out_trials(slower: dict[int, float] | None = None) -> list:
    """Trials of the planted model; trial i `slower[i]` times slower than it."""
    out = []
    for i, config in enumerate(CONFIGS):
        est = TRUTH.estimate(config)
        step = est.step_time_s * (slower or {}).get(i, 1.0)
        out.append((f"t{i}", config, TrialResult(status="ok", step_time_s=step,
                                                 tokens_per_s=est.tokens_per_step / step)))
    return out


def test_a_model_that_explains_the_trials_predicts_each_from_the_others():
    errors = held_out_errors(COST, held_out_trials())
    assert errors is not None and len(errors) == len(CONFIGS)
    assert max(abs(e) for e in errors) < 1e-3


def test_a_trial_the_others_do_not_explain_shows_its_whole_miss_only_held_out():
    """One trial 30% slower than the planted model: the full fit bends toward it, so its
    in-sample error understates the miss; held out, the others predict it 1.3x fast."""
    trials = held_out_trials(slower={4: 1.3})
    in_sample = calibrate(COST, trials).trials[4].error
    held_out = held_out_errors(COST, trials)[4]
    assert held_out == pytest.approx(0.3, abs=0.02)
    assert abs(in_sample) < abs(held_out)


def test_too_few_trials_to_leave_one_out():
    assert held_out_errors(COST, held_out_trials()[:3]) is None
    failed = [(tid, c, TrialResult(status="oom", error="x")) for tid, c, _ in held_out_trials()]
    assert held_out_errors(COST, failed) is None


def _simulated_campaign(tmp_path, cli, name: str, trials: int) -> None:
    import yaml

    spec = tmp_path / f"{name}.yaml"
    spec.write_text(yaml.safe_dump({
        "name": name, "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": 8, "global_batch_size": 512},
        "space": {"tp": [1, 2, 4, 8], "zero_stage": [1, 3], "micro_batch_size": [1, 2, 4]},
        "search": {"algorithm": "random", "seed": 3}, "budget": {"max_trials": trials},
        "backend": {"kind": "simulated", "seed": 5, "noise": 0.05},
        "tracking": {"enabled": False}}))
    assert cli("run", str(spec))[0] == 0


def test_calibrate_prints_each_trials_held_out_error(tmp_path, runs_dir, cli):
    _simulated_campaign(tmp_path, cli, "sim", 12)
    code, out, err = cli("calibrate", "sim", "--held-out")
    assert code == 0, err
    assert "held out" in out and "refit from h100-80g on the others" in out


def test_held_out_needs_a_trial_to_spare(tmp_path, runs_dir, cli):
    _simulated_campaign(tmp_path, cli, "few", 3)
    code, _, err = cli("calibrate", "few", "--held-out")
    assert code == 2 and "--held-out needs 4 successful trials" in err
    assert "Traceback" not in err


def test_a_cluster_file_calibrate_cannot_read_is_one_line_naming_the_key(tmp_path, runs_dir, cli):
    """--cluster reads a preset file as a spec's `cluster:` does: a binary file or a file that
    is not a preset is one line naming what is wrong, not a traceback."""
    _simulated_campaign(tmp_path, cli, "few", 3)
    binary, other = tmp_path / "binary.yaml", tmp_path / "not-a-preset.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe")
    other.write_text("name: a-campaign\nmodel: tiny\n")
    for path, message in ((binary, "line 2: not UTF-8 text"),
                          (other, "cluster.gpus_per_node: required key is missing")):
        code, _, err = cli("calibrate", "few", "--cluster", str(path))
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert "Traceback" not in err
