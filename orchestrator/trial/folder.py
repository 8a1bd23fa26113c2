"""A trial's folder, `runs/<campaign>/trials/<trial_id>/`: the one owner of its file names.

Backends prepare it, trainer adapters read the result from it, tracking takes its artifacts
from it, and the trial program finds its result path in $PARATUNE_RESULT_FILE. Nothing else
spells a file name.

The trial program may leave anything at these names (a link, a FIFO, a directory), and so may
an earlier attempt or a hand: preparing moves such a thing aside (`*.moved-<time>`, so nothing
is lost) rather than write through it, and nothing here follows a symbolic link.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

RESULT_FILE = "result.json"
LOG_FILE = "trial.log"
SETTINGS_FILE = "trial.json"
SBATCH_SCRIPT = "sbatch.sh"
DEEPSPEED_CONFIG_FILE = "ds_config.json"
DEEPSPEED_CHANGES_FILE = "ds_config.changes.txt"  # what the config changed from the user's
DEADLINE_PREFIX = ".deadline-"  # + an attempt's name: when its tasks stop (backends/on_node.py)
# + an attempt's name: the first of its ranks to fail (backends/peer_failure.py)
RANK_FAILED_PREFIX = ".rank-failed-"
MOVED_SUFFIX = ".moved-"  # + a time stamp: what sat where a trial's folder or file goes


def _is(path: Path, kind) -> bool:  # noqa: ANN001 - a stat.S_IS* predicate
    """Whether `path` itself (not a link's target) is of that kind."""
    try:
        return kind(os.lstat(path).st_mode)
    except OSError:
        return False


def move_aside(path: Path) -> Path:
    """Rename what sits at `path` to a free `<name>.moved-<time>` beside it; the new name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        target = path.with_name(f"{path.name}{MOVED_SUFFIX}{stamp}{f'-{n}' if n else ''}")
        if not os.path.lexists(target):
            os.rename(path, target)
            return target
    raise FileExistsError(f"{path}: no free name to move it aside")


def _open_appending(path: str, flags: int) -> int:
    """An `opener` that appends to a regular file only: never through a symbolic link, and
    never blocking on a FIFO left there (no reader: ENXIO; a reader: refused below)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def open_for_append(path: Path) -> BinaryIO:
    """`path` opened to append bytes to, created if missing, refusing anything but a regular
    file (OSError)."""
    return open(path, "ab", opener=_open_appending)


@dataclass(frozen=True)
class TrialFolder:
    path: Path

    def __post_init__(self) -> None:
        # Absolute: the trial program runs in this folder (or the spec's workdir), and every
        # path it is handed (its result file, its config, its trial dir) must mean the same
        # there as here.
        object.__setattr__(self, "path", Path(self.path).absolute())

    @classmethod
    def of(cls, campaign_dir: Path, trial_id: str) -> "TrialFolder":
        return cls(Path(campaign_dir) / "trials" / trial_id)

    @property
    def result_file(self) -> Path:
        return self.path / RESULT_FILE

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def settings_file(self) -> Path:
        return self.path / SETTINGS_FILE

    @property
    def sbatch_script(self) -> Path:
        return self.path / SBATCH_SCRIPT

    @property
    def deepspeed_config(self) -> Path:
        return self.path / DEEPSPEED_CONFIG_FILE

    @property
    def slurm_dir(self) -> Path:
        """Where submitit keeps a Slurm job's script, pickles and logs."""
        return self.path / "slurm"

    @property
    def tmp_dir(self) -> Path:
        return self.path / "tmp"

    def deadline_file(self, attempt: str) -> Path:
        """When every task of one attempt at the trial stops (backends/on_node.py)."""
        return self.path / f"{DEADLINE_PREFIX}{attempt}"

    def rank_failure_file(self, attempt: str) -> Path:
        """Which rank of one attempt at the trial failed first, and why (peer_failure.py)."""
        return self.path / f"{RANK_FAILED_PREFIX}{attempt}"

    def rank_log(self, rank: int) -> Path:
        """Rank 0 writes the trial log; other ranks launched one task each get their own."""
        return self.log_file if rank == 0 else self.path / f"rank{rank}.log"

    def artifacts(self) -> list[Path]:
        """The files worth keeping with the trial's tracking run, where they exist as regular
        files (a link or a FIFO left there is no artifact)."""
        return [p for p in (self.log_file, self.sbatch_script) if _is(p, stat.S_ISREG)]

    def followed_link(self) -> Path | None:
        """The trial folder, or the campaign's `trials` folder above it, where it is a symbolic
        link: what is read or written there would be somewhere else."""
        above = [self.path.parent] if self.path.parent.name == "trials" else []
        return next((p for p in (*above, self.path) if _is(p, stat.S_ISLNK)), None)

    def left_result(self) -> bool:
        """Whether anything (a file, a link, a folder) sits at the result file's name."""
        return os.path.lexists(self.result_file)

    def note(self, text: str, rank: int = 0) -> None:
        """Add a line of the controller's to the trial's log, where that log is a regular file."""
        try:
            with open_for_append(self.rank_log(rank)) as log:
                log.write(f"paratune: {text}\n".encode())
        except OSError:
            pass

    def _make_way(self, path: Path, directory: bool) -> str | None:
        """Move aside what sits at `path` that is not a real directory (`directory`) or a
        regular file; a line saying where it went, or None."""
        if not os.path.lexists(path) or _is(path, stat.S_ISDIR if directory else stat.S_ISREG):
            return None
        kind = "a symbolic link" if _is(path, stat.S_ISLNK) else \
            "a folder" if _is(path, stat.S_ISDIR) else "a file" if _is(path, stat.S_ISREG) else \
            "a FIFO, device or socket"
        return f"moved {path} ({kind}) aside to {move_aside(path).name}"

    def prepare(self, files: dict[str, str]) -> None:
        """Write what a trial reads (name -> text) and clear a result, and the deadline of
        its tasks (backends/on_node.py), left by an earlier attempt. Whatever sits where the
        folder or one of its files goes, and is not one, is moved aside; the trial's log says so."""
        above = [self.path.parent] if self.path.parent.name == "trials" else []
        moved = [self._make_way(folder, directory=True) for folder in (*above, self.path)]
        self.path.mkdir(parents=True, exist_ok=True)
        files_here = [self.path / name for name in (RESULT_FILE, LOG_FILE, *files)]
        moved += [self._make_way(path, directory=False)
                  for path in (*files_here, *self.path.glob("rank*.log"),
                               *self.path.glob(f"{DEADLINE_PREFIX}*"),
                               *self.path.glob(f"{RANK_FAILED_PREFIX}*"))]
        moved.append(self._make_way(self.tmp_dir, directory=True))
        self.result_file.unlink(missing_ok=True)
        for left in (*self.path.glob(f"{DEADLINE_PREFIX}*"),
                     *self.path.glob(f"{RANK_FAILED_PREFIX}*")):
            left.unlink(missing_ok=True)
        for name, text in files.items():
            (self.path / name).write_text(text)
        self.tmp_dir.mkdir(exist_ok=True)
        for line in filter(None, moved):
            self.note(line)
