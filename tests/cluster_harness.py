"""The two-node cluster of tests/cluster/start_cluster.sh, for the multi-node tests: started by
a module fixture, stopped at its end, and checked to have left nothing behind (no process it
recorded, no namespace, no interface, no /etc/netns file)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.common.processes import is_running

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "cluster"
STATE = Path(os.environ.get("PARATUNE_CLUSTER_STATE", "/tmp/paratune-cluster"))
TOOLS = ("ip", "nsenter", "unshare", "munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
TINY = {"num_layers": 2, "hidden": 64, "num_heads": 4, "ffn_hidden": 128, "vocab_size": 256,
        "seq_len": 32}


def skip_reason() -> str | None:
    """Why the two-node tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root: the two-node cluster needs root for its network namespaces"
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if missing:
        return f"no {', '.join(missing)} here (run tests/slurm/start_local_slurm.sh once as root)"
    if (STATE / "pids").exists() and (STATE / "pids").read_text().strip():
        return f"a two-node cluster is already up in {STATE}"
    probe_name = f"ptc-probe-{os.getpid()}"  # each pytest-xdist worker probes at collection
    probe = subprocess.run(["ip", "netns", "add", probe_name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces not allowed here: {probe.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", probe_name], capture_output=True)
    return None


def leftovers(pids: list[tuple[int, int]]) -> list[str]:
    """What a stopped cluster left behind: recorded processes still running (by PID and start
    time, so a PID another process got since is not counted), namespaces, links, files."""
    left = [f"process {pid}" for pid, started in pids if is_running(pid, started)]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"namespace {line.split()[0]}" for line in netns.splitlines()
             if line.startswith("ptc-")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    left += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
             if line.split(":")[1].strip().startswith("ptc-")]
    left += [f"file {p}" for p in Path("/etc/netns").glob("ptc-*")] if Path("/etc/netns").exists() else []
    return left


def recorded_pids() -> list[tuple[int, int]]:
    """(PID, start time) of each daemon start_cluster.sh recorded (tests/recorded_pids.sh)."""
    lines = (STATE / "pids").read_text().splitlines() if (STATE / "pids").exists() else []
    return [(int(fields[1]), int(fields[2])) for fields in map(str.split, lines)
            if len(fields) == 3]


def pid_of(name: str) -> int:
    """The PID of the recorded daemon `name`, which must still be the process recorded."""
    for line in (STATE / "pids").read_text().splitlines():
        fields = line.split()
        if fields[0] == name:
            pid, started = int(fields[1]), int(fields[2])
            assert is_running(pid, started), f"{name} (PID {pid}) is no longer running"
            return pid
    raise KeyError(name)


@contextlib.contextmanager
def two_node_cluster(*extra: str):
    """Start the cluster (extra arguments go to the script: `ray` adds a Ray cluster run by
    this interpreter's Ray), point this process's Slurm clients at it, and on the way out stop
    it and assert nothing is left. One cluster at a time: a second caller (another pytest
    worker) waits on the lock until the first has stopped its cluster."""
    with open(STATE.parent / f"{STATE.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with _started_cluster(*extra) as state:
            yield state


def _forget_job_states() -> None:
    """submitit caches each finished job's state by job ID, once per process, and never asks
    Slurm about it again. This cluster and the local one number their jobs from 1 each, so a
    job of one would read the other's cached state (the local Slurm's cancelled job 3 read as
    COMPLETED, its job 7 as TIMEOUT): the cache is cleared whenever the process changes
    cluster."""
    import submitit

    submitit.SlurmJob.watcher.clear()


@contextlib.contextmanager
def _started_cluster(*extra: str):
    started = subprocess.run(["bash", str(SCRIPTS / "start_cluster.sh"), str(STATE), *extra],
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PARATUNE_PYTHON": sys.executable})
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-3000:]
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(STATE / "slurm.conf")
    _forget_job_states()
    try:
        yield STATE
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        _forget_job_states()
        pids = recorded_pids()
        stopped = subprocess.run(["bash", str(SCRIPTS / "stop_cluster.sh"), str(STATE)],
                                 capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr[-2000:]
        left = leftovers(pids)
        assert not left, f"the cluster left {left}"


def single_process_losses(tmp_path: Path, global_batch: dict, steps: int) -> list[float]:
    """The losses of a one-process run of the built-in job: the reference for multi-node runs."""
    config = {"model": TINY, "dp": 1, "steps": steps, "warmup_steps": 1, "peak_tflops": 0.1,
              **global_batch, "result_file": str(tmp_path / "single.result.json")}
    (tmp_path / "single.json").write_text(json.dumps(config))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
         "-m", "jobs.train", "--config", str(tmp_path / "single.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "single.result.json").read_text())
    return result["extra"]["losses"]
