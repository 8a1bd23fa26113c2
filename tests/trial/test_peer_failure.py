"""A trial of several tasks ends soon after one rank fails, with that rank's status and cause
on the result, instead of its other ranks waiting out the timeout (backends/peer_failure.py).
Each rank here is a short Python program run by `run_on_node`, as a Slurm task or Ray actor
runs it; the grace a rank allows before stopping is set to 0 so the tests wait on the note
alone."""

from __future__ import annotations

import json
import sys
import threading

import pytest
from conftest import builtin_request

from orchestrator.backends import peer_failure
from orchestrator.backends.on_node import run_on_node

SLEEPS = [sys.executable, "-c", "import time; time.sleep(600)"]
ATTEMPT = "7-0"


def fails(message: str, code: int = 1) -> list[str]:
    return [sys.executable, "-c", f"print({message!r}, flush=True); raise SystemExit({code})"]


@pytest.fixture
def trial(tmp_path, monkeypatch):
    monkeypatch.setattr(peer_failure, "GRACE_S", 0.0)
    request = builtin_request(tmp_path / "t0001", "t0001", {"steps": 2}, timeout_s=600)
    request.prepare()
    return request


def run_ranks(request, argv_by_rank: dict[int, list[str]]) -> dict:
    """Every rank's result, each rank in a thread of its own (as tasks run side by side)."""
    results: dict = {}

    def rank(number: int) -> None:
        results[number] = run_on_node(request, argv_by_rank[number], number, poll_s=0.05,
                                      attempt=ATTEMPT)

    threads = [threading.Thread(target=rank, args=(n,)) for n in argv_by_rank]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a rank was not stopped"
    return results


def test_a_rank_that_runs_out_of_memory_ends_the_trial_as_oom(trial):
    results = run_ranks(trial, {0: SLEEPS, 1: fails("torch.OutOfMemoryError: CUDA out of memory")})
    assert results[1].status == "oom"
    assert results[0].status == "oom"  # rank 0's result is the trial's
    assert "rank 1 ended oom first" in results[0].error
    assert "CUDA out of memory" in results[0].error


def test_rank_0_failing_first_stops_the_others_with_its_cause(trial):
    results = run_ranks(trial, {0: fails("EADDRINUSE on the rendezvous port", 2), 1: SLEEPS})
    assert results[0].status == "failed"
    assert results[1].status == "failed"
    assert "rank 0 ended failed first" in results[1].error and "was stopped" in results[1].error


def test_a_rank_failing_at_teardown_leaves_rank_0s_reported_result(trial):
    """Rank 0 wrote its result and is slow to exit; another rank exits non-zero: the trial
    reported, so its result stands."""
    reported = json.dumps({"status": "ok", "tokens_per_s": 100.0, "step_time_s": 1.0,
                           "world_size": 2})
    writes_then_sleeps = [sys.executable, "-c",
                          f"import os, time; open(os.environ['PARATUNE_RESULT_FILE'], 'w')"
                          f".write({reported!r}); print('written', flush=True); time.sleep(600)"]
    writes_then_exits = [sys.executable, "-c",
                         "import os, time\n"
                         "while not os.path.exists(os.environ['PARATUNE_RESULT_FILE']):\n"
                         "    time.sleep(0.05)\n"
                         "raise SystemExit(1)"]
    results = run_ranks(trial, {0: writes_then_sleeps, 1: writes_then_exits})
    assert results[1].status == "failed"
    assert results[0].status == "ok" and results[0].tokens_per_s == 100.0


def test_ranks_that_end_well_leave_no_note(trial):
    reports = [sys.executable, "-c", "import os; open(os.environ['PARATUNE_RESULT_FILE'], 'w')"
               ".write('{\"status\": \"ok\", \"tokens_per_s\": 1.0, \"world_size\": 2}')"]
    results = run_ranks(trial, {0: reports, 1: [sys.executable, "-c", "pass"]})
    assert results[0].status == "ok"
    assert not trial.folder.rank_failure_file(ATTEMPT).exists()


def test_a_new_attempt_in_the_folder_forgets_the_last_ones_failure(trial):
    run_ranks(trial, {0: SLEEPS, 1: fails("boom")})
    assert trial.folder.rank_failure_file(ATTEMPT).exists()
    trial.prepare()
    assert not trial.folder.rank_failure_file(ATTEMPT).exists()


def test_a_rank_0_that_cannot_open_its_rendezvous_port_ends_the_trial(tmp_path, monkeypatch):
    """The built-in trainer's two ranks, placed as a Ray placement group places them, with
    rank 0's port held by another socket: rank 0 fails at once, and rank 1, which would wait
    for the store until the trial's timeout, is stopped; the trial's result names the port."""
    import socket

    from orchestrator.backends.on_node import run_rank_at

    monkeypatch.setattr(peer_failure, "GRACE_S", 0.0)
    tiny = {"num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 128,
            "vocab_size": 256, "seq_len": 32}
    request = builtin_request(tmp_path / "t0001", "t0001",
                              {"model": tiny, "dp": 2, "micro_batch_size": 2,
                               "grad_accum_steps": 2, "steps": 2, "warmup_steps": 1},
                              timeout_s=600, env={"OMP_NUM_THREADS": "1"})
    request.prepare()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        master = ("127.0.0.1", held.getsockname()[1])
        results: dict = {}

        def rank(number: int) -> None:
            results[number] = run_rank_at(request, number, (number, 2), master, poll_s=0.1)

        threads = [threading.Thread(target=rank, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a rank was not stopped"
    assert results[0]["status"] == "failed"
    assert "address already in use" in results[0]["error"].lower() or \
        "EADDRINUSE" in results[0]["error"]
