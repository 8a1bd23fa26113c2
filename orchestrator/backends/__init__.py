"""Backends run trials: `local` (torchrun subprocesses). Each kind is one module."""

from __future__ import annotations

from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.backends.local import LocalBackend


def make_backend(kind: str) -> Backend:
    if kind == "local":
        return LocalBackend()
    raise ValueError(f"unknown backend kind {kind!r}")  # the spec rejects it first


__all__ = ["Backend", "LocalBackend", "TrialHandle", "TrialRequest", "make_backend"]
