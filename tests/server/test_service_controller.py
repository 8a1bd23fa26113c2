"""What the campaign service relies on in a controller: trial slots shared by campaigns (never
more trials at once than granted, a refused campaign waits), SIGTERM detaching without touching
the trials, SIGINT cancelling them, `paratune cancel`, and the campaign's state in its journal."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, alive_after, alive_naming, journal_events, run_cli_process, write_spec
from test_controller import FakeBackend

from orchestrator.cli.campaigns import trial_slots
from orchestrator.common.errors import CampaignStateError
from orchestrator.common.processes import is_running, kill_tree
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import Journal
from orchestrator.scheduling import loop as scheduler
from orchestrator.scheduling.controller import Controller
from orchestrator.scheduling.signals import Detached
from orchestrator.scheduling.slots import NoSlotLimit, ServiceSlots, TrialSlots
from orchestrator.campaign_spec import spec_from_dict


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch):
    monkeypatch.setattr(scheduler, "POLL_INTERVAL_S", 0.001)
    monkeypatch.setattr(scheduler, "SLOT_RETRY_S", 0.001)


def spec_named(tmp_path, name: str, **budget):
    return spec_from_dict({
        "name": name, "model": "llama-7b", "cluster": "a100-80g",
        "scale": {"nodes": 1, "gpus_per_node": 8, "global_batch_size": 32},
        "space": {"tp": [1, 2], "pp": [1], "zero_stage": [1, 3], "micro_batch_size": [1, 2],
                  "activation_checkpointing": ["full"]},
        "search": {"algorithm": "grid"},
        "budget": {"max_trials": 8, "max_concurrent": 2, **budget},
        "tracking": {"enabled": False, "runs_dir": str(tmp_path / "runs")},
    })


class Pool:
    """A stand-in for the service: at most `limit` slots over all campaigns."""

    def __init__(self, limit: int):
        self.limit, self.held, self.most, self.refusals = limit, {}, 0, 0
        self.lock = threading.Lock()

    def slots(self, campaign: str) -> TrialSlots:
        pool = self

        class PoolSlots(TrialSlots):
            def acquire(self, holding: int) -> bool:
                with pool.lock:
                    pool.held[campaign] = holding
                    if sum(pool.held.values()) >= pool.limit:
                        pool.refusals += 1
                        return False
                    pool.held[campaign] = holding + 1
                    pool.most = max(pool.most, sum(pool.held.values()))
                    return True

            def report(self, holding: int) -> None:
                with pool.lock:
                    pool.held[campaign] = holding

        return PoolSlots()


class Scripted(TrialSlots):
    """Answers acquire from `answers` (then grants), and notes every call."""

    def __init__(self, *answers: bool | type):
        self.answers, self.calls = list(answers), []

    def acquire(self, holding: int) -> bool:
        answer = self.answers.pop(0) if self.answers else True
        self.calls.append(("acquire", holding, answer))
        if isinstance(answer, type):
            raise answer("campaign")
        return answer

    def report(self, holding: int) -> None:
        self.calls.append(("report", holding))


def most_at_once(campaign_dirs: list[Path]) -> int:
    """The most trials whose journaled [submitted, finished] intervals overlap."""
    edges = []
    for campaign in campaign_dirs:
        for record in Journal(campaign / "journal.jsonl").trials().values():
            if not record.pruned:
                edges += [(record.submitted_at, 1), (record.finished_at, -1)]
    most = now = 0
    for _, step in sorted(edges):  # an end before a start at the same instant
        now += step
        most = max(most, now)
    return most


def test_two_campaigns_never_run_more_trials_than_the_slots_granted(tmp_path):
    pool = Pool(limit=1)
    summaries, errors = {}, []

    def run(name: str) -> None:
        try:
            summaries[name] = Controller(spec_named(tmp_path, name), backend=FakeBackend(polls=3),
                                         slots=pool.slots(name)).run()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and set(summaries) == {"a", "b"}
    assert all(s.complete and len(s.records) == 8 and all(r.done for r in s.records)
               for s in summaries.values())
    assert pool.refusals > 0 and pool.most == 1 and pool.held == {"a": 0, "b": 0}
    assert most_at_once([tmp_path / "runs" / "a", tmp_path / "runs" / "b"]) == 1


def test_a_refused_campaign_waits_for_a_slot_instead_of_ending(tmp_path):
    slots = Scripted(*[False] * 20)
    backend = FakeBackend(polls=2)
    summary = Controller(spec_named(tmp_path, "wait"), backend=backend, slots=slots).run()
    asked = [call for call in slots.calls if call[0] == "acquire"]
    assert [a for _, _, a in asked[:20]] == [False] * 20 and asked[20][2] is True
    assert summary.complete and len(summary.records) == len(backend.submitted) == 8
    assert [r.trial_id for r in summary.records] == [f"t{i:04d}" for i in range(1, 9)]
    assert slots.calls[-1] == ("report", 0)


def test_a_campaign_with_nothing_left_ends_though_refused(tmp_path):
    spec = spec_named(tmp_path, "done")
    Controller(spec, backend=FakeBackend()).run()
    backend, slots = FakeBackend(), Scripted(*[False] * 1000)
    summary = Controller(spec, backend=backend, slots=slots).run(resume=True)
    assert summary.complete and not backend.submitted
    assert not [c for c in slots.calls if c[0] == "acquire"]


def test_a_trial_waiting_for_a_slot_does_not_outrun_the_budget(tmp_path):
    """The wall clock runs out while the first trial waits: it never runs."""
    spec = spec_named(tmp_path, "late", wall_clock_s=5)

    class Refuse(Scripted):
        def acquire(self, holding: int) -> bool:
            self.calls.append(("acquire", holding))
            return False

    backend, slots = FakeBackend(), Refuse()
    summary = Controller(spec, backend=backend, slots=slots).run()
    assert ("acquire", 0) in slots.calls  # it was proposed, and waited
    assert not backend.submitted and summary.records == []
    assert summary.stop_reason.startswith("wall clock")


def test_detached_leaves_trials_running_and_resume_takes_them_over(tmp_path):
    spec = spec_named(tmp_path, "detach")

    def detach_on_second(kind, record):
        if kind == "submitted" and record.trial_id == "t0002":
            raise Detached("detach")

    first = FakeBackend(polls=10_000)
    with pytest.raises(Detached):
        Controller(spec, backend=first, on_event=detach_on_second).run()
    assert first.running == {"t0001", "t0002"}  # not cancelled
    view = CampaignView(spec)
    assert view.state() == "incomplete"
    second = FakeBackend(alive=first.running)
    summary = Controller(spec, backend=second).run(resume=True)
    assert sorted(second.reattached) == ["t0001", "t0002"]
    assert summary.complete and len(summary.records) == 8 and view.state() == "finished"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop
def test_a_sigterm_whose_detached_was_dropped_still_detaches_at_the_next_turn(tmp_path):
    """A signal handler runs wherever the main thread is. Here the SIGTERM lands in a weakref
    finalizer, where Python prints the handler's `Detached` and drops it; the controller,
    refused every slot as by a service that is gone, would wait for ever. The request the
    handler recorded makes the scheduling loop leave at its next turn instead."""
    import gc
    import weakref

    from orchestrator.cli.campaigns import controller_signals

    class Owner:
        pass

    spec = spec_named(tmp_path, "dropped")
    first = FakeBackend(polls=10_000)
    gone = Scripted(True, *[False] * 100_000)  # one slot, then a service that never answers

    with controller_signals(spec.name) as detach:
        owner = Owner()
        weakref.finalize(owner, os.kill, os.getpid(), signal.SIGTERM)
        del owner
        gc.collect()  # the handler ran in the finalizer: its Detached went no further
        assert detach.requested
        with pytest.raises(Detached):
            Controller(spec, backend=first, slots=gone, detach=detach).run()
    assert CampaignView(spec).state() == "incomplete"


def test_detached_before_any_trial_keeps_the_campaign_resumable(tmp_path):
    spec = spec_named(tmp_path, "early")
    with pytest.raises(Detached):
        Controller(spec, backend=FakeBackend(), slots=Scripted(Detached)).run()
    assert (tmp_path / "runs" / "early" / "spec.yaml").exists()
    assert Controller(spec, backend=FakeBackend()).run(resume=True).complete


def test_an_interrupt_cancels_the_running_trials_and_frees_their_slots(tmp_path):
    spec = spec_named(tmp_path, "interrupt")
    slots = Scripted()

    def interrupt(kind, record):
        if kind == "submitted" and record.trial_id == "t0002":
            raise KeyboardInterrupt

    backend = FakeBackend(polls=10_000)
    with pytest.raises(KeyboardInterrupt):
        Controller(spec, backend=backend, on_event=interrupt, slots=slots).run()
    assert backend.running == set() and slots.calls[-1] == ("report", 0)


def test_the_campaign_state_from_the_journal(tmp_path):
    spec = spec_named(tmp_path, "states")
    view = CampaignView(spec)
    assert view.state() == "incomplete"  # no journal at all
    view.journal.append("submitted", trial_id="t0001", config={"dp": 8}, handle={},
                        fidelity="full")
    assert view.state() == "incomplete"  # a journal of an earlier release, mid-campaign
    view.journal.path.unlink()
    summary = Controller(spec, backend=FakeBackend()).run()
    ends = [e for e in view.journal.events() if e["event"] == "campaign_end"]
    assert view.state() == "finished" and ends[-1]["stop_reason"] == summary.stop_reason
    with pytest.raises(CampaignStateError, match="has finished"):
        Controller(spec, backend=FakeBackend()).cancel()


def test_cancel_stops_what_a_dead_controller_left_running(tmp_path):
    spec = spec_named(tmp_path, "orphans")

    def crash(kind, record):
        if kind == "submitted" and record.trial_id == "t0002":
            raise SystemExit  # as good as a SIGKILL for the trials of this backend

    first = FakeBackend(polls=10_000)
    with pytest.raises(SystemExit):
        Controller(spec, backend=first, on_event=crash).run()
    second = FakeBackend(alive={"t0001"})
    second.running = {"t0001"}
    assert Controller(spec, backend=second).cancel() == 1
    assert second.reattached == ["t0001"] and second.running == set()
    assert second.cleaned == ["t0002"]
    view = CampaignView(spec)
    assert view.state() == "cancelled"
    assert view.journal.events()[-1]["event"] == "campaign_cancelled"
    Controller(spec, backend=FakeBackend()).run(resume=True)  # still resumable: runs the rest
    assert view.state() == "finished"


# ---------------------------------------------------------------------------------- HTTP slots


class SlotService:
    """A slot endpoint on 127.0.0.1: grants while holding < 1; answers 500 while `down`."""

    def __init__(self):
        self.requests, self.down = [], False
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.requests.append((self.path, self.headers["Authorization"], body))
                reply = b"{}" if service.down else json.dumps(
                    {"granted": body["want"] and body["holding"] < 1}).encode()
                self.send_response(500 if service.down else 200)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/api/slots/c1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_service_slots_ask_the_service_and_survive_its_outages(caplog):
    service = SlotService()
    try:
        slots = ServiceSlots(service.url, "s3cret")
        assert slots.acquire(0) is True and slots.acquire(1) is False
        slots.report(0)
        assert service.requests == [
            ("/api/slots/c1", "Bearer s3cret", {"holding": 0, "want": True}),
            ("/api/slots/c1", "Bearer s3cret", {"holding": 1, "want": True}),
            ("/api/slots/c1", "Bearer s3cret", {"holding": 0, "want": False}),
        ]
        service.down = True
        with caplog.at_level(logging.WARNING, logger="orchestrator.scheduling.slots"):
            assert [slots.acquire(0) for _ in range(3)] == [False] * 3
            slots.report(0)
            assert len(caplog.records) == 1 and "unreachable" in caplog.records[0].message
            service.down = False
            assert slots.acquire(0) is True
            assert len(caplog.records) == 2 and "answers again" in caplog.records[1].message
    finally:
        service.close()
    nobody = ServiceSlots("http://127.0.0.1:9/api/slots/c1", "t", timeout_s=0.5)
    assert nobody.acquire(0) is False  # refused connection: not granted, no exception
    nobody.report(0)


def test_the_cli_takes_the_services_slots_from_the_environment(monkeypatch):
    monkeypatch.delenv("PARATUNE_SLOTS_URL", raising=False)
    monkeypatch.setenv("PARATUNE_SLOTS_TOKEN", "t")
    assert isinstance(trial_slots(), NoSlotLimit)
    monkeypatch.setenv("PARATUNE_SLOTS_URL", "http://127.0.0.1:9/api/slots/x")
    slots = trial_slots()
    assert isinstance(slots, ServiceSlots) and slots.url.endswith("/api/slots/x")


# ---------------------------------------------------------------------------------- signals


def test_a_signal_waits_until_the_trials_started_are_journaled():
    def detach(signum, frame):
        raise Detached("x")

    previous = signal.signal(signal.SIGTERM, detach)
    try:
        done = []
        with pytest.raises(Detached):
            with scheduler.signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                done.append("journaled")
        assert done == ["journaled"] and signal.getsignal(signal.SIGTERM) is detach
    finally:
        signal.signal(signal.SIGTERM, previous)


def gone(marker: Path, within_s: float = 30.0) -> bool:
    """No live process names `marker` (within a moment: a SIGKILL takes a little while)."""
    return not alive_after(marker, within_s)


class RealTrial:
    """`paratune run` of a one-trial local campaign, stopped once its torchrun trial runs."""

    def __init__(self, tmp_path: Path, runs_dir: Path, name: str, steps: int):
        spec = write_spec(tmp_path / f"{name}.yaml", name=name, search={"algorithm": "grid"},
                          space={"zero_stage": [0], "micro_batch_size": [4],
                                 "activation_checkpointing": ["none"]},
                          budget={"max_trials": 1}, tracking={"enabled": False},
                          trial={"steps": steps, "warmup_steps": 1, "timeout_s": 300})
        self.name, self.campaign = name, runs_dir / name
        self.folder = self.campaign / "trials" / "t0001"
        self.env = {"PARATUNE_RUNS_DIR": str(runs_dir)}
        self.log = tmp_path / f"{name}.stderr"
        with open(self.log, "w") as log:
            self.controller = subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", "run", str(spec)], cwd=ROOT,
                env={**os.environ, **self.env}, stdout=subprocess.DEVNULL, stderr=log)
        self.handle: dict = {}

    def wait_for_the_trial(self) -> None:
        deadline = time.time() + 120
        while time.time() < deadline and len(alive_naming(self.folder)) < 3:  # torchrun + 2
            assert self.controller.poll() is None, self.log.read_text()[-2000:]
            time.sleep(0.2)
        assert len(alive_naming(self.folder)) >= 3
        events = journal_events(self.campaign)
        self.handle = next(e["handle"] for e in events if e["event"] == "submitted")

    def signal(self, sig: int) -> int:
        self.controller.send_signal(sig)
        return self.controller.wait(timeout=60)

    def trial_alive(self) -> bool:
        return bool(self.handle) and is_running(self.handle["pid"], self.handle["start_time"])

    def close(self) -> None:
        """Whatever a failed test left: stopped by the PIDs this test started."""
        if self.controller.poll() is None:
            self.controller.kill()
            self.controller.wait()
        if self.trial_alive():
            kill_tree(self.handle["pid"])


@pytest.fixture
def real_trials():
    started: list[RealTrial] = []
    yield lambda *args: started.append(RealTrial(*args)) or started[-1]
    for trial in started:
        trial.close()


@pytest.mark.slow
def test_sigterm_detaches_and_resume_reattaches_the_trial(tmp_path, runs_dir, real_trials):
    run = real_trials(tmp_path, runs_dir, "detached", 40)
    run.wait_for_the_trial()
    assert run.signal(signal.SIGTERM) == 143
    assert "detached; continue with `paratune resume detached`" in run.log.read_text()
    assert run.trial_alive(), "the trial outlives its controller"
    assert CampaignView.open(runs_dir, "detached").state() == "incomplete"
    resumed = run_cli_process("resume", "detached", env=run.env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    events = [e for e in journal_events(run.campaign) if e.get("trial_id")]
    assert [e["event"] for e in events] == ["submitted", "reattached", "finished"]
    assert events[-1]["result"]["status"] == "ok"
    assert gone(run.folder)
    assert CampaignView.open(runs_dir, "detached").state() == "finished"


@pytest.mark.slow
def test_sigint_cancels_the_running_trial(tmp_path, runs_dir, real_trials):
    run = real_trials(tmp_path, runs_dir, "interrupted", 10_000)
    run.wait_for_the_trial()
    assert run.signal(signal.SIGINT) == 130
    assert gone(run.folder) and not run.trial_alive()
    assert CampaignView.open(runs_dir, "interrupted").state() == "incomplete"
    assert "interrupted; continue with `paratune resume interrupted`" in run.log.read_text()
    status = run_cli_process("status", "interrupted", "--json", env=run.env, timeout=60)
    report = json.loads(status.stdout)
    assert report["state"] == "stopped" and report["counts"] == {"unfinished": 1}


@pytest.mark.slow
def test_cancel_kills_the_trial_a_killed_controller_left(tmp_path, runs_dir, real_trials):
    run = real_trials(tmp_path, runs_dir, "abandoned", 10_000)
    run.wait_for_the_trial()
    refused = run_cli_process("cancel", "abandoned", env=run.env, timeout=60)
    assert refused.returncode == 2 and f"PID {run.controller.pid}" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert run.signal(signal.SIGKILL) == -signal.SIGKILL
    assert run.trial_alive()
    cancelled = run_cli_process("cancel", "abandoned", env=run.env, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr[-2000:]
    assert cancelled.stdout == "cancelled abandoned: stopped 1 running trial\n"
    assert gone(run.folder) and not run.trial_alive()
    assert CampaignView.open(runs_dir, "abandoned").state() == "cancelled"
