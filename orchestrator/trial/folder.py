"""A trial's folder, `runs/<campaign>/trials/<trial_id>/`: the one owner of its file names.

Backends prepare it, trainer adapters read the result from it, tracking takes its artifacts
from it, and the trial program finds its result path in $PARATUNE_RESULT_FILE. Nothing else
spells a file name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESULT_FILE = "result.json"
LOG_FILE = "trial.log"
SETTINGS_FILE = "trial.json"
SBATCH_SCRIPT = "sbatch.sh"
DEEPSPEED_CONFIG_FILE = "ds_config.json"
DEEPSPEED_CHANGES_FILE = "ds_config.changes.txt"  # what the config changed from the user's
DEADLINE_PREFIX = ".deadline-"  # + an attempt's name: when its tasks stop (backends/on_node.py)


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

    def rank_log(self, rank: int) -> Path:
        """Rank 0 writes the trial log; other ranks launched one task each get their own."""
        return self.log_file if rank == 0 else self.path / f"rank{rank}.log"

    def artifacts(self) -> list[Path]:
        """The files worth keeping with the trial's tracking run, where they exist."""
        return [p for p in (self.log_file, self.sbatch_script) if p.exists()]

    def prepare(self, files: dict[str, str]) -> None:
        """Write what a trial reads (name -> text) and clear a result, and the deadline of
        its tasks (backends/on_node.py), left by an earlier attempt."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.result_file.unlink(missing_ok=True)
        for deadline in self.path.glob(f"{DEADLINE_PREFIX}*"):
            deadline.unlink(missing_ok=True)
        for name, text in files.items():
            (self.path / name).write_text(text)
        self.tmp_dir.mkdir(exist_ok=True)
