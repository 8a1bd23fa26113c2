"""Ending a torchrun worker without the interpreter's teardown.

A process group that FSDP or a device mesh still references outlives
`destroy_process_group()`; the interpreter then frees it during finalization, and gloo's
worker threads abort the process ("terminate called without an active exception",
pytorch/pytorch#179291) after training has finished and its result is written. A worker
therefore ends its group itself and leaves with `os._exit`.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch.distributed as dist


def leave(code: int, destroy_group: bool = True) -> NoReturn:
    """Exit with `code`. `destroy_group` only where every rank gets here (a normal end): a
    rank leaving after a failure may have peers still inside a collective."""
    if destroy_group and dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
