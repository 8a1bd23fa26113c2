"""The DeepSpeed trainer: its log parser on lines in DeepSpeed 0.19.8's own format, its config
and export loaded by DeepSpeed's own `DeepSpeedConfig`, and a real DeepSpeed campaign on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import EXAMPLES, journal_events
from ports import free_port

from orchestrator.campaign_spec import load_spec
from orchestrator.trainers import DeepSpeedTrainer, Measure
from orchestrator.trainers.result_reading import result_from_log

import deepspeed  # noqa: E402, F401  (the test extra installs it: a broken install fails here)

MEASURE = Measure(world_size=2, seq_len=256, tokens_per_step=16 * 256, model_flops_per_step=2e11,
                  peak_tflops=0.1, warmup_steps=1)


def throughput_line(step: int, samples: float, max_mem: float = 0.62) -> str:
    """A line as deepspeed/utils/timer.py's ThroughputTimer logs it through DeepSpeed's logger."""
    return (f"[2026-11-30 17:43:07,852] [INFO] [timer.py:264:stop] epoch=0/micro_step={2 * step}/"
            f"global_step={step}, RunningAvgSamplesPerSec={samples * 0.99}, "
            f"CurrSamplesPerSec={samples}, MemAllocated=0.61GB, MaxMemAllocated={max_mem}GB")


def progress_line(step: int) -> str:
    """engine._report_progress through log_dist: it carries no throughput."""
    return (f"[2026-11-30 17:43:07,852] [INFO] [logging.py:123:log_dist] [Rank 0] step={step}, "
            "skipped=0, lr=[0.0003], mom=[(0.9, 0.999)]")


def test_throughput_lines_become_a_result():
    lines = []
    for step, samples in ((3, 40.0), (4, 50.0), (5, 60.0)):
        lines += [progress_line(step), throughput_line(step, samples),
                  throughput_line(step, samples),  # a second rank logs the same step
                  f"step={step} loss={9 - step / 10:.4f}"]
    result = result_from_log(DeepSpeedTrainer(), "\n".join(lines), 0, MEASURE)
    assert result.status == "ok"
    assert result.tokens_per_s == pytest.approx(55.0 * 256)  # steps 4 and 5, after warm-up
    assert result.step_time_s == pytest.approx(16 * 256 / result.tokens_per_s)
    assert result.tflops_per_gpu == pytest.approx(2e11 / result.step_time_s / 2 / 1e12)
    assert result.mfu == pytest.approx(result.tflops_per_gpu / 0.1)
    assert result.peak_memory_gb == 0.62 and result.loss_first == 8.7 and result.loss_last == 8.5


@pytest.mark.parametrize("message", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.02 GiB is free.",
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1024.00 MiB. GPU 3 has a total "
    "capacity of 63.98 GiB of which 0 bytes is free.",
])
def test_out_of_memory_is_oom(message):
    log = "\n".join([throughput_line(3, 40.0), "[rank0]: Traceback (most recent call last):",
                     '[rank0]:   File "train.py", line 80, in main', f"[rank0]: {message}"])
    result = result_from_log(DeepSpeedTrainer(), log, 1, MEASURE)
    assert result.status == "oom" and "out of memory" in result.error


def test_a_crash_is_failed_with_its_reason():
    log = "\n".join(["[rank1]: Traceback (most recent call last):",
                     "[rank1]: AssertionError: Not sure how to proceed, we were given deepspeed "
                     "configs in the deepspeed arguments and deepspeed.initialize() function call"])
    result = result_from_log(DeepSpeedTrainer(), log, 1, MEASURE)
    assert result.status == "failed" and "Not sure how to proceed" in result.error


# DeepSpeedConfig asks torch.distributed for the rank and, through an mpu, for the data-parallel
# size; outside a process group it assumes one rank. So it is loaded in a one-rank gloo group in
# a child process, with an mpu giving the layout's data-parallel size.
LOAD_IN_DEEPSPEED = """
import json, sys
import deepspeed
from deepspeed.runtime.config import DeepSpeedConfig
deepspeed.init_distributed(dist_backend="gloo")

class DataParallel:
    def get_data_parallel_world_size(self):
        return int(sys.argv[2])

ds = DeepSpeedConfig(sys.argv[1], mpu=DataParallel())
print(json.dumps({"world_size": ds.world_size, "train_batch_size": ds.train_batch_size,
                  "micro": ds.train_micro_batch_size_per_gpu,
                  "accumulation": ds.gradient_accumulation_steps,
                  "zero_stage": ds.zero_optimization_stage, "optimizer": ds.optimizer_name}))
"""


def in_deepspeed(script: str, *args) -> dict:
    """Run `script` as rank 0 of one on DeepSpeed's CPU accelerator; its last line, as JSON."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0",
           "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_in_deepspeed(path, dp: int) -> dict:
    return in_deepspeed(LOAD_IN_DEEPSPEED, path, dp)


def test_trial_config_and_export_load_in_deepspeed(tmp_path, monkeypatch, runs_dir, cli):
    from orchestrator.export import export

    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "deepspeed.yaml")
    config = spec.search_space().candidates()[-1]
    from orchestrator.trial.folder import TrialFolder

    run = DeepSpeedTrainer().run(spec, config, "t0001", TrialFolder(tmp_path / "t0001"), steps=3)
    assert run.launcher == "torchrun" and run.program[0] == "train_gpt.py"
    assert run.program[-2:] == ["--deepspeed_config", str(tmp_path / "t0001" / "ds_config.json")]
    assert run.program[run.program.index("--steps") + 1] == "4"  # 3 timed + 1 warm-up
    for name, text in (("trial", run.files["ds_config.json"]),
                       ("export", export("deepspeed", spec, "t0001", config))):
        (tmp_path / f"{name}.json").write_text(text)
        ds = load_in_deepspeed(tmp_path / f"{name}.json", config.dp)
        assert ds == {"world_size": config.dp, "train_batch_size": config.global_batch_size(),
                      "micro": config.micro_batch_size, "accumulation": config.grad_accum_steps,
                      "zero_stage": config.zero_stage,
                      "optimizer": "adamw"}  # kept from the user's base config
    exported = json.loads(export("deepspeed", spec, "t0001", config))
    assert "deepspeed-gpt" in exported["_paratune"] and "t0001" in exported["_paratune"]
    assert "DeepSpeed 0.19.8" in exported["_paratune"]


def test_the_command_export_writes_a_config_deepspeed_loads(tmp_path):
    """`--format command` writes the layout's DeepSpeed config into $RUN_DIR before it runs the
    user's program; that file is one DeepSpeed's own DeepSpeedConfig takes."""
    from orchestrator.export import export

    spec = load_spec(EXAMPLES / "quickstart.yaml", [
        "trial.command=['true', --deepspeed_config, '{deepspeed_config}']",
        "space.zero_stage=[2]", "space.micro_batch_size=[2]"])
    config = spec.search_space().candidates()[0]
    script = tmp_path / "launch.sh"
    script.write_text(export("command", spec, "t0001", config))
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    ds = load_in_deepspeed(tmp_path / "paratune-run" / "ds_config.json", config.dp)
    assert (ds["world_size"], ds["train_batch_size"], ds["micro"], ds["accumulation"],
            ds["zero_stage"]) == (config.dp, config.global_batch_size(),
                                  config.micro_batch_size, config.grad_accum_steps, 2)


# DeepSpeed's engine on a config as a trial on GPUs gets it (bf16 on), one backward: the dtype
# it reduces gradients in without ZeRO, and whether ZeRO is on.
REDUCED_BY_DEEPSPEED = """
import json, sys
import torch
import deepspeed
deepspeed.init_distributed(dist_backend="gloo")
config = json.load(open(sys.argv[1]))
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
x = torch.randn(config["train_micro_batch_size_per_gpu"], 8, dtype=torch.bfloat16)
engine.backward(engine(x).float().pow(2).mean())
name = lambda dtype: str(dtype).removeprefix("torch.")
print(json.dumps({"communication": name(engine.communication_data_type),
                  "zero": engine.zero_optimization(),
                  "grads": sorted({name(p.grad.dtype) for p in engine.module.parameters()})}))
"""


def test_deepspeed_reduces_stage_0_gradients_in_bf16_as_the_cost_model_prices_them(
        tmp_path, monkeypatch):
    """Without ZeRO, DeepSpeed's engine keeps bf16 gradients and reduces them in bf16 (its
    `communication_data_type`), where PyTorch's DDP reduces float32: the DeepSpeed trainer's
    stage 0 is priced on DeepSpeed's engine, 2 bytes a parameter (test_costmodel_runtime.py)."""
    from orchestrator.campaign_spec.planning import cost_model_for
    from orchestrator.trainers.deepspeed.config import base_config, deepspeed_config

    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "deepspeed.yaml", ["cluster=a100-80g", "scale.gpus_per_node=1"])
    config = next(c for c in spec.search_space().candidates() if c.zero_stage == 0)
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(deepspeed_config(spec, config, base_config(spec))))
    seen = in_deepspeed(REDUCED_BY_DEEPSPEED, path)
    assert seen == {"communication": "bfloat16", "zero": False, "grads": ["bfloat16"]}
    engine = cost_model_for(spec).runtime.engine_of(config.zero_stage)
    assert config.factors(spec.gpus_per_node, engine).engine == "deepspeed"


# Five trials of two DeepSpeed ranks each, every one importing DeepSpeed and torch: about half
# a minute a trial on an idle machine, several times that on a busy one. The bounds are there
# for a hung trial only.
TRIAL_TIMEOUT_S = 1200


@pytest.mark.slow
@pytest.mark.timeout(5 * TRIAL_TIMEOUT_S + 600)
def test_real_deepspeed_campaign_on_cpu(runs_dir, cli, monkeypatch):
    """examples/deepspeed.yaml as written, with a trial timeout for a busy machine: DeepSpeed
    trains a small GPT at world size 2 under ZeRO 0-3; the largest micro-batch passes the
    memory limit and is recorded as oom."""
    monkeypatch.chdir(EXAMPLES.parent)
    code, _, err = cli("run", str(EXAMPLES / "deepspeed.yaml"),
                       "--set", f"trial.timeout_s={TRIAL_TIMEOUT_S}")
    assert code == 0, err
    results = {e["trial_id"]: (e["config"], e["result"])
               for e in journal_events(runs_dir / "deepspeed-gpt") if e["event"] == "finished"}
    ok = [r for _, r in results.values() if r["status"] == "ok"]
    oom = [(c, r) for c, r in results.values() if r["status"] == "oom"]
    assert len(ok) >= 4 and {c["zero_stage"] for c, r in results.values()
                             if r["status"] == "ok"} == {0, 1, 2, 3}
    assert all(r["tokens_per_s"] > 0 and r["mfu"] > 0 and r["loss_last"] for r in ok)
    assert len(oom) == 1 and oom[0][0]["micro_batch_size"] == 8
    assert "out of memory" in oom[0][1]["error"]


def test_amsp_factors_that_are_zero_3_load_in_deepspeed_as_stage_3(tmp_path):
    """A winner of an AMSP space whose factors shard everything over the whole mesh exports
    as ZeRO-3, and DeepSpeed's own DeepSpeedConfig reads stage 3 and the layout's batch."""
    from orchestrator.export import export
    from orchestrator.space import ShardingFactors
    from orchestrator.campaign_spec import spec_from_dict

    spec = spec_from_dict({"name": "a", "model": "tiny", "cluster": "a100-80g",
                           "scale": {"nodes": 2, "global_batch_size": 16},
                           "space": {"kind": "amsp"}})
    zero3 = ShardingFactors.named("zero3", 8, 2).as_tuple()
    config = next(c for c in spec.candidates() if c.sharding.as_tuple() == zero3)
    path = tmp_path / "ds_config.json"
    path.write_text(export("deepspeed", spec, "t0001", config))
    ds = load_in_deepspeed(path, config.dp)
    assert (ds["world_size"], ds["train_batch_size"], ds["zero_stage"]) == (
        config.dp, config.global_batch_size(), 3)
