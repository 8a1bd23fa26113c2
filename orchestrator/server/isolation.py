"""Controllers and trials as an OS user of their own (`paratune server --run-as USER`).

A campaign runs programs its submitter chose; run as the service's user, they could open its
database, read its credentials or its parents' environments, and make themselves admin. With
`--run-as`, the service (started as root) keeps its state directory to itself (mode 0700) and
starts every controller, and so every trial, as USER, who owns the runs directory and nothing
else of the service's. On a cluster, the Slurm jobs such a controller submits run as USER too.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from orchestrator.common.errors import UserError


@dataclass(frozen=True)
class RunAs:
    name: str
    uid: int
    gid: int

    @classmethod
    def of(cls, name: str) -> "RunAs":
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise UserError(f"--run-as: no OS user {name!r} on this machine; create one for the "
                            "service's campaigns (e.g. `useradd --system paratune-runs`)") from None
        if entry.pw_uid == 0:
            raise UserError("--run-as: campaigns must not run as root; name an unprivileged user")
        return cls(name, entry.pw_uid, entry.pw_gid)

    def popen_options(self) -> dict:
        """What `subprocess.Popen` takes to start a child as this user, with no other group."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def isolate(run_as: RunAs, state_dir: Path, runs_dir: Path, service_owned: list[Path]) -> None:
    """Give the runs directory to `run_as` and keep the state directory from it; the folders
    in `service_owned` (inside the runs directory) stay the service's, readable by all."""
    if os.geteuid() != 0:
        raise UserError("--run-as: the service must start as root to run campaigns as another "
                        "user; start it as root, or drop --run-as")
    state, runs = state_dir.resolve(), runs_dir.resolve()
    if runs == state or state in runs.parents:
        raise UserError(f"--runs-dir: {runs} is inside the state directory {state}, which "
                        "campaigns must not reach; give a --runs-dir outside it")
    os.chmod(state, 0o700)
    runs.mkdir(parents=True, exist_ok=True)
    os.chown(runs, run_as.uid, run_as.gid)
    os.chmod(runs, 0o755)
    for folder in service_owned:
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, 0, 0)
        os.chmod(folder, 0o755)
