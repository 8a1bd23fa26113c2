"""`budget.gpu_hours` bounds a running campaign: each trial reserves its world size times
`trial.timeout_s` before it starts, a trial whose reservation does not fit in what is left
waits for running trials to settle (or never starts when none runs, the stop reason naming the
budget and the fix), and what a trial used is counted from the devices it held and the time it
took, whatever its own report says."""

from __future__ import annotations

import sys

from builders import cli_json
from conftest import journal_events, write_spec
from test_service import max_overlap

from orchestrator.record.journal import Journal

WORLD, TIMEOUT_S = 2, 6.0
RESERVED_S = WORLD * TIMEOUT_S  # GPU-seconds each trial reserves
# Sleeps a little, then reports a result that talks its cost down: one GPU, no time at all.
UNDERSTATING_TRAINER = (
    "import json, os, time; time.sleep(0.3); "
    "json.dump({'status': 'ok', 'tokens_per_s': 1000.0, 'world_size': 1, "
    "'simulated_duration_s': 0.0}, open(os.environ['PARATUNE_RESULT_FILE'], 'w'))")


def command_campaign(tmp_path, name: str, budget_s: float):
    """Four one-second trials on two GPUs each (grid over ZeRO stages), all allowed at once by
    max_concurrent, under a budget of `budget_s` GPU-seconds."""
    return write_spec(
        tmp_path / f"{name}.yaml", name=name, search={"algorithm": "grid"},
        scale={"nodes": 1, "gpus_per_node": WORLD, "global_batch_size": 8},
        space={"tp": [1], "zero_stage": [0, 1, 2, 3], "micro_batch_size": [2],
               "activation_checkpointing": ["none"]},
        budget={"max_trials": 4, "max_concurrent": 4, "gpu_hours": budget_s / 3600},
        trial={"command": [sys.executable, "-c", UNDERSTATING_TRAINER, "{zero_stage}"],
               "timeout_s": TIMEOUT_S},
        tracking={"enabled": False})


def test_trials_start_only_while_their_reservations_fit_the_budget(tmp_path, runs_dir, cli):
    """30 GPU-seconds hold two reservations of 12: two trials start, the others wait for them
    to settle (each uses about 1 of its 12) and then run too; what each used is its two GPUs
    times its time, not the one GPU and no time it reported."""
    code, _, err = cli("run", str(command_campaign(tmp_path, "reserved", budget_s=30)))
    assert code == 0, err
    events = journal_events(runs_dir / "reserved")
    submitted = {e["trial_id"]: e["time"] for e in events if e["event"] == "submitted"}
    finished = {e["trial_id"]: e["time"] for e in events if e["event"] == "finished"}
    assert len(finished) == 4 and set(submitted) == set(finished), events
    assert max_overlap([(submitted[t], finished[t]) for t in finished]) == 2
    used_s = sum(WORLD * (finished[t] - submitted[t]) for t in finished)
    budget = cli_json(cli, "status", "reserved")["budget"]
    assert abs(budget["gpu_hours"] * 3600 - used_s) < 1e-6, (budget, used_s)
    assert used_s <= 30

    # A trial a stopped controller left running holds its reservation: status shows it.
    journal = Journal(runs_dir / "reserved" / "journal.jsonl")
    last = [e for e in events if e["event"] == "finished"][-1]
    journal.append("submitted", trial_id="t0099", config=last["config"], handle={},
                   phase="search")
    budget = cli_json(cli, "status", "reserved")["budget"]
    assert abs(budget["gpu_hours_reserved"] * 3600 - RESERVED_S) < 0.5, budget
    assert abs(budget["gpu_hours_left"] * 3600 - (30 - used_s - RESERVED_S)) < 0.5, budget
    text = " ".join(cli("status", "reserved")[1].split())
    assert "GPU-hours used, 0.00333 reserved by running trials" in text, text


def test_a_trial_whose_reservation_does_not_fit_is_not_started(tmp_path, runs_dir, cli):
    code, _, err = cli("run", str(command_campaign(tmp_path, "too-small", budget_s=10)))
    assert code == 0, err
    events = journal_events(runs_dir / "too-small")
    assert not [e for e in events if e["event"] == "submitted"], events
    reason = cli_json(cli, "status", "too-small")["stop_reason"]
    assert reason.startswith("budget.gpu_hours: ") and "\n" not in reason, reason
    assert "trial.timeout_s 6 s" in reason and "raise budget.gpu_hours" in reason, reason
    assert f"stopped: {reason}" in " ".join(err.split()), err  # `run` says so too

