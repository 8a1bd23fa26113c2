"""A trial's folder, `runs/<campaign>/trials/<trial_id>/`: the one owner of its file names.

Backends prepare it and read the result from it, tracking takes its artifacts from it, and the
trial program finds its result path in $PARATUNE_RESULT_FILE. Nothing else spells a file name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.result import STDOUT_MARKER, TrialResult

RESULT_FILE = "result.json"
LOG_FILE = "trial.log"
SETTINGS_FILE = "trial.json"
SBATCH_SCRIPT = "sbatch.sh"
DEEPSPEED_CONFIG_FILE = "ds_config.json"


@dataclass(frozen=True)
class TrialFolder:
    path: Path

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

    def rank_log(self, rank: int) -> Path:
        """Rank 0 writes the trial log; other ranks launched one task each get their own."""
        return self.log_file if rank == 0 else self.path / f"rank{rank}.log"

    def artifacts(self) -> list[Path]:
        """The files worth keeping with the trial's tracking run, where they exist."""
        return [p for p in (self.log_file, self.sbatch_script) if p.exists()]

    def prepare(self, job_settings: dict[str, Any], files: dict[str, str]) -> None:
        """Write what a trial reads: the built-in job's settings and any extra files; clear a
        result left by an earlier attempt."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.result_file.unlink(missing_ok=True)
        settings = {**job_settings, "result_file": str(self.result_file)}
        self.settings_file.write_text(json.dumps(settings, indent=2))
        for name, text in files.items():
            (self.path / name).write_text(text)
        self.tmp_dir.mkdir(exist_ok=True)

    def read_result(self, returncode: int | None) -> TrialResult:
        """The trial's own report if it wrote one (trusted even on a non-zero exit, since torch
        can abort at teardown after a good run), else a `PARATUNE_RESULT` line in its log, else
        a `failed` result quoting the end of its log."""
        if self.result_file.exists():
            try:
                return TrialResult.from_dict(json.loads(self.result_file.read_text()))
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                return TrialResult(status="failed", error=f"unreadable {RESULT_FILE}: {exc}")
        log = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        for line in reversed(log.splitlines()):
            if line.startswith(STDOUT_MARKER + " "):
                try:
                    return TrialResult.from_dict(json.loads(line[len(STDOUT_MARKER) + 1:]))
                except (json.JSONDecodeError, TypeError, ValueError):
                    break
        return TrialResult(
            status="failed", error=f"exit code {returncode}, no result reported: {_tail(log)}"
        )

    def reported(self) -> TrialResult | None:
        """The trial's own report, or None when it wrote none (e.g. killed by its scheduler)."""
        result = self.read_result(None)
        if result.status == "failed" and "no result reported" in (result.error or ""):
            return None
        return result


def _tail(log: str, lines: int = 6) -> str:
    tail = [line.strip() for line in log.splitlines() if line.strip()][-lines:]
    return " | ".join(tail)[-1500:] or "(empty log)"
