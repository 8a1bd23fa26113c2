"""`paratune calibrate --from FILE.csv`: published-style measurements become a cluster profile.
The acceptance check on a check source's held-out landscape, and bad files as one line."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from benchmarks.measured_corpus import CHECK, FOLDER, ROLE_OF_SOURCE
from orchestrator.cli import main
from orchestrator.costmodel.calibration import spearman
from orchestrator.costmodel.cluster_fit import Measurement, calibrated_coefficients
from orchestrator.costmodel.fit_figures import Figures, landscape_figures
from orchestrator.costmodel.published_rows import PricedRow, price_row
from orchestrator.campaign_spec import load_cluster

DLPERF = FOLDER / "dlperf_gpt_v100.csv"


def _held_out(values: dict[str, str]) -> bool:
    return values["model"] == "GPT (498M)" and values["gpus"] == "8"


@pytest.fixture(scope="module")
def dlperf_split(tmp_path_factory):
    """The acceptance split (the xfail test's docstring): `calibrate --from` run on the fit
    rows, and the held-out landscape's figures priced stock and with the written profile."""
    folder = tmp_path_factory.mktemp("dlperf")
    with open(DLPERF, newline="") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    megatron = [r for r in rows if r["framework"].startswith("NVIDIA Megatron-LM")]
    fit_rows = [r for r in megatron if not _held_out(r)]
    held_out = [price_row(r) for r in megatron if _held_out(r)]
    fit_file, profile_file = folder / "history.csv", folder / "v100-calibrated.yaml"
    with open(fit_file, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(fit_rows)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["calibrate", "--from", str(fit_file), "--out", str(profile_file), "--json"])
    profile = load_cluster(str(profile_file), "cluster") if code == 0 else None
    return SimpleNamespace(code=code, out=stdout.getvalue(), fit_rows=fit_rows,
                           held_out=held_out, profile=profile)


def _held_out_figures(held_out: list[PricedRow], cost_of) -> tuple[float, Figures]:
    """The held-out rows priced by `cost_of(row)`: the Spearman correlation of predicted with
    measured throughput per GPU over the rows (the acceptance criterion), and the figures
    docs/validation.md gives (over distinct layouts)."""
    rows = [Measurement(str(i), "held out", p.cost, p.config, p.measured_step_s)
            for i, p in enumerate(held_out)]
    predicted = [cost_of(p).estimate(p.config) for p in held_out]
    correlation = spearman([r.tokens_per_gpu_step / e.step_time_s for r, e in zip(rows, predicted)],
                           [r.tokens_per_gpu_step / r.step_time_s for r in rows])
    return correlation, landscape_figures(rows, predicted)


def test_calibrate_from_a_sources_csv_writes_a_profile_a_spec_prices_with(dlperf_split):
    assert ROLE_OF_SOURCE[DLPERF.name] == CHECK
    assert dlperf_split.code == 0, dlperf_split.out
    data = json.loads(dlperf_split.out)
    assert data["rows"] == len(dlperf_split.fit_rows) and data["cluster"] == "v100-16g"
    assert set(data["figures"]) == {"stock", "calibrated", "held_out"}
    profile = dlperf_split.profile
    assert profile.calibration is not None and profile.device == "V100-SXM2-16GB"
    assert len(dlperf_split.held_out) == 6
    assert all(isinstance(p, PricedRow) for p in dlperf_split.held_out)
    # Priced with the profile, the held-out rows' predictions move (the fit is used).
    _, stock = _held_out_figures(dlperf_split.held_out, lambda p: p.cost)
    _, calibrated = _held_out_figures(dlperf_split.held_out, lambda p: _on(p, profile))
    assert calibrated.median_abs_error != stock.median_abs_error


def _on(row: PricedRow, profile):
    """The row's model priced on the profile, as a spec naming it (`cluster: FILE`) prices."""
    return replace(row.cost, cluster=profile, coefficients=calibrated_coefficients(profile))


@pytest.mark.xfail(strict=True, reason=(
    "the profile does not rank DLPerf's held-out landscape better, it predicts it closer: held "
    "out (GPT-498M on 8 V100s under Megatron-LM, 6 rows, 4 layouts), stock v100-16g: "
    "Spearman 0.91, layout pairs ordered right 5 of 6, median |step error| 32.3%, regret 0.0%; "
    "calibrated on the 12 other Megatron-LM rows: Spearman 0.91, 5 of 6, 12.8%, 0.0%"))
def test_a_profile_fitted_on_other_landscapes_ranks_a_held_out_landscape_better(dlperf_split):
    """Acceptance, with the split and the criterion fixed before any figure was looked at.
    Source: DLPerf (dlperf_gpt_v100.csv), a check source on one cluster (4 nodes of 8
    V100-SXM2-16GB). Held out: the landscape GPT-498M on 8 GPUs under Megatron-LM, its 6 rows
    (DP 8, TP 8 and the 2D splits; two layouts measured twice). Fitted on: every other
    Megatron-LM row of the file (the other models and GPU counts of the same cluster under
    the same trainer: a lab's history); OneFlow's rows (another trainer) and the held-out rows
    are not in the file `calibrate --from` reads. Ranks better: on the held-out rows, the
    Spearman correlation of predicted with measured throughput per GPU is higher priced with
    the written profile (as a spec's `cluster: FILE` prices) than with the stock v100-16g
    preset. Median |error| and the regret of the pick are quoted beside it."""
    profile = dlperf_split.profile
    stock_rho, stock = _held_out_figures(dlperf_split.held_out, lambda p: p.cost)
    rho, calibrated = _held_out_figures(dlperf_split.held_out, lambda p: _on(p, profile))
    quoted = "; ".join(
        f"{label}: Spearman {r:.2f}, layout pairs ordered right {f.pairs_right} of {f.pairs}, "
        f"median |step error| {f.median_abs_error:.1%}, regret {f.regret:.1%}"
        for label, r, f in (("stock", stock_rho, stock), ("calibrated", rho, calibrated)))
    print(quoted)
    assert rho > stock_rho, quoted
