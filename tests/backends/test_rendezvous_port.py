"""The rendezvous port of a Slurm trial: outside the range the kernel hands to outgoing
connections, where another process could hold it, and the same on every task of one job."""

from __future__ import annotations

import os

import pytest

from orchestrator.backends import slurm_tasks
from orchestrator.backends.slurm_tasks import ephemeral_ports, rendezvous_port


def test_ports_lie_below_the_ephemeral_range_and_differ_by_job(tmp_path, monkeypatch):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(slurm_tasks, "ephemeral_ports", lambda: ephemeral_ports(str(ranges)))
    ports = [rendezvous_port(str(job)) for job in range(1, 5001)]
    assert all(20000 <= port < 32768 for port in ports)
    assert len(set(ports)) == len(ports)  # neighbouring jobs on one node never share one
    assert rendezvous_port("16") == rendezvous_port("16") != 36899  # submitit's pick for job 16


def test_the_range_is_read_from_the_kernel_file(tmp_path):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000 50000\n")
    assert ephemeral_ports(str(ranges)) == (40000, 50000)
    assert ephemeral_ports(str(tmp_path / "absent")) == (32768, 60999)


@pytest.mark.parametrize("task", [0, 1])
def test_every_rank_of_a_job_exports_the_same_port(monkeypatch, task):
    """A rank-env task as Slurm starts it (its variables set by hand: no allocation here), with
    the rank program itself replaced by a recorder of the environment it would get."""
    for name, value in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "16", "SLURM_NTASKS": "2",
                        "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0",
                        "SLURM_JOB_NODELIST": "localhost", "SLURM_PROCID": str(task),
                        "SLURM_LOCALID": str(task)}.items():
        monkeypatch.setenv(name, value)
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE"):
        monkeypatch.setenv(name, "")  # recorded, so what run_rank exports is undone after
        monkeypatch.delenv(name)
    seen = {}

    class Ran:
        def to_dict(self):
            return {}

    def record(request, argv, rank, poll_s, attempt=None):
        seen.update(rank=rank, port=os.environ["MASTER_PORT"], addr=os.environ["MASTER_ADDR"])
        return Ran()

    monkeypatch.setattr(slurm_tasks, "run_on_node", record)
    monkeypatch.setattr(slurm_tasks, "rank_argv", lambda run: [])

    class Request:
        run = None

    slurm_tasks.run_rank(Request())
    assert seen == {"rank": task, "port": str(rendezvous_port("16")), "addr": "localhost"}
