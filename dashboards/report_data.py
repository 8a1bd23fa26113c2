"""The plain data a campaign report shows (`ReportData`), read from the campaign's view and
its calibrated cost model; report.py renders it without knowing where it came from."""

from __future__ import annotations

from dashboards.report import ConvergencePoint, ReportData, TrialRow
from orchestrator.export import export
from orchestrator.record.best import BestSoFar, finish_order
from orchestrator.record.budget import gpu_hours
from orchestrator.record.campaign import CampaignView
from orchestrator.record.journal import SCALING, TrialRecord
from orchestrator.record.scaling import efficiency
from orchestrator.spec.planning import cost_model_for

MEMORY_TOP = 5  # layouts whose memory breakdown the report shows


def report_data(view: CampaignView) -> ReportData:
    """Everything the report shows, from the journal and the (calibrated) cost model."""
    spec, objective = view.spec, view.objective
    records = view.records()
    calibration = view.calibration(records)
    model = calibration.model if calibration else cost_model_for(spec)

    def row(r: TrialRecord) -> TrialRow:
        predicted = None
        if r.result and r.result.status != "infeasible":
            predicted = objective.predicted(model.estimate(r.config))
        return TrialRow(r.trial_id, r.config.to_params(), r.config.key(),
                        r.result.status if r.result else "running", r.phase,
                        r.result.metric(objective.metric) if r.result else None, predicted,
                        gpu_hours(r), r.result.error if r.result else None)

    rows = [row(r) for r in records]
    best = view.best(records)
    best_row = next((t for t in rows if best and t.trial_id == best.trial_id), None)
    launch = export("torchrun", spec, best.trial_id, best.config) if best else ""
    ranked = objective.ranked((r for r in records if r.phase != SCALING),
                              lambda r: objective.value(r.result))[:MEMORY_TOP]
    memory_top = [(r.config.key(), model.estimate(r.config).memory.as_gb()) for r in ranked]
    scaling = efficiency(records, spec.scale.study, spec.gpus_per_node, objective.metric) \
        if spec.scale.study else []
    return ReportData(
        campaign=spec.name, metric=objective.metric, mode=objective.mode, model=spec.model.name,
        cluster=spec.cluster.name, world_size=spec.world_size, trials=rows, best=best_row,
        launch_command=launch, memory_top=memory_top, scaling=scaling,
        scaling_study=spec.scale.study,
        calibration=calibration.to_dict() if calibration else None,
        convergence=convergence(records, objective),
    )


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
