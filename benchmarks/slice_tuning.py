"""Tune small, choose for large, on generated landscapes: a 1,024-GPU target tuned with 128-GPU
slice trials (`scale.slice_nodes`) against a cost-guided search run at the full 1,024 GPUs, on
the same seeds. Generated, not measured: the truth is the simulated backend's, the cost model
bent by hidden per-knob factors (perturbation), multi-knob quirks (interactions) and network
congestion that grows with the nodes the data-parallel collectives span (`congestion`), a
form the cost model does not have, so scale can change the winner and a slice cannot see it.

For each seed it reports:
- the true best at the target (every layout priced by the noise-free truth);
- the slice campaign's winner (the best it measured at the target), how far below the true
  best, and its GPU-hours (slice trials plus target confirmations);
- the full-scale campaign's GPU-hours until it first measured a layout within 3% of the true
  best (its whole spend if it never did) and in all, and how far its own winner is below the
  true best.

Run: .venv/bin/python benchmarks/slice_tuning.py [--seeds 20]   (writes docs/slice_tuning.json
     and the table in docs/slice_tuning.md; 3 minutes here)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marked_block import write_marked_block  # noqa: E402

from orchestrator.backends.simulated import SimulatedBackend  # noqa: E402
from orchestrator.record.budget import executed, gpu_hours  # noqa: E402
from orchestrator.record.campaign import CampaignView  # noqa: E402
from orchestrator.record.journal import TARGET  # noqa: E402
from orchestrator.scheduling.controller import Controller  # noqa: E402
from orchestrator.campaign_spec import spec_from_dict  # noqa: E402
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JSON_PATH = ROOT / "docs" / "slice_tuning.json"
WITHIN = 0.03
NODES, SLICE_NODES = 128, 16
# What the slice campaign may spend at the target: about four of its trials.
CONFIRM_GPU_HOURS = 16.0
# Llama 3.1 8B at 8k on 1,024 H100 with a batch of 1,024 sequences: one micro-batch per
# replica at full data parallelism, so the gradient traffic is a real share of a step.
TARGET_SPEC = {
    "name": "target", "model": "llama-3.1-8b", "cluster": "h100-80g",
    "scale": {"nodes": NODES, "global_batch_size": 1024},
    "space": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "zero_stage": [0, 1, 2, 3],
              "micro_batch_size": [1, 2, 4], "activation_checkpointing": ["none", "selective",
                                                                       "full"]},
    "objective": {"metric": "tokens_per_s"},
    "search": {"algorithm": "cost-guided"},
    "budget": {"max_trials": 40, "confirm_gpu_hours": CONFIRM_GPU_HOURS},
    "tracking": {"enabled": False},
    "backend": {"kind": "simulated"},
}
NOISE, PERTURBATION, INTERACTIONS = 0.03, 0.08, 1.0
CONGESTION = (0.05, 0.3)  # drawn per seed: 5% to 30% more per doubling of the nodes


def truth(seed: int, spec) -> SimulatedBackend:
    strength = random.Random(f"congestion-{seed}").uniform(*CONGESTION)
    return SimulatedBackend(cost_model_for(spec), noise=NOISE, perturbation=PERTURBATION,
                            interactions=INTERACTIONS, seed=seed, congestion=strength)


def true_tokens_per_s(backend: SimulatedBackend, config) -> float | None:
    """The layout's noise-free throughput at the target; None if it runs out of memory."""
    step = backend.noise_free_step_s(config)
    return None if step is None else backend.cost_model.estimate(config).tokens_per_step / step


def campaign(runs: Path, name: str, seed: int, **scale) -> tuple[list, object]:
    raw = json.loads(json.dumps(TARGET_SPEC))
    raw.update(name=name)
    raw["scale"].update(scale)
    raw["search"]["seed"] = seed
    raw["tracking"]["runs_dir"] = str(runs)
    spec = spec_from_dict(raw)
    summary = Controller(spec, backend=truth(seed, spec)).run()
    return executed(CampaignView.open(runs, name).records()), summary


def one_seed(seed: int) -> dict:
    runs = Path(tempfile.mkdtemp()) / "runs"
    target = spec_from_dict({**TARGET_SPEC, "tracking": {"enabled": False, "runs_dir": str(runs)}})
    oracle = truth(seed, target)
    values = {c: v for c in fitted_candidates(target)
              if (v := true_tokens_per_s(oracle, c)) is not None}
    best = max(values.values())
    sliced, summary = campaign(runs, "sliced", seed, slice_nodes=SLICE_NODES)
    at_target = [r for r in sliced if r.phase == TARGET]
    winner = summary.best.config if summary.best is not None and summary.best.phase == TARGET \
        else None
    gap = 1 - values[winner] / best if winner in values else None
    full, full_summary = campaign(runs, "full", seed)
    full_winner = full_summary.best.config if full_summary.best is not None else None
    spent, to_reach = 0.0, None
    for r in sorted(full, key=lambda r: r.trial_id):
        spent += gpu_hours(r)
        if to_reach is None and r.result and r.result.ok and values.get(r.config, 0) >= \
                (1 - WITHIN) * best:
            to_reach = spent
    return {"seed": seed, "true_best": round(best), "slice_trials": len(sliced) - len(at_target),
            "target_trials": len(at_target), "winner": winner.key() if winner else None,
            "gap": None if gap is None else round(gap, 4),
            "slice_gpu_hours": round(sum(gpu_hours(r) for r in sliced), 1),
            "full_trials": len(full), "full_gpu_hours": round(spent, 1),
            "full_gap": (round(1 - values[full_winner] / best, 4) if full_winner in values
                         else None),
            "full_gpu_hours_to_3pct": None if to_reach is None else round(to_reach, 1)}


def summarise(rows: list[dict]) -> dict:
    within = [r for r in rows if r["gap"] is not None and r["gap"] <= WITHIN]
    shares = [r["slice_gpu_hours"] / (r["full_gpu_hours_to_3pct"] or r["full_gpu_hours"])
              for r in rows]
    full_within = [r for r in rows if r["full_gap"] is not None and r["full_gap"] <= WITHIN]
    return {"seeds": len(rows), "winner_within_3pct": len(within),
            "full_scale_winner_within_3pct": len(full_within),
            "full_scale_reached_3pct": sum(r["full_gpu_hours_to_3pct"] is not None for r in rows),
            "median_slice_gpu_hours": statistics.median(r["slice_gpu_hours"] for r in rows),
            "median_full_gpu_hours_to_3pct": statistics.median(
                r["full_gpu_hours_to_3pct"] or r["full_gpu_hours"] for r in rows),
            "median_share_of_full_to_3pct": round(statistics.median(shares), 4),
            "median_share_of_full_total": round(statistics.median(
                r["slice_gpu_hours"] / r["full_gpu_hours"] for r in rows), 4),
            "max_share_of_full_to_3pct": round(max(shares), 4)}


MD_PATH = ROOT / "docs" / "slice_tuning.md"


def pct(value: float | None) -> str:
    return "never" if value is None else f"{100 * value:.1f}%"


def markdown(report: dict) -> str:
    """The per-seed table and the summary, as docs/slice_tuning.md shows them."""
    lines = ["| seed | slice trials | target trials | slice campaign's winner below the best | "
             "its GPU-hours | full-scale campaign's winner below the best | its GPU-hours to "
             "3% | its GPU-hours |", "|---" * 8 + "|"]
    for r in report["seeds"]:
        to_3 = r["full_gpu_hours_to_3pct"]
        lines.append(f"| {r['seed']} | {r['slice_trials']} | {r['target_trials']} | "
                     f"{pct(r['gap'])} | {r['slice_gpu_hours']:,.1f} | {pct(r['full_gap'])} | "
                     f"{'never' if to_3 is None else f'{to_3:,.1f}'} | "
                     f"{r['full_gpu_hours']:,.1f} |")
    s = report["summary"]
    lines += ["", f"- Slice campaign's winner within 3% of the true best: "
              f"**{s['winner_within_3pct']} of {s['seeds']}** seeds; the full-scale campaign's: "
              f"{s['full_scale_winner_within_3pct']} of {s['seeds']} (it measured a layout "
              f"within 3% on {s['full_scale_reached_3pct']}).",
              f"- Slice campaign's GPU-hours: median {s['median_slice_gpu_hours']:,.1f}, "
              f"{100 * s['median_share_of_full_total']:.1f}% of the full-scale campaign's "
              f"(median of the per-seed shares), {100 * s['median_share_of_full_to_3pct']:.1f}% "
              f"of what it spent to first measure a layout within 3% (its whole spend where "
              f"it never did; median {s['median_full_gpu_hours_to_3pct']:,.1f})."]
    return "\n".join(lines) + "\n"


def write_doc(report: dict) -> None:
    write_marked_block(MD_PATH, "slice-tuning", markdown(report))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    rows = []
    for seed in range(args.seeds):
        rows.append(one_seed(seed))
        print(json.dumps(rows[-1]), flush=True)
    report = {"landscape": "generated", "target": TARGET_SPEC, "slice_nodes": SLICE_NODES,
              "noise": NOISE, "perturbation": PERTURBATION, "interactions": INTERACTIONS,
              "congestion": CONGESTION, "summary": summarise(rows), "seeds": rows}
    JSON_PATH.write_text(json.dumps(report, indent=1) + "\n")
    write_doc(report)
    print(json.dumps(report["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
