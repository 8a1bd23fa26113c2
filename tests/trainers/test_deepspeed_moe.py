"""A real DeepSpeed mixture-of-experts campaign on CPU: examples/deepspeed-moe.yaml trains a
small GPT whose MLPs are DeepSpeed's own MoE layer at world size 2, with expert parallelism 1
and 2 reaching the script through `{ep}`, and each result is read from DeepSpeed's own
throughput lines in the trial's log (its ThroughputTimer logs from global step 3 on)."""

from __future__ import annotations

import re
import statistics

import pytest
from conftest import EXAMPLES, journal_events

from orchestrator.campaign_spec import load_spec
from orchestrator.trainers import DeepSpeedTrainer
from orchestrator.trainers.deepspeed import THROUGHPUT
from orchestrator.trial.folder import TrialFolder

import deepspeed  # noqa: E402, F401  (the test extra installs it: a broken install fails here)

# Two trials of two DeepSpeed ranks each: about half a minute a trial on an idle machine.
TRIAL_TIMEOUT_S = 900
GROUPS = re.compile(r"Creating expert and data parallel groups with size (\d+)")


def test_ep_reaches_the_script_and_deepspeed_runs_on_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "deepspeed-moe.yaml")
    configs = spec.candidates()
    assert [c.ep for c in configs] == [1, 2]
    for config in configs:
        run = DeepSpeedTrainer().run(spec, config, "t0001", TrialFolder(tmp_path / "t"), steps=3)
        assert run.program[0] == "train_moe.py" and run.env == {"DS_ACCELERATOR": "cpu"}
        assert run.program[run.program.index("--ep") + 1] == str(config.ep)


@pytest.mark.slow
@pytest.mark.timeout(2 * TRIAL_TIMEOUT_S + 600)
def test_real_deepspeed_moe_campaign_on_cpu(runs_dir, cli, monkeypatch):
    """Both layouts train, DeepSpeed built its expert groups of the layout's ep, and each
    result's throughput is DeepSpeed's CurrSamplesPerSec after the warm-up step."""
    monkeypatch.chdir(EXAMPLES.parent)
    code, _, err = cli("run", str(EXAMPLES / "deepspeed-moe.yaml"),
                       "--set", f"trial.timeout_s={TRIAL_TIMEOUT_S}")
    assert code == 0, err
    campaign = runs_dir / "deepspeed-moe"
    finished = {e["config"]["ep"]: (e["trial_id"], e["result"])
                for e in journal_events(campaign) if e["event"] == "finished"}
    assert sorted(finished) == [1, 2]
    for ep, (trial_id, result) in finished.items():
        assert result["status"] == "ok", result["error"]
        log = (campaign / "trials" / trial_id / "trial.log").read_text()
        assert set(GROUPS.findall(log)) == {str(ep)}
        samples = {int(m["step"]): float(m["curr"]) for m in THROUGHPUT.finditer(log)}
        logged = [samples[step] for step in sorted(samples)]  # from global step 3 on
        assert len(logged) >= 2
        timed = logged[1:]  # less the one warm-up step's line
        assert result["tokens_per_s"] == pytest.approx(statistics.median(timed) * 128)
        assert result["peak_memory_gb"] > 0 and result["loss_last"] > 0
