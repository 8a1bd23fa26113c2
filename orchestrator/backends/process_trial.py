"""Run one trial to its end in the current process's machine: the work a cluster backend ships
to a compute node (inside a Ray task or a Slurm job).

It launches the trial as the local backend does (torchrun in its own process group, or the
external command), enforces the timeout itself, kills the whole process tree when interrupted
(a cancelled Ray task, a Slurm job sent SIGTERM), and returns the result as a dict, so it needs
only the standard library and the trial program on the node.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from orchestrator.backends.base import TrialRequest
from orchestrator.backends.local import LocalBackend


def run_trial_to_end(request: TrialRequest, poll_s: float = 0.5) -> dict[str, Any]:
    handle = LocalBackend().submit(request)
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):  # noqa: ANN001 - signal handler signature
        handle.cancel()
        raise KeyboardInterrupt(f"trial {request.trial_id} stopped by signal {signum}")

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (some Ray workers): rely on KeyboardInterrupt
        previous = None
    try:
        while (result := handle.poll()) is None:
            time.sleep(poll_s)
        return result.to_dict()
    except BaseException:
        handle.cancel()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
