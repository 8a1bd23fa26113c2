"""The campaign service from its users' side: `paratune submit`, `ls`, `status`, `logs`,
`best` and `cancel` against a real `paratune server` (its own PID, a free loopback port, a
temporary state directory), every failure one line and exit code 2, and the web page in
headless Chromium.

The server admits one campaign at a time (--max-running 1), so the module's campaigns hold
four states at once: `demo` finishes, `slow` runs until an admin cancels it, `waiting` stays
queued behind it, and `dropped` is cancelled before it starts. Set PARATUNE_SHOTS=docs to
write docs/service-web.png and docs/service-campaign.png from the pages showing them.
"""

from __future__ import annotations

import html
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from builders import one_line_error
from conftest import EXAMPLES, ROOT, journal_events
from ports import free_port, start_on_a_free_port
from screenshots import CHROMIUM, chromium, keep_screenshot

SPEC = EXAMPLES / "frontier-175b.yaml"
QUICK = ["--set", "backend.latency_s=0.3", "--set", "budget.max_trials=6",
         "--set", "tracking.enabled=false"]
SLOW = ["--set", "backend.latency_s=3", "--set", "budget.max_trials=200", "--set", "search.seed=1",
        "--set", "budget.max_concurrent=2", "--set", "tracking.enabled=false"]
FINAL = ("finished", "failed", "cancelled", "refused")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ParaTune's or MLflow's settings, the checkout first
    on the import path, and `extra` on top."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PARATUNE_") and k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**env, **extra}


def run_paratune(*args: str, server: str | None = None, token: str | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
    extra = {"PARATUNE_SERVER": server} if server else {}
    if token:
        extra["PARATUNE_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=clean_env(**extra))


@dataclass
class Server:
    url: str
    state: Path
    tokens: dict[str, str]

    def cli(self, *args: str, user: str = "alice", **kw) -> subprocess.CompletedProcess:
        return run_paratune(*args, server=self.url, token=self.tokens[user], **kw)

    def ok(self, *args: str, user: str = "alice", **kw) -> subprocess.CompletedProcess:
        proc = self.cli(*args, user=user, **kw)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr[-3000:])
        return proc

    def campaign(self, name: str) -> dict:
        """As the admin sees it (a user sees only their own campaigns)."""
        return json.loads(self.ok("status", name, "--json", user="root").stdout)

    def wait_for(self, name: str, ready, timeout: float = 180) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.campaign(name)
            if ready(found):
                return found
            time.sleep(0.5)
        raise AssertionError(f"{name} never got there: {found}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`paratune server` as a child process, stopped by its PID (SIGTERM: it detaches its
    controllers and exits), with tokens for alice, bob and the admin root."""
    base = tmp_path_factory.mktemp("service")
    state, log = base / "state", base / "server.log"

    def launch(port: int) -> subprocess.Popen:
        with open(log, "a") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "orchestrator.cli", "server", "--state-dir", str(state),
                 "--runs-dir", str(state / "runs"), "--port", str(port), "--max-running", "1"],
                cwd=ROOT, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def answers(port: int) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/whoami", timeout=2).status_code == 401
        except httpx.TransportError:
            return False

    proc, port = start_on_a_free_port(launch, answers, log)
    url = f"http://127.0.0.1:{port}"
    try:
        tokens = {}
        for user, admin in (("alice", []), ("bob", []), ("root", ["--admin"])):
            made = run_paratune("server", "token", "create", "--user", user, *admin,
                                "--state-dir", str(state))
            assert made.returncode == 0, made.stderr
            tokens[user] = made.stdout.strip()
        yield Server(url, state, tokens)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def demo(server):
    """alice's quick campaign, submitted first: (the submit process, its seconds)."""
    started = time.time()
    proc = server.cli("submit", str(SPEC), *QUICK, "--set", "name=demo")
    return proc, time.time() - started


@pytest.fixture(scope="module")
def slow(server, demo):
    """bob's long campaign (several minutes, however slow the machine makes the tests
    between), queued behind demo; the last test cancels it."""
    return json.loads(server.ok("submit", str(SPEC), *SLOW, "--set", "name=slow", "--json",
                                user="bob").stdout)


@pytest.fixture(scope="module")
def waiting(server, slow):
    """alice's campaign of lower priority: queued as long as slow runs."""
    return server.ok("submit", str(SPEC), *QUICK, "--set", "name=waiting", "--priority", "-1",
                     "--project", "llm").stdout.strip()


@pytest.fixture(scope="module")
def dropped(server, waiting):
    """alice's campaign, cancelled while queued."""
    name = server.ok("submit", str(SPEC), *QUICK, "--set", "name=dropped",
                     "--priority", "-5").stdout.strip()
    cancelled = server.ok("cancel", name)
    assert cancelled.stderr.strip() == "dropped: cancelled"
    return name


def test_submit_prints_the_campaign_name_and_returns(demo):
    proc, seconds = demo
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "demo\n"
    assert "paratune logs demo --follow" in proc.stderr
    assert seconds < 60  # the process's start-up, not the campaign


def test_submit_json_prints_the_queued_campaign(server, slow):
    assert slow["name"] == "slow" and slow["owner"] == "bob" and slow["state"] == "queued"
    assert slow["max_trials"] == 200 and slow["trials"] == 0 and slow["best"] is None
    assert slow["report_url"] == "/api/campaigns/slow/report"


def test_logs_follow_ends_when_the_campaign_finishes(server, demo):
    followed = server.ok("logs", "demo", "--follow", timeout=300)
    assert re.search(r"^best: t\d{4} ", followed.stdout, re.M), followed.stdout[-2000:]
    # The trials that ran and the layouts pruned unrun are counted apart.
    pruned = sum(1 for e in journal_events(server.state / "runs" / "demo")
                 if e["event"] == "finished" and e["result"]["status"] == "infeasible")
    header = "campaign demo: 6 trials ran" + (f", {pruned} layouts pruned" if pruned else "")
    assert re.search(rf"^{header}$", followed.stdout, re.M), followed.stdout[-3000:]
    found = server.campaign("demo")
    assert found["state"] == "finished" and found["final"]
    assert found["trials"] == found["max_trials"] == 6 and found["running"] == 0
    # Every trial ended: measured, or out of memory on a layout the model calls risky (predicted
    # over the device but within its memory margin), which a campaign measures by design.
    counts = found["counts"]
    assert counts.get("ok", 0) >= 1 and counts.get("ok", 0) + counts.get("oom", 0) == 6, counts
    assert found["best"]["metric"] == "tokens_per_s"
    assert server.ok("logs", "demo").stdout == followed.stdout  # the same, complete log


def test_ls_and_status_list_every_campaign(server, demo, slow):
    """An admin's list holds every campaign; a user's, their own."""
    listed = json.loads(server.ok("ls", "--json", user="root").stdout)["campaigns"]
    owners = {c["name"]: c["owner"] for c in listed}
    assert owners["demo"] == "alice" and owners["slow"] == "bob"
    mine = json.loads(server.ok("ls", "--json").stdout)["campaigns"]
    assert {c["owner"] for c in mine} == {"alice"} and "slow" not in {c["name"] for c in mine}
    table = server.ok("ls", "--server", server.url, user="root").stdout
    assert re.search(r"^ ?demo\s+alice\s+finished\s+6/6\s+0\s", table, re.M), table
    every = json.loads(server.ok("status", "--json", user="root").stdout)["campaigns"]
    assert [c["name"] for c in every] == [c["name"] for c in listed]
    text = server.ok("status", "demo").stdout
    assert text.startswith("demo (alice): finished, 6/6 trials") and "best t" in text


def test_best_through_the_server_matches_the_runs_directory(server, demo, tmp_path):
    server.wait_for("demo", lambda c: c["state"] == "finished")
    remote = server.ok("best", "demo", "--format", "torchrun").stdout
    runs = str(server.state / "runs")
    # an explicit --runs-dir reads the local directory even with $PARATUNE_SERVER set
    local = server.ok("best", "demo", "--format", "torchrun", "--runs-dir", runs).stdout
    assert remote.startswith("#!/usr/bin/env bash") and remote == local
    launch = tmp_path / "launch.sh"
    wrote = server.ok("best", "demo", "--format", "torchrun", "-o", str(launch), "--json")
    summary = json.loads(wrote.stdout)
    assert launch.read_text() == remote and os.access(launch, os.X_OK)
    assert summary["trial_id"] == server.campaign("demo")["best"]["trial_id"]
    assert summary["file"] == str(launch) and summary["tokens_per_s"] > 0
    local_json = json.loads(run_paratune("best", "demo", "--json", "--runs-dir", runs).stdout)
    assert local_json["trial_id"] == summary["trial_id"]
    refused = one_line_error(server.cli("best", "demo", "--format", "command"))
    assert "ran trainer 'builtin', not a trial.command" in refused


def test_failures_are_one_line(server, demo, tmp_path):
    url = server.url
    unknown = one_line_error(run_paratune("ls", server=url, token="not-a-token"))
    assert "missing or unknown token" in unknown
    missing = one_line_error(run_paratune("ls", server=url))
    assert "--token" in missing and "$PARATUNE_TOKEN" in missing
    down = f"http://127.0.0.1:{free_port()}"
    assert one_line_error(run_paratune("status", "demo", server=down, token="x")) == (
        f"error: cannot reach the ParaTune server at {down}; start it with `paratune server` "
        "or check --server")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    assert one_line_error(server.cli("submit", str(bad))).startswith(
        f"error: {bad}: line 2: YAML syntax error")
    assert "bogus: unknown key" in one_line_error(
        server.cli("submit", str(SPEC), "--set", "bogus=1"))
    assert "campaign 'demo' exists" in one_line_error(
        server.cli("submit", str(SPEC), "--set", "name=demo"))
    assert "no such file" in one_line_error(server.cli("submit", str(tmp_path / "none.yaml")))
    assert "no campaign 'nope' on this server" in one_line_error(server.cli("logs", "nope"))
    assert "unknown format 'zip'" in one_line_error(server.cli("best", "demo", "--format", "zip"))
    assert "needs a campaign service" in one_line_error(run_paratune("ls"))
    assert "no campaign 'demo' under" in one_line_error(run_paratune("cancel", "demo"))
    assert "is not an http(s) URL" in one_line_error(
        run_paratune("ls", server="ftp://x", token="t"))


def test_only_the_owner_or_an_admin_may_cancel(server, demo, slow):
    """Another user does not even see the campaign (its existence is not told)."""
    refused = one_line_error(server.cli("cancel", "slow", user="alice"))
    assert refused.startswith("error: no campaign 'slow' on this server"), refused
    assert server.campaign("slow")["state"] in ("queued", "running")
    # An ended campaign too: the owner is told it has ended, anyone else that it is not theirs.
    server.wait_for("demo", lambda c: c["state"] == "finished")
    refused = one_line_error(server.cli("cancel", "demo", user="bob"))
    assert refused.startswith("error: no campaign 'demo' on this server"), refused
    assert server.ok("cancel", "demo").stderr.strip() == (
        "demo is already finished; nothing to cancel")


def test_the_page_carries_no_data(server, demo):
    page = httpx.get(f"{server.url}/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "demo" not in page.text and "alice" not in page.text
    # Nothing from elsewhere: its one script source is the service's own shared one.
    assert "<script" in page.text and re.findall(r'src="([^"]*)"', page.text) == ["/pages.js"]


def shown_states(dom: str) -> dict[str, str]:
    """campaign -> the state its row's badge shows."""
    return dict(re.findall(r'<tr id="campaign-([^"]+)">.*?<span class="badge s-\w+">(\w+)</span>',
                           dom, re.S))


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_the_web_page_shows_every_campaign(server, demo, slow, waiting, dropped, tmp_path):
    server.wait_for("demo", lambda c: c["state"] == "finished")
    server.wait_for("slow", lambda c: c["state"] == "running" and c["trials"] >= 4)
    before = {c["name"]: c["state"]
              for c in json.loads(server.ok("ls", "--json", user="root").stdout)["campaigns"]}
    page = f"{server.url}/#token={server.tokens['root']}"  # the admin sees every campaign
    dom = chromium(page, tmp_path / "profile-dom", "--dump-dom").stdout
    shot = tmp_path / "service-web.png"
    chromium(page, tmp_path / "profile-shot", f"--screenshot={shot}")
    assert shown_states(dom) == before == {"demo": "finished", "slow": "running",
                                           "waiting": "queued", "dropped": "cancelled"}
    assert "signed in as root" in dom and "MLflow: run <code>paratune ui</code>" in dom
    assert re.search(r"<b>[\d,.]+</b> tokens_per_s", dom)
    assert re.search(r"TP(&nbsp;|\xa0)\d+(&nbsp;|\xa0)· PP(&nbsp;|\xa0)\d+", dom)
    assert "project llm" in dom and "waiting: 1 of 1 campaigns running" in dom
    # A simulated rehearsal's GPU-hours are marked as `paratune ls` marks them.
    assert re.search(r'<tr id="campaign-demo">.*?<td class="num">[\d,.]+<span class="sim" '
                     r'title="a simulated rehearsal: counted against no quota">sim</span>', dom, re.S)
    assert '<a href="/campaigns/demo">demo</a>' in dom
    assert shot.exists() and shot.stat().st_size > 20_000
    keep_screenshot(shot, "service-web.png")

    refused = chromium(f"{server.url}/#token=wrong", tmp_path / "profile-bad", "--dump-dom").stdout
    assert re.search(r'<div class="error" id="error" role="alert">missing or unknown token',
                     refused), refused[:3000]
    assert '<form class="token" id="tokenform">' in refused and "campaign-demo" not in refused


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_the_campaign_page_shows_its_trials_best_and_log(server, demo, tmp_path):
    """The page a campaign's name opens: its state, GPU-hours marked `sim`, best, every trial
    that ran best first, and the end of its controller's log."""
    server.wait_for("demo", lambda c: c["state"] == "finished")
    found = server.campaign("demo")
    page = f"{server.url}/campaigns/demo#token={server.tokens['alice']}"
    dom = chromium(page, tmp_path / "profile-dom", "--dump-dom").stdout
    shot = tmp_path / "service-campaign.png"
    chromium(page, tmp_path / "profile-shot", "--window-size=1280,1100", f"--screenshot={shot}")
    rows = re.findall(r'<tr id="trial-(t\d{4})"(?: class="(\w*)")?>', dom)
    assert len(rows) == found["trials"] == 6, dom[-6000:]
    assert rows[0] == (found["best"]["trial_id"], "best")  # best first, marked
    assert all(mark != "best" for _, mark in rows[1:])
    assert '<span class="badge s-finished">finished</span>' in dom
    assert re.search(r'<div class="value" id="gpu-hours">[\d,.]+<span class="sim"', dom)
    log = server.ok("logs", "demo").stdout
    last = [line for line in log.splitlines() if line.strip()][-1]
    assert re.search(r'<pre id="log">[^<]*' + re.escape(html.escape(last, quote=False)), dom)
    assert shot.exists() and shot.stat().st_size > 20_000
    keep_screenshot(shot, "service-campaign.png")


def test_cancelling_a_queued_and_a_running_campaign(server, slow, waiting):
    assert server.ok("cancel", "waiting").stderr.strip() == "waiting: cancelled"
    assert server.campaign("waiting")["state"] == "cancelled"
    assert "is already cancelled" in server.ok("cancel", "waiting").stderr
    running = json.loads(server.ok("cancel", "slow", "--json", user="root").stdout)
    assert running["cancel_requested"] or running["state"] == "cancelled"
    found = server.wait_for("slow", lambda c: c["final"], timeout=120)
    assert found["state"] == "cancelled"
    server.ok("logs", "slow", "--follow", timeout=60, user="bob")  # final: follows no further


class DevTools:
    """Headless Chromium driven over its DevTools pipe (commands in on fd 3, replies out on
    fd 4, each JSON message ended by a NUL): a click needs no browser-automation package."""

    def __init__(self, profile: Path):
        to_browser, self._in = os.pipe()
        self._out, from_browser = os.pipe()

        def plumb():  # in the child: the two pipe ends become fds 3 and 4
            high_in, high_out = os.dup2(to_browser, 100), os.dup2(from_browser, 101)
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=plumb, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._id = b"", 0

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._in, json.dumps(message).encode() + b"\0")
        deadline = time.time() + 60
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    assert "error" not in reply, reply
                    return reply["result"]
            assert time.time() < deadline, f"no answer to {method}"
            if select.select([self._out], [], [], 1.0)[0]:
                self._buffer += os.read(self._out, 1 << 20)

    def open(self, url: str) -> str:
        target = self.send("Target.createTarget", url=url)["targetId"]
        return self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, session: str, expression: str):
        return self.send("Runtime.evaluate", session, expression=expression, returnByValue=True,
                         userGesture=True, awaitPromise=True)["result"].get("value")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._in)
        os.close(self._out)


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_the_report_link_opens_the_report_with_the_token(server, demo, tmp_path):
    """The report endpoint needs the bearer header, so the page fetches it and opens a blob."""
    server.wait_for("demo", lambda c: c["state"] == "finished")
    browser = DevTools(tmp_path / "profile")
    try:
        page = browser.open(f"{server.url}/#token={server.tokens['alice']}")
        button = "document.querySelector('#campaign-demo button.link')"
        deadline = time.time() + 60
        while not browser.evaluate(page, f"!!{button}"):
            assert time.time() < deadline, browser.evaluate(page, "document.body.innerText")
            time.sleep(0.3)
        assert browser.evaluate(page, "location.hash") == ""  # the token left the address bar
        browser.evaluate(page, f"{button}.click()")
        while True:
            reports = [t for t in browser.send("Target.getTargets")["targetInfos"]
                       # Until its <title> is parsed, a tab's title is its URL.
                       if t["url"].startswith("blob:") and t["title"] not in ("", t["url"])]
            if reports:
                break
            assert time.time() < deadline, browser.evaluate(page, "document.body.innerText")
            time.sleep(0.3)
        assert reports[0]["title"] == "ParaTune report: demo"
        assert browser.evaluate(page, "document.getElementById('error').textContent") == ""
    finally:
        browser.close()
