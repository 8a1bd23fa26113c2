"""`paratune plan --model M --cluster C --gpus N` with no space: the whole space the model and
the cluster allow (campaign_spec/full_space.py), with what was searched, what was left out and why.

No trainer named, the plan prices layouts and no trainer's rules refuse any. A trainer named
(`--set trial.trainer=megatron-lm`) narrows the space by its rules, each reason printed: its
range rules (a ZeRO stage it has not) narrow the ranges, its layout rules drop layouts.
`paratune run SPEC` with no `space` runs over the same whole space, narrowed by the trainer
that will run the trials (the built-in one when the spec names none).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from orchestrator.cli.common import out
from orchestrator.common.errors import SpecError
from orchestrator.costmodel import CostModel
from orchestrator.costmodel.fit_verdict import DOES_NOT_FIT, memory_margin, memory_verdict
from orchestrator.costmodel.ranking import Ranking, rank_by_throughput
from orchestrator.costmodel.recompute import fewest_recomputed_layers
from orchestrator.layout import searched_knobs
from orchestrator.space import Layout, SearchSpace
from orchestrator.campaign_spec import CampaignSpec, apply_override, load_spec, spec_from_dict
from orchestrator.campaign_spec.full_space import FullSpace, full_space
from orchestrator.campaign_spec.planning import cost_model_for
from orchestrator.campaign_spec.yaml_input import load_yaml_file
from orchestrator.campaign_spec.trainer_layouts import runnable
from orchestrator.trainers.registry import DEFAULT, readers_of

SHOWN_REASONS = 3  # distinct layout refusals printed; the JSON has them all, counted


@dataclass
class FullPlan:
    """What the plan searched beyond its spec: the full space, the trainer named (None:
    none), the range rules it narrowed the space by, and why it refused layouts."""

    full: FullSpace
    trainer: str | None
    given: list[str]
    narrowed: list[str] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)

    def to_dict(self, candidates: list[Layout]) -> dict[str, Any]:
        return {"searched": searched_values(self, candidates), "left_out": self.full.left_out,
                "trainer": self.trainer, "narrowed": self.narrowed,
                "refused": [{"reason": r, "layouts": n} for r, n in self.refused.items()]}


def full_space_spec(data: dict[str, Any], source: str) -> tuple[CampaignSpec, FullPlan]:
    """The spec of `data` (presets and --set applied) over the full space; the keys `--set`
    gave in `space` win over it."""
    given = dict(data.get("space") or {})
    trial = data.get("trial") if isinstance(data.get("trial"), dict) else {}
    trainer = trial.get("trainer") or (readers_of("command")[0] if trial.get("command") else None)
    shape = spec_from_dict({**data, "space": {}}, source, trainer_rules=False)
    full = full_space(shape.model, shape.cluster, shape.gpus_per_node, shape.world_size)
    merged = {**full.space, **given}
    spec = spec_from_dict({**data, "space": merged}, source, trainer_rules=False)
    plan = FullPlan(full, trainer, sorted(given))
    if trainer is None:
        return spec, plan
    try:  # the trainer's rules over the full ranges as if given: each reason it refuses them
        return spec_from_dict({**data, "space": merged}, source), plan
    except SpecError as exc:
        plan.narrowed = [line.removeprefix(f"{source}: ") for line in str(exc).splitlines()]
    # The full ranges as defaults, so the trainer's rules narrow them as they narrow a spec's
    # default ranges (a user's own ranges are still refused).
    space = type(spec.space).model_construct(_fields_set=set(given), **dict(spec.space))
    return spec_from_dict({**data, "space": space}, source), plan


def as_given(spec: CampaignSpec, plan: FullPlan | None) -> CampaignSpec:
    """The spec as if only the space keys `--set` gave were set, so the notes on values no
    layout takes (unused_values.py) speak of the user's values, not the full space's."""
    if plan is None:
        return spec
    space = type(spec.space).model_construct(_fields_set=set(plan.given), **dict(spec.space))
    return spec.model_copy(update={"space": space})


def plan_candidates(spec: CampaignSpec, plan: FullPlan, cost: CostModel) -> list[Layout]:
    """The space's layouts the named trainer runs (all of them when none is named), each
    `recompute_num_layers: fit` resolved by `cost`; why the trainer refused the others,
    counted, goes to `plan.refused`."""
    fit = partial(fewest_recomputed_layers, cost)
    found = [c for space in _undominated_spaces(spec, plan) for c in space.candidates(fit=fit)]
    if not found:
        return spec.candidates()  # the SpecError that says why the space is empty
    reasons: list[str] = []
    kept = runnable(spec, found, reasons)
    for reason in reasons:
        plan.refused[reason] = plan.refused.get(reason, 0) + 1
    return kept


def _undominated_spaces(spec: CampaignSpec, plan: FullPlan) -> list[SearchSpace]:
    """The spec's search space as parts that hold no `dominated` layout: tp 1, and tp > 1
    with sequence parallelism (unless `--set` gave sequence_parallel)."""
    space = spec.search_space()
    ranges, tp = space.ranges, space.ranges.tp
    if "sequence_parallel" in plan.given or not ranges.sequence_parallel.count(True):
        return [space]
    parts = [((1,), (False,)), (tuple(t for t in tp if t > 1), (True,))]
    return [dataclasses.replace(space, ranges=dataclasses.replace(
        ranges, tp=tps, sequence_parallel=sp)) for tps, sp in parts if tps and set(tps) & set(tp)]


def rank_full(top_k: int, cost: CostModel, candidates: list[Layout]) -> Ranking:
    """The candidates ranked by throughput, the step priced only where the memory model
    says the layout may fit (within its margin): most of a full space does not."""
    margin = memory_margin(cost.cluster.device)
    priced = [c for c in candidates if cost.unsupported(c) is None and memory_verdict(
        cost.memory(c), cost.cluster.memory_gb, 1.0, margin) != DOES_NOT_FIT]
    ranking = rank_by_throughput(cost, priced, top_k)
    return dataclasses.replace(ranking, candidates=len(candidates))


def searched_values(plan: FullPlan, candidates: list[Layout]) -> dict[str, list]:
    """Each knob of the full space with the values some searched layout takes."""
    names = [k.name for k in searched_knobs() if k.name in plan.full.space]
    found = {name: {getattr(c, name) for c in candidates} for name in names}
    return {name: [v for v in dict.fromkeys([*plan.full.space[name], *found[name]])
                   if v in found[name]] for name in names}


def print_full_plan(spec: CampaignSpec, plan: FullPlan, candidates: list[Layout],
                    fitting: int, batch_hint: str = "--global-batch-size") -> None:
    """What was searched, each knob's values; what was left out and why; the trainer's rules."""
    out.print(f"searched the whole space {spec.model.name} on {spec.world_size:,} × "
              f"{spec.cluster.device} allows: {len(candidates):,} layouts, {fitting:,} fit in "
              f"{spec.cluster.memory_gb:g} GB, at a global batch of "
              f"{spec.scale.global_batch_size:,} sequences of {spec.model.seq_len:,} tokens "
              f"({batch_hint} sets it)", markup=False, highlight=False)
    for name, values in searched_values(plan, candidates).items():
        given = " (--set)" if name in plan.given else ""
        out.print(f"  {name}: {', '.join(map(_shown, values))}{given}", markup=False,
                  highlight=False)
    out.print("left out:", markup=False, highlight=False)
    for line in plan.full.left_out:
        out.print(f"  - {line}", markup=False, highlight=False)
    if plan.trainer is None:
        out.print("no trainer named: no trainer's rules narrow the layouts, and they are priced "
                  "as the built-in trainer runs them (PyTorch DDP, ZeroRedundancyOptimizer, "
                  "FSDP2); --set trial.trainer=megatron-lm (or torchtitan, deepspeed, "
                  "megatron-deepspeed, builtin) applies its rules and its engine",
                  markup=False, highlight=False)
        return
    for line in plan.narrowed:
        out.print(f"trainer {plan.trainer} narrows {line}", markup=False, highlight=False)
    if plan.refused:
        total = sum(plan.refused.values())
        out.print(f"trainer {plan.trainer} refused {total:,} layouts; e.g.:", markup=False,
                  highlight=False)
        for reason in sorted(plan.refused, key=plan.refused.get, reverse=True)[:SHOWN_REASONS]:
            out.print(f"  - {reason}", markup=False, highlight=False)


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


MEMORY_KNOBS = ("tp", "pp", "cp", "ep", "zero_stage", "activation_checkpointing", "offload")


def no_fit_message(spec: CampaignSpec, plan: FullPlan | None) -> str:
    """Nothing fits: the keys that cut memory and are not yet at their widest, each as the
    `--set` that widens it (offload last, as a last resort), or more GPUs."""
    widest = full_space(spec.model, spec.cluster, spec.gpus_per_node, spec.world_size).space
    widest = {**widest, "offload": ["none", "optimizer", "optimizer+params"]}
    sets = []
    for name in MEMORY_KNOBS:
        values, wider = list(getattr(spec.space, name)), widest[name]
        if name == "ep" and not spec.model.num_experts or set(wider) <= set(values):
            continue
        shown = ",".join(map(_shown, wider))
        sets.append(f"--set 'space.{name}=[{shown}]'")
    widen = (f"widen the space: {' '.join(sets)}" if sets else
             "every key that cuts memory is at its widest")
    more = "; or give more GPUs (--gpus)" if plan is not None else ""
    return (f"{spec.name}: no configuration fits in {spec.cluster.memory_gb:g} GB; {widen}"
            f"{more}")


def run_spec(spec_file: Path, overrides: list[str]) -> CampaignSpec:
    """The spec `paratune run` runs: SPEC as given, or over the whole space if it gives no
    `space`."""
    spec = load_spec(spec_file, overrides)
    return spec if "space" in spec.model_fields_set else _whole_space_run_spec(spec_file,
                                                                               overrides)


def file_full_space_spec(spec_file: Path, overrides: list[str]) -> tuple[CampaignSpec, FullPlan]:
    """A SPEC file that gives no `space`, over the whole space its model and cluster allow."""
    return full_space_spec(_file_data(spec_file, overrides), str(spec_file))


def _file_data(spec_file: Path, overrides: list[str], trainer: str | None = None) -> dict:
    """A SPEC file's data with `overrides` applied; `trainer` is named where it names none."""
    data = load_yaml_file(spec_file)
    for item in overrides:
        apply_override(data, item, source=str(spec_file))
    trial = data.setdefault("trial", {}) if isinstance(data.get("trial", {}), dict) else {}
    if trainer and not trial.get("trainer") and not trial.get("command"):
        trial["trainer"] = trainer
    return data


def _whole_space_run_spec(spec_file: Path, overrides: list[str]) -> CampaignSpec:
    """A campaign spec that gives no `space`, over the whole space its model and cluster allow
    (what `plan` searches), narrowed by the trainer that runs the trials (the built-in one
    unless the spec names another); what it searched and left out is printed, as `plan`
    prints it."""
    data = _file_data(spec_file, overrides, trainer=DEFAULT)
    spec, plan = full_space_spec(data, str(spec_file))
    cost = cost_model_for(spec)
    candidates = plan_candidates(spec, plan, cost)
    print_full_plan(spec, plan, candidates, rank_full(1, cost, candidates).feasible,
                    batch_hint="--set scale.global_batch_size=N")
    # The campaign keeps the values some layout takes (a micro-batch the batch cannot hold
    # is no value of the run's space), and the keys --set gave as given.
    data["space"] = {**searched_values(plan, candidates), **(data.get("space") or {})}
    return spec_from_dict(data, str(spec_file))
