"""`paratune plan --compare` and `--nodes`: the AMSP paper's scheme comparison and scale sweeps.

`--compare` takes the best layout the cost model finds for the spec and prints AMSP's plan,
MiCS, ZeRO++, ZeRO-1 and ZeRO-3 on it side by side (memory, MFU, HFU, and MFU with every
overlap on and with every collective exposed). `--nodes 1,16,128` repeats the plan (or the comparison) at each node
count with the spec's global batch (strong scaling, as AMSP §VI-B keeps 4M tokens), or with
the batch per node kept (`--weak`), so the papers' trends print from one command.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from rich import box
from rich.table import Table

from orchestrator.cli.campaign_table import number
from orchestrator.cli.common import out, print_json, rank_spec
from orchestrator.cli.layout_table import Column, Row, print_layouts
from orchestrator.cli.table_fit import fits, pair, print_records
from orchestrator.common.errors import UserError
from orchestrator.costmodel.compare import compare_schemes
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.planning import cost_model_for


def parse_nodes(text: str) -> list[int]:
    try:
        nodes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        nodes = []
    if not nodes or min(nodes) < 1:
        raise UserError(f"--nodes: {text!r} is not a list of positive node counts; e.g. 1,16,128")
    return nodes


def _rows_for(spec: CampaignSpec, compare: bool) -> list[tuple[dict[str, Any], Any]]:
    """The JSON rows for one node count, each with the layout it describes (or None)."""
    ranking = rank_spec(spec, 1)
    best = ranking.best
    where = {"nodes": spec.scale.nodes, "world_size": spec.world_size,
             "global_batch_size": spec.scale.global_batch_size}
    if best is None:
        return [({**where, "scheme": None, "fits": False}, None)]
    if not compare:
        factors = ranking.plan.factors.to_dict() if ranking.plan else None
        return [({**where, "config": best.config.key(), "factors": factors,
                  "memory_gb": best.memory_gb, "mfu": best.mfu, "hfu": best.hfu,
                  "tokens_per_s": best.tokens_per_s,
                  "tokens_per_s_per_gpu": best.tokens_per_s / spec.world_size}, best.config)]
    base = dataclasses.replace(best.config, sharding=None, zero_stage=0)
    rows = compare_schemes(cost_model_for(spec), base)
    return [({**where, "config": base.key(), **row.to_dict()}, base) for row in rows]


def plan_sweep(load: Callable[[list[str]], CampaignSpec], nodes: list[int] | None,
               compare: bool, as_json: bool, weak: bool = False) -> None:
    """Rows for each node count (or the spec's own); `load` builds the spec with overrides."""
    specs = [load([f"scale.nodes={n}"]) for n in nodes] if nodes else [load([])]
    if weak:
        own = load([])
        per_node = own.scale.global_batch_size / own.scale.nodes
        specs = [load([f"scale.nodes={s.scale.nodes}",
                       f"scale.global_batch_size={round(per_node * s.scale.nodes)}"])
                 for s in specs]
    pairs = [pair for spec in specs for pair in _rows_for(spec, compare)]
    rows = [row for row, _ in pairs]
    if as_json:
        print_json({"model": specs[0].model.name, "cluster": specs[0].cluster.name,
                    "global_batch_size": specs[0].scale.global_batch_size, "rows": rows})
        return
    out.print(f"{specs[0].name}: {specs[0].model.name} on {specs[0].cluster.name}, global batch "
              f"{specs[0].scale.global_batch_size} sequences")
    if compare:
        _print_compare(rows)
    else:
        _print_best_per_scale(pairs)


def _print_compare(rows: list[dict[str, Any]]) -> None:
    headers = ("GPUs", "scheme", "factors", "GB", "fits", "MFU", "HFU", "all", "none")
    table = Table(*headers, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    cells = []
    for r in rows:
        if r.get("scheme") is None:
            cells.append([str(r["world_size"]), "-", "nothing fits", "", "", "", "", "", ""])
            continue
        f = r["factors"]
        factors = ",".join(str(f[k]) for k in ("s0p", "s1p", "s0g", "s1g", "s0os", "s1os"))
        cells.append([str(r["world_size"]), r["scheme"], f"({factors})",
                      f"{r['memory_gb']:.1f}", "yes" if r["fits"] else "no",
                      f"{r['mfu']:.1%}", f"{r['hfu']:.1%}", f"{r['mfu_full_overlap']:.1%}",
                      f"{r['mfu_without_overlap']:.1%}"])
    for row in cells:
        table.add_row(*row)
    out.print("factors: (s0p,s1p,s0g,s1g,s0os,s1os); MFU as run end to end (AMSP's "
              "broadcast overlap off); all: MFU with every overlap on; none: with every "
              "collective exposed")
    for r in rows:
        if r.get("recompute", "").endswith("layers"):
            out.print(f"{r['world_size']} GPUs, {r['scheme']}: recomputes the first "
                      f"{r['recompute']} of each stage, the fewest that fit")
    if fits(out, table):
        out.print(table)
    else:  # one record per scheme rather than a factor cut
        print_records(out, [(f"GPUs={row[0]}  {row[1]}",
                             [pair(h, c) for h, c in zip(headers[2:], row[2:]) if c])
                            for row in cells])


def _print_best_per_scale(pairs: list[tuple[dict[str, Any], Any]]) -> None:
    """The best layout at each node count, in node order: a column per knob that varies."""
    rows = []
    for r, config in pairs:
        if config is None:
            rows.append(Row([number(r["world_size"])], None, ["nothing fits", "", "", ""]))
            continue
        rows.append(Row([number(r["world_size"])], config,
                        [f"{r['memory_gb']:.1f}", f"{r['mfu']:.1%}", f"{r['hfu']:.1%}",
                         number(r["tokens_per_s"])]))
    print_layouts(out, rows, [Column("GPUs")],
                  [Column("memory GB", "GB"), Column("MFU"), Column("HFU"), Column("tokens/s")])
