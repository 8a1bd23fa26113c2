"""Deliberate failures, for testing that a campaign treats failed trials as data.

$PARATUNE_INJECT_FAULT is `KIND` or `KIND:field=value,field=value`, KIND one of crash, oom or
hang. With conditions, only trials whose settings match all of them fail. The fault fires on
rank 0 at the first step after warm-up.
"""

from __future__ import annotations

import os
import time

import torch

ENV_VAR = "PARATUNE_INJECT_FAULT"


def _matches(config: object, conditions: str) -> bool:
    for item in filter(None, conditions.split(",")):
        name, _, wanted = item.partition("=")
        if str(getattr(config, name.strip(), None)) != wanted.strip():
            return False
    return True


def maybe_inject_fault(config, step: int) -> None:
    spec = os.environ.get(ENV_VAR, "")
    if not spec or step != config.warmup_steps or os.environ.get("RANK", "0") != "0":
        return
    kind, _, conditions = spec.partition(":")
    if not _matches(config, conditions):
        return
    if kind == "crash":
        raise RuntimeError(f"injected crash ({ENV_VAR}={spec})")
    if kind == "oom":
        raise torch.OutOfMemoryError(f"injected out-of-memory ({ENV_VAR}={spec})")
    if kind == "hang":
        while True:
            time.sleep(60)
    raise ValueError(f"{ENV_VAR}: unknown fault kind {kind!r}; use crash, oom or hang")
