"""`paratune calibrate --from FILE`: measurements a user already has become a calibrated cluster
profile, with no new trials.

FILE is another campaign's journal (its trials, priced by the spec saved beside it) or a CSV
with the columns of benchmarks/measured/ (each row priced by costmodel/published_rows.py).
The multipliers are the cluster's, so they are fitted on every priced row of one cluster at
once, whatever model each row trained (costmodel/cluster_fit.py); the figures are then given
per landscape (one model on one cluster). The profile is the rows' cluster preset (or
--cluster's) with the fit in its `calibration:` key: a spec names it with `cluster: FILE`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import yaml
from rich.table import Table

from orchestrator.cli.common import out, print_json
from orchestrator.cli.profile import refuse_unusable_out
from orchestrator.common.errors import UserError, excerpt
from orchestrator.costmodel.calibration import MIN_TRIALS
from orchestrator.costmodel.cluster_fit import (
    Measurement,
    calibration_of,
    fit_cluster,
    held_out_predictions,
    predictions,
)
from orchestrator.costmodel.fit_figures import figures_by_landscape
from orchestrator.presets import Cluster
from orchestrator.campaign_spec import load_cluster

TERM_NAMES = {"compute": "compute", "bubble": "bubble", "model_parallel_comm":
              "model-parallel comm", "model_parallel_latency": "model-parallel latency",
              "data_parallel_comm": "exposed DP comm", "data_parallel_gathers":
              "exposed weight gathers", "launches": "fixed cost per layer and micro-batch (s)"}

PREDICTED_BY = {"stock": "stock", "calibrated": "fitted (in sample)", "held_out": "held out"}


def calibrate_from(source: Path, cluster: Optional[str], out_file: Optional[Path],
                   as_json: bool) -> None:
    """Read, fit, write the profile, print the figures (module docstring)."""
    name = excerpt(str(source), 200, quote=False)
    if not source.exists():
        raise UserError(f"--from {name}: no such file; give a campaign's journal "
                        "(runs/NAME/journal.jsonl) or a CSV with the columns of "
                        "benchmarks/measured/ (README there)")
    base = None if cluster is None else load_cluster(
        cluster, f"--cluster {excerpt(cluster, 100, quote=False)}")
    rows, unpriced, grouping = _read(source, base)
    if len(rows) < MIN_TRIALS:
        raise UserError(f"--from {name}: {len(rows)} measured layout(s) priced, a fit needs "
                        f"{MIN_TRIALS} or more{_unpriced_text(unpriced)}")
    profile_base = base or rows[0].cost.cluster
    fit = fit_cluster(rows)
    figures = {"stock": predictions(rows), "calibrated": predictions(rows, fit.coefficients),
               "held_out": held_out_predictions(rows)}
    data = {
        "from": str(source), "cluster": profile_base.name, "rows": len(rows),
        "landscapes": len({r.landscape for r in rows}), "grouping": grouping,
        "unpriced_rows": sum(unpriced.values()), "unpriced": dict(unpriced.most_common()),
        "terms": fit.terms, "global_scale": fit.global_scale,
        "figures": {label: None if predicted is None else
                    {k: v.to_dict() for k, v in figures_by_landscape(rows, predicted).items()}
                    for label, predicted in figures.items()},
    }
    fitted_on = (f"paratune calibrate --from {name}: {len(rows)} measured layouts of "
                 f"{data['landscapes']} landscape(s) on {profile_base.name}")
    path = out_file or Path("presets") / f"{profile_base.name}-calibrated.yaml"
    data["profile"] = str(path)
    data["calibration"] = _write_profile(profile_base, fit.coefficients, fitted_on, path,
                                         source).calibration.model_dump()
    if as_json:
        print_json(data)
    else:
        _print(data)


def _read(source: Path, base: Cluster | None) -> tuple[list[Measurement], Counter, str]:
    """The priced rows, the others counted by reason, and how the rows were grouped."""
    if source.suffix.lower() == ".csv":
        from orchestrator.cli.measured_csv import csv_measurements

        return csv_measurements(source, base)
    from orchestrator.record.campaign_measurements import journal_measurements

    view, rows, unpriced = journal_measurements(source, base)
    return rows, unpriced, (f"one landscape: the trials of campaign {view.spec.name!r} at "
                            "its tuned scale")


def _write_profile(base: Cluster, coefficients, fitted_on: str, path: Path,
                   source: Path) -> Cluster:
    """The base preset with the fitted multipliers, as a preset file a spec can name."""
    refuse_unusable_out(path)
    if path.exists() and path.resolve() == source.resolve():
        raise UserError(f"--out {path}: is the --from file; write the profile to another name")
    profile = Cluster.model_validate({
        **base.model_dump(), "name": f"{base.name.removesuffix('-calibrated')}-calibrated",
        "calibration": calibration_of(coefficients, fitted_on).model_dump()})
    header = (f"# Cluster preset written by `paratune calibrate --from`: {base.name} with the\n"
              f"# cost model's multipliers fitted to measured layouts ({fitted_on}).\n"
              "# Name it in a campaign spec as `cluster: THIS_FILE`.\n")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + yaml.safe_dump(profile.model_dump(), sort_keys=False))
    except OSError as exc:
        raise UserError(f"--out {path}: cannot write there ({exc.strerror}); give a file "
                        "path in a writable folder") from None
    return profile


def _shown(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _unpriced_text(unpriced: Counter) -> str:
    if not unpriced:
        return ""
    reasons = "; ".join(f"{reason}: {n}" for reason, n in unpriced.most_common(5))
    return f"; {sum(unpriced.values())} not priced ({reasons})"


def _print(data: dict) -> None:
    out.print(f"{data['rows']} measured layouts of {data['landscapes']} landscape(s) priced on "
              f"{data['cluster']} ({data['grouping']}){_unpriced_text(Counter(data['unpriced']))}")
    if data["global_scale"] is not None:
        fit = (f"too few rows to fit each term: every prediction scaled by "
               f"{data['global_scale']:.3f} (the ranking is the stock model's)")
    else:
        fit = ", ".join(f"{TERM_NAMES[k]} x{v:.3g}" if k != "launches" else
                        f"{TERM_NAMES[k]} {v:.3g}" for k, v in data["terms"].items())
    out.print(f"wrote {data['profile']} (a spec names it as `cluster: {data['profile']}`): {fit}")
    predicted_by = [label for label, figures in data["figures"].items() if figures]
    table = Table("landscape", "rows", "median |step error|", "p90 |step error|", "Spearman",
                  "regret of the pick", title=" / ".join(PREDICTED_BY[p] for p in predicted_by))
    landscapes = list(data["figures"]["stock"])
    if len(landscapes) == 2:  # one landscape and "all rows", the same figures
        landscapes = landscapes[:1]
    for landscape in landscapes:
        each = [data["figures"][label][landscape] for label in predicted_by]
        table.add_row(landscape, str(each[0]["rows"]),
                      *(" / ".join(_shown(f[key], fmt) for f in each) for key, fmt in (
                          ("median_abs_error", ".1%"), ("p90_abs_error", ".1%"),
                          ("spearman", ".2f"), ("regret", ".1%"))),
                      end_section=len(landscapes) > 1 and landscape == landscapes[-2])
    out.print(table)
    if data["figures"]["held_out"] is None:
        out.print(f"held out: needs {MIN_TRIALS + 1} rows or more (one left out, "
                  f"{MIN_TRIALS} to fit on)")
    else:
        out.print("stock: the preset before this fit; fitted: the fit on every row; held out: "
                  "each row predicted by the fit on all the others")
