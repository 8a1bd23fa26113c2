"""The built-in trial job under torchrun (gloo, 2 ranks): modes agree on the loss, faults are data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = {"num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
        "seq_len": 32}


def run_job(tmp_path: Path, nproc: int, env: dict | None = None, timeout: float = 300, **settings):
    config = {"model": TINY, "dp": nproc, "micro_batch_size": 2, "grad_accum_steps": 2,
              "steps": 3, "warmup_steps": 1, "peak_tflops": 0.1, **settings}
    name = "-".join(f"{k}{v}" for k, v in settings.items()) or "default"
    (tmp_path / f"{name}.json").write_text(json.dumps(config))
    result_file = tmp_path / f"{name}.result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
         "-m", "jobs.train", "--config", str(tmp_path / f"{name}.json"),
         "--result-file", str(result_file)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path), **(env or {})},
    )
    assert result_file.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(result_file.read_text()), proc


@pytest.mark.slow
def test_sharding_modes_match_single_process_loss(tmp_path):
    """Same seed and global batch, through the job's command line and result file: FSDP2
    (zero 2/3) gives the loss of one process, with full recompute on ZeRO-3 and on ZeRO-2 of the
    first block only (partial recompute). DDP and ZeRO-1, and every other mode, are compared
    step by step in test_modes.py."""
    single, _ = run_job(tmp_path, 1, dp=1, grad_accum_steps=4)
    assert single["status"] == "ok"
    recompute = {2: {"activation_checkpointing": "full", "recompute_num_layers": 1},
                 3: {"activation_checkpointing": "full"}}
    for zero, recompute_settings in recompute.items():
        result, _ = run_job(tmp_path, 2, zero_stage=zero, **recompute_settings)
        assert result["status"] == "ok", result
        assert result["loss_first"] == pytest.approx(single["loss_first"], rel=1e-5)
        assert result["loss_last"] == pytest.approx(single["loss_last"], rel=1e-4)
        assert result["world_size"] == 2 and result["tokens_per_s"] > 0 and result["mfu"] > 0
        assert len(result["step_times_s"]) == 3


@pytest.mark.slow
def test_injected_crash_is_reported_as_failed(tmp_path):
    result, proc = run_job(tmp_path, 2, env={"PARATUNE_INJECT_FAULT": "crash:zero_stage=2"}, zero_stage=2)
    assert proc.returncode != 0
    assert result["status"] == "failed" and "injected crash" in result["error"]


def test_unsupported_layout_is_infeasible_before_any_process_group(tmp_path):
    result, proc = run_job(tmp_path, 1, dp=1, tp=2)
    assert result["status"] == "infeasible" and "tp(2)" in result["error"]


def test_tp_that_does_not_split_the_mlp_is_infeasible_not_a_crash():
    """DTensor's colwise split of a 341-wide SwiGLU over 2 ranks fails in its first matmul;
    the job says so before any process group instead."""
    from jobs.config import JobConfig
    from jobs.model import ModelArgs
    from jobs.trainer import Infeasible, check_feasible

    config = JobConfig(model=ModelArgs(hidden=128, num_heads=2, ffn_hidden=341), tp=2)
    with pytest.raises(Infeasible, match=r"tp\(2\) must divide ffn_hidden\(341\)"):
        check_feasible(config, 2)


def test_gpu_check_script_runs_on_cpu_with_a_tiny_model(tmp_path):
    """The GPU check is run by hand on a lent GPU; here its code path is smoke-tested."""
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
         str(ROOT / "benchmarks" / "gpu_check.py"), "--tiny", "--steps", "2",
         "--modes", "plain,ac_full,fp8_tensorwise,moe", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["mode"] for r in rows] == ["plain", "ac_full", "fp8_tensorwise", "moe"]
    trained = [rows[0], rows[1], rows[3]]
    assert all(r["tokens_per_s"] > 0 and r["predicted_tokens_per_s"] > 0 for r in trained)
    assert rows[0]["loss_first"] == pytest.approx(rows[1]["loss_first"])
    assert "needs FP8 tensor cores" in rows[2]["infeasible"]  # a CPU has none
