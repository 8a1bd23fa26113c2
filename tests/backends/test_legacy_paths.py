"""Pickles and imports that name release 0.2's module paths still load after the move to stage
folders: a Slurm job queued before an upgrade runs on the compute node after it."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT
from submitit.core.utils import DelayedSubmission

from orchestrator.backends.slurm_tasks import run_node, run_rank
from orchestrator.space import ParallelConfig, ShardingFactors
from orchestrator.trial.folder import TrialFolder

LEGACY = ROOT / "tests/fixtures/legacy"


def test_a_submitit_job_pickled_by_release_0_2_unpickles_to_todays_classes():
    jobs = [DelayedSubmission.load(LEGACY / f"submitit-job-{i}.pkl") for i in (0, 1)]
    assert [job.function for job in jobs] == [run_node, run_rank]
    first, second = (job.args[0] for job in jobs)
    assert type(first.config) is ParallelConfig and type(first.folder) is TrialFolder
    assert first.config.key() == "tp1-pp1-dp2-z2-mbs4-gas1-acfull"
    assert second.config.sharding == ShardingFactors(1, 1, 2, 1, 2, 1)
    assert second.config.key() == "tp1-pp1-dp2-z0-mbs1-gas4-acnone-amsp112121"
    assert first.run.program[:2] == ["-m", "jobs.train"]


def test_an_old_module_path_is_the_moved_module_itself_loaded_once():
    code = ("import orchestrator.search_spaces.config as old, orchestrator.space.config as new, "
            "orchestrator.trial_folder as folder, orchestrator.trial.folder as moved; "
            "assert old is new and folder is moved; "
            "assert new.__spec__.name == 'orchestrator.space.config'; "
            "assert old.ParallelConfig.__module__ == 'orchestrator.space.config'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
