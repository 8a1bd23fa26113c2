"""Offload, overlap and bucket size reach DeepSpeed: the config a layout runs with sets ZeRO's
offload_optimizer, offload_param, overlap_comm and bucket keys only where the layout says so,
DeepSpeed's own `DeepSpeedConfig` parses them into its zero config, and a real DeepSpeed campaign
on CPU (examples/deepspeed/offload-overlap.yaml) trains with each of them, read back from
DeepSpeed's own log lines."""

from __future__ import annotations

import json
import re
import statistics

import pytest
import test_deepspeed as ds_tests
from conftest import EXAMPLES, journal_events

from orchestrator.export import export
from orchestrator.campaign_spec import load_spec
from orchestrator.trainers import DeepSpeedTrainer, trainer_for
from orchestrator.trainers.deepspeed import THROUGHPUT
from orchestrator.trainers.deepspeed.config import LAYOUT_KEYS, changes, deepspeed_config
from orchestrator.trial.folder import DEEPSPEED_CHANGES_FILE, DEEPSPEED_CONFIG_FILE, TrialFolder

import deepspeed  # noqa: E402, F401  (the test extra installs it: a broken install fails here)

SPEC = EXAMPLES / "deepspeed" / "offload-overlap.yaml"
BASE = {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": 1, "overlap_comm": True, "reduce_bucket_size": 1000,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True}}}


def spec_and_layout(*extra, **values):
    """The example's spec with one listed layout of these knob values, and that layout."""
    spec = load_spec(SPEC, [f"space={{kind: list, configs: [{json.dumps(values)}]}}", *extra])
    (config,) = spec.candidates()
    return spec, config


def test_the_layout_sets_offload_overlap_and_buckets_and_null_keeps_the_base():
    zero = deepspeed_config(*spec_and_layout(zero_stage=3, offload="optimizer+params",
                                             overlap_comm=True, bucket_size=2_000_000)
                            )["zero_optimization"]
    assert zero == {"stage": 3, "overlap_comm": True, "reduce_bucket_size": 2_000_000,
                    "allgather_bucket_size": 2_000_000,
                    "offload_optimizer": {"device": "cpu", "pin_memory": False},  # CPU cluster
                    "offload_param": {"device": "cpu", "pin_memory": False}}
    kept = deepspeed_config(*spec_and_layout(zero_stage=2), BASE)["zero_optimization"]
    assert kept == {**BASE["zero_optimization"], "stage": 2}  # nothing but the stage differs
    zero = deepspeed_config(*spec_and_layout("cluster=a100-80g", zero_stage=2,
                                             offload="optimizer", overlap_comm=False)
                            )["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert zero["overlap_comm"] is False
    assert "offload_param" not in zero and "reduce_bucket_size" not in zero


def test_each_layout_change_is_said_with_its_reason():
    spec, config = spec_and_layout(zero_stage=2, offload="optimizer", overlap_comm=True,
                                   bucket_size=2_000_000)
    lines = [c.line() for c in changes(BASE, deepspeed_config(spec, config, BASE))]
    said = "\n".join(lines)
    assert "zero_optimization.overlap_comm" not in said  # the base already overlaps
    assert ("zero_optimization.reduce_bucket_size: 1000 -> 2000000 (the layout's bucket_size, "
            "in elements (null keeps the base's))") in lines
    assert "zero_optimization.allgather_bucket_size: (unset) -> 2000000" in said
    assert "not documented" not in said
    keys = {c.key for c in changes(None, deepspeed_config(spec, config))}
    assert keys - {"steps_per_print", "log_level"} <= set(LAYOUT_KEYS)


def test_the_example_grid_varies_offload_overlap_and_buckets():
    spec = load_spec(SPEC)
    configs = spec.candidates()
    assert len(configs) == 16 == spec.budget.max_trials
    assert {(c.offload, c.overlap_comm, c.bucket_size) for c in configs} == {
        (o, v, b) for o in ("none", "optimizer") for v in (None, True) for b in (None, 2_000_000)}


def test_megatron_deepspeed_shares_the_config(tmp_path):
    spec = load_spec(EXAMPLES / "megatron-deepspeed.yaml", [
        "trial.megatron.deepspeed_config=null", "space.zero_stage=[1]",
        "space.offload=[optimizer]", "space.overlap_comm=[false]", "space.bucket_size=[4000000]"])
    config = spec.candidates()[0]
    files = trainer_for(spec).run(spec, config, "t0001", TrialFolder(tmp_path / "t"), 3).files
    zero = json.loads(files[DEEPSPEED_CONFIG_FILE])["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["overlap_comm"] is False
    assert zero["reduce_bucket_size"] == zero["allgather_bucket_size"] == 4_000_000


# DeepSpeed's own parse of the zero section, in a one-rank gloo group (as test_deepspeed.py).
ZERO_IN_DEEPSPEED = """
import json, sys
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
deepspeed.init_distributed(dist_backend="gloo")

class DataParallel:
    def get_data_parallel_world_size(self):
        return int(sys.argv[2])

zero = DeepSpeedConfig(sys.argv[1], mpu=DataParallel()).zero_config
device = lambda offload: offload and getattr(offload.device, "value", offload.device)
print(json.dumps({"stage": int(zero.stage), "overlap_comm": zero.overlap_comm,
                  "reduce_bucket_size": zero.reduce_bucket_size,
                  "allgather_bucket_size": zero.allgather_bucket_size,
                  "offload_optimizer": device(zero.offload_optimizer),
                  "offload_param": device(zero.offload_param),
                  "pin_memory": zero.offload_optimizer and zero.offload_optimizer.pin_memory}))
"""


@pytest.mark.parametrize("values, parsed", [
    ({"zero_stage": 2, "offload": "optimizer", "overlap_comm": True, "bucket_size": 2_000_000},
     {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 2_000_000,
      "allgather_bucket_size": 2_000_000, "offload_optimizer": "cpu", "offload_param": None,
      "pin_memory": False}),
    ({"zero_stage": 3, "offload": "optimizer+params", "overlap_comm": False,
      "bucket_size": None},  # DeepSpeed's defaults: 5e8-element buckets
     {"stage": 3, "overlap_comm": False, "reduce_bucket_size": 500_000_000,
      "allgather_bucket_size": 500_000_000, "offload_optimizer": "cpu", "offload_param": "cpu",
      "pin_memory": False}),
])
def test_trial_config_and_export_load_in_deepspeed_with_the_knobs(tmp_path, monkeypatch, values,
                                                                   parsed):
    monkeypatch.chdir(EXAMPLES.parent)
    spec, config = spec_and_layout(**values)
    run = DeepSpeedTrainer().run(spec, config, "t0001", TrialFolder(tmp_path / "t"), steps=3)
    for name, text in (("trial", run.files[DEEPSPEED_CONFIG_FILE]),
                       ("export", export("deepspeed", spec, "t0001", config))):
        (tmp_path / f"{name}.json").write_text(text)
        assert ds_tests.in_deepspeed(ZERO_IN_DEEPSPEED, tmp_path / f"{name}.json",
                                     config.dp) == parsed, name


# Three trials of two DeepSpeed ranks: 25-45 s each on a loaded 2-core machine. The bounds are
# there for a hung trial only.
TRIAL_TIMEOUT_S = 600
LAYOUTS = ("[{zero_stage: 2, micro_batch_size: 1, overlap_comm: true, bucket_size: 2000000},"
           " {zero_stage: 1, micro_batch_size: 1, overlap_comm: false, offload: optimizer},"
           " {zero_stage: 3, micro_batch_size: 1, offload: optimizer+params}]")
# What DeepSpeed 0.19.8 logs of each setting: stage_1_and_2.py's __init__ and the engine's
# config print (config.py), one line per rank.
SAID = {1: ["CPU Offload: True", "overlap_comm=False", "offload_optimizer="
            "DeepSpeedZeroOffloadOptimizerConfig(device='cpu'"],
        2: ["Reduce bucket size 2000000", "Allgather bucket size 2000000", "CPU Offload: False",
            "overlap_comm=True"],
        3: ["offload_param=DeepSpeedZeroOffloadParamConfig(device='cpu'",
            "offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu'",
            "Creating torch.float32 ZeRO stage 3 optimizer"]}


@pytest.mark.slow
@pytest.mark.timeout(3 * TRIAL_TIMEOUT_S + 300)
def test_real_deepspeed_campaign_with_offload_overlap_and_buckets_on_cpu(runs_dir, cli,
                                                                         monkeypatch):
    """DeepSpeed trains with optimizer offload (torch's AdamW on the host, as the base config's
    `torch_adam` asks), offloaded weights at ZeRO-3, overlap on and off and a 2M-element
    bucket; each result is DeepSpeed's CurrSamplesPerSec after the warm-up step."""
    monkeypatch.chdir(EXAMPLES.parent)
    code, _, err = cli("run", str(SPEC), "--set", f"trial.timeout_s={TRIAL_TIMEOUT_S}",
                       "--set", f"space={{kind: list, configs: {LAYOUTS}}}")
    assert code == 0, err
    campaign = runs_dir / "deepspeed-offload-overlap"
    finished = {e["config"]["zero_stage"]: (e["trial_id"], e["result"])
                for e in journal_events(campaign) if e["event"] == "finished"}
    assert sorted(finished) == [1, 2, 3]
    for stage, (trial_id, result) in finished.items():
        assert result["status"] == "ok", result["error"]
        folder = campaign / "trials" / trial_id
        log = (folder / "trial.log").read_text()
        for line in SAID[stage]:
            assert line in log, (stage, line)
        samples = {int(m["step"]): float(m["curr"]) for m in THROUGHPUT.finditer(log)}
        timed = [samples[step] for step in sorted(samples)][1:]  # less the warm-up step
        assert result["tokens_per_s"] == pytest.approx(statistics.median(timed) * 256)
        assert result["loss_last"] > 0 and re.search(
            r"zero_optimization\.(offload_optimizer|overlap_comm|reduce_bucket_size)",
            (folder / DEEPSPEED_CHANGES_FILE).read_text())


def test_an_odd_bucket_is_refused_in_deepspeeds_words():
    from orchestrator.space import Layout
    from orchestrator.trainers.deepspeed.capabilities import even_bucket_refusal

    odd = Layout(dp=2, zero_stage=1, bucket_size=5_000_001)
    assert "multiple of nccl_start_alignment_factor" in even_bucket_refusal("deepspeed", odd)
    assert even_bucket_refusal("deepspeed", Layout(dp=2, zero_stage=1,
                                                           bucket_size=5_000_000)) is None
