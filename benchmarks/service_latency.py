"""Status latency of the campaign service under load: 50 clients poll campaign status for 30 s
on loopback while simulated campaigns run (target: p99 under 100 ms, no errors).

Each client polls every --interval seconds (0.5 s by default, as `paratune logs --follow`
does; the web page polls every 2 s); --interval 0 is a closed loop, each client asking again
the moment it has its answer, which measures the server's throughput rather than a poll.

Starts its own `paratune server` (SQLite, or --database URL) in a temporary directory, submits
the campaigns, measures, and stops the server by its PID.

Run: .venv/bin/python benchmarks/service_latency.py [--clients 50] [--seconds 30] [--campaigns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "frontier-175b.yaml"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


async def _poll(url: str, token: str, names: list[str], until: float, latencies: list[float],
                errors: list[str], index: int, interval: float) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
        await asyncio.sleep(interval * index / 50)  # clients arrive over one interval, not at once
        i = index
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                response = await client.get(f"/api/campaigns/{names[i % len(names)]}")
                if response.status_code != 200:
                    errors.append(f"HTTP {response.status_code}")
            except httpx.HTTPError as exc:
                errors.append(type(exc).__name__)
            elapsed = time.perf_counter() - started
            latencies.append(elapsed)
            i += 1
            if interval > elapsed:
                await asyncio.sleep(interval - elapsed)


async def _load(url: str, token: str, names: list[str], clients: int, seconds: float,
                interval: float):
    latencies: list[float] = []
    errors: list[str] = []
    until = time.monotonic() + seconds
    await asyncio.gather(*(_poll(url, token, names, until, latencies, errors, i, interval)
                           for i in range(clients)))
    return latencies, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--campaigns", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    parser.add_argument("--database", default=None, help="SQLAlchemy URL (default: SQLite)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state, port = Path(tmp) / "state", _port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("PARATUNE_RUNS_DIR", None)
        db = ["--database", args.database] if args.database else []
        token = _cli("server", "token", "create", "--user", "bench", "--state-dir", str(state),
                     *db, env=env)
        server = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "server", "--port", str(port),
             "--state-dir", str(state), "--max-trials", "4", *db],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            names = _start_campaigns(url, token, args.campaigns, args.seconds)
            latencies, errors = asyncio.run(_load(url, token, names, args.clients, args.seconds,
                                                  args.interval))
            running = [httpx.get(f"{url}/api/campaigns/{n}", headers={
                "Authorization": f"Bearer {token}"}).json() for n in names]
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(120)
    ms = sorted(x * 1000 for x in latencies)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    print(f"{args.clients} clients x {args.seconds:g} s, polling every {args.interval:g} s, "
          f"{len(names)} campaigns: "
          f"{len(ms)} requests ({len(ms) / args.seconds:.0f}/s), p50 {p(0.5):.1f} ms, "
          f"p99 {p(0.99):.1f} ms, max {ms[-1]:.1f} ms, mean {statistics.fmean(ms):.1f} ms, "
          f"errors {len(errors)}")
    print("campaign trials at the end: " + ", ".join(
        f"{c['name']} {c['trials']} ({c['state']})" for c in running))


def _start_campaigns(url: str, token: str, count: int, seconds: float) -> list[str]:
    """Campaigns whose trials keep running through the whole measurement."""
    headers = {"Authorization": f"Bearer {token}"}
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/openapi.json", timeout=1)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    names = [f"bench-{i}" for i in range(count)]
    for name in names:
        response = httpx.post(f"{url}/api/campaigns", headers=headers, json={
            "spec_yaml": SPEC.read_text(),
            "set": [f"name={name}", "budget.max_trials=200", "budget.max_concurrent=2",
                    f"backend.latency_s={max(1.0, seconds / 30)}", "tracking.enabled=false"]})
        response.raise_for_status()
    while not all(httpx.get(f"{url}/api/campaigns/{n}", headers=headers).json()["trials"]
                  for n in names):
        time.sleep(0.5)
    return names


if __name__ == "__main__":
    main()
