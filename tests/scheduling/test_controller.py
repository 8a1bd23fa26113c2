"""The controller and its scheduling loop against an in-memory backend: scheduling within the
concurrency limit, budget stops, halving promotions, the scaling study and resume.

The backend here is a stand-in on purpose: these tests are about what the controller does with
trials, so trials answer at once from a formula instead of running anything.
"""

from __future__ import annotations

import pytest
from builders import make_spec

from orchestrator.backends import Backend, TrialHandle, TrialRequest
from orchestrator.record.journal import Journal
from orchestrator.result import TrialResult
from orchestrator.scheduling import loop as scheduler
from orchestrator.scheduling.controller import Controller


def throughput(config) -> float:
    """A made-up landscape: tp 2 and ZeRO 1 are fast, larger micro-batches a little faster."""
    return 1000.0 * (1.5 if config.tp == 2 else 1.0) * (1.2 if config.zero_stage == 1 else 1.0) \
        * (1 + 0.1 * config.micro_batch_size) * config.world_size / 8


class FakeHandle(TrialHandle):
    def __init__(self, backend: "FakeBackend", request: TrialRequest):
        self.backend, self.request = backend, request
        self.polls_left = backend.polls

    def poll(self) -> TrialResult | None:
        if self.polls_left > 0:
            self.polls_left -= 1
            return None
        self.backend.running.discard(self.request.trial_id)
        value = self.backend.landscape(self.request.config)
        return TrialResult(status="ok", tokens_per_s=value, step_time_s=1e6 / value,
                           world_size=self.request.world_size,
                           extra={"steps_run": self.request.steps})

    def cancel(self) -> None:
        self.backend.running.discard(self.request.trial_id)

    def info(self) -> dict:
        return {"fake": self.request.trial_id}


class FakeBackend(Backend):
    def __init__(self, polls: int = 0, alive: set[str] = frozenset(), landscape=throughput):
        self.polls = polls
        self.landscape = landscape
        self.alive = set(alive)  # trial ids whose "cluster job" survives a controller crash
        self.submitted: list[TrialRequest] = []
        self.running: set[str] = set()
        self.most_running = 0
        self.reattached: list[str] = []
        self.cleaned: list[str] = []

    def submit(self, request: TrialRequest) -> FakeHandle:
        self.submitted.append(request)
        self.running.add(request.trial_id)
        self.most_running = max(self.most_running, len(self.running))
        return FakeHandle(self, request)

    def reattach(self, info: dict, request: TrialRequest) -> FakeHandle | None:
        if info.get("fake") not in self.alive:
            return None
        self.reattached.append(request.trial_id)
        self.running.add(request.trial_id)
        return FakeHandle(self, request)

    def cleanup(self, info: dict, folder) -> None:
        self.cleaned.append(folder.path.name)


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch):
    monkeypatch.setattr(scheduler, "POLL_INTERVAL_S", 0.001)


def fake_campaign(tmp_path) -> dict:
    """A grid of 8 layouts of llama-7b on one node, run one at a time, recorded under tmp_path."""
    return {
        "name": "fake", "model": "llama-7b", "cluster": "a100-80g",
        "scale": {"nodes": 1, "gpus_per_node": 8, "global_batch_size": 32},
        "space": {"tp": [1, 2], "pp": [1], "zero_stage": [1, 3], "micro_batch_size": [1, 2],
                  "activation_checkpointing": ["full"]},
        "search": {"algorithm": "grid"}, "budget": {"max_trials": 8, "max_concurrent": 1},
        "tracking": {"enabled": False, "runs_dir": str(tmp_path / "runs")},
    }


def test_trials_run_within_the_concurrency_limit(tmp_path):
    backend = FakeBackend(polls=3)
    spec = make_spec(fake_campaign(tmp_path), budget={"max_trials": 20, "max_concurrent": 3})
    summary = Controller(spec, backend=backend).run()
    assert backend.most_running == 3
    assert len(backend.submitted) == len(summary.records) == 8
    assert len({r.config for r in summary.records}) == 8
    assert summary.complete and summary.stop_reason == "search space exhausted"
    assert summary.best.result.tokens_per_s == max(throughput(r.config) for r in summary.records)


def test_budget_stops_the_search(tmp_path):
    backend = FakeBackend(polls=1)
    spec = make_spec(fake_campaign(tmp_path), budget={"max_trials": 3, "max_concurrent": 2})
    summary = Controller(spec, backend=backend).run()
    assert len(backend.submitted) == 3 and summary.stop_reason == "max_trials 3 reached"


def test_patience_stops_the_search(tmp_path):
    """The first layout in grid order is the best here, so the next two end the search."""
    spec = make_spec(fake_campaign(tmp_path), budget={"patience": 2})
    backend = FakeBackend(landscape=lambda config: 1e4 / len(backend.submitted))
    summary = Controller(spec, backend=backend).run()
    assert "patience 2" in summary.stop_reason and len(summary.records) == 3


def test_halving_screens_then_confirms_the_best_share(tmp_path):
    backend = FakeBackend()
    spec = make_spec(fake_campaign(tmp_path), trial={"steps": 10},
                     search={"fidelity": {"screening_steps": 2, "keep_fraction": 0.5,
                                          "min_screened": 2}})
    summary = Controller(spec, backend=backend).run()
    screens = [r for r in summary.records if r.phase == "screen"]
    confirms = [r for r in summary.records if r.phase == "confirm"]
    assert screens and confirms and {r.phase for r in summary.records} == {"screen", "confirm"}
    steps = {r.trial_id: r.steps for r in backend.submitted}
    assert all(steps[r.trial_id] == 2 for r in screens)
    assert all(steps[r.trial_id] == 10 for r in confirms)
    best_screen = max(screens, key=lambda r: r.result.tokens_per_s)
    assert best_screen.config in {r.config for r in confirms}
    assert {r.config for r in confirms} <= {r.config for r in screens}
    assert len(confirms) < len(screens) and len({r.config for r in confirms}) == len(confirms)
    assert summary.best.phase == "confirm"


def test_scaling_study_runs_after_the_search_outside_its_budget(tmp_path):
    backend = FakeBackend(polls=1)
    spec = make_spec(fake_campaign(tmp_path), budget={"max_trials": 4, "max_concurrent": 2},
                     scale={"nodes": 2, "gpus_per_node": 4, "global_batch_size": 32,
                            "study": "weak", "study_nodes": [1, 2, 4]})
    summary = Controller(spec, backend=backend).run()
    search = [r for r in summary.records if r.phase == "search"]
    scaling = [r for r in summary.records if r.phase == "scaling"]
    assert len(search) == 4 and summary.stop_reason == "max_trials 4 reached"
    assert sorted(r.config.world_size for r in scaling) == [4, 8, 16]
    best = summary.best
    assert best.phase == "search" and all(r.config.tp == best.config.tp for r in scaling)
    order = [r.trial_id for r in backend.submitted]
    assert all(order.index(s.trial_id) > order.index(r.trial_id) for s in scaling for r in search)


class Crash(Exception):
    pass


def test_resume_reattaches_survivors_and_reruns_the_rest(tmp_path):
    """Kill the controller with two trials in flight; one's job survives the crash."""
    spec = make_spec(fake_campaign(tmp_path), budget={"max_concurrent": 2})
    finished = []

    def crash_after_three(kind, record):
        if kind == "finished":
            finished.append(record.trial_id)
            if len(finished) == 3:
                raise Crash

    first = FakeBackend(polls=2)
    with pytest.raises(Crash):
        Controller(spec, backend=first, on_event=crash_after_three).run()
    in_flight = sorted(first.running | {r.trial_id for r in first.submitted} - set(finished))
    assert len(in_flight) >= 1
    survivor = in_flight[0]
    second = FakeBackend(alive={survivor})
    summary = Controller(spec, backend=second).run(resume=True)
    assert second.reattached == [survivor]
    events = [e for e in Journal(tmp_path / "runs" / "fake" / "journal.jsonl").events()
              if e.get("trial_id") == survivor]
    assert [e["event"] for e in events] == ["submitted", "reattached", "finished"]
    assert survivor not in {r.trial_id for r in second.submitted}
    assert set(in_flight[1:]) <= {r.trial_id for r in second.submitted}
    assert set(second.cleaned) == set(in_flight[1:])
    assert not set(finished) & {r.trial_id for r in second.submitted}
    assert len(summary.records) == 8 and len({r.config for r in summary.records}) == 8
    assert all(r.done for r in summary.records)


def test_a_gap_in_the_journal_never_hands_an_existing_trial_id_out_again(tmp_path):
    """A trial about to be submitted when the controller stopped, with later ones already
    journaled as pruned, leaves a gap in the IDs; a resumed campaign numbers its new trials
    past the highest ID, so no ID is finished twice."""
    spec = make_spec(fake_campaign(tmp_path), budget={"max_trials": 4})
    Controller(spec, backend=FakeBackend()).run()
    journal = tmp_path / "runs" / "fake" / "journal.jsonl"
    kept = [line for line in journal.read_text().splitlines(keepends=True)
            if '"trial_id": "t0002"' not in line]
    journal.write_text("".join(kept))
    assert sorted(Journal(journal).trials()) == ["t0001", "t0003", "t0004"]

    more = make_spec(fake_campaign(tmp_path), budget={"max_trials": 6})
    Controller(more, backend=FakeBackend()).run(resume=True)
    finished = [e["trial_id"] for e in Journal(journal).events() if e["event"] == "finished"]
    assert len(finished) == len(set(finished)) == 6
    assert finished[3:] == ["t0005", "t0006", "t0007"]
