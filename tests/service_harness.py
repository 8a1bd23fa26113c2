"""A real `paratune server` process on a loopback port, for the service tests: started with
the CLI, talked to over HTTP, stopped by its PID (SIGTERM, or SIGKILL to test a crash)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from conftest import ROOT
from ports import start_on_a_free_port

from orchestrator.common.processes import is_running, live_pids, parent_of, start_time


def answers(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1)
        return True
    except httpx.TransportError:
        return False


class ServiceProcess:
    def __init__(self, state_dir: Path, database_url: str, *extra: str,
                 runs_dir: Path | None = None, python: str = sys.executable):
        """`runs_dir`: a --runs-dir of its own (else STATE_DIR/runs); `python`: the interpreter
        the server, and so its controllers, run on."""
        self.state_dir = state_dir
        self.database_url = database_url
        self.extra = list(extra) + (["--runs-dir", str(runs_dir)] if runs_dir else [])
        self._runs_dir = runs_dir
        self.python = python
        self.port: int | None = None  # chosen at start (tests/ports.py)
        self.url = ""
        self.process: subprocess.Popen | None = None
        # (PID, start time) of the controllers it ran, recorded at stop or kill, ended at stop.
        self.controllers: set[tuple[int, int]] = set()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
        self.env.pop("PARATUNE_RUNS_DIR", None)
        self.env.pop("MLFLOW_TRACKING_URI", None)

    @property
    def runs_dir(self) -> Path:
        return self._runs_dir or self.state_dir / "runs"

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, "-m", "orchestrator.cli", *args], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=120)

    def admin_options(self) -> tuple[str, ...]:
        """The options that point an admin command (`paratune server ...`) at this server's
        database."""
        return ("--state-dir", str(self.state_dir), "--database", self.database_url)

    def token(self, user: str, admin: bool = False) -> str:
        done = self.cli("server", "token", "create", "--user", user, *self.admin_options(),
                        *(["--admin"] if admin else []))
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start(self) -> "ServiceProcess":
        """Start the server (on another port if its own was taken meanwhile) and wait until
        it answers."""
        def launch(port: int) -> subprocess.Popen:
            with open(self.state_dir / "server.log", "ab") as log:
                return subprocess.Popen(
                    [self.python, "-m", "orchestrator.cli", "server", "--port", str(port),
                     "--state-dir", str(self.state_dir), "--database", self.database_url,
                     *self.extra], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

        self.process, self.port = start_on_a_free_port(launch, answers, self.state_dir / "server.log")
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def _record_controllers(self) -> None:
        children = [p for p in live_pids() if parent_of(p) == self.process.pid]
        self.controllers |= {(p, t) for p in children if (t := start_time(p)) is not None}

    def _running_controllers(self) -> list[int]:
        return [pid for pid, started in self.controllers if is_running(pid, started)]

    def kill(self) -> None:
        """SIGKILL, as a crash would: no shutdown code runs."""
        self._record_controllers()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        """SIGTERM (controllers detach), then wait for the controllers it ran (its children;
        their trials may run on) to end; those still running after a minute, or left by a
        kill, are stopped by their recorded PIDs."""
        if self.process is not None and self.process.poll() is None:
            self._record_controllers()
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(90)
        for sig, wait_s in ((None, 60), (signal.SIGTERM, 15), (signal.SIGKILL, 15)):
            for pid in self._running_controllers() if sig else []:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
            while self._running_controllers() and time.monotonic() < deadline:
                time.sleep(0.2)
        self.controllers.clear()

    def api(self, method: str, path: str, token: str, **kw) -> httpx.Response:
        return httpx.request(method, f"{self.url}{path}", timeout=30,
                             headers={"Authorization": f"Bearer {token}"}, **kw)

    def submit(self, token: str, spec: Path, *overrides: str, **body) -> httpx.Response:
        return self.api("POST", "/api/campaigns", token, json={
            "spec_yaml": spec.read_text(), "set": list(overrides), "workdir": str(ROOT), **body})

    def campaign(self, token: str, name: str) -> dict:
        response = self.api("GET", f"/api/campaigns/{name}", token)
        assert response.status_code == 200, response.text
        return response.json()

    def wait_final(self, token: str, names: list[str], timeout_s: float = 240) -> dict[str, dict]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = {n: self.campaign(token, n) for n in names}
            if all(c["final"] for c in found.values()):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(json.dumps(found, indent=1)[:3000] + self.logs())
            time.sleep(0.5)

    def logs(self) -> str:
        parts = [(self.state_dir / "server.log").read_text(errors="replace")[-3000:]]
        for log in sorted((self.state_dir / "logs").glob("*.log")):
            parts.append(f"--- {log.name}\n" + log.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

