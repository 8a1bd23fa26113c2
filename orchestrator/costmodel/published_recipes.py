"""Settings a published run did not print but its launch code set, read from that code.

Two sources print each run's layout but not its activation recompute, which their launch
code sets per run; the code was read at the release that ran, and a CSV beside this module
holds, for each published run whose code was found, the modules it recomputes ("" for
nothing) and any activation offload, with the code's release and the recipe read:
- bridge_perf_recompute.csv: Megatron-Bridge's performance summary (its rows in
  benchmarks/measured/, "NeMo / Megatron-Bridge" their framework). The release each NeMo
  container ships (25.09: 0.1.0rc3, or rc4 where only rc4's layout matches; 25.11: 0.2.0;
  26.02: 0.3.0; 26.02.01: 0.3.1; 26.04: 0.4.0; 26.04.01: 0.4.2; 26.06: 0.5.0; 26.06.01:
  0.5.1; 26.08: 0.6.0, by the repository's docs/releases/software-versions.md and
  docs/versions1.json). The recipe's defaults, then the family's common settings, then the
  workload preset decide it (scripts/performance/utils/overrides.py
  `_set_recompute_overrides`; from 0.6.0 the flat recipes of src/megatron/bridge/perf_recipes/).
  "Nothing" is granularity None, an empty module list, or 0.2.0's module list set without
  the selective granularity that makes it act.
- nemo_launcher_recompute.csv: NeMo 24.07's performance summary
  (benchmarks/measured/nemo_24.07_perf_summary.csv), run from NeMo-Framework-Launcher's
  example scripts and model configs (tag 24.07, or the later commit whose config has the
  published layout): `activations_checkpoint_granularity: null` in every one, which NeMo
  2.0.0rc1 (the container's) passes to Megatron-Core as no recompute.
A run is in a table only where the code read has the published layout (the parallel sizes,
the FSDP choice and the micro-batch; the global batch may differ, as Megatron-Bridge's launcher
rescales it): 27 of Megatron-Bridge's 293 runs and 6 of NeMo 24.07's 18 have none (the table
prints a layout no config of the release sets), so what ran is not known, and they keep
published_layout.py's rule.

The layout knows none, selective and full recompute, so a module list is priced as:
- nothing, or only element-wise ops and MLA's up-projections (layernorm, moe_act,
  mla_up_proj): none; their replay is a few per cent of a step, not priced;
- core_attn (without mlp or moe): selective, Megatron-Core's core-attention recompute;
- mlp or moe: full, an upper bound (the MLP is most of a layer's forward).
A run that offloads activations to the host (CPU offload of whole layers, Megatron-Core's
fine-grained offload) is not priced: the layout has no knob for it, so its memory would be
counted on the device (published_rows.py prices no setting it cannot express).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from orchestrator.costmodel.published_names import NotPriced

HERE = Path(__file__).parent
TABLES = (HERE / "bridge_perf_recompute.csv", HERE / "nemo_launcher_recompute.csv")
SETTINGS = ("recomputed_modules", "activation_offload", "launch_code", "recipe")
UNPRICED_REPLAYS = frozenset({"layernorm", "moe_act", "mla_up_proj"})


@cache
def _runs() -> list[tuple[tuple[str, ...], dict[tuple[str, ...], dict[str, str]]]]:
    """Per table: its key columns (every column before the settings) and its runs by key."""
    found = []
    for table in TABLES:
        with open(table, newline="") as f:
            reader = csv.DictReader(f)
            key = tuple(c for c in reader.fieldnames if c not in SETTINGS)
            found.append((key, {tuple(run[k] for k in key): run for run in reader}))
    return found


def run_of(values: dict[str, str]) -> dict[str, str] | None:
    """The launch code's settings of this published row, or None where none was read."""
    for key, runs in _runs():
        run = runs.get(tuple(values.get(k, "") for k in key))
        if run is not None:
            return run
    return None


def recompute_from_launch_code(values: dict[str, str]) -> tuple[str, list[str]] | None:
    """The recompute mode the row's launch code ran it with, and the assumptions that pricing
    it adds; None where the row is not one whose code was read. NotPriced where that code
    offloads activations."""
    run = run_of(values)
    if run is None:
        return None
    if run["activation_offload"]:
        raise NotPriced(f"{run['activation_offload']} ({run['launch_code']}'s recipe): no "
                        "layout knob for it")
    modules = frozenset(m for m in run["recomputed_modules"].split(";") if m)
    mode, how = priced_recompute(modules)
    said = (f"recompute from {run['launch_code']}'s recipe ({run['recipe']}): "
            + (", ".join(sorted(modules)) if modules else "nothing recomputed") + how)
    return mode, [said]


def priced_recompute(modules: frozenset[str]) -> tuple[str, str]:
    """The layout's recompute mode for Megatron-Core's `recompute_modules` (selective
    granularity), and what pricing it so leaves out (module docstring)."""
    if modules & {"mlp", "moe"}:
        return "full", "; priced as full recompute, an upper bound"
    if "core_attn" in modules:
        return "selective", ""
    if modules - UNPRICED_REPLAYS:
        raise NotPriced(f"recompute_modules {sorted(modules - UNPRICED_REPLAYS)}: not modelled")
    return "none", "; their replay (element-wise ops, up-projections) not priced" if modules \
        else ""
