"""The campaign service's guards against misuse and odd input, against real server processes:
a second server on a live one's state directory, database or port touches none of its
controllers, the controllers never act as API clients, quotas and log offsets are bounded, a
controller that keeps dying is reported by how it ended, and a campaign name may be as long as a spec allows
on SQLite and on PostgreSQL (a database an older service made included)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, POSTGRES_ELSE_SQLITE, journal_events, on_database
from ports import free_port
from sqlalchemy.engine import make_url
from test_service import simulated_options

from orchestrator.cli.service_client import SERVER_ENV, TOKEN_ENV
from orchestrator.common.processes import is_running, start_time
from orchestrator.server import supervisor as supervisor_module
from orchestrator.server.auth import create_token
from orchestrator.server.campaign_summary import ProgressCache
from orchestrator.server.config import ServiceConfig
from orchestrator.server.db import FAILED, QUEUED, RUNNING, Campaign, Database
from orchestrator.server.slot_pool import SlotPool
from orchestrator.campaign_spec.strings import NAME_MAX

SIMULATED = EXAMPLES / "frontier-175b.yaml"


def one_line_failure(done) -> str:
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1, (done.returncode, lines)
    return lines[0]


@on_database(POSTGRES_ELSE_SQLITE)
def test_a_second_server_touches_none_of_the_running_controllers(service, tmp_path):
    server = service().start()
    token = server.token("alice")
    # Trials of a minute: the controller outlives the three server starts below however
    # slow the machine is, and the test cancels the campaign once they are checked.
    server.submit(token, SIMULATED, *simulated_options("guarded", trials=30, latency=60.0,
                                                       tracking=False))
    deadline = time.monotonic() + 60
    while not (campaign := server.campaign(token, "guarded"))["trials"]:
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.2)
    pid = campaign["controller_pid"]
    started = start_time(pid)

    same_state = server.cli("server", "--port", str(server.port), "--state-dir",
                            str(server.state_dir), "--database", server.database_url)
    # Another state directory on the same database, on another port: the database stops it.
    same_database = server.cli("server", "--port", str(free_port()), "--state-dir",
                               str(tmp_path / "another"), "--database", server.database_url)
    # Another state directory and database, on the same port: the port stops it.
    own = f"sqlite:///{tmp_path / 'own.db'}"
    same_port = server.cli("server", "--port", str(server.port), "--state-dir",
                           str(tmp_path / "third"), "--database", own)
    assert is_running(pid, started), server.logs()
    assert server.campaign(token, "guarded")["controller_pid"] == pid
    error = one_line_failure(same_state)
    assert f"PID {server.process.pid}" in error and "--state-dir" in error, error
    error = one_line_failure(same_database)
    assert error.startswith("error: --database ") and f"PID {server.process.pid}" in error, error
    password = make_url(server.database_url).password
    assert "another paratune server" in error and not (password and password in error), error
    assert not (tmp_path / "another" / "logs").exists()  # no controller started there
    error = one_line_failure(same_port)
    assert f"--port {server.port}" in error, error
    assert server.api("POST", "/api/campaigns/guarded/cancel", token).status_code == 200
    done = server.wait_final(token, ["guarded"])["guarded"]
    assert done["state"] == "cancelled" and done["restarts"] == 0, server.logs()
    log = (server.state_dir / "logs" / "guarded.log").read_text()
    assert "detached" not in log and log.count("paratune run") == 1, log


def lock_sessions(admin) -> list[tuple[int, str]]:
    """(backend PID, application_name) of the sessions holding the service's advisory lock."""
    from orchestrator.server.database_lock import ADVISORY_KEY

    return admin.execute(
        "SELECT l.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a "
        "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND l.objid = %s "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (ADVISORY_KEY,)).fetchall()


@on_database("postgresql")
def test_a_server_whose_database_session_ends_locks_again_or_leaves(service, database_url):
    """A PostgreSQL restart ends the session holding the service's lock (here: that session
    alone, by pg_terminate_backend). The service takes the lock again; had another taken it
    meanwhile, the service stops the graceful way and leaves the campaigns to it."""
    import psycopg

    from orchestrator.server.database_lock import ADVISORY_KEY
    from orchestrator.server.supervisor import LOCK_CHECK_S

    server = service().start()
    libpq = make_url(database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as admin:
        ((first, name),) = lock_sessions(admin)
        assert f"PID {server.process.pid}" in name, name
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        deadline = time.monotonic() + 6 * LOCK_CHECK_S
        while not (held := lock_sessions(admin)) or held[0][0] == first:
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.2)
        assert f"PID {server.process.pid}" in held[0][1] and server.process.poll() is None
        # Again, but this time a rival takes the lock before the service looks.
        admin.execute("SELECT pg_terminate_backend(%s)", (held[0][0],))
        deadline = time.monotonic() + LOCK_CHECK_S / 2
        while not admin.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_KEY,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the service took its lock back first"
            time.sleep(0.05)
        # The graceful stop: uvicorn ends on the SIGTERM it re-raises once it has shut down.
        assert server.process.wait(6 * LOCK_CHECK_S + 60) == -signal.SIGTERM, server.logs()
        assert "another paratune server took the database's lock" in server.logs()


@on_database("sqlite")
def test_controllers_never_get_the_clients_server_and_token_nor_the_database(service):
    server = service()
    token = server.token("alice")
    server.env.update({SERVER_ENV: server.url, TOKEN_ENV: token,  # a client of itself
                       "PARATUNE_DATABASE_URL": server.database_url})
    server.start()
    server.submit(token, SIMULATED, *simulated_options("env", trials=4, latency=60, tracking=False))
    deadline = time.monotonic() + 60
    while not (campaign := server.campaign(token, "env"))["running"]:
        assert time.monotonic() < deadline, server.logs()
        time.sleep(0.2)
    environ = Path(f"/proc/{campaign['controller_pid']}/environ").read_bytes().split(b"\0")
    assert not [v for v in environ if v.startswith(
        (b"PARATUNE_SERVER=", b"PARATUNE_TOKEN=", b"PARATUNE_DATABASE_URL="))]
    assert server.api("POST", "/api/campaigns/env/cancel", token).status_code == 200
    done = server.wait_final(token, ["env"], timeout_s=60)["env"]
    assert done["state"] == "cancelled", server.logs()
    events = [e["event"] for e in journal_events(server.runs_dir / "env")]
    assert "campaign_cancelled" in events, server.logs()


@on_database("sqlite")
def test_quotas_are_finite_and_above_zero(service):
    server = service().start()
    admin = server.token("root", admin=True)
    for raw in ('"inf"', '"nan"', "1e400", "0"):
        refused = httpx.post(f"{server.url}/api/quotas", timeout=30, headers={
            "Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
            content=f'{{"scope": "user", "name": "bob", "gpu_hours": {raw}}}')
        assert refused.status_code == 422, (raw, refused.text)
        assert refused.json()["detail"].startswith("gpu_hours: "), refused.text
    assert server.api("POST", "/api/quotas", admin, json={
        "scope": "user", "name": "bob", "gpu_hours": 2.5}).status_code == 200
    for value in ("0", "-1", "inf", "nan"):
        done = server.cli("server", "quota", "set", "--user", "bob", "--gpu-hours", value,
                          "--state-dir", str(server.state_dir), "--database", server.database_url)
        assert done.returncode == 2, (value, done.stdout, done.stderr)
        assert "--gpu-hours" in one_line_failure(done)
    quota = server.cli("server", "quota", "set", "--user", "bob", "--gpu-hours", "0.5",
                       "--state-dir", str(server.state_dir), "--database", server.database_url)
    assert quota.returncode == 0, quota.stderr


@on_database("sqlite")
def test_a_log_offset_past_the_end_reads_nothing(service):
    server = service().start()
    token = server.token("alice")
    server.submit(token, SIMULATED,
                  *simulated_options("logged", trials=2, latency=0.1, tracking=False))
    server.wait_final(token, ["logged"])
    size = (server.state_dir / "logs" / "logged.log").stat().st_size
    whole = server.api("GET", "/api/campaigns/logged/logs", token)
    assert whole.status_code == 200 and int(whole.headers["X-Log-Offset"]) == size
    for offset in (2**62, 2**40, size + 10, size):
        past = server.api("GET", "/api/campaigns/logged/logs", token, params={"offset": offset})
        assert past.status_code == 200 and past.text == "", (offset, past.text[:200])
        assert int(past.headers["X-Log-Offset"]) == size
    for offset in (2**62 + 1, 2**64, 10**30, -1):
        refused = server.api("GET", "/api/campaigns/logged/logs", token,
                             params={"offset": offset})
        assert refused.status_code == 422, (offset, refused.text)
        assert refused.json()["detail"].startswith("query.offset: "), refused.text


# A stand-in controller: on its first start it says why it fails, then every start dies by
# SIGKILL after `argv[-1]` seconds, the later ones without a word (as a controller killed while
# starting up does).
DYING = """
import os, signal, sys, time
said = os.path.join(os.environ["PARATUNE_RUNS_DIR"], "said")
if not os.path.exists(said):
    open(said, "w").close()
    print("RuntimeError: CUDA error: an illegal memory access", flush=True)
time.sleep(float(sys.argv[-1]))
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def dying_controller(tmp_path, monkeypatch):
    """A supervisor (real database, real child processes) whose campaign's controller is
    DYING, living `run_s` seconds each start; returns a function that ticks it until `done`."""
    supervisors: list[supervisor_module.Supervisor] = []

    def make(run_s: float, **limits):
        monkeypatch.setattr(supervisor_module, "controller_argv", lambda command, *args: [
            sys.executable, "-c", DYING, command, str(run_s)])
        config = ServiceConfig(state_dir=tmp_path / "state", runs_dir=tmp_path / "runs",
                               backoff_s=0.05, tick_s=0.05, **limits)
        config.state_dir.mkdir()
        config.runs_dir.mkdir()
        db = Database(config.url)
        supervisor = supervisor_module.Supervisor(db, config, SlotPool(db, None),
                                                  ProgressCache(config.runs_dir),
                                                  "http://127.0.0.1:1")
        supervisors.append(supervisor)
        create_token(db, "alice")  # an owner with a token: a campaign of none is not started
        with db.session() as s:
            s.add(Campaign(name="dying", owner="alice", state=QUEUED, spec_yaml="name: dying\n",
                           submitted_at=time.time()))

        def run_until(done, timeout_s: float = 60) -> Campaign:
            deadline = time.monotonic() + timeout_s
            while True:
                supervisor.tick()
                with db.session() as s:
                    row = s.get(Campaign, "dying")
                if done(row, config.log_path("dying")):
                    return row
                assert time.monotonic() < deadline, (row.state, row.reason, row.restarts)
                time.sleep(0.05)
        return run_until

    yield make
    for supervisor in supervisors:
        supervisor.stop()
        supervisor.db.dispose()


def starts(log: Path) -> int:
    return log.read_text().count(" paratune run ") if log.exists() else 0


def test_a_controller_that_keeps_dying_fails_its_campaign_saying_how(dying_controller):
    run_until = dying_controller(run_s=0.0, max_restarts=2)
    row = run_until(lambda row, _log: row.state == FAILED)
    assert row.reason.startswith("the controller died 3 times in a row; the last time it was "
                                 "killed by signal 9 (SIGKILL); its last line (from an earlier "
                                 "start): RuntimeError: CUDA error"), row.reason
    assert "---" not in row.reason


def test_restarts_count_afresh_after_a_healthy_run(dying_controller):
    """Deaths spread out (each after running longer than healthy_run_s) never add up to
    max_restarts."""
    run_until = dying_controller(run_s=0.6, max_restarts=1, healthy_run_s=0.3)
    row = run_until(lambda row, log: row.state not in (QUEUED, RUNNING) or starts(log) >= 4)
    assert row.state == RUNNING and row.restarts <= 1, (row.state, row.reason, row.restarts)


LONG_NAME = "a-campaign-name-as-long-as-a-spec-allows-" + "x" * 39


def test_a_campaign_name_as_long_as_a_spec_allows(service):
    assert len(LONG_NAME) == 80 < NAME_MAX
    server = service().start()
    token = server.token("alice")
    response = server.submit(token, SIMULATED, *simulated_options(LONG_NAME, trials=2, latency=0.1,
                                                                  tracking=False))
    assert response.status_code == 201, response.text
    done = server.wait_final(token, [LONG_NAME])[LONG_NAME]
    assert done["state"] == "finished", server.logs()


@on_database("postgresql")
def test_an_older_services_database_takes_long_names(service, database_url):
    from sqlalchemy import create_engine, inspect, text

    from orchestrator.server.db import Base

    engine = create_engine(database_url)  # the tables as services before NAME_MAX made them
    Base.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(text("ALTER TABLE campaigns ALTER COLUMN name TYPE VARCHAR(64)"))
    server = service().start()
    token = server.token("alice")
    response = server.submit(token, SIMULATED, *simulated_options(LONG_NAME, trials=2, latency=0.1,
                                                                  tracking=False))
    assert response.status_code == 201, response.text
    assert server.campaign(token, LONG_NAME)["name"] == LONG_NAME
    columns = {c["name"]: c["type"] for c in inspect(engine).get_columns("campaigns")}
    assert columns["name"].length == NAME_MAX
    engine.dispose()
    assert server.wait_final(token, [LONG_NAME])[LONG_NAME]["state"] == "finished"
