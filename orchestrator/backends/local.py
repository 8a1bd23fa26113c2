"""Local backend: each trial is a `torchrun --standalone` subprocess in its own process group.

An external trainer (`trial.command`) runs as its argv, never through a shell, and launches
its own ranks. The group is what gets killed, so a timeout or a cancel leaves no rank behind.
Logs and the result JSON go to the trial's directory, `runs/<campaign>/trials/<trial_id>/`;
the program finds that path in $PARATUNE_RESULT_FILE.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.backends.base import TrialRequest
from orchestrator.result import STDOUT_MARKER, TrialResult

RESULT_FILE = "result.json"
LOG_FILE = "trial.log"
SETTINGS_FILE = "trial.json"
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def read_result(trial_dir: Path, returncode: int | None) -> TrialResult:
    """The trial's own report if it wrote one (trusted even on a non-zero exit, since torch can
    abort at teardown after a good run); else a `failed` result quoting the end of its log."""
    result_path = trial_dir / RESULT_FILE
    log_path = trial_dir / LOG_FILE
    if result_path.exists():
        try:
            return TrialResult.from_dict(json.loads(result_path.read_text()))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            return TrialResult(status="failed", error=f"unreadable {RESULT_FILE}: {exc}")
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    for line in reversed(log.splitlines()):
        if line.startswith(STDOUT_MARKER + " "):
            try:
                return TrialResult.from_dict(json.loads(line[len(STDOUT_MARKER) + 1:]))
            except (json.JSONDecodeError, TypeError, ValueError):
                break
    return TrialResult(
        status="failed", error=f"exit code {returncode}, no result reported: {_log_tail(log)}"
    )


def _log_tail(log: str, lines: int = 6) -> str:
    tail = [line.strip() for line in log.splitlines() if line.strip()][-lines:]
    return " | ".join(tail)[-1500:] or "(empty log)"


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state letter


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (torchrun starts its ranks in sessions of their own, so
    its process group alone does not reach them)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL a trial's launcher, its process group and every process below it."""
    below = descendants(pid)  # before the kill: orphans lose their parent link
    for target in [pid, *below]:
        for kill in (os.killpg, os.kill):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class LocalHandle:
    def __init__(self, process: subprocess.Popen, request: TrialRequest):
        self.process = process
        self.request = request
        self.started = time.monotonic()
        self._result: TrialResult | None = None

    def poll(self) -> TrialResult | None:
        if self._result is not None:
            return self._result
        returncode = self.process.poll()
        if returncode is None:
            if time.monotonic() - self.started <= self.request.timeout_s:
                return None
            kill_tree(self.process.pid)
            self.process.wait()
            self._result = TrialResult(
                status="timeout",
                error=f"killed after trial.timeout_s={self.request.timeout_s:g}s; raise it if "
                "the trial needs longer",
                world_size=self.request.world_size,
            )
            return self._result
        kill_tree(self.process.pid)  # ranks that outlived torchrun, if any
        self._result = read_result(self.request.trial_dir, returncode)
        return self._result

    def cancel(self) -> None:
        kill_tree(self.process.pid)
        self.process.wait()

    def info(self) -> dict[str, Any]:
        return {"pid": self.process.pid, "pgid": self.process.pid}


def prepare_trial_dir(request: TrialRequest) -> Path:
    """Write what a trial reads into its directory: the job's settings and any extra files."""
    trial_dir = request.trial_dir
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / RESULT_FILE).unlink(missing_ok=True)
    settings = {**request.job_settings, "result_file": str(trial_dir / RESULT_FILE)}
    (trial_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2))
    for name, text in request.files.items():
        (trial_dir / name).write_text(text)
    (trial_dir / "tmp").mkdir(exist_ok=True)
    return trial_dir


class LocalBackend:
    def __init__(self, cpu_count: int | None = None):
        self.cpu_count = cpu_count or os.cpu_count() or 1

    def command(self, request: TrialRequest) -> list[str]:
        if request.command:
            return list(request.command)
        return [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={request.world_size}",
            "-m", "jobs.train", "--config", str(request.trial_dir / SETTINGS_FILE),
        ]

    def submit(self, request: TrialRequest) -> LocalHandle:
        trial_dir = prepare_trial_dir(request)
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(max(1, self.cpu_count // request.world_size)),
            "TMPDIR": str(trial_dir / "tmp"),  # torchrun leaves a torchelastic_* folder per launch
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")])
            ),
            "PYTHONUNBUFFERED": "1",
            "PARATUNE_RESULT_FILE": str(trial_dir / RESULT_FILE),
            "PARATUNE_TRIAL_ID": request.trial_id,
            **request.env,
        }
        with open(trial_dir / LOG_FILE, "ab") as log:
            process = subprocess.Popen(
                self.command(request), cwd=request.workdir or trial_dir, env=env,
                stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return LocalHandle(process, request)

    def cleanup(self, info: dict[str, Any], trial_dir: Path) -> None:
        """End what is left of a trial whose controller died: its recorded launcher and the
        processes below it, and ranks orphaned by the launcher's death (their parent link is
        gone, so they are found by this trial's directory in their command line). Every
        process killed must name the trial directory, since PIDs are recycled."""
        marker = str(trial_dir).encode()
        pid = info.get("pid")
        suspects = set(descendants(pid)) | {pid} if pid else set()
        suspects |= {p for p in _live_pids() if _names(p, marker)}
        for target in suspects:
            if _names(target, marker):
                kill_tree(target)


def _live_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _names(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
