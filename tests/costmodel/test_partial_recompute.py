"""Partial recompute: the first N layers of each stage replay their forward, priced, planned,
rendered for Megatron-LM and run by the built-in trainer; refused where a trainer cannot."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from functools import partial

import pytest
import yaml
from builders import layout
from conftest import journal_events

from orchestrator.common.errors import SpecError
from orchestrator.costmodel import CostModel
from orchestrator.costmodel.recompute import fewest_recomputed_layers
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.space import InvalidConfig, Layout, ShardingFactors
from orchestrator.campaign_spec import spec_from_dict
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates
from orchestrator.trainers.megatron import megatron_args
from orchestrator.trainers.megatron.flags import MEGATRON_LM_FLAGS, problems

ROOT = Path(__file__).resolve().parents[2]
LLAMA_30B = MODEL_PRESETS["llama-30b"]  # 60 layers
A800 = CLUSTER_PRESETS["a800-80g"]

recompute_layout = partial(layout, tp=1, dp=64, zero_stage=3, grad_accum_steps=8,
                           activation_checkpointing="full")


def test_the_count_needs_full_recompute_and_fewer_layers_than_a_stage():
    with pytest.raises(InvalidConfig, match="needs activation_checkpointing 'full'"):
        Layout(activation_checkpointing="selective", recompute_num_layers=4)
    with pytest.raises(InvalidConfig, match="positive integer"):
        Layout(activation_checkpointing="full", recompute_num_layers=0)
    config = Layout(pp=4, dp=2, activation_checkpointing="full", recompute_num_layers=15)
    with pytest.raises(InvalidConfig, match="below the 15 layers of a pipeline stage"):
        config.validate(world_size=8, num_heads=52, num_layers=60, global_batch_size=2)
    assert config.recompute_fraction(60) == 1.0
    half = dataclasses.replace(config, recompute_num_layers=7)
    assert half.recompute_fraction(60) == pytest.approx(7 / 15)
    assert Layout().recompute_fraction(60) == 0.0


def test_the_count_is_part_of_the_key_and_survives_mlflow_params():
    config = recompute_layout(recompute_num_layers=42)
    assert config.key().endswith("-acfull42") and config.key() != recompute_layout().key()
    params = {k: str(v) for k, v in config.to_params().items()}
    assert Layout.from_params(params) == config
    every = {k: str(v) for k, v in recompute_layout().to_params().items()}
    assert Layout.from_params(every).recompute_num_layers is None


def test_fewer_recomputed_layers_cost_memory_and_save_compute():
    cost = CostModel(LLAMA_30B, A800, 8)
    estimates = [cost.estimate(recompute_layout(activation_checkpointing="none")),
                 cost.estimate(recompute_layout(recompute_num_layers=30)),
                 cost.estimate(recompute_layout())]
    memory = [e.memory.activations for e in estimates]
    hardware = [e.hardware_flops_per_step for e in estimates]
    compute = [e.time.compute_s for e in estimates]
    assert memory[0] > memory[1] > memory[2]
    assert hardware[0] < hardware[1] < hardware[2]
    assert compute[0] < compute[1] < compute[2]
    # Half the layers replay half the forward that full recompute adds.
    assert hardware[1] - hardware[0] == pytest.approx((hardware[2] - hardware[0]) / 2)
    assert len({e.model_flops_per_step for e in estimates}) == 1  # MFU counts no recompute


def test_the_fewest_layers_that_fit_are_found():
    cost = CostModel(LLAMA_30B, A800, 8)
    amsp = dataclasses.replace(recompute_layout(), zero_stage=0, sharding=None)
    factors = ShardingFactors(2, 1, 8, 4, 8, 4)  # AMSP's 64-GPU plan at M = 8
    config = dataclasses.replace(amsp, sharding=factors)
    chosen = fewest_recomputed_layers(cost, config)
    k = chosen.recompute_num_layers
    assert k is not None and 1 < k < 60
    assert cost.estimate(chosen).fits
    assert not cost.estimate(dataclasses.replace(config, recompute_num_layers=k - 1)).fits
    assert cost.estimate(chosen).step_time_s < cost.estimate(config).step_time_s
    # Nothing to do for a layout that recomputes nothing, or already names its count.
    named = dataclasses.replace(config, recompute_num_layers=50)
    assert fewest_recomputed_layers(cost, named) is named


def test_the_space_pairs_counts_with_full_recompute_only():
    spec = spec_from_dict({
        "name": "partial", "model": "llama-30b", "cluster": "a800-80g",
        "scale": {"nodes": 8, "global_batch_size": 512},
        "space": {"zero_stage": [3], "micro_batch_size": [1],
                  "activation_checkpointing": ["none", "full"],
                  "recompute_num_layers": [None, 20, 40]},
    })
    keys = sorted(c.key() for c in spec.candidates())
    assert keys == ["tp1-pp1-dp64-z3-mbs1-gas8-acfull", "tp1-pp1-dp64-z3-mbs1-gas8-acfull20",
                    "tp1-pp1-dp64-z3-mbs1-gas8-acfull40", "tp1-pp1-dp64-z3-mbs1-gas8-acnone"]


def fit_spec(**space) -> dict:
    """LLaMA-30B on 64 A800s, ZeRO-3, every layout asking for the fewest layers that fit."""
    return {"name": "fit", "model": {"preset": "llama-30b", "seq_len": 4096},
            "cluster": "a800-80g",
            "scale": {"nodes": 8, "global_batch_size": 128}, "backend": {"kind": "simulated"},
            "space": {"zero_stage": [3], "micro_batch_size": [1, 2],
                      "activation_checkpointing": ["full"], "recompute_num_layers": ["fit"],
                      **space}}


def test_fit_takes_each_layouts_fewest_recomputed_layers():
    """mbs 2 (no accumulation) fits with 32 of 60 layers recomputed and not with 31; mbs 1
    accumulates over 2 micro-batches, where the built-in trainer's FSDP2 keeps the whole
    gradient: nothing fits, and the layout stays as listed (full recompute) for the pruner.
    At global batch 64, mbs 1 fits with nothing recomputed."""
    spec = spec_from_dict(fit_spec())
    cost = cost_model_for(spec)
    assert {c.key() for c in spec.candidates()} == {  # unresolved: enough to check the space
        "tp1-pp1-dp64-z3-mbs1-gas2-acfull", "tp1-pp1-dp64-z3-mbs2-gas1-acfull"}
    fitted = {c.micro_batch_size: c for c in fitted_candidates(spec)}
    assert fitted[1].key() == "tp1-pp1-dp64-z3-mbs1-gas2-acfull" and not cost.estimate(
        fitted[1]).fits
    k = fitted[2].recompute_num_layers
    assert fitted[2].activation_checkpointing == "full" and 1 < k < 60
    assert cost.estimate(fitted[2]).fits
    assert not cost.estimate(dataclasses.replace(fitted[2], recompute_num_layers=k - 1)).fits
    small = spec_from_dict(fit_spec(micro_batch_size=[1]) | {
        "scale": {"nodes": 8, "global_batch_size": 64}})
    (alone,) = fitted_candidates(small)
    assert alone.activation_checkpointing == "none" and cost.estimate(alone).fits


def test_a_fitted_layout_listed_as_it_is_is_one_candidate():
    spec = spec_from_dict(fit_spec(micro_batch_size=[1], activation_checkpointing=["none", "full"])
                          | {"scale": {"nodes": 8, "global_batch_size": 64}})
    assert [c.key() for c in fitted_candidates(spec)] == ["tp1-pp1-dp64-z3-mbs1-gas1-acnone"]


def test_a_campaign_runs_the_fitted_counts(tmp_path, runs_dir, cli):
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(fit_spec()))
    code, _, err = cli("run", str(path))
    assert code == 0, err
    events = journal_events(runs_dir / "fit")
    ran = {e["config"]["micro_batch_size"]: e for e in events if e["event"] == "finished"}
    assert ran[2]["config"]["recompute_num_layers"] == fitted_candidates(
        spec_from_dict(fit_spec()))[1].recompute_num_layers
    # mbs 1 fits nowhere, but within the memory model's margin: measured (the simulated device
    # runs a risky layout with the chance the verdict gives it), and recorded as risky.
    assert ran[1]["result"]["status"] in ("ok", "oom")
    assert ran[1]["result"]["extra"]["memory_verdict"] == "risky"
    code, out, _ = cli("plan", str(path), "--json")
    assert json.loads(out)["top"][0]["config"]["recompute_num_layers"] == ran[2]["config"][
        "recompute_num_layers"]


def test_an_unknown_count_word_is_one_line(tmp_path, cli):
    path = tmp_path / "fits.yaml"
    path.write_text(yaml.safe_dump(fit_spec(recompute_num_layers=["fits"])))
    code, out, err = cli("run", str(path), "--dry-run")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "space.recompute_num_layers" in err and "'fit'" in err, err


def test_an_empty_space_says_which_layout_check_refused_it():
    """A count no stage can take empties the space; the error quotes the check, not a list
    of knobs to widen."""
    with pytest.raises(SpecError, match=r"the first refused: recompute_num_layers\(500\) must "
                                        r"be below the 60 layers of a pipeline stage"):
        spec_from_dict({
            "name": "partial", "model": "llama-30b", "cluster": "a800-80g",
            "scale": {"nodes": 8, "global_batch_size": 512},
            "space": {"zero_stage": [3], "activation_checkpointing": ["full"],
                      "recompute_num_layers": [500]},
        }).candidates()


@pytest.mark.parametrize("trainer", ["torchtitan", "megatron-deepspeed"])
def test_trainers_that_recompute_every_layer_refuse_a_count(trainer, tmp_path, cli):
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["trial"] = {**data.get("trial", {}), "trainer": trainer}
    for count in (1, "fit"):
        data["space"] = {"activation_checkpointing": ["full"], "recompute_num_layers": [count]}
        path = tmp_path / "partial.yaml"
        path.write_text(yaml.safe_dump(data))
        code, out, err = cli("run", str(path), "--dry-run")
        assert code == 2 and out == "" and err.count("\n") == 1
        assert "space.recompute_num_layers" in err and trainer in err


def test_megatron_lm_recomputes_the_first_layers_of_each_stage_by_its_block_method():
    spec = spec_from_dict({
        "name": "mega", "model": "gpt-175b", "cluster": "h100-80g",
        "scale": {"nodes": 8, "global_batch_size": 128},
        "trial": {"trainer": "megatron-lm",
                  "megatron": {"script": "pretrain_gpt.py", "args": ["--lr=1e-4"]}},
    })
    config = Layout(tp=8, pp=4, dp=2, micro_batch_size=1, grad_accum_steps=64,
                            activation_checkpointing="full", recompute_num_layers=10)
    args = megatron_args("megatron-lm", spec, config)
    assert {"--recompute-granularity=full", "--recompute-method=block",
            "--recompute-num-layers=10"} <= set(args)
    assert problems(args, MEGATRON_LM_FLAGS) == []
    with pytest.raises(SpecError, match="space.recompute_num_layers"):
        megatron_args("megatron-deepspeed", spec, config)


def test_the_built_in_trainer_checkpoints_only_the_first_blocks_of_a_stage():
    from jobs.model import ModelArgs, Transformer
    from jobs.parallelize import Checkpointed, apply_ac

    model = Transformer(ModelArgs(num_layers=4, hidden=32, num_heads=2, ffn_hidden=64,
                                  vocab_size=64, seq_len=16))
    apply_ac(model, "full", 3)
    wrapped = [isinstance(block, Checkpointed) for block in model.layers.values()]
    assert wrapped == [True, True, True, False]
    with pytest.raises(ValueError, match="needs activation_checkpointing full"):
        apply_ac(model, "selective", 1)
