"""Every output is for the program the campaign measured: for a DeepSpeed, a `command`, a
Megatron-LM and a torchtitan campaign (rehearsed on the simulated backend), the report's launch
section and the `torchrun` and `sbatch` exports run that campaign's own program, mark the
trial-length settings, and say so for a format of another program."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import EXAMPLES

from dashboards.report_data import report_data
from orchestrator.export import export, unmeasured_note
from orchestrator.record.campaign import CampaignView
from orchestrator.scheduling.controller import Controller
from orchestrator.campaign_spec import load_spec

# example, what its program is called in a launch line, the words that carry a trial's length,
# the logging a trial adds only to be measured
PROGRAMS = [
    ("quickstart.yaml", "-m jobs.train", "--steps 6", None),
    ("deepspeed.yaml", "train_gpt.py", "--steps 4", None),
    ("command-ddp.yaml", "train_ddp.py", "--steps 5", None),
    ("megatron-lm.yaml", "pretrain_gpt.py", "--train-iters=",
     "--log-interval=1 --log-throughput"),
    ("torchtitan.yaml", "torchtitan.train", "--training.steps=", "--metrics.log-freq=1"),
]


@pytest.mark.parametrize("example,program,length,logging", PROGRAMS)
def test_launch_files_and_report_run_the_measured_program(example, program, length, logging,
                                                          runs_dir, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / example, ["backend.kind=simulated", "budget.max_trials=3",
                                          "tracking.enabled=false"])
    Controller(spec).run()
    view = CampaignView(spec)
    best = view.best(view.records())
    assert best is not None
    report = report_data(view).launch_command
    for text in (report, *(export(fmt, spec, best.trial_id, best.config,
                                  view.trial_dir(best.trial_id)) for fmt in ("torchrun", "sbatch"))):
        assert program in text and (program == "-m jobs.train" or "jobs.train" not in text), text
        assert f"# Trial length: {length}" in text, text
        assert (f"# Trial logging: {logging} logged every step" in text) == bool(logging), text
    for fmt in ("torchrun", "sbatch"):
        assert unmeasured_note(fmt, spec) is None
    other = "megatron-lm" if spec.trial.trainer == "builtin" else "yaml"
    assert "another program" in unmeasured_note(other, spec)
    sbatch = export("sbatch", spec, best.trial_id, best.config)
    assert "##SBATCH --time=" in sbatch.splitlines()  # a simulated campaign's trials had none


def test_the_deepspeed_launch_file_carries_the_winners_config_without_trial_only_keys(
        runs_dir, monkeypatch):
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "deepspeed.yaml", ["backend.kind=simulated",
                                                   "budget.max_trials=1"])
    config = spec.candidates()[0]
    script = export("torchrun", spec, "t0001", config)
    quoted = script.split("printf '%s\\n' \\\n", 1)[1].split('> "$RUN_DIR"/ds_config.json', 1)[0]
    written = "\n".join(shlex.split(quoted.replace("\\\n", " ")))  # a quoted word a line
    assert '"train_batch_size": 16' in written and "steps_per_print" not in written
    assert "log_level" not in written
    assert '--deepspeed_config "$RUN_DIR"/ds_config.json' in script


def test_the_winners_config_is_read_as_the_trial_left_it_never_through_a_link(
        runs_dir, monkeypatch, tmp_path):
    """The service exports as root what a trial (another OS user) left in its folder: a link
    there to a file the trial may not read is not followed, and a copy nested past any config's
    depth is taken as damaged; either way the layout's config as rendered now is exported."""
    from orchestrator.export.program import winner_deepspeed_config

    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "deepspeed.yaml", ["backend.kind=simulated"])
    secret = tmp_path / "root-only.json"
    secret.write_text(json.dumps({"train_batch_size": 4242, "password": "S3cretPW2"}))
    rendered = {"train_batch_size": 16}
    folder = tmp_path / "trial"
    folder.mkdir()
    (folder / "ds_config.json").symlink_to(secret)
    assert winner_deepspeed_config(spec, folder, lambda: rendered)["train_batch_size"] == 16
    (folder / "ds_config.json").unlink()
    (folder / "ds_config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert winner_deepspeed_config(spec, folder, lambda: rendered)["train_batch_size"] == 16
    (folder / "ds_config.json").write_text(json.dumps({"train_batch_size": 8}))
    assert winner_deepspeed_config(spec, folder, lambda: rendered)["train_batch_size"] == 8
