"""The torchtitan 0.3.0 trainer: trial arguments and the launch file, read back by torchtitan's own
config manager (torchtitan/config/manager.py), and its per-step log read into results.

No real campaign runs here: torchtitan 0.3.0 does not train on a CPU-only machine. Its
`tools/utils.py:get_device_info` falls back to `cuda`, and a 2-rank gloo run of
`--module llama3 --config llama3_debugmodel` under torchrun stops in
`torchtitan/trainer.py:301` (`device_module.set_device(self.device)`) with
`AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'` (torch 2.13.0+cpu).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
from builders import make_spec
from trainer_checks import torchtitan_registry_configs

from orchestrator.common.errors import SpecError
from orchestrator.trainers.torchtitan.export import export_torchtitan
from orchestrator.trainers import TorchtitanTrainer, trainer_for
from orchestrator.trainers.base import Measure
from orchestrator.trainers.result_reading import result_from_log
from orchestrator.trial.folder import TrialFolder


def _spec(**space):
    """llama-7b on two nodes run by torchtitan as llama3_8b, with overrides that the layout
    and the trial's own steps and folder must win over."""
    return make_spec(
        name="titan", scale={"global_batch_size": 32}, trainer="torchtitan",
        space={"activation_checkpointing": ["selective"], **space},
        trial={"steps": 5, "warmup_steps": 2,
               "torchtitan": {"module": "llama3", "config": "llama3_8b", "overrides": [
                   "--training.steps=99", "--dump-folder=./runs/{trial_id}",
                   "--training.local-batch-size=64"]}})


def _only(spec):
    candidates = spec.search_space().candidates()
    assert len(candidates) == 1, [c.key() for c in candidates]
    return candidates[0]


def _trial_args(spec, config, tmp_path):
    run = TorchtitanTrainer().run(spec, config, "t0007", TrialFolder.of(tmp_path, "t0007"), 5)
    assert run.launcher == "torchrun" and run.program[:2] == ["-m", "torchtitan.train"]
    return run.program[2:]


def _export_args(spec, config, tmp_path):
    text = export_torchtitan(spec, "t0007", config)
    assert "torchtitan 0.3.0" in text and "'titan'" in text and "t0007" in text
    script = tmp_path / "launch.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    return shlex.split(re.search(r"^ARGS=\(\n(.*?)\n\)$", text, re.MULTILINE | re.DOTALL).group(1))


@pytest.fixture(scope="module")
def parse():
    """torchtitan's own parser, with the environment its import changes put back."""
    saved = dict(os.environ)
    try:
        from torchtitan.config import ConfigManager
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return lambda args: ConfigManager().parse_args(list(args))


def _derived(cfg):
    """torchtitan/trainer.py (Trainer.__init__): accumulation and pipeline micro-batches."""
    dp = cfg.parallelism.data_parallel_replicate_degree * cfg.parallelism.data_parallel_shard_degree
    local = cfg.training.local_batch_size
    accumulation = cfg.training.global_batch_size // (local * dp)
    assert cfg.training.global_batch_size == accumulation * local * dp
    micro = (local // cfg.parallelism.pipeline_parallel_microbatch_size
             if cfg.parallelism.pipeline_parallel_degree > 1 else 1)
    return accumulation, micro


def test_tp2_pp2_layout_is_what_torchtitan_parses(parse, tmp_path):
    spec = _spec(tp=[2], pp=[2], zero_stage=[3], micro_batch_size=[2])
    config = _only(spec)
    assert (config.dp, config.grad_accum_steps) == (4, 4)
    trial, export = _trial_args(spec, config, tmp_path), _export_args(spec, config, tmp_path)
    for args in (trial, export):
        cfg = parse(args)
        p, t = cfg.parallelism, cfg.training
        assert (p.tensor_parallel_degree, p.pipeline_parallel_degree) == (2, 2)
        assert (p.data_parallel_shard_degree, p.data_parallel_replicate_degree) == (4, 1)
        assert p.fsdp_reshard_after_forward == "always"
        assert p.pipeline_parallel_schedule == "1F1B"
        assert p.pipeline_parallel_microbatch_size == config.micro_batch_size
        assert t.global_batch_size == config.global_batch_size() == 32
        assert t.seq_len == spec.model.seq_len
        assert type(cfg.activation_checkpoint).__qualname__.startswith("SelectiveAC")
        # ParaTune's accumulation steps are the pipeline's micro-batches (as in jobs/): one
        # torchtitan accumulation step of grad_accum_steps micro-batches of micro_batch_size.
        accumulation, micro = _derived(cfg)
        assert accumulation * micro == config.grad_accum_steps
        assert t.local_batch_size // micro == config.micro_batch_size
    # The trial runs warm-up + timed steps in its own folder; the launch file keeps the user's.
    trial_cfg, export_cfg = parse(trial), parse(export)
    assert trial_cfg.training.steps == 7 and trial_cfg.dump_folder.endswith("t0007/outputs")
    assert export_cfg.training.steps == 99 and export_cfg.dump_folder == "./runs/t0007"


def test_zero2_without_pp_is_fsdp_never_resharding(parse, tmp_path):
    spec = _spec(tp=[2], pp=[1], zero_stage=[2], micro_batch_size=[1])
    config = _only(spec)
    assert (config.dp, config.grad_accum_steps) == (8, 4)
    cfg = parse(_trial_args(spec, config, tmp_path))
    assert cfg.parallelism.fsdp_reshard_after_forward == "never"
    assert cfg.parallelism.data_parallel_shard_degree == 8
    assert cfg.training.local_batch_size == config.micro_batch_size  # the micro-batch
    assert _derived(cfg) == (config.grad_accum_steps, 1)  # torchtitan derives our accumulation
    assert cfg.metrics.log_freq == 1


def test_zero0_and_1_replicate_and_layout_flags_win(parse, tmp_path):
    for stage in (0, 1):
        spec = _spec(tp=[1], pp=[1], zero_stage=[stage], micro_batch_size=[2], compile=[True],
                     activation_checkpointing=["none"])
        config = _only(spec)
        args = _trial_args(spec, config, tmp_path)
        assert args[-1] == "activation-checkpoint:none"
        cfg = parse(args)
        p = cfg.parallelism
        assert (p.data_parallel_shard_degree, p.data_parallel_replicate_degree) == (1, 16)
        assert cfg.training.local_batch_size == 2  # the layout's, after the user's 64
        assert cfg.compile.enable and cfg.activation_checkpoint is None


def test_a_campaign_of_another_trainer_exports_with_torchtitans_defaults(tmp_path):
    spec = make_spec(name="quick", model="tiny", cluster="cpu-local",
                     scale={"nodes": 1, "global_batch_size": 4},
                     space={"tp": [1], "pp": [1], "zero_stage": [3], "micro_batch_size": [2],
                            "activation_checkpointing": ["full"]})
    config = _only(spec)
    text = export_torchtitan(spec, "t0001", config)
    assert "--module llama3 --config llama3_debugmodel" in " ".join(shlex.split(text, comments=True))
    assert "--parallelism.tensor-parallel-degree=1" in text and "activation-checkpoint:full" in text


def test_overrides_may_not_set_what_the_layout_sets():
    with pytest.raises(SpecError, match="activation checkpointing from the layout"):
        make_spec(model="tiny", cluster="cpu-local", scale={"nodes": 1, "global_batch_size": 4},
                  trainer="torchtitan",
                  trial={"torchtitan": {"overrides": ["activation-checkpoint:full"]}})


def test_amsp_factors_torchtitan_cannot_run_are_a_spec_error(tmp_path):
    spec = _spec(tp=[1], pp=[1], zero_stage=[3], micro_batch_size=[1])
    config = _only(spec)
    odd = type(config)(**{**config.to_dict(), "sharding": {
        "s0p": 1, "s1p": 1, "s0g": 1, "s1g": 1, "s0os": 8, "s1os": 1}})
    with pytest.raises(SpecError, match="torchtitan cannot shard"):
        _trial_args(spec, odd, tmp_path)


# The metrics line of torchtitan/components/metrics.py (MetricsProcessor.log), with the colours
# of torchtitan/tools/utils.py (Color) and the prefix of torchtitan/tools/logging.py.
RED, GREEN, BLUE, CYAN, MAGENTA, RESET = ("\033[31m", "\033[32m", "\033[34m", "\033[36m",
                                          "\033[35m", "\033[39m")
ORANGE, TURQUOISE = "\033[38;2;180;60;0m", "\033[38;2;54;234;195m"


def _line(step, loss, gib, tps, tflops, mfu):
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    return (f"[titan] 2026-11-30 17:42:53,128 - root - INFO - "
            f"{RED}step: {step:2}  {GREEN}loss: {loss:8.5f}  {ORANGE}grad_norm: {1.5:7.4f}  "
            f"{TURQUOISE}memory: {gib:5.2f}GiB({gib / 80 * 100:.2f}%)  "
            f"{BLUE}tps: {round(tps):,}  {CYAN}tflops: {tflops:,.2f}  "
            f"{MAGENTA}mfu: {mfu_str}{RESET}")


def _log(steps=5, ranks=2):
    lines = ["[titan] 2026-11-30 17:42:53,128 - root - INFO - torchtitan version: 0.3.0"]
    for step in range(1, steps + 1):
        for rank in range(ranks):  # the last pipeline stage has the loss, the others log -1
            loss = 10.0 - step if rank == ranks - 1 else -1.0
            lines.append(_line(step, loss, 30.0 + rank, 1000.0 * step + rank * 100,
                               400.0 + step, 40.0 + step))
    return "\n".join(lines)


MEASURE = Measure(world_size=2, seq_len=8192, tokens_per_step=2 * 8192, model_flops_per_step=1e15,
                  peak_tflops=989.0, warmup_steps=2)


def test_log_lines_with_colours_give_every_metric():
    m = TorchtitanTrainer().parse_log(_log())
    assert m.steps == 5
    assert m.tokens_per_s_per_gpu == [1050.0, 2050.0, 3050.0, 4050.0, 5050.0]  # rank mean
    assert m.tflops_per_gpu == [401.0, 402.0, 403.0, 404.0, 405.0]
    assert m.mfu == pytest.approx([0.41, 0.42, 0.43, 0.44, 0.45])  # fractions
    assert m.losses == [9.0, 8.0, 7.0, 6.0, 5.0]
    assert m.peak_memory_gb == pytest.approx(31.0 * 2**30 / 1e9)  # GiB -> GB, max over ranks


def test_log_without_colours_and_without_mfu():
    line = _line(3, 2.5, 1.23, 12345, 12.34, None)
    m = TorchtitanTrainer().parse_log(re.sub(r"\x1b\[[0-9;]*m", "", line))
    assert m.tokens_per_s_per_gpu == [12345.0] and m.mfu == [] and m.losses == [2.5]


def test_result_drops_the_warmup_steps():
    result = result_from_log(TorchtitanTrainer(), _log(), 0, MEASURE)
    assert result.status == "ok"
    assert result.tokens_per_s_per_gpu == pytest.approx(4050.0)  # steps 3-5
    assert result.tokens_per_s == pytest.approx(8100.0)
    assert result.mfu == pytest.approx(0.44) and result.tflops_per_gpu == pytest.approx(404.0)
    assert result.step_time_s == pytest.approx(2 * 8192 / 8100.0)
    assert (result.loss_first, result.loss_last) == (9.0, 5.0)  # the first logged, the last


@pytest.mark.parametrize("text", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 79.10 GiB of which 1.02 GiB is free."),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
     "capacity of 63.98 GiB of which 0 bytes is free."),
])
def test_out_of_memory_is_oom(text):
    log = _log(steps=2) + "\n[rank0]: Traceback (most recent call last):\n[rank0]: " + text
    result = result_from_log(TorchtitanTrainer(), log, 1, MEASURE)
    assert result.status == "oom" and "out of memory" in result.error


def test_a_crash_is_failed_with_its_cause():
    log = "\n".join([
        "[titan] 2026-11-30 17:42:53,128 - root - INFO - torchtitan version: 0.3.0",
        "Traceback (most recent call last):",
        '  File ".../torchtitan/trainer.py", line 301, in __init__',
        "    device_module.set_device(self.device)",
        "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ])
    result = result_from_log(trainer_for(_spec(tp=[1])), log, 1, MEASURE)
    assert result.status == "failed"
    assert "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'" in result.error


# --- mixture of experts ------------------------------------------------------------------

def _moe_spec(config="qwen3_30b_a3b", module="qwen3", **space):
    return make_spec(
        name="titan", model="qwen3-30b-a3b", scale={"nodes": 1, "global_batch_size": 32},
        space={"tp": [1, 2], "pp": [1], "ep": [1, 2, 4, 8], "zero_stage": [1, 3],
               "micro_batch_size": [1], "activation_checkpointing": ["full"], **space},
        trainer="torchtitan", trial={"torchtitan": {"module": module, "config": config}})


def test_expert_parallelism_is_what_torchtitan_parses(parse, tmp_path):
    """Every kept layout's expert degree parses into torchtitan's ParallelismConfig, borrows
    ranks torchtitan's mesh has (efsdp = dp_shard x cp x tp / ep, a whole number), and turns
    CUDA graphs off, which Trainer.Config refuses with the all-to-all token dispatcher."""
    spec = _moe_spec()
    kept = spec.candidates()
    assert {c.ep for c in kept} == {1, 2, 4, 8}
    assert all(c.zero_stage == 3 or c.ep <= c.tp for c in kept)  # replicas lend no ranks
    for config in (c for c in kept if c.ep > 1):
        cfg = parse(_trial_args(spec, config, tmp_path))
        p = cfg.parallelism
        assert p.expert_parallel_degree == config.ep
        assert (p.data_parallel_shard_degree * p.context_parallel_degree
                * p.tensor_parallel_degree) % p.expert_parallel_degree == 0
        assert cfg.training.disable_cuda_graphs
    exported = parse(_export_args(spec, kept[-1], tmp_path))
    assert exported.parallelism.expert_parallel_degree == kept[-1].ep


def test_torchtitan_moe_refusals_say_why():
    with pytest.raises(SpecError, match="trial.torchtitan.config: torchtitan's llama3 "
                                        "llama3_8b is a dense model"):
        _moe_spec("llama3_8b", "llama3")
    with pytest.raises(SpecError, match="space.etp: torchtitan has no expert tensor parallelism"):
        _moe_spec(etp=[None, 2])
    with pytest.raises(SpecError, match=r"can run: torchtitan: ep\(8\) must divide dp_shard\(1\)"):
        _moe_spec(tp=[1], ep=[8], zero_stage=[1]).candidates()


def test_the_moe_config_table_is_torchtitans_registry():
    """TORCHTITAN_MOE_CONFIGS against torchtitan 0.3.0's own registry functions: a config is an
    MoE one exactly when its model has experts (configs that need packages this machine lacks,
    torchao and the like, are passed over)."""
    from orchestrator.trainers.torchtitan.configs import torchtitan_is_moe

    checked = 0
    for module, name, config in torchtitan_registry_configs():
        assert torchtitan_is_moe(module, name) == ("num_experts" in repr(config.model_spec))
        checked += 1
    assert checked >= 25


def test_context_parallelism_is_what_torchtitan_parses(parse, tmp_path):
    spec = _spec(tp=[2], pp=[1], cp=[2], zero_stage=[3], micro_batch_size=[1])
    assert spec.space.cp_comm_type == ["allgather"]  # the one comm type torchtitan runs
    config = _only(spec)
    assert (config.cp, config.dp) == (2, 4)
    for args in (_trial_args(spec, config, tmp_path), _export_args(spec, config, tmp_path)):
        p = parse(args).parallelism
        assert (p.context_parallel_degree, p.context_parallel_load_balancer) == (2, "headtail")
        assert (p.tensor_parallel_degree, p.data_parallel_shard_degree) == (2, 4)
