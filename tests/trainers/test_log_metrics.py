"""What a user gets back is for their program: a `command` trainer's `trial.log_metrics`
values are summarised by their median after warm-up, as the README says (a slow step does not
move it), a regex that matched no line is named in the trial's error, and an export is never
written over a file the campaign reads."""

from __future__ import annotations

import re
import shutil

from conftest import EXAMPLES

from orchestrator.trainers import Measure
from orchestrator.trainers.command import CommandTrainer
from orchestrator.trainers.result_reading import result_from_log

MEASURE = Measure(world_size=2, seq_len=256, tokens_per_step=16 * 256, model_flops_per_step=2e11,
                  peak_tflops=0.1, warmup_steps=1)
LOG = "\n".join(f"step {i} tok/s: {v}" for i, v in enumerate([900.0, 2654.6, 2277.8, 3719.6]))


def test_per_step_rates_are_summarised_by_their_median_after_warmup():
    trainer = CommandTrainer({"tokens_per_s": r"tok/s: ([\d.]+)"})
    result = result_from_log(trainer, LOG, 0, MEASURE)
    assert result.status == "ok"
    assert result.tokens_per_s == 2654.6  # the mean of the three would be 2884.0


def test_a_regex_that_matches_no_line_is_named():
    trainer = CommandTrainer({"tokens_per_s": r"tokens per second = ([\d.]+)"})
    result = result_from_log(trainer, LOG, 0, MEASURE)
    assert result.status == "failed"
    assert "trial.log_metrics.tokens_per_s" in result.error
    assert "tokens per second = " in result.error


def test_an_export_is_never_written_over_a_file_the_campaign_reads(tmp_path, runs_dir, cli):
    """`best --format deepspeed -o ds_config.json`, run in the trials' folder, would replace the
    campaign's own base config: refused in one line, the base config untouched."""
    workdir = tmp_path / "work"
    shutil.copytree(EXAMPLES / "deepspeed", workdir)
    base = (workdir / "ds_config.json").read_text()
    code, _, err = cli("run", str(EXAMPLES / "deepspeed.yaml"), "--set", "backend.kind=simulated",
                       "--set", f"trial.workdir={workdir}", "--set", "budget.max_trials=2")
    assert code == 0, err
    for target in (workdir / "ds_config.json", workdir / "train_gpt.py"):
        code, _, err = cli("best", "deepspeed-gpt", "--format", "deepspeed", "-o", str(target))
        assert code == 2 and "is a file the campaign reads" in err, err
    assert (workdir / "ds_config.json").read_text() == base
    code, _, err = cli("best", "deepspeed-gpt", "--format", "deepspeed", "-o",
                       str(workdir / "winner.json"))
    assert code == 0, err


def test_large_figures_read_as_plain_numbers(runs_dir, cli):
    """A Frontier run's throughput and GPU-hours in the live lines, the summary and `status`:
    thousands separators, never e-notation (5.317e+04)."""
    code, out, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), "--set", "budget.max_trials=3")
    assert code == 0, err
    code, status, _ = cli("status", "frontier-175b")
    assert code == 0
    assert re.search(r"tokens_per_s=\d{1,3}(,\d{3})+", err), err
    assert "e+0" not in out + err + status, out + err + status
