"""Pickles and imports that name release 0.2's module paths still load after the move to stage
folders: a Slurm job queued before an upgrade runs on the compute node after it."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT
from submitit.core.utils import DelayedSubmission

from orchestrator.backends.slurm_tasks import run_node, run_rank
from orchestrator.space import Layout, ShardingFactors
from orchestrator.trial.folder import TrialFolder

LEGACY = ROOT / "tests/fixtures/legacy"


def test_a_submitit_job_pickled_by_release_0_2_unpickles_to_todays_classes():
    jobs = [DelayedSubmission.load(LEGACY / f"submitit-job-{i}.pkl") for i in (0, 1)]
    assert [job.function for job in jobs] == [run_node, run_rank]
    first, second = (job.args[0] for job in jobs)
    assert type(first.config) is Layout and type(first.folder) is TrialFolder
    assert first.config.key() == "tp1-pp1-dp2-z2-mbs4-gas1-acfull"
    assert second.config.sharding == ShardingFactors(1, 1, 2, 1, 2, 1)
    assert second.config.key() == "tp1-pp1-dp2-z0-mbs1-gas4-acnone-amsp112121"
    assert first.run.program[:2] == ["-m", "jobs.train"]


def test_an_old_module_path_is_the_moved_module_itself_loaded_once():
    code = ("import orchestrator.search_spaces.config as old, orchestrator.space.config as new, "
            "orchestrator.trial_folder as folder, orchestrator.trial.folder as moved; "
            "assert old is new and folder is moved; "
            "assert new.__spec__.name == 'orchestrator.space.config'; "
            "assert old.Layout.__module__ == 'orchestrator.space.config'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_pickle_naming_the_spec_packages_old_name_loads_todays_spec():
    """The spec package was renamed (orchestrator.spec -> orchestrator.campaign_spec): a pickle
    written before names the old module of each class (protocol 2 names them as text), and
    loads as today's."""
    code = ("import pickle, orchestrator; "
            "from orchestrator.campaign_spec import load_spec; "
            "spec = load_spec('examples/quickstart.yaml'); "
            "old = pickle.dumps(spec, protocol=2)"
            ".replace(b'orchestrator.campaign_spec', b'orchestrator.spec'); "
            "assert b'orchestrator.spec.campaign' in old; "
            "back = pickle.loads(old); assert back == spec; "
            "import orchestrator.spec.trial as legacy, orchestrator.campaign_spec.trial as now; "
            "assert legacy is now and now.__spec__.name == 'orchestrator.campaign_spec.trial'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
