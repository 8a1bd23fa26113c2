"""A scaling study's result as read from the record: each node count's throughput and its
efficiency against the smallest (weak scaling: per GPU; strong: speed-up over node ratio)."""

from __future__ import annotations

from typing import Any

from orchestrator.record.journal import SCALING, TrialRecord


def efficiency(records: list[TrialRecord], study: str, gpus_per_node: int,
               metric: str = "tokens_per_s") -> list[dict[str, Any]]:
    """One row per node count measured, smallest first, with its scaling efficiency."""
    rows = []
    for record in records:
        if record.phase != SCALING or record.result is None or not record.result.ok:
            continue
        world = record.config.world_size
        rows.append({"nodes": world // gpus_per_node, "world_size": world,
                     "tokens_per_s": record.result.metric(metric),
                     "tokens_per_s_per_gpu": record.result.metric(metric) / world,
                     "trial_id": record.trial_id})
    rows.sort(key=lambda r: r["nodes"])
    if not rows:
        return rows
    base = rows[0]
    for row in rows:
        if study == "weak":
            row["efficiency"] = row["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]
        else:
            speedup = row["tokens_per_s"] / base["tokens_per_s"]
            row["efficiency"] = speedup / (row["nodes"] / base["nodes"])
    return rows
