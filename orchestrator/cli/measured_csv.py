"""A CSV of measured layouts for `paratune calibrate --from`: the columns of benchmarks/measured/
(README there), each row priced by costmodel/published_rows.py.

What makes the file unusable is one line naming the file, its line, the column and the fix: no
header or no row, a column no row can be priced without, a number column's cell that is no
number, a GPU type no cluster preset knows. A row the model cannot price (a setting it has no
knob for, a metric that is not a step time) is counted by its reason instead.

The fit is a cluster's, so it takes the priced rows of one cluster preset: the only one the
rows name, or the one `--cluster` names (matched by its device; the rows are then priced on it).
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from orchestrator.common.bounded_files import UnreadableFile, read_bounded, size_words
from orchestrator.common.errors import UserError, excerpt
from orchestrator.costmodel.cluster_fit import Measurement, calibrated_coefficients
from orchestrator.costmodel.published_names import ABSENT, NotPriced, cluster_of, number
from orchestrator.costmodel.published_rows import PricedRow, price_row
from orchestrator.presets import Cluster

MAX_BYTES = 64 << 20
REQUIRED = ("model", "gpu_type", "gpus", "tp", "pp", "micro_batch", "global_batch",
            "metric_name", "metric_value")
NUMBERS = ("num_layers", "hidden", "heads", "ffn_hidden", "seq_len", "gpus", "gpus_per_node",
           "nodes", "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "global_batch",
           "grad_accum", "metric_value")
FIX = "benchmarks/measured/README.md lists the columns"


def csv_measurements(path: Path, cluster: Cluster | None
                     ) -> tuple[list[Measurement], Counter, str]:
    """The priced rows of one cluster, the rest counted by reason, and how they were grouped."""
    rows = _read_rows(path)
    unpriced: Counter = Counter()
    by_cluster: dict[str, list[tuple[int, PricedRow]]] = defaultdict(list)
    for line, values in rows:
        _check_cells(path, line, values)
        priced = price_row(values)
        if isinstance(priced, PricedRow):
            by_cluster[priced.cost.cluster.device].append((line, priced))
        else:
            unpriced[priced.reason] += 1
    chosen = _one_cluster(path, by_cluster, cluster, unpriced)
    for device, priced in by_cluster.items():
        if device != chosen:
            unpriced[f"on another cluster ({priced[0][1].cost.cluster.name})"] += len(priced)
    measurements = []
    for line, row in by_cluster[chosen]:
        cost = row.cost if cluster is None else replace(
            row.cost, cluster=cluster, coefficients=calibrated_coefficients(cluster))
        measurements.append(Measurement(f"{path.name} line {line}", row.landscape, cost,
                                        row.config, row.measured_step_s))
    name = cluster.name if cluster else by_cluster[chosen][0][1].cost.cluster.name
    return measurements, unpriced, (
        f"the fit is the cluster's, on every priced row of {name}; a landscape is one model, "
        "precision, framework and GPU count")


def _read_rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    """(line number, cells) of every data row; the header checked for the required columns."""
    try:
        text = read_bounded(path, MAX_BYTES, follow_links=True).decode("utf-8-sig")
    except UnreadableFile as exc:
        raise UserError(f"--from {exc}; give a CSV file of at most {size_words(MAX_BYTES)}"
                        ) from None
    except UnicodeDecodeError as exc:
        raise UserError(f"--from {path}: not UTF-8 text (byte {exc.start}); save the CSV as "
                        "UTF-8") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        rows = [(reader.line_num, values) for values in reader]
    except csv.Error as exc:
        raise UserError(f"--from {path} line {reader.line_num}: not CSV ({exc})") from None
    if not reader.fieldnames:
        raise UserError(f"--from {path}: empty; give a CSV whose first line names the columns "
                        f"({FIX}) and one measured layout per line")
    missing = [c for c in REQUIRED if c not in reader.fieldnames]
    if missing:
        raise UserError(f"--from {path} line 1: no column {', '.join(missing)}; add "
                        f"{'it' if len(missing) == 1 else 'them'} (an empty cell where a row "
                        f"has no value; {FIX})")
    if not rows:
        raise UserError(f"--from {path}: a header and no row; add one measured layout per line")
    return rows


def _check_cells(path: Path, line: int, values: dict[str, str]) -> None:
    """A number column's cell is a number or empty; the GPU type is one a preset knows."""
    if None in values:  # more cells than the header names
        raise UserError(f"--from {path} line {line}: {len(values[None])} cell(s) more than "
                        "the header has columns; quote cells that hold commas")
    for column in NUMBERS:
        text = (values.get(column) or "").strip()
        if text.lower() not in ABSENT and number(text) is None:
            raise UserError(f"--from {path} line {line}, column {column}: "
                            f"{excerpt(text, 40)} is not a number; give a number, or leave "
                            "the cell empty where it was not measured")
    gpu_type = (values.get("gpu_type") or "").strip()
    try:
        cluster_of(gpu_type)
    except NotPriced as exc:
        if gpu_type and str(exc).endswith("no cluster preset"):
            raise UserError(f"--from {path} line {line}, column gpu_type: "
                            f"{excerpt(gpu_type, 60)} is no GPU a cluster preset knows; name "
                            "one (V100-SXM2-16GB, A100-40GB, A100-80GB, H100-80GB, H200, "
                            "B200, B300, GB200, GB300)") from None


def _one_cluster(path: Path, by_cluster: dict, cluster: Cluster | None,
                 unpriced: Counter) -> str:
    """The device of the cluster the fit is for (module docstring)."""
    names = {device: rows[0][1].cost.cluster.name for device, rows in by_cluster.items()}
    listed = ", ".join(f"{names[d]} ({len(r)} rows)" for d, r in by_cluster.items())
    if not by_cluster:
        reasons = "; ".join(f"{reason}: {n}" for reason, n in unpriced.most_common(3))
        raise UserError(f"--from {path}: no row can be priced ({reasons}); "
                        "benchmarks/measured/README.md says what each column holds")
    if cluster is not None:
        if cluster.device not in by_cluster:
            raise UserError(f"--cluster {cluster.name}: no priced row is on its device "
                            f"{cluster.device!r}; the rows are on {listed}")
        return cluster.device
    if len(by_cluster) > 1:
        raise UserError(f"--from {path}: rows on {len(by_cluster)} clusters ({listed}); a "
                        f"profile is one cluster's: give --cluster with one of them")
    return next(iter(by_cluster))
