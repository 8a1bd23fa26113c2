"""The trainer seam: the spec's choice of trainer and its section, the command trainer's user
regexes, and the result rules every adapter shares."""

from __future__ import annotations

import pytest
import yaml
from builders import quickstart_data
from conftest import EXAMPLES

from orchestrator.common.errors import SpecError
from orchestrator.campaign_spec import spec_from_dict
from orchestrator.trainers import CommandTrainer, Measure, trainer_for
from orchestrator.trainers.result_reading import result_from_log

MEASURE = Measure(world_size=2, seq_len=128, tokens_per_step=8 * 128, model_flops_per_step=1e10,
                  peak_tflops=1.0, warmup_steps=1)


@pytest.mark.parametrize("trial,name", [
    ({}, "builtin"), ({"command": ["train.py"]}, "command"),
    ({"trainer": "deepspeed", "deepspeed": {"script": "train.py"}}, "deepspeed"),
    ({"trainer": "torchtitan"}, "torchtitan"), ({"trainer": "megatron-lm"}, "megatron-lm"),
    ({"trainer": "megatron-deepspeed"}, "megatron-deepspeed"),
])
def test_each_trainer_has_its_adapter(trial, name):
    spec = spec_from_dict(quickstart_data(trial=trial) if name != "megatron-lm" else
                          {**quickstart_data(trial=trial), "space": {"zero_stage": [0, 1]}})
    assert spec.trial.trainer == name and trainer_for(spec).name == name


@pytest.mark.parametrize("trial,message", [
    ({"trainer": "deepspeed"}, "trial.deepspeed: required"),
    ({"torchtitan": {}}, "trial.torchtitan: a section for another trainer"),
    ({"trainer": "command"}, "trial.command: give a command exactly when"),
    ({"log_metrics": {"tokens_per_s": "tps: ([0-9.]+)"}}, "only the command trainer"),
    ({"command": ["t.py"], "log_metrics": {"tokens_per_s": "tps: [0-9.]+"}}, "needs a group"),
    ({"trainer": "caffe"}, "trial.trainer"),
])
def test_trainer_mistakes_are_one_line_errors(trial, message):
    with pytest.raises(SpecError) as err:
        spec_from_dict(quickstart_data(trial=trial))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_command_trainer_reads_the_users_regexes():
    trainer = CommandTrainer({"tokens_per_s": r"tps: ([\d,.]+)", "loss": r"loss ([\d.]+)",
                              "mfu_percent": r"mfu: ([\d.]+)%", "peak_memory_gb": r"mem ([\d.]+)"})
    log = "\n".join(f"step {i} loss {9 - i / 10} tps: {1000 * i:,} mfu: {10 * i}% mem {i / 2}"
                    for i in (1, 2, 3))
    result = result_from_log(trainer, log, 0, MEASURE)
    assert result.status == "ok"
    assert result.tokens_per_s == pytest.approx(2500.0)  # steps 2 and 3, after warm-up
    assert result.mfu == pytest.approx(0.25) and result.peak_memory_gb == 1.5
    assert result.step_time_s == pytest.approx(8 * 128 / 2500)
    assert (result.loss_first, result.loss_last) == (8.9, 8.7)


def test_no_metrics_or_a_nonzero_exit_is_failed_with_the_log_tail():
    trainer = CommandTrainer({"tokens_per_s": r"tps: ([\d.]+)"})
    empty = result_from_log(trainer, "starting\nValueError: bad shape", 0, MEASURE)
    assert empty.status == "failed" and "no step metrics" in empty.error and "bad shape" in empty.error
    crashed = result_from_log(trainer, "tps: 10\ntps: 11\nSegmentation fault", 139, MEASURE)
    assert crashed.status == "failed" and "exit code 139" in crashed.error


def test_a_missing_training_script_is_refused_before_the_run(tmp_path, runs_dir, cli):
    data = yaml.safe_load((EXAMPLES / "deepspeed.yaml").read_text())
    data["trial"]["workdir"] = str(EXAMPLES / "deepspeed")
    data["trial"]["deepspeed"]["script"] = "no_such_train.py"
    spec = tmp_path / "ds.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, _, err = cli("run", str(spec))
    assert code == 2 and "trial.deepspeed.script" in err and len(err.strip().splitlines()) == 1
    assert not (runs_dir / "deepspeed-gpt").exists()
