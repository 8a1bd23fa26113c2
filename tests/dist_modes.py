"""Run many layouts inside one torchrun launch (one process group), for the mode tests.

Usage: torchrun --nproc_per_node=W tests/dist_modes.py CASES.json OUT.json
CASES.json maps a case name to JobConfig settings; OUT.json gets, per case, the status and the
loss of every step (or the error). Each case goes through the job's own check and train path.
A case may name a fault to run under, "patch": "module:function" (a test module of one of the
stage folders beside this file, whose function returns a context manager), to show a test
catches a broken mechanism.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

import torch.distributed as dist

from jobs.config import parse_config
from jobs.shutdown import leave
from jobs.train import pick_device, train
from jobs.trainer import Infeasible, check_feasible


MECHANISMS = ("optimizer_state_fraction", "attention_forwards_per_microbatch", "compiled_graphs",
              "attention_sequence_length")


def fault(patch: str | None):
    """The context a case runs in: its test-only fault, or none."""
    if patch is None:
        return contextlib.nullcontext()
    module, _, name = patch.partition(":")
    stages = [str(p) for p in sorted(Path(__file__).resolve().parent.iterdir()) if p.is_dir()]
    sys.path.extend(s for s in stages if s not in sys.path)  # as tests/conftest.py does
    return getattr(importlib.import_module(module), name)()


def train_mode_cases(cases_path: str, out_path: str) -> None:
    cases = json.load(open(cases_path))
    dist.init_process_group("gloo")
    device = pick_device()
    results = {}
    for name, settings in cases.items():
        patch = settings.pop("patch", None)
        path = f"{out_path}.{name}.json"
        if dist.get_rank() == 0:
            json.dump(settings, open(path, "w"))
        dist.barrier()
        config = parse_config(["--config", path])
        try:
            plan = check_feasible(config, dist.get_world_size())
            with fault(patch):
                result = train(config, plan, device)
            results[name] = {"status": result.status, "losses": result.extra["losses"],
                             "held": result.extra["held_parameter_fraction"],
                             "tokens_per_s": result.tokens_per_s,
                             **{k: result.extra[k] for k in MECHANISMS}}
        except Infeasible as exc:
            results[name] = {"status": "infeasible", "error": str(exc)}
        except Exception as exc:  # reported, so one broken mode does not hide the others
            traceback.print_exc()
            results[name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            break  # the process group may be unusable after a failure inside a collective
    if dist.get_rank() == 0:
        with open(out_path, "w") as out:
            json.dump(results, out, indent=1)
    leave(0)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    train_mode_cases(sys.argv[1], sys.argv[2])
