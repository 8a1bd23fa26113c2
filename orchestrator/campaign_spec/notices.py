"""Warnings a spec earns: an option ParaTune keeps, because a saved spec or an example may carry
it harmlessly, but that does not do here what its name says.

Each is one line on the `orchestrator.campaign_spec` log, which the CLI prints on stderr
(`paratune: ...`); a spec read several times in one process (a plan over node counts, a
submission the service checks) says each thing once.
"""

from __future__ import annotations

import logging

log = logging.getLogger("orchestrator.campaign_spec")
_said: set[str] = set()


def warn(message: str) -> None:
    """Say `message` on stderr, once per process."""
    if message not in _said:
        _said.add(message)
        log.warning(message)


def forget() -> None:
    """Let every warning be said again (a long-lived process, or a test)."""
    _said.clear()


def check_flash_attention(flash_attention: bool, trainer: str | None, backend: str) -> None:
    """`trial.flash_attention: false` tells the cost model to count the s x s attention scores
    a trainer without a fused kernel keeps. Only the Megatron trainers also switch their kernel
    by it; the built-in trainer always calls PyTorch SDPA, and the DeepSpeed, torchtitan and
    command programs choose their own, so there it is an assumption about the program that
    only the user can vouch for. The simulated backend runs no trainer: nothing to say."""
    from orchestrator.trainers.registry import adapter  # the adapters read the spec

    if flash_attention or backend == "simulated":
        return
    kernel = adapter(trainer).attention_kernel  # None: it switches its kernel by the flag
    if kernel is None:
        return
    trainer = adapter(trainer).name
    warn(f"trial.flash_attention: false changes only the cost model's memory estimate (it "
         f"counts the s x s attention scores); the {trainer} trainer {kernel}: keep it only "
         "where that kernel keeps the scores (SDPA's math fallback), else remove it")
