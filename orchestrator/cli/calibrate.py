"""`paratune calibrate`: the cost model against measured layouts. Given a campaign, refit it to
the campaign's trials and show predicted against measured per trial; given `--from FILE`
(measurements a user already has: another campaign's journal, or a CSV of published-style
rows), fit a cluster profile to them and write it (cli/calibrate_from.py).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from orchestrator.cli.common import RUNS_DIR_OPTION, open_campaign, out, print_json
from orchestrator.common.errors import UserError, excerpt
from orchestrator.campaign_spec import load_cluster
from orchestrator.campaign_spec.planning import cost_model_for


def calibrate(
    campaign: Optional[str] = typer.Argument(None, help="campaign name (or --from FILE)"),
    runs_dir: Optional[Path] = RUNS_DIR_OPTION,
    cluster: Optional[str] = typer.Option(
        None, "--cluster", help="no refit: the errors of this preset (name or YAML file) as is; "
        "with --from: the preset the profile starts from"),
    held_out: bool = typer.Option(
        False, "--held-out", help="also predict each trial from a refit on all the others "
        "(from the spec's preset, or --cluster's): the error on an unmeasured layout"),
    from_file: Optional[Path] = typer.Option(
        None, "--from", help="fit a cluster profile to these measurements: a campaign's "
        "journal.jsonl (or its folder), or a CSV with the columns of benchmarks/measured/"),
    out_file: Optional[Path] = typer.Option(
        None, "--out", help="with --from: where to write the profile "
        "[default: presets/CLUSTER-calibrated.yaml]"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Refit the cost model to a campaign's measured trials; show predicted against measured.
    With --cluster, the errors of that preset's predictions before any calibration. With
    --from FILE, write a cluster profile fitted to FILE's measurements, with no new trials."""
    if from_file is not None:
        if campaign is not None:
            raise UserError(f"give a CAMPAIGN or --from FILE, not both ({campaign!r} and "
                            f"--from {excerpt(str(from_file), 100, quote=False)})")
        from orchestrator.cli.calibrate_from import calibrate_from

        calibrate_from(from_file, cluster, out_file, as_json)
        return
    if campaign is None:
        raise UserError("calibrate: give a CAMPAIGN name, or --from FILE (a journal or a CSV "
                        "of measurements)")
    if out_file is not None:
        raise UserError("--out: only with --from FILE; a campaign's refit is not written, "
                        "`paratune calibrate --from runs/NAME/journal.jsonl --out FILE` writes it")
    _refit_campaign(campaign, runs_dir, cluster, held_out, as_json)


def _refit_campaign(campaign: str, runs_dir: Optional[Path], cluster: Optional[str],
                    held_out: bool, as_json: bool) -> None:
    from dataclasses import replace

    from orchestrator.costmodel.calibration import evaluate, held_out_errors
    from orchestrator.costmodel.cluster_fit import calibrated_coefficients
    from orchestrator.record.campaign import calibration_input

    view = open_campaign(campaign, runs_dir)
    cost = cost_model_for(view.spec)
    if cluster is not None:
        source = f"--cluster {excerpt(cluster, 100, quote=False)}"
        preset = load_cluster(cluster, source)  # a calibrated profile prices as a spec's does
        cost = replace(cost, cluster=preset, coefficients=calibrated_coefficients(preset))
    records = view.records()
    measured = calibration_input(records)
    result = view.calibration(records) if cluster is None else evaluate(cost, measured)
    if result is None:
        raise UserError(f"campaign {campaign!r} has fewer than 3 successful trials to fit on")
    data = {"campaign": campaign, "cluster": cluster or "calibrated", **result.to_dict()}
    if held_out:
        errors = held_out_errors(cost, measured)
        if errors is None:
            raise UserError(f"campaign {campaign!r}: --held-out needs 4 successful trials or "
                            "more (one left out, 3 to fit on)")
        data["held_out"] = {"base": cost.cluster.name,
                            "median_abs_error": statistics.median(abs(e) for e in errors)}
        for trial, error in zip(data["per_trial"], errors):
            trial["held_out_error"] = error
    if as_json:
        print_json(data)
        return
    columns = ["trial", "config", "measured tok/s", "predicted tok/s", "error"]
    table = Table(*columns, *(["held out"] if held_out else []))
    for t in data["per_trial"]:
        cells = [t["trial_id"], t["config"], f"{t['measured_tokens_per_s']:,.0f}",
                 f"{t['predicted_tokens_per_s']:,.0f}", f"{t['error']:+.1%}"]
        table.add_row(*cells, *([f"{t['held_out_error']:+.1%}"] if held_out else []))
    out.print(table)
    memory = ("memory not measured: no trial reported its peak" if data["memory_scale"] is None
              else f"memory measured/predicted {data['memory_scale']:.2f}")
    out.print(f"median |error| {data['median_abs_error']:.1%}, Spearman {data['spearman']:.2f} "
              f"over {data['trials']} trials; {memory}")
    if held_out:
        out.print(f"held out (refit from {data['held_out']['base']} on the others): median "
                  f"|error| {data['held_out']['median_abs_error']:.1%}")
