"""Megatron-Bridge: a layout renders as the recipe overrides run_recipe.py takes, the layouts
Bridge cannot run are refused with the reason, its training log reads back, and its launch
file is bash that keeps every spec value one quoted word."""
# ruff: noqa: UP032  (the log lines are built with Bridge's own str.format calls)

from __future__ import annotations

import shlex
import subprocess
from datetime import datetime

import pytest
from conftest import EXAMPLES
from test_export_safety import hostile, stand_ins

from orchestrator.common.errors import SpecError
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec, spec_from_dict
from orchestrator.trainers.megatron_bridge.adapter import MegatronBridgeTrainer
from orchestrator.trainers.megatron_bridge.export import export_megatron_bridge
from orchestrator.trainers.megatron_bridge.runtime import bridge_runtime
from orchestrator.trial.folder import TrialFolder

SECTION = {"script": "scripts/training/run_recipe.py", "recipe": "llama31_8b_pretrain_config",
           "overrides": ["tokenizer.tokenizer_type=NullTokenizer", "optimizer.lr=3e-4"]}
# World 16 = 2 nodes x 8; global batch 128.
INTERLEAVED = {"tp": 2, "pp": 2, "cp": 2, "dp": 2, "zero_stage": 1, "micro_batch_size": 1,
               "grad_accum_steps": 64, "activation_checkpointing": "full",
               "recompute_num_layers": 2, "sequence_parallel": True,
               "pp_schedule": "interleaved", "virtual_stages": 2, "cp_comm_type": "allgather",
               "precision": "fp8-tensorwise", "overlap_comm": True, "bucket_size": 100_000_000}
PLAIN = {"tp": 4, "pp": 1, "dp": 4, "zero_stage": 0, "micro_batch_size": 2,
         "grad_accum_steps": 16, "activation_checkpointing": "selective"}


def bridge_spec(cluster="h100-80g", section=None, **space):
    return spec_from_dict({
        "name": "bridge", "model": "llama-3.1-8b", "cluster": cluster,
        "scale": {"nodes": 2, "gpus_per_node": 8, "global_batch_size": 128},
        "space": {"tp": [1, 2, 4], "pp": [1, 2], "zero_stage": [0, 1], **space},
        "trial": {"trainer": "megatron-bridge", "megatron_bridge": section or SECTION},
        "tracking": {"enabled": False}})


def program(spec, fields, tmp_path, steps=5):
    run = MegatronBridgeTrainer().run(spec, Layout(**fields), "t0001",
                                      TrialFolder(tmp_path / "t0001"), steps)
    return run


def as_dict(words):
    return dict(w.split("=", 1) for w in words if "=" in w)


def test_an_interleaved_fp8_layout_lands_in_the_recipe_overrides(tmp_path):
    spec = bridge_spec()
    run = program(spec, INTERLEAVED, tmp_path)
    assert run.launcher == "torchrun"
    assert run.program[:7] == ["scripts/training/run_recipe.py", "--recipe",
                               "llama31_8b_pretrain_config", "--mode", "pretrain",
                               "--dataset", "mock"]
    got = as_dict(run.program[7:])
    assert got | {
        "model.tensor_model_parallel_size": "2", "model.pipeline_model_parallel_size": "2",
        "model.virtual_pipeline_model_parallel_size": "2", "model.context_parallel_size": "2",
        "model.cp_comm_type": "all_gather", "model.sequence_parallel": "true",
        "train.micro_batch_size": "1", "train.global_batch_size": "128",
        "model.recompute_granularity": "full", "model.recompute_method": "block",
        "model.recompute_num_layers": "2",
        "optimizer.use_distributed_optimizer": "true", "ddp.use_distributed_optimizer": "true",
        "ddp.overlap_grad_reduce": "true", "ddp.overlap_param_gather": "true",
        "optimizer.overlap_param_gather": "true", "ddp.bucket_size": "100000000",
        "mixed_precision": "bf16_with_fp8_current_scaling_mixed",
        "model.num_layers": "32", "model.hidden_size": "4096", "model.ffn_hidden_size": "14336",
        "model.num_attention_heads": "32", "model.num_query_groups": "8",
        "dataset.seq_length": str(spec.model.seq_len),
        "train.train_iters": str(5 + spec.trial.warmup_steps), "logger.log_interval": "1",
        "logger.log_throughput": "true", "checkpoint.save": "null", "checkpoint.load": "null",
    } == got
    # The user's overrides come first, so the layout's win wherever Hydra sees both.
    assert run.program.index("optimizer.lr=3e-4") < run.program.index("train.micro_batch_size=1")
    assert run.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_zero_stage_0_turns_the_distributed_optimizer_off_in_both_configs(tmp_path):
    got = as_dict(program(bridge_spec(), PLAIN, tmp_path).program)
    # Bridge turns it on in both where either has it, and its recipes have it on in both.
    assert got["optimizer.use_distributed_optimizer"] == "false"
    assert got["ddp.use_distributed_optimizer"] == "false"
    assert got["ddp.overlap_param_gather"] == got["optimizer.overlap_param_gather"] == "false"
    assert "ddp.overlap_grad_reduce" not in got  # overlap_comm null: the recipe's own
    assert got["model.recompute_granularity"] == "selective"
    assert got["model.recompute_method"] == got["model.recompute_num_layers"] == "null"
    assert got["model.virtual_pipeline_model_parallel_size"] == "null"
    assert got["mixed_precision"] == "bf16_mixed"
    assert got["train.micro_batch_size"] == "2" and got["model.tensor_model_parallel_size"] == "4"


@pytest.mark.parametrize("change,field", [
    ({"zero_stage": 3}, "zero_stage 3"), ({"pp_schedule": "gpipe"}, "pp_schedule gpipe"),
    ({"precision": "fp8-rowwise"}, "precision fp8-rowwise")])
def test_a_layout_bridge_cannot_run_is_refused_with_its_source(change, field, tmp_path):
    fields = {**PLAIN, "pp": 2, "dp": 2, **change}
    with pytest.raises(SpecError) as error:
        program(bridge_spec(), fields, tmp_path)
    assert f"megatron-bridge: {field}:" in str(error.value)
    assert "megatron/" in str(error.value)  # the source file it was read in


def test_spec_level_refusals_name_the_field():
    trainer = MegatronBridgeTrainer()
    with pytest.raises(SpecError) as error:  # the spec asks the trainer as it is read
        bridge_spec(zero_stage=[0, 1, 2])
    [line] = str(error.value).splitlines()
    assert "space.zero_stage: megatron-bridge does not run 2: ZeRO-1 is" in line
    assert trainer.check_spec(bridge_spec()) == []
    cpu = spec_from_dict({"name": "c", "model": "tiny", "cluster": "cpu-local",
                          "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
                          "space": {"zero_stage": [0]}, "trial": {"trainer": "megatron-bridge"}},
                         trainer_rules=False)
    [line] = trainer.check_spec(cpu)
    assert line.startswith("cluster.device: cpu: megatron-bridge: Bridge's training_log")


def test_a_user_override_of_a_layout_key_is_one_clear_error():
    with pytest.raises(SpecError) as error:
        bridge_spec(section={**SECTION, "overrides": ["model.tensor_model_parallel_size=8"]})
    assert "model.tensor_model_parallel_size: ParaTune sets it from space.tp" in str(error.value)
    with pytest.raises(SpecError) as error:
        bridge_spec(section={**SECTION, "overrides": ["--lr 1e-4"]})
    assert "give KEY=VALUE" in str(error.value)


def test_the_runtime_overlaps_ddp_unless_the_overrides_turn_it_off():
    assert bridge_runtime().ddp_overlaps  # recipes/common.py: overlap_grad_reduce=True
    assert not bridge_runtime(["ddp.overlap_grad_reduce=false"]).ddp_overlaps
    assert bridge_runtime(["ddp.overlap_grad_reduce=false", "ddp.overlap_grad_reduce=true"]
                          ).ddp_overlaps  # Hydra applies them in order
    assert bridge_runtime(["model.moe_token_dispatcher_type=flex"]).dispatch_per_node


def bridge_log_lines() -> str:
    """Two iterations and the memory report, built with training_log's own format calls
    (megatron-bridge 0.6.2, megatron/bridge/training/utils/train_utils.py)."""
    lines = []
    for iteration, elapsed, per_gpu_tf, loss in ((1, 2.5, 400.0, 11.5), (2, 1.25, 420.0, 10.25)):
        log_string = f" [{datetime(2026, 12, 7, 6).strftime('%Y-%m-%d %H:%M:%S')}]"
        log_string += " iteration {:8d}/{:8d} |".format(iteration, 7)
        log_string += " consumed samples: {:12d} |".format(128 * iteration)
        log_string += " elapsed time per iteration (ms): {:.1f} |".format(elapsed * 1000.0)
        log_string += f" throughput per GPU (TFLOP/s/GPU): {per_gpu_tf:.1f} |"
        log_string += f" learning rate: {3e-4:.6E} |"
        log_string += f" global batch size: {128:5d} |"
        log_string += " {}: {:.6E} |".format("lm loss", loss)
        log_string += f" loss scale: {1.0:.1f} |"
        log_string += " number of skipped iterations: {:3d} |".format(0)
        log_string += " number of nan iterations: {:3d} |".format(0)
        lines.append(log_string)
        if iteration == 1:
            memory_string = f"(after {iteration} iterations) memory (GB)"
            for metric, value in {"mem-allocated-gigabytes": 20.5,
                                  "mem-max-allocated-gigabytes": 61.234,
                                  "mem-max-reserved-gigabytes": 70.0}.items():
                memory_string += f" | {metric}: {value}"
            lines.append("[Rank {}] {}".format(0, memory_string))
    return "\n".join(lines) + "\n"


def test_the_training_log_reads_back():
    metrics = MegatronBridgeTrainer().parse_log(bridge_log_lines())
    assert metrics.step_times_s == [2.5, 1.25]
    assert metrics.tflops_per_gpu == [400.0, 420.0]
    assert metrics.losses == [11.5, 10.25]
    assert metrics.peak_memory_gb == pytest.approx(61.234)  # report_memory's GB: bytes / 1e9


def hostile_spec(marker, workdir):
    bad = hostile(marker)
    return spec_from_dict({
        "name": "x", "model": {"preset": "llama-3.1-8b", "name": bad[0]},
        "cluster": {"preset": "h100-80g", "name": bad[1]},
        "scale": {"nodes": 1, "gpus_per_node": 8, "global_batch_size": 64},
        "space": {"tp": [2], "pp": [1], "zero_stage": [1]},
        "trial": {"trainer": "megatron-bridge", "workdir": str(workdir),
                  "env": {f"V{i}": v for i, v in enumerate(bad)},
                  "megatron_bridge": {"script": bad[2],
                                      "overrides": [f"tokenizer.x={v}" for v in bad]}},
        "tracking": {"enabled": False}})


def test_the_launch_file_is_bash_that_keeps_hostile_values_data(tmp_path):
    marker = tmp_path / "INJECTED"
    spec = hostile_spec(marker, tmp_path)
    config = spec.candidates()[0]
    path = tmp_path / "launch.sh"
    path.write_text(export_megatron_bridge(spec, "t0001", config))
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    run = subprocess.run(["bash", str(path)], env=stand_ins(tmp_path), capture_output=True,
                         text=True, cwd=tmp_path, timeout=30)
    assert run.returncode == 0, run.stderr
    assert not marker.exists()
    argv = (tmp_path / "argv").read_text().split("\n")[:-1]
    bad = hostile(marker)
    start = argv.index(bad[2])  # the script, then the recipe's options and the overrides
    assert argv[start:start + 7] == [bad[2], "--recipe", "llama3_8b_pretrain_config", "--mode",
                                     "pretrain", "--dataset", "mock"]
    assert argv[start + 7:start + 7 + len(bad)] == [f"tokenizer.x={v}" for v in bad]
    shown = as_dict(argv[start + 7:])
    assert shown["model.tensor_model_parallel_size"] == "2"
    # What only a trial needs stays out of a production run's file, named in a comment.
    assert "train.train_iters" not in shown and "logger.log_interval" not in shown
    assert "checkpoint.save" not in shown
    assert "logger.log_interval=1" in path.read_text().split("set -euo")[0]


def test_the_example_plans_and_its_winner_exports(cli, tmp_path):
    code, out, err = cli("plan", str(EXAMPLES / "megatron-bridge.yaml"))
    assert code == 0, err
    assert "megatron-bridge-llama31-8b" in out
    spec = load_spec(EXAMPLES / "megatron-bridge.yaml")
    best = spec.candidates()[0]
    text = export_megatron_bridge(spec, "t0001", best)
    path = tmp_path / "launch.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    overrides = shlex.split(text.split("OVERRIDES=(", 1)[1].split(")\n", 1)[0])
    assert f"model.tensor_model_parallel_size={best.tp}" in overrides
    assert "tokenizer.tokenizer_type=NullTokenizer" in overrides
