"""Controllers and trials as an OS user of their own (`paratune server --run-as USER`).

A campaign runs programs its submitter chose; run as the service's user, they could open its
database, read its credentials or its parents' environments, and make themselves admin. With
`--run-as`, the service (started as root) keeps its state directory to itself and starts every
controller, and so every trial, as USER, who owns the runs directory and nothing else of the
service's. On a cluster, the Slurm jobs such a controller submits run as USER too.

Whatever USER may write (the runs directory, all of it) the service, as root, never writes,
chmods or follows a link in: what it lends USER (the specs it starts controllers with, the
trials' empty working folder) lives in the state directory, which USER may cross (mode 0711)
but not list, every other entry of it closed to USER. Files and folders there are opened
without following links and checked to be root's before anything is changed on them.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from orchestrator.common.errors import UserError

SHARED_MODE = 0o755  # the state directory's folders USER reads: specs, the trials' workdir
# Variables that name a home or a cache; the service's own (under its HOME, root's) are out of
# USER's reach, and a trial given one fails (torch's extension builds under ~/.cache).
HOME_VARIABLES = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
                  "XDG_RUNTIME_DIR", "TORCH_EXTENSIONS_DIR", "TORCH_HOME", "TRITON_CACHE_DIR",
                  "TORCHINDUCTOR_CACHE_DIR", "HF_HOME", "MPLCONFIGDIR", "PYTHONUSERBASE")


@dataclass(frozen=True)
class RunAs:
    name: str
    uid: int
    gid: int
    home: str = ""  # the user's own home, where it is a folder of theirs

    @classmethod
    def of(cls, name: str) -> "RunAs":
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise UserError(f"--run-as: no OS user {name!r} on this machine; create one for the "
                            "service's campaigns (e.g. `useradd --system paratune-runs`)") from None
        if entry.pw_uid == 0:
            raise UserError("--run-as: campaigns must not run as root; name an unprivileged user")
        try:
            owned = os.stat(entry.pw_dir).st_uid == entry.pw_uid
        except OSError:
            owned = False
        return cls(name, entry.pw_uid, entry.pw_gid, entry.pw_dir if owned else "")

    def popen_options(self) -> dict:
        """What `subprocess.Popen` takes to start a child as this user, with no other group
        and files others may read (the service's own umask keeps its files to itself)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": 0o022}

    def environment(self, env: dict[str, str], runs_dir: Path) -> dict[str, str]:
        """`env` for this user's processes: its own HOME (a folder in the runs directory where
        it has none), with the caches under it, and no path into the service's home."""
        home = self.home or str(Path(runs_dir) / ".home")
        ours = os.environ.get("HOME", "").rstrip("/")  # "" for none, or for "/"
        kept = {k: v for k, v in env.items() if k not in HOME_VARIABLES
                or not ours or not (v == ours or v.startswith(ours + "/"))}
        cache = kept.setdefault("XDG_CACHE_HOME", f"{home}/.cache")
        kept.setdefault("TORCH_EXTENSIONS_DIR", f"{cache}/torch_extensions")
        return {**kept, "HOME": home, "USER": self.name, "LOGNAME": self.name}


def isolate(run_as: RunAs, state_dir: Path, runs_dir: Path, shared: list[Path]) -> None:
    """Give the runs directory to `run_as` and keep the state directory from it but for the
    folders in `shared` (its children), which it may read."""
    if os.geteuid() != 0:
        raise UserError("--run-as: the service must start as root to run campaigns as another "
                        "user; start it as root, or drop --run-as")
    state, runs = state_dir.resolve(), runs_dir.resolve()
    if runs == state or state in runs.parents:
        raise UserError(f"--runs-dir: {runs} is inside the state directory {state}, which "
                        "campaigns must not reach; give a --runs-dir outside it")
    if runs in state.parents:
        raise UserError(f"--state-dir: {state} is inside the runs directory {runs}, which "
                        "campaigns may change; give a --state-dir outside it")
    for folder in (state, *state.parents, *runs.parents):
        if folder.exists() and folder.stat().st_uid == run_as.uid:  # it could swap what is in it
            raise UserError(f"{folder} belongs to {run_as.name}, who could replace the service's "
                            "folders in it; give --state-dir and --runs-dir in folders of root's")
    runs.mkdir(parents=True, exist_ok=True)
    with _Folder(runs) as folder:
        os.fchown(folder.fd, run_as.uid, run_as.gid)
        os.fchmod(folder.fd, 0o755)
    with _Folder(state, owner=0) as folder:
        os.fchmod(folder.fd, 0o711)  # USER may cross it to what it shares, not list it
        names = {p.name for p in shared if p.parent.resolve() == state}
        assert len(names) == len(shared), f"{shared}: not all folders of {state}"
        for name in os.listdir(folder.fd):
            if name not in names:
                folder.close_to_others(name)
        for name in names:
            try:
                os.mkdir(name, 0o700, dir_fd=folder.fd)
            except FileExistsError:
                pass
            with _Folder(name, owner=0, parent=folder.fd) as child:
                os.fchmod(child.fd, SHARED_MODE)


def write_service_file(path: Path, text: str) -> None:
    """Write a file of the service's, readable by all (a spec a controller starts with),
    never through a link: an existing one must be the service's own regular file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                 0o644)
    with os.fdopen(fd, "wb") as out:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise UserError(f"{path}: not a file of the service's own; remove it")
        out.truncate(0)
        os.fchmod(fd, 0o644)
        out.write(text.encode())


class _Folder:
    """A directory opened without following a link, checked to be one (and `owner`'s)."""

    def __init__(self, path: Path | str, owner: int | None = None, parent: int | None = None):
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=parent)
        except OSError as exc:
            raise UserError(f"{path}: not a folder the service can open ({exc.strerror}); a "
                            "link is refused, make it a folder") from None
        found = os.fstat(self.fd).st_uid
        if owner is not None and found != owner:
            os.close(self.fd)
            raise UserError(f"{path}: owned by UID {found}, not by root, so another user may "
                            "change it; give it to root (chown root)")

    def close_to_others(self, name: str) -> None:
        """Take group and others' access from the entry `name` (a link is left alone: nothing
        of the service's is one)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.fd)
        except OSError:
            return
        try:
            os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & 0o700)
        finally:
            os.close(fd)

    def __enter__(self) -> "_Folder":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)
