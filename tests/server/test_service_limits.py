"""What the service takes back or refuses, against one real server (SQLite, one campaign
running at a time): a request body over the limit is refused before it is read, a deleted
token stops working at the next request, a queued campaign whose owner lost their token or
code grant (or that a new quota finds without a budget) fails instead of starting, and a
campaign within its quota is held to its budget by reservation, not only admitted against it."""

from __future__ import annotations

import select
import socket
import sqlite3
import time

import pytest
from conftest import journal_events
from test_service import QUICKSTART, SIMULATED, simulated_options

from orchestrator.server import trust
from orchestrator.server.auth import create_token
from orchestrator.server.db import Database

MIB = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from service_harness import ServiceProcess  # it imports conftest

    state = tmp_path_factory.mktemp("limits") / "service"
    state.mkdir()
    started = ServiceProcess(state, f"sqlite:///{state}/server.db", "--max-running", "1").start()
    yield started
    started.stop()


def tokens(server, *users: str) -> list[str]:
    """A new token for each user (an admin's for `root`), made on the server's database
    directly: quicker than a CLI process each."""
    db = Database(server.database_url)
    try:
        return [create_token(db, user, admin=user == "root") for user in users]
    finally:
        db.dispose()


def set_code_grant(server, user: str) -> None:
    db = Database(server.database_url)
    try:
        trust.set_code_grant(db, trust.USER, user)
    finally:
        db.dispose()


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def response_head(sock: socket.socket, limit_s: float = 30) -> bytes:
    """The status line and headers of the answer on `sock` (what arrived of them)."""
    sock.settimeout(limit_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


REQUEST = b"POST /api/campaigns HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def test_a_large_body_is_refused_before_it_is_read(server):
    before = peak_rss_mib(server.process.pid)
    # Declared: answered before a byte of the body is sent.
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST + b"Content-Length: %d\r\n\r\n" % (256 * MIB))
        head = response_head(sock)
    assert head.startswith(b"HTTP/1.1 413"), head

    # Chunked: refused once past the limit, long before the 64 MiB offered have been sent.
    sent, chunk = 0, b"%x\r\n%s\r\n" % (MIB, b"x" * MIB)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(REQUEST + b"Transfer-Encoding: chunked\r\n\r\n")
        while sent < 64 * MIB and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += MIB
        else:
            if sent >= 64 * MIB:
                sock.sendall(b"0\r\n\r\n")
        head = response_head(sock)
    assert head.startswith(b"HTTP/1.1 413"), (sent, head)
    assert sent < 64 * MIB
    assert peak_rss_mib(server.process.pid) - before < 48  # 8 MiB read at most, and let go


def test_a_deleted_token_stops_working_at_once(server):
    (token,) = tokens(server, "dora")
    assert server.api("GET", "/api/campaigns", token).status_code == 200
    with sqlite3.connect(server.state_dir / "server.db") as db:
        db.execute("DELETE FROM tokens WHERE user = 'dora'")
    assert server.api("GET", "/api/campaigns", token).status_code == 401


def test_queued_campaigns_are_checked_again_when_they_start(server, tmp_path):
    admin, bob, carol, gus, erin = tokens(server, "root", "bob", "carol", "gus", "erin")
    set_code_grant(server, "bob")
    blocker = server.submit(admin, SIMULATED, *simulated_options("blocker", trials=60, concurrent=1,
                                                                 latency=1.0, tracking=False))
    assert blocker.status_code == 201, blocker.text
    deadline = time.monotonic() + 60
    while server.campaign(admin, "blocker")["state"] != "running":
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.2)

    marker = tmp_path / "bobs-command-ran"
    queued = {
        "bobs": server.submit(bob, QUICKSTART, "name=bobs", "budget.max_trials=1",
                              "tracking.enabled=false", "trial.command=[python3, -c, "
                              f"'open(\"{marker}\", \"w\")', '{{zero_stage}}', "
                              "'{micro_batch_size}', '{activation_checkpointing}']"),
        "carols": server.submit(carol, SIMULATED,
                                *simulated_options("carols", trials=1, tracking=False)),
        "gus-unbounded": server.submit(gus, QUICKSTART, "name=gus-unbounded",
                                       "budget.max_trials=1", "tracking.enabled=false"),
        "erins": server.submit(erin, SIMULATED,
                               *simulated_options("erins", trials=1, tracking=False)),
    }
    for name, response in queued.items():
        assert response.status_code == 201, (name, response.text)
        assert server.campaign(admin, name)["state"] == "queued"
    assert server.cli("server", "grant", "--user", "bob", "--revoke",
                      *server.admin_options()).returncode == 0
    revoked = server.cli("server", "token", "revoke", "--user", "carol", *server.admin_options())
    assert revoked.returncode == 0 and "1 token(s) of 'carol' revoked" in revoked.stderr
    assert server.api("POST", "/api/quotas", admin, json={
        "scope": "user", "name": "gus", "gpu_hours": 5}).status_code == 200
    assert server.api("POST", "/api/campaigns/blocker/cancel", admin).status_code == 200

    done = server.wait_final(admin, [*queued, "blocker"])
    bobs, carols, gus_unbounded = done["bobs"], done["carols"], done["gus-unbounded"]
    assert bobs["state"] == "failed" and bobs["reason"].startswith("not started: trial.command "
                                                                   "takes a code grant"), bobs
    assert not marker.exists()
    assert carols["state"] == "failed" and "holds no token" in carols["reason"], carols
    assert gus_unbounded["state"] == "failed", gus_unbounded
    assert "budget.gpu_hours" in gus_unbounded["reason"], gus_unbounded
    assert done["erins"]["state"] == "finished", done["erins"]  # kept what it needed: it runs
    for name in ("bobs", "carols", "gus-unbounded"):
        assert not (server.runs_dir / name).exists(), name  # no controller ever ran it


def test_a_campaign_within_its_quota_is_held_to_its_budget(server):
    """0.0002 GPU-hours of quota and of budget: two real trials of two GPUs each would reserve
    0.1 each (180 s of timeout), so none starts, where they once both ran past the quota."""
    admin, fay = tokens(server, "root", "fay")
    assert server.api("POST", "/api/quotas", admin, json={
        "scope": "user", "name": "fay", "gpu_hours": 0.0002}).status_code == 200
    submitted = server.submit(fay, QUICKSTART, "name=fays", "budget.gpu_hours=0.0002",
                              "budget.max_trials=2", "budget.max_concurrent=2",
                              "trial.steps=1", "trial.warmup_steps=0", "tracking.enabled=false")
    assert submitted.status_code == 201, submitted.text
    fays = server.wait_final(admin, ["fays"])["fays"]
    assert fays["state"] == "finished" and fays["gpu_hours"] <= 0.0002, fays
    events = journal_events(server.runs_dir / "fays")
    assert not [e for e in events if e["event"] == "submitted"]
    end = [e for e in events if e["event"] == "campaign_end"][-1]
    assert end["stop_reason"].startswith("budget.gpu_hours: "), end
