"""The campaign service against a real server process, on SQLite and on a real PostgreSQL:
crash and restart, supervised controllers, the cluster-wide trial limit, quotas, cancel and
authentication. A server killed mid-way and the trial limit shared by concurrent controllers run
on both databases; the rest, whose subject is the service rather than its database, run once:
some on SQLite, the others on PostgreSQL where one is given (else on SQLite)."""

from __future__ import annotations

import collections
import os
import re
import signal
import time
from pathlib import Path

import httpx
from conftest import (
    EXAMPLES,
    POSTGRES_ELSE_SQLITE,
    ROOT,
    alive_after,
    alive_naming,
    journal_events,
    on_database,
)

from orchestrator.record.journal import Journal

SIMULATED = EXAMPLES / "frontier-175b.yaml"
QUICKSTART = EXAMPLES / "quickstart.yaml"


def simulated_options(name: str, trials: int = 8, concurrent: int = 2, latency: float = 0.4,
                      tracking: bool = True) -> list[str]:
    return [f"name={name}", f"budget.max_trials={trials}", f"budget.max_concurrent={concurrent}",
            f"backend.latency_s={latency}", f"tracking.enabled={str(tracking).lower()}",
            "backend.noise=0.0"]


def finishes_per_trial(runs: Path, name: str) -> collections.Counter:
    """How many times each trial of campaign `name` finished: more than once is a rerun."""
    return collections.Counter(e["trial_id"] for e in journal_events(runs / name)
                               if e["event"] == "finished")


def mlflow_trial_ids(runs: Path, name: str) -> collections.Counter:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(f"paratune/{name}")
    found = client.search_runs([experiment.experiment_id],
                               filter_string="tags.`paratune.kind` = 'trial'", max_results=5000)
    return collections.Counter(r.data.tags["paratune.trial_id"] for r in found)


def test_server_killed_midway_resumes_every_campaign(service):
    server = service("--max-running", "4").start()
    token = server.token("alice")
    names = ["sim-a", "sim-b", "sim-c"]
    for name in names:
        assert server.submit(token, SIMULATED, *simulated_options(name, trials=10, latency=0.6)
                             ).status_code == 201
    real = server.submit(token, QUICKSTART, "name=real-trials", "budget.max_trials=2",
                         "trial.steps=4", "trial.warmup_steps=1")
    assert real.status_code == 201, real.text
    names.append("real-trials")
    deadline = time.monotonic() + 120  # mid-way: every campaign has started some trials
    while not all(server.campaign(token, n)["trials"] >= 1 for n in names):
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.3)
    server.kill()

    server = service("--max-running", "4").start()
    done = server.wait_final(token, names)
    for name, campaign in done.items():
        assert campaign["state"] == "finished", (name, campaign, server.logs())
        records = Journal(server.runs_dir / name / "journal.jsonl").trials()
        finished = finishes_per_trial(server.runs_dir, name)
        ran = [r.trial_id for r in records.values() if r.result.status != "infeasible"]
        assert set(finished) == set(records) and max(finished.values()) == 1, finished
        assert mlflow_trial_ids(server.runs_dir, name) == collections.Counter(ran), name
    assert done["real-trials"]["counts"].get("ok", 0) >= 1


@on_database(POSTGRES_ELSE_SQLITE)
def test_a_killed_controller_is_restarted(service):
    server = service().start()
    token = server.token("alice")
    # Trials of 3 s: the controller is still running when the test kills it.
    server.submit(token, SIMULATED, *simulated_options("restarted", trials=8, latency=3))
    deadline = time.monotonic() + 60
    while not server.campaign(token, "restarted")["trials"]:
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.2)
    pid = server.campaign(token, "restarted")["controller_pid"]
    os.kill(pid, signal.SIGKILL)
    campaign = server.wait_final(token, ["restarted"])["restarted"]
    assert campaign["state"] == "finished", server.logs()
    assert campaign["restarts"] == 1
    assert max(finishes_per_trial(server.runs_dir, "restarted").values()) == 1


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start
        running += step
        peak = max(peak, running)
    return peak


def test_cluster_wide_trial_limit_is_shared(service):
    server = service("--max-trials", "2").start()
    token = server.token("alice")
    names = ["share-a", "share-b", "share-c"]
    for name in names:
        server.submit(token, SIMULATED,
                      *simulated_options(name, trials=6, latency=0.5, tracking=False))
    server.wait_final(token, names)
    intervals, per_campaign = [], {}
    for name in names:
        records = Journal(server.runs_dir / name / "journal.jsonl").trials().values()
        ran = [r for r in records if r.submitted_at is not None]
        intervals += [(r.submitted_at, r.finished_at) for r in ran]
        per_campaign[name] = len(ran)
    assert max_overlap(intervals) <= 2
    assert all(n >= 1 for n in per_campaign.values()), per_campaign
    assert max_overlap(intervals) == 2  # the limit is used, not just respected


@on_database(POSTGRES_ELSE_SQLITE)
def one_real_trial(name: str) -> list[str]:
    """The quickstart cut to one short real trial: a campaign that spends GPU-hours (a
    simulated one spends none, and no quota counts it)."""
    return [f"name={name}", "budget.max_trials=1", "trial.steps=1", "trial.warmup_steps=0",
            "tracking.enabled=false"]


def test_quota_refuses_admission(service):
    server = service().start()
    admin = server.token("root", admin=True)
    token = server.token("bob")
    assert server.api("POST", "/api/quotas", admin, json={
        "scope": "user", "name": "bob", "gpu_hours": 1.0}).status_code == 200
    refused = server.submit(token, QUICKSTART, *one_real_trial("too-big"), "budget.gpu_hours=5")
    assert refused.status_code == 403
    assert "quota of user 'bob': 1 GPU-hours" in refused.json()["detail"]
    unbounded = server.submit(token, QUICKSTART, *one_real_trial("unbounded"))
    assert unbounded.status_code == 403 and "budget.gpu_hours" in unbounded.json()["detail"]
    fits = server.submit(token, QUICKSTART, *one_real_trial("fits"), "budget.gpu_hours=0.5")
    assert fits.status_code == 201
    again = server.submit(token, QUICKSTART, *one_real_trial("no-room"), "budget.gpu_hours=0.6")
    assert again.status_code == 403, again.text  # 0.5 reserved by the queued one
    rehearsal = server.submit(token, SIMULATED, *simulated_options("rehearsal"),
                              "budget.gpu_hours=5")
    assert rehearsal.status_code == 201 and rehearsal.json()["simulated"] is True
    assert server.api("POST", "/api/quotas", token, json={
        "scope": "user", "name": "bob", "gpu_hours": 99}).status_code == 403
    carol = server.token("carol")  # no quota of her own, but her project has one
    assert server.api("POST", "/api/quotas", admin, json={
        "scope": "project", "name": "llm", "gpu_hours": 2.0}).status_code == 200
    assert server.submit(carol, QUICKSTART, *one_real_trial("in-project"),
                         "budget.gpu_hours=1.5", project="llm").status_code == 201
    over = server.submit(carol, QUICKSTART, *one_real_trial("over-project"),
                         "budget.gpu_hours=1", project="llm")
    assert over.status_code == 403 and "quota of project 'llm'" in over.json()["detail"]
    assert server.submit(carol, QUICKSTART, *one_real_trial("no-project"),
                         "budget.gpu_hours=1").status_code == 201
    server.wait_final(admin, ["fits", "in-project", "no-project", "rehearsal"], timeout_s=600)


@on_database("sqlite")
def test_cancel_stops_running_trials(service):
    server = service().start()
    token = server.token("alice")
    response = server.submit(token, QUICKSTART, "name=cancel-me", "trial.steps=100000",
                             "trial.timeout_s=600", "tracking.enabled=false")
    assert response.status_code == 201, response.text
    campaign_dir = server.runs_dir / "cancel-me"
    deadline = time.monotonic() + 120
    while not alive_naming(campaign_dir / "trials"):
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.3)
    assert server.api("POST", "/api/campaigns/cancel-me/cancel", token).status_code == 200
    campaign = server.wait_final(token, ["cancel-me"], timeout_s=60)["cancel-me"]
    assert campaign["state"] == "cancelled"
    # The trial it stopped ran no more: it is counted cancelled, not running.
    assert campaign["running"] == 0 and "running" not in campaign["counts"]
    assert campaign["counts"].get("cancelled") == 1, campaign["counts"]
    assert alive_after(campaign_dir / "trials") == []
    events = [e["event"] for e in journal_events(campaign_dir)]
    assert "campaign_cancelled" in events, server.logs()


@on_database("sqlite")
def test_authentication_and_one_line_errors(service):
    server = service().start()
    alice, bob = server.token("alice"), server.token("bob")
    assert server.api("GET", "/api/campaigns", "not-a-token").status_code == 401
    assert httpx.get(f"{server.url}/api/campaigns").status_code == 401  # no token at all
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    assert {"/api/campaigns", "/api/campaigns/{name}/cancel", "/api/campaigns/{name}/logs",
            "/api/campaigns/{name}/best", "/api/quotas"} <= set(paths)
    assert server.api("GET", "/api/whoami", alice).json() == {"user": "alice", "admin": False}
    submitted = server.submit(alice, SIMULATED, *simulated_options("alices", latency=5))
    assert submitted.status_code == 201
    hidden = server.api("POST", "/api/campaigns/alices/cancel", bob)  # not bob's to see
    assert hidden.status_code == 404 and "no campaign 'alices'" in hidden.json()["detail"]
    malformed = server.api("POST", "/api/campaigns", alice,
                           json={"spec_yaml": "name: x\nmodel: [unclosed\n", "workdir": str(ROOT)})
    assert malformed.status_code == 422
    detail = malformed.json()["detail"]
    assert "\n" not in detail and detail.startswith("submitted spec: line")
    wrong_key = server.submit(alice, SIMULATED, "budget.max_trails=3")
    assert wrong_key.status_code == 422 and "max_trails" in wrong_key.json()["detail"]
    assert server.api("GET", "/api/campaigns/alices", bob).status_code == 404
    assert server.api("GET", "/api/campaigns/alices", alice).json()["owner"] == "alice"
    assert server.api("POST", "/api/campaigns/alices/cancel", alice).status_code == 200


@on_database(POSTGRES_ELSE_SQLITE)
def test_sigterm_detaches_and_the_next_server_reattaches(service):
    """A graceful stop leaves the running trial alive; the next server resumes the campaign,
    which takes the trial over instead of running it again."""
    server = service().start()
    token = server.token("alice")
    server.submit(token, QUICKSTART, "name=detach", "budget.max_trials=1", "trial.steps=30",
                  "trial.warmup_steps=1", "tracking.enabled=false")
    campaign_dir = server.runs_dir / "detach"
    deadline = time.monotonic() + 120
    while not alive_naming(campaign_dir / "trials"):
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.2)
    server.stop()
    assert alive_naming(campaign_dir / "trials"), "the trial died with the service"
    assert re.search(r"^ParaTune service on http://\S+ stopped: running trials keep running",
                     server.logs(), re.M), server.logs()[-2000:]
    server = service().start()
    done = server.wait_final(token, ["detach"])["detach"]
    assert done["state"] == "finished" and done["counts"] == {"ok": 1}, server.logs()
    events = [e["event"] for e in journal_events(campaign_dir)]
    assert events.count("submitted") == 1 and "reattached" in events


@on_database("sqlite")
def test_queue_starts_higher_priority_first(service):
    server = service("--max-running", "1").start()
    token = server.token("alice")
    # Trials of 5 s: first still runs when both others are queued, however slow the submits.
    server.submit(token, SIMULATED,
                  *simulated_options("first", trials=3, latency=5, tracking=False))
    deadline = time.monotonic() + 120
    while server.campaign(token, "first")["state"] == "queued":  # the queue is read each tick
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.1)
    server.submit(token, SIMULATED, *simulated_options("low", trials=2, tracking=False), priority=0)
    server.submit(token, SIMULATED, *simulated_options("high", trials=2, tracking=False),
                  priority=5)
    waiting = server.campaign(token, "low")
    assert waiting["state"] == "queued"
    done = server.wait_final(token, ["first", "low", "high"])
    assert done["high"]["started_at"] < done["low"]["started_at"]
    assert done["high"]["started_at"] >= done["first"]["ended_at"], (done, server.logs())
    assert all(c["state"] == "finished" for c in done.values())
