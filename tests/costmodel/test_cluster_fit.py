"""A cluster's calibration fitted on measurements of several models at once, and carried in its
preset file: planted multipliers come back, each row held out is predicted by the others, a
single model's rows fit as `calibrate` fits them, and a preset without a calibration dumps as
before (the spec fingerprint of every saved campaign stays the same)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from orchestrator.costmodel import Coefficients, CostModel
from orchestrator.costmodel.calibration import calibrate, held_out_errors, scaled
from orchestrator.costmodel.cluster_fit import (
    Measurement,
    calibrated_coefficients,
    calibration_of,
    fit_cluster,
    held_out_predictions,
    predictions,
)
from orchestrator.costmodel.fit_figures import figures_by_landscape
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS, Cluster
from orchestrator.result import TrialResult
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_cluster

H100 = CLUSTER_PRESETS["h100-80g"]
PLANTED = dict(scale_compute=1.4, scale_model_parallel_latency=20.0)


def rows_of(model: str, planted: dict = PLANTED, slower: float = 1.0) -> list[Measurement]:
    """Layouts of `model` on 8 H100s, measured as the planted multipliers predict."""
    cost = CostModel(MODEL_PRESETS[model], H100, 8)
    truth = cost.with_coefficients(cost.coefficients.with_(**planted))
    configs = [Layout(tp=t, dp=8 // t, zero_stage=1, micro_batch_size=m,
                              grad_accum_steps=8 // m) for t in (1, 2, 4, 8) for m in (1, 2, 8)]
    return [Measurement(f"{model}-{i}", model, cost, c,
                        truth.estimate(c).step_time_s * slower) for i, c in enumerate(configs)]


def test_multipliers_planted_in_two_models_on_one_cluster_come_back():
    rows = rows_of("llama-7b") + rows_of("llama-13b")
    fit = fit_cluster(rows)
    assert fit.global_scale is None
    assert fit.terms["compute"] == pytest.approx(1.4, rel=1e-3)
    assert fit.terms["model_parallel_latency"] == pytest.approx(20.0, rel=1e-2)
    for row, estimate in zip(rows, predictions(rows, fit.coefficients)):
        assert estimate.step_time_s == pytest.approx(row.step_time_s, rel=1e-3)
    for row, estimate in zip(rows, held_out_predictions(rows)):
        assert estimate.step_time_s == pytest.approx(row.step_time_s, rel=1e-3)


def test_one_models_rows_fit_as_calibrate_fits_a_campaign():
    rows = rows_of("llama-7b", slower=1.0)
    rows[4] = Measurement(rows[4].label, rows[4].landscape, rows[4].cost, rows[4].config,
                          rows[4].step_time_s * 1.3)  # one layout the others do not explain
    measured = [(r.label, r.config, TrialResult(
        status="ok", step_time_s=r.step_time_s,
        tokens_per_s=r.config.global_batch_size() * r.cost.model.seq_len / r.step_time_s))
        for r in rows]
    fit = fit_cluster(rows)
    assert fit.coefficients == calibrate(rows[0].cost, measured).model.coefficients
    errors = [r.step_time_s / e.step_time_s - 1 for r, e in zip(rows, held_out_predictions(rows))]
    assert errors == pytest.approx(held_out_errors(rows[0].cost, measured), rel=1e-9)


def test_too_few_rows_for_every_term_scale_the_whole_prediction():
    twice = vars(scaled(Coefficients(), 2.0))  # every term twice as long
    rows = rows_of("llama-7b", planted=twice)[:4]
    fit = fit_cluster(rows)
    assert fit.terms == {} and fit.global_scale == pytest.approx(2.0, rel=1e-6)
    assert fit_cluster(rows[:2]) is None


def test_a_preset_file_carries_the_fit_to_a_spec(tmp_path):
    fit = fit_cluster(rows_of("llama-7b"))
    profile = H100.model_copy(update={"calibration": calibration_of(fit.coefficients, "test")})
    path = tmp_path / "calibrated.yaml"
    path.write_text(yaml.safe_dump(profile.model_dump()))
    loaded = load_cluster(str(path), "cluster")
    assert calibrated_coefficients(loaded) == fit.coefficients
    assert calibrated_coefficients(H100) == CostModel(MODEL_PRESETS["tiny"], H100, 8).coefficients


def test_a_preset_without_calibration_dumps_without_the_key():
    """The spec fingerprint a journal holds (record/journal.py) is of this dump: a stock preset
    must dump exactly its own fields, or every saved campaign reads as another's."""
    for cluster in CLUSTER_PRESETS.values():
        assert "calibration" not in cluster.model_dump()
        assert "calibration" not in cluster.model_dump(mode="json")
    assert Cluster.model_validate(H100.model_dump()) == H100


def test_figures_of_a_landscape():
    """Five layouts of one batch (A measured twice), worked by hand: measured steps A 1.0 and
    1.2, B 2, C 3, D 4, E 5; predicted A 1.5, B 1, C 3, D 4.4, E 4."""
    configs = [Layout(dp=8, zero_stage=z, micro_batch_size=m, grad_accum_steps=8 // m)
               for z in (1, 2) for m in (1, 2, 8)][:5]
    cost = CostModel(MODEL_PRESETS["llama-7b"], H100, 8)
    measured = [1.0, 2.0, 3.0, 4.0, 5.0, 1.2]
    steps = [1.5, 1.0, 3.0, 4.4, 4.0, 1.5]
    rows = [Measurement(str(i), "one", cost, configs[i % 5], step)
            for i, step in enumerate(measured)]

    def figures(unfit: set[int] = frozenset(), pruned: set[int] | None = None):
        """Layouts `unfit` do not fit; those of them in `pruned` (all by default) are beyond
        the memory margin, the others risky."""
        pruned = unfit if pruned is None else pruned
        predicted = [SimpleNamespace(step_time_s=step, fits=i % 5 not in unfit,
                                     prunable=i % 5 in pruned)
                     for i, step in enumerate(steps)]
        return figures_by_landscape(rows, predicted)

    f = figures()["one"]
    assert (f.rows, f.layouts, f.does_not_fit) == (6, 5, 0)
    # |errors| 0.5 0.25 0.5 0.1 0.2 0: median of 0.2 and 0.25; the 90th percentile 0.5.
    assert f.median_abs_error == pytest.approx(0.225) and f.p90_abs_error == pytest.approx(0.5)
    # Ranks by predicted throughput D E C A B, by measured E D C B A: sum of d^2 = 4.
    assert f.spearman == pytest.approx(1 - 6 * 4 / (5 * 24))
    assert (f.pairs, f.pairs_right) == (10, 8)  # A-B and D-E ordered wrong
    # The pick is B (predicted fastest), measured at half A's median speed (1/1.0, 1/1.2).
    assert f.regret == pytest.approx((1 + 1 / 1.2) / 2 / 0.5 - 1)
    pruned = figures(unfit={1})
    assert pruned["one"].regret == 0 and pruned["one"].does_not_fit == 1
    assert pruned["all rows"].rows == 6 and pruned["all rows"].regret == 0
    # B does not fit but is within the margin (risky): a campaign measures it, so it stays
    # the pick, and it counts as a layout that ran though the model says it does not fit.
    risky = figures(unfit={1}, pruned=set())["one"]
    assert risky.regret == pytest.approx(f.regret) and risky.does_not_fit == 1
    four = figures_by_landscape(rows[:4], [SimpleNamespace(step_time_s=s, fits=True,
                                                           prunable=False)
                                           for s in steps[:4]])["one"]
    assert four.spearman is None  # 4 layouts: too few to rank
