"""Module paths of release 0.2, kept importable under their new names.

A Slurm job pickled before an upgrade (submitit pickles the trial request and the function a
node runs) names the old paths, and unpickles on the compute node after the upgrade; so does
any pickle that names a moved class. Each old path resolves to the module now holding the
same objects, imported only when asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

MOVED = {
    "orchestrator.backends.extension_locks": "orchestrator.trial.extension_locks",
    "orchestrator.backends.process_trial": "orchestrator.backends.slurm_tasks",
    "orchestrator.backends.trial_process": "orchestrator.trial.process",
    "orchestrator.budget": "orchestrator.record.budget",
    "orchestrator.campaign": "orchestrator.record.campaign",
    "orchestrator.controller": "orchestrator.scheduling.controller",
    "orchestrator.costmodel.runtime": "orchestrator.costmodel.zero_engine",
    "orchestrator.costmodel.runtime_fit": "orchestrator.costmodel.trainer_overhead_fit",
    "orchestrator.errors": "orchestrator.common.errors",
    "orchestrator.halving": "orchestrator.scheduling.halving",
    "orchestrator.journal": "orchestrator.record.journal",
    "orchestrator.lock": "orchestrator.common.locks",
    "orchestrator.objective": "orchestrator.common.objective",
    "orchestrator.paths": "orchestrator.common.paths",
    "orchestrator.placeholders": "orchestrator.common.placeholders",
    "orchestrator.preflight": "orchestrator.campaign_spec.preflight",
    "orchestrator.processes": "orchestrator.common.processes",
    "orchestrator.scheduler": "orchestrator.scheduling.loop",
    "orchestrator.search_spaces": "orchestrator.space",
    "orchestrator.search_spaces.config": "orchestrator.space.config",
    "orchestrator.search_spaces.errors": "orchestrator.space.errors",
    "orchestrator.search_spaces.ranges": "orchestrator.space.ranges",
    "orchestrator.search_spaces.sharding": "orchestrator.space.sharding",
    "orchestrator.search_spaces.space": "orchestrator.space.search_space",
    "orchestrator.searchers": "orchestrator.search",
    "orchestrator.trainers.deepspeed_config": "orchestrator.trainers.deepspeed.config",
    "orchestrator.trainers.megatron_context": "orchestrator.trainers.megatron.context",
    "orchestrator.trainers.megatron_flags": "orchestrator.trainers.megatron.flags",
    "orchestrator.trainers.megatron_log": "orchestrator.trainers.megatron.log",
    "orchestrator.trainers.megatron_moe": "orchestrator.trainers.megatron.moe",
    "orchestrator.trainers.megatron_precision": "orchestrator.trainers.megatron.precision",
    "orchestrator.trainers.results": "orchestrator.trainers.result_reading",
    "orchestrator.trainers.torchtitan_precision": "orchestrator.trainers.torchtitan.precision",
    "orchestrator.trial_folder": "orchestrator.trial.folder",
    "orchestrator.trial_requests": "orchestrator.scheduling.requests",
}


# Packages renamed whole: every module under the old name is the same module under the new.
RENAMED_PACKAGES = {
    "orchestrator.spec": "orchestrator.campaign_spec",  # `spec/` reads as a folder of tests
}


def new_path(fullname: str) -> str | None:
    """Where an old module path lives now, or None if it did not move."""
    if fullname in MOVED:
        return MOVED[fullname]
    for old, new in RENAMED_PACKAGES.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The import system stamped the old spec on the real module; give it back its own.
        module.__spec__ = self.own_spec


class LegacyPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        target = new_path(fullname)
        if target is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(target))


def install() -> None:
    if not any(isinstance(finder, LegacyPathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, LegacyPathFinder())  # before the path finder, which would
        # otherwise load a moved package's files a second time under the old name
