"""The plain data a campaign report shows (`ReportData`), read from the campaign's view and
its calibrated cost model; report.py renders it without knowing where it came from."""

from __future__ import annotations

from dashboards.report import ConvergencePoint, LayoutBreakdown, MemoryBar, ReportData, TrialRow
from dashboards.report_slice import slice_points
from orchestrator.common.objective import Objective
from orchestrator.costmodel import CostModel, Estimate
from orchestrator.export import export
from orchestrator.record.best import BestSoFar, Standings, finish_order
from orchestrator.record.budget import gpu_hours
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import SCALING, TrialRecord
from orchestrator.record.scaling import efficiency
from orchestrator.record.slice_summary import slice_summary
from orchestrator.campaign_spec.planning import cost_model_for, priced_runtime

MEMORY_TOP = 5  # layouts whose memory breakdown the report shows


def report_data(view: CampaignView) -> ReportData:
    """Everything the report shows, from the journal and the (calibrated) cost model."""
    spec, objective = view.spec, view.objective
    records = view.records()
    calibration = view.calibration(records)
    stock = cost_model_for(spec)  # what `paratune estimate` predicts memory with
    model = calibration.model if calibration else stock
    rows = [trial_row(r, objective, model, stock) for r in records]
    best = view.best(records)
    best_row = next((t for t in rows if best and t.trial_id == best.trial_id), None)
    # The measured program's own launch script (DeepSpeed's config written beside it).
    launch = export("torchrun", spec, best.trial_id, best.config,
                    view.trial_dir(best.trial_id)) if best else ""
    ranked = objective.ranked((r for r in records if r.phase != SCALING),
                              lambda r: objective.value(r.result))[:MEMORY_TOP]
    memory_top = [MemoryBar(r.config.key(), stock.memory(r.config).as_gb(),
                            r.result.peak_memory_gb) for r in ranked]
    second = runner_up(records, objective, best) if best else None
    scaling = efficiency(records, spec.scale.study, spec.gpus_per_node, objective.metric) \
        if spec.scale.study else []
    return ReportData(
        campaign=spec.name, metric=objective.metric, mode=objective.mode, model=spec.model.name,
        cluster=spec.cluster.name, world_size=spec.world_size, trials=rows, best=best_row,
        launch_command=launch, memory_top=memory_top, scaling=scaling,
        scaling_study=spec.scale.study,
        calibration=calibration.to_dict() if calibration else None,
        convergence=convergence(records, objective),
        winner=breakdown(best, objective, model) if best else None,
        runner_up=breakdown(second, objective, model) if second else None,
        runtime=priced_runtime(spec),
        gpu_hours=view.budget(records).gpu_hours,
        simulated=spec.backend.kind == "simulated",
        slice=slice_summary(spec, records, objective),
        slice_points=slice_points(spec, records, objective),
    )


def trial_row(r: TrialRecord, objective: Objective, model: CostModel,
              stock: CostModel) -> TrialRow:
    """A trial as the table shows it: predictions from the calibrated model, except memory,
    which is the stock model's total so it reads as `paratune estimate` prints it."""
    predicted = None
    if r.result and r.result.status != "infeasible":
        predicted = objective.predicted(model.estimate(r.config))
    return TrialRow(r.trial_id, r.config.to_params(), r.config.key(),
                    r.result.status if r.result else "running", r.phase,
                    r.result.metric(objective.metric) if r.result else None, predicted,
                    gpu_hours(r), r.result.error if r.result else None,
                    peak_memory_gb=r.result.peak_memory_gb if r.result else None,
                    predicted_memory_gb=stock.memory(r.config).as_gb()["total_gb"])


def runner_up(records: list[TrialRecord], objective: Objective,
              best: TrialRecord) -> TrialRecord | None:
    """The second-best distinct layout by the rule that chose the best (layouts at the mean of
    their full measurements; screens only while none succeeded), shown by the measurement
    nearest its mean."""
    standings = Standings(objective)
    for record in records:
        standings.add(record)
    if standings.layouts:
        others = sorted((c for c in standings.layouts if c != best.config),
                        key=lambda c: min(r.trial_id for r in standings.layouts[c]))
        config = objective.best(others, standings.mean)
        return standings.nearest_mean(config) if config is not None else None
    screens = sorted((r for r in standings.screens if r.config != best.config),
                     key=lambda r: r.trial_id)
    return objective.best(screens, lambda r: objective.value(r.result))


def time_parts(estimate: Estimate) -> dict[str, float]:
    """The predicted step time by component, summing to it; recompute is the compute spent
    beyond the model's own FLOPs."""
    t = estimate.time
    hardware = estimate.hardware_flops_per_step
    model_share = estimate.model_flops_per_step / hardware if hardware else 1.0
    return {
        "compute": t.compute_s * model_share,
        "recompute": t.compute_s * (1 - model_share),
        "optimizer step": t.optimizer_s,
        "pipeline bubble": t.bubble_s,
        "tensor-parallel communication": t.tp_comm_s,
        "pipeline-parallel sends": t.pp_comm_s,
        "data-parallel communication, exposed": t.dp_exposed_s,
        "fixed cost per layer and micro-batch": t.overhead_s,
    }


def breakdown(record: TrialRecord, objective: Objective, model: CostModel) -> LayoutBreakdown:
    """A layout's measured numbers beside the calibrated model's step by component, so two
    layouts can be compared part by part."""
    estimate = model.estimate(record.config)
    return LayoutBreakdown(record.trial_id, record.config.key(), objective.value(record.result),
                           objective.predicted(estimate), record.result.step_time_s,
                           time_parts(estimate), estimate.step_time_s)


def convergence(records: list[TrialRecord], objective) -> list[ConvergencePoint]:
    """The best so far by the campaign's own rule, after each trial that ran at the tuned
    scale, in the order they ended."""
    best, points = BestSoFar(objective), []
    for record in finish_order(records):
        if record.result.status == "infeasible" or record.phase == SCALING:
            continue
        best.add(record)
        points.append(ConvergencePoint(record.trial_id, gpu_hours(record), best.value,
                                       best.record.trial_id if best.record else None))
    return points
