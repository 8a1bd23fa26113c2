"""`paratune plan` and `estimate`: the cost model and the AMSP planner from the CLI.

Both take a campaign spec (estimate: one that pins a single configuration) or presets given as
options (`calibrate` is cli/calibrate.py). With `--json` each prints one JSON object.
"""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from orchestrator.cli.common import (
    out,
    print_json,
    print_space_notes,
    rank_spec,
)
from orchestrator.cli.plan_caveats import mfu_peak, plan_caveats, print_plan
from orchestrator.cli.plan_full_space import (
    file_full_space_spec,
    as_given,
    FullPlan,
    full_space_spec,
    no_fit_message,
    plan_candidates,
    print_full_plan,
    rank_full,
)
from orchestrator.cli.plan_sweep import parse_nodes, plan_sweep
from orchestrator.cli.spec_options import file_options, options_data, spec_from_options
from orchestrator.cli.plan_tokens import parse_tokens, pick_extras, print_pick_extras
from orchestrator.common.errors import UserError
from orchestrator.costmodel.fit_verdict import RISKY, memory_margin
from orchestrator.costmodel.precision import is_fp8
from orchestrator.costmodel.ranking import Ranking
from orchestrator.campaign_spec import (
    CampaignSpec,
    apply_override,
    load_spec,
)
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates, priced_runtime
from orchestrator.campaign_spec.unused_values import unused_values
from orchestrator.trainers.registry import trainer_for


def _describe_spec(spec: CampaignSpec) -> dict[str, Any]:
    return {"model": spec.model.name, "params": spec.model.num_params,
            "cluster": spec.cluster.name, "world_size": spec.world_size,
            "runtime": priced_runtime(spec)}


SPEC_ARG = typer.Argument(None, help="campaign YAML (instead of --model/--cluster/--gpus)")
SET_OPT = typer.Option([], "--set", help="override a spec key: a.b=value")


AMSP_SPACE = {"kind": "amsp", "micro_batch_size": [1], "activation_checkpointing": ["none", "full"]}


def plan(
    spec_file: Optional[Path] = SPEC_ARG,
    set_: list[str] = SET_OPT,
    model: Optional[str] = typer.Option(None, "--model"),
    cluster: Optional[str] = typer.Option(None, "--cluster"),
    gpus: Optional[int] = typer.Option(None, "--gpus"),
    global_batch_size: Optional[int] = typer.Option(None, "--global-batch-size"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len"),
    top_k: int = typer.Option(5, "--top-k", help="1 to 10000"),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="a token budget (15T, 300B, "
                                         "1e12): days and GPU-hours for each listed layout"),
    amsp: bool = typer.Option(False, "--amsp", help="without a SPEC: AMSP's sharding factors "
                              "at tp 1, pp 1 instead of the whole space"),
    compare: bool = typer.Option(False, "--compare",
                                 help="AMSP's plan, MiCS, ZeRO++, ZeRO-1, ZeRO-3 side by side"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="sweep node counts: 1,16,128"),
    weak: bool = typer.Option(False, "--weak", help="with --nodes: keep the batch per node"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The cost model's top-k over the whole space a model and a cluster allow (without a
    SPEC), the spec's space, or the AMSP planner (amsp spaces, --amsp)."""
    if not 1 <= top_k <= 10_000:
        raise UserError(f"--top-k: {top_k} is out of range; give 1 to 10000")
    budget = parse_tokens(tokens) if tokens is not None else None
    if compare or nodes:
        if spec_file is None:
            raise UserError("--compare and --nodes need a SPEC file")
        node_counts = parse_nodes(nodes) if nodes else None
        plan_sweep(lambda extra: load_spec(spec_file, [*set_, *extra]), node_counts, compare,
                   as_json, weak)
        return
    spec, full = _plan_spec(spec_file, set_, {"model": model, "cluster": cluster, "gpus": gpus,
                            "global_batch_size": global_batch_size, "seq_len": seq_len}, amsp)
    cost = cost_model_for(spec)
    candidates = plan_candidates(spec, full, cost) if full else fitted_candidates(spec, cost)
    ranking = (rank_full if full else partial(rank_spec, spec))(top_k, cost, candidates)
    if not as_json:
        print_space_notes(as_given(spec, full), candidates)
    if ranking.best is None and not ranking.risky:
        raise UserError(no_fit_message(spec, full))
    caveats = plan_caveats(spec, cost, ranking)  # mfu_peak, and constants the order rests on
    extras = pick_extras(spec, cost, ranking, budget)  # the largest micro-batch, days to train
    if not as_json:
        if full is not None:
            print_full_plan(spec, full, candidates, ranking.feasible)
        print_plan(spec, ranking, caveats)  # the ranking's table, then the caveats
        print_pick_extras(ranking, extras)
        if trainer_for(spec).runtime_assumed or (full is not None and full.trainer):
            out.print(f"priced as: {priced_runtime(spec)}", markup=False, highlight=False)
        return
    print_json({
        **_describe_spec(spec), "planner": ranking.planner, **_pick(ranking),
        "candidates": ranking.candidates, "feasible": ranking.feasible,
        "top": [e.to_dict() for e in ranking.top],
        "memory_margin": memory_margin(spec.cluster.device), "risky_count": ranking.risky_count,
        "risky": [e.to_dict() for e in ranking.risky], **caveats,
        "notes": unused_values(as_given(spec, full), candidates), **extras,
        **({"full_space": full.to_dict(candidates)} if full else {}),
    })


def _plan_spec(spec_file: Optional[Path], overrides: list[str], presets: dict[str, Any],
               amsp: bool) -> tuple[CampaignSpec, FullPlan | None]:
    """A SPEC file's spec (over the whole space if it gives no space); without one, the whole
    space the presets allow, or AMSP's sharding at tp 1, pp 1 (--amsp, or --set
    space.kind=amsp)."""
    if spec_file is None and not amsp:
        data = options_data({k: v for k, v in presets.items() if v is not None}, {}, "plan")
        for item in overrides:
            apply_override(data, item, source="paratune plan")
        space = data.get("space")
        if not (isinstance(space, dict) and space.get("kind") == "amsp"):
            return full_space_spec(data, "paratune plan")
    spec = spec_from_options(spec_file, overrides, presets, {} if spec_file else AMSP_SPACE,
                              "plan")
    if spec_file is None or amsp or "space" in spec.model_fields_set:
        return spec, None
    given = {k: v for k, v in presets.items() if v is not None}  # a SPEC with no space
    return file_full_space_spec(spec_file, [*file_options(given, {}), *overrides])


def _pick(ranking: Ranking) -> dict[str, Any]:
    """plan's JSON on the planner's pick: its figures, AMSP's plan and runner-up (for the tie
    rule); `best: null` alone where no layout fits and only risky ones are listed."""
    best = ranking.best
    if best is None:
        return {"best": None}
    runner_up = None
    if ranking.plan and len(ranking.top) > 1:
        second = ranking.top[1]
        runner_up = {"plan": second.config.sharding.to_dict(),
                     "exposed_comm_ms": second.time.dp_exposed_s * 1e3,
                     "step_time_s": second.step_time_s}
    return {"plan": ranking.plan.factors.to_dict() if ranking.plan else None,
            "exposed_comm_ms": best.time.dp_exposed_s * 1e3, "runner_up": runner_up,
            "mfu": best.mfu, "hfu": best.hfu, "tokens_per_s": best.tokens_per_s,
            "tflops_per_gpu": best.tflops_per_gpu, "best": best.to_dict()}


def estimate(
    spec_file: Optional[Path] = SPEC_ARG,
    set_: list[str] = SET_OPT,
    model: Optional[str] = typer.Option(None, "--model", help="model preset, e.g. llama-7b"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="cluster preset, e.g. h100-80g"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="world size"),
    tp: Optional[int] = typer.Option(None, "--tp", help="[default: 1, or the spec's]"),
    pp: Optional[int] = typer.Option(None, "--pp", help="[default: 1, or the spec's]"),
    zero_stage: Optional[int] = typer.Option(None, "--zero-stage",
                                             help="[default: 0, or the spec's]"),
    micro_batch_size: Optional[int] = typer.Option(None, "--micro-batch-size",
                                                   help="[default: 1, or the spec's]"),
    global_batch_size: Optional[int] = typer.Option(None, "--global-batch-size",
                                                    help="sequences per step (default: gpus)"),
    ac: Optional[str] = typer.Option(None, "--activation-checkpointing",
                                     help="none | selective | full [default: none, or the spec's]"),
    recompute_num_layers: Optional[int] = typer.Option(
        None, "--recompute-num-layers", help="with full: layers per stage that recompute"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Memory and predicted throughput breakdown of one configuration."""
    # Without a SPEC the checkpointing is --activation-checkpointing's alone; a SPEC may give it.
    if recompute_num_layers is not None and (ac or ("full" if spec_file else "none")) != "full":
        raise UserError("--recompute-num-layers: needs --activation-checkpointing full")
    layout = {"tp": tp, "pp": pp, "zero_stage": zero_stage, "micro_batch_size": micro_batch_size,
              "activation_checkpointing": ac, "recompute_num_layers": recompute_num_layers}
    space = {k: [v] for k, v in layout.items() if v is not None}
    if spec_file is None:  # a single layout: the defaults pin what was not given
        space = {"tp": [1], "pp": [1], "zero_stage": [0], "micro_batch_size": [1],
                 "activation_checkpointing": ["none"], **space}
    presets = {"model": model, "cluster": cluster, "gpus": gpus,
               "global_batch_size": global_batch_size, "seq_len": seq_len}
    spec = spec_from_options(spec_file, set_, presets, space, "estimate")
    cost = cost_model_for(spec)
    candidates = fitted_candidates(spec, cost)
    chosen = None
    if len(candidates) == 1:
        result = cost.estimate(candidates[0])
    else:  # a space: the configuration the cost model ranks first (AMSP's plan on amsp spaces)
        result = rank_spec(spec, 1, cost, candidates).best
        if result is None:
            raise UserError(f"{spec.name}: none of the space's {len(candidates)} configurations "
                            f"fits in {spec.cluster.memory_gb:g} GB")
        chosen = f"the cost model's best of {len(candidates)} configurations"
    data = {**_describe_spec(spec), **result.to_dict(), "memory_margin": result.memory_margin,
            "chosen": chosen or "pinned", "mfu_peak": mfu_peak(spec.cluster),
            "stage_layers": list(result.config.stage_layers(spec.model.num_layers))}
    if as_json:
        print_json(data)
    else:
        _print_estimate(spec, result, data, chosen)


def _print_estimate(spec, result, data: dict, chosen: str | None) -> None:
    """An estimate as tables of memory and time, and a verdict line."""
    out.print(f"[bold]{spec.model.name}[/] ({spec.model.num_params / 1e9:.2f}B params) on "
              f"{spec.world_size} × {spec.cluster.device}: {result.config.key()}"
              + (f" ({chosen})" if chosen else ""))
    for title, section, unit in (("memory per device", "memory", "GB"),
                                 ("time per step", "time", "seconds")):
        table = Table(title, unit)
        for key, value in data[section].items():
            table.add_row(key.removesuffix("_gb").removesuffix("_s"), f"{value:.4g}")
        out.print(table)
    if len(data["stage_layers"]) > 1:
        out.print(f"pipeline stages: {_stage_layers_text(data['stage_layers'])} transformer "
                  f"layers ({result.config.pipeline_split} split)")
    verdict = "fits" if result.fits else "[red]does NOT fit[/]"
    if not result.unsupported and result.memory_verdict == RISKY:
        verdict = (f"[yellow]risky[/]: over {result.capacity_gb:g} GB, within the memory "
                   f"model's {result.memory_margin:.0%} margin (a campaign measures it)")
    fp8_note = ", not FP8's" if is_fp8(result.config) else ""
    out.print(f"{verdict}; {result.tokens_per_s:,.0f} tokens/s, "
              f"{result.tflops_per_gpu:.1f} TFLOPS/GPU, MFU {result.mfu:.1%}, HFU {result.hfu:.1%}"
              + f" (MFU vs {spec.cluster.peak_tflops:g} TFLOPS {data['mfu_peak'].upper()} dense "
              f"peak{fp8_note})")
    if trainer_for(spec).runtime_assumed:  # the engine is an assumption only for a command
        out.print(f"priced as: {data['runtime']}", markup=False, highlight=False)


def _stage_layers_text(layers: list[int]) -> str:
    """Each stage's layers, a run of equal stages as one term: 3 + 14 × 4 + 2."""
    runs = [(count, len(list(run))) for count, run in itertools.groupby(layers)]
    return " + ".join(f"{n} × {count}" if n > 1 else str(count) for count, n in runs)

