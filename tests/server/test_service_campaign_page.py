"""One campaign's page on the service and what it reads: the page itself (no data in it), the
campaign's trials best first with the knobs they vary and the pruned layouts as a count, and
the tail of its controller's log. In-process against the real app (FastAPI's TestClient) over a
simulated campaign's real journal; the browser's view is in test_service_client.py."""

from __future__ import annotations

import re

import time

import pytest
from fastapi.testclient import TestClient
from test_report_contents import mixed

from orchestrator.server.api import create_app
from orchestrator.server.auth import create_token
from orchestrator.server.config import ServiceConfig
from orchestrator.server.db import FINISHED, Campaign
from orchestrator.server.service import Service

LOG_LINES = 3000


@pytest.fixture
def page(tmp_path, runs_dir, cli):
    """alice's finished simulated campaign `mixed` (7 of its 12 layouts pruned), its
    controller log, and a client of the app with tokens for alice and bob."""
    view = mixed(tmp_path, cli)
    service = Service(ServiceConfig(state_dir=tmp_path / "state", runs_dir=runs_dir),
                      base_url="http://127.0.0.1:9")
    tokens = {user: create_token(service.db, user) for user in ("alice", "bob")}
    with service.db.session() as s:
        s.add(Campaign(name="mixed", owner="alice", state=FINISHED, spec_yaml="",
                       submitted_at=time.time(), started_at=time.time(), max_trials=12,
                       simulated=True))
    log = service.config.log_path("mixed")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"line {i}\n" for i in range(LOG_LINES)))
    client = TestClient(create_app(service))
    yield client, tokens, view, log
    service.db.dispose()


def bearer_header(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_the_campaign_page_carries_no_data_and_asks_the_api(page):
    client, _, _, _ = page
    shown = client.get("/campaigns/mixed")
    assert shown.status_code == 200 and shown.headers["content-type"].startswith("text/html")
    assert "alice" not in shown.text and "tokens_per_s" not in shown.text
    # Nothing from elsewhere: its one script source is the service's own shared one.
    assert re.findall(r'src="([^"]*)"', shown.text) == ["/pages.js"]
    shared = client.get("/pages.js")
    assert shared.status_code == 200 and "async function api(path)" in shared.text
    for path in ('"/api/campaigns/"', '"/trials"', '"/logs?tail="'):
        assert path in shown.text
    listing = client.get("/").text
    assert '"/campaigns/" + encodeURIComponent(c.name)' in listing  # the list links to it


def test_trials_come_best_first_with_the_knobs_they_vary(page):
    client, tokens, view, _ = page
    found = client.get("/api/campaigns/mixed/trials", headers=bearer_header(tokens["alice"])).json()
    records = view.records()
    pruned = [r for r in records if r.result.status == "infeasible"]
    ran = {r.trial_id: r for r in records if r.result.status != "infeasible"}
    assert found["pruned"] == len(pruned) == 7
    assert sorted(t["trial_id"] for t in found["trials"]) == sorted(ran)
    ok = [t for t in found["trials"] if t["status"] == "ok"]
    assert found["trials"][:len(ok)] == ok  # the measured first
    values = [t["value"] for t in ok]
    assert values == sorted(values, reverse=True) and len(values) >= 2
    for t in ok:
        assert t["value"] == ran[t["trial_id"]].result.tokens_per_s
    # MIXED varies tp, zero_stage and micro_batch_size (grad_accum_steps and dp follow).
    assert {"tp", "zero_stage", "micro_batch_size"} <= set(found["knobs"])
    assert "pp" not in found["knobs"] and "activation_checkpointing" not in found["knobs"]
    failed = [t for t in found["trials"] if t["status"] not in ("ok", "running")]
    assert all(t["error"] and "\n" not in t["error"] for t in failed)
    refused = client.get("/api/campaigns/mixed/trials", headers=bearer_header(tokens["bob"]))
    assert refused.status_code == 404  # not bob's: not even told it exists


def test_the_log_tail_is_its_last_bytes(page):
    client, tokens, _, log = page
    size = log.stat().st_size
    tail = client.get("/api/campaigns/mixed/logs", params={"tail": 200},
                      headers=bearer_header(tokens["alice"]))
    assert tail.status_code == 200 and tail.text == log.read_text()[-200:]
    assert tail.text.endswith(f"line {LOG_LINES - 1}\n")
    assert int(tail.headers["X-Log-Offset"]) == size
    bad = client.get("/api/campaigns/mixed/logs", params={"tail": 0},
                     headers=bearer_header(tokens["alice"]))
    assert bad.status_code == 422 and bad.json()["detail"].startswith("query.tail:")

