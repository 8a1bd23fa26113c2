"""Small guards: pruning messages, exported env names, spec error sources, YAML hints,
quiet artifact transfers."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from builders import one_line_error

from orchestrator.costmodel import Calibration, CostModel
from orchestrator.costmodel.fit_verdict import MEMORY_MARGIN
from orchestrator.export.common import env_line, run_context
from orchestrator.presets import CLUSTER_PRESETS, MODEL_PRESETS
from orchestrator.scheduling.live_cost_model import LiveCostModel
from orchestrator.space import Layout
from orchestrator.campaign_spec.trial import BASH_READONLY


def _live_model(memory_scale: float | None) -> tuple[LiveCostModel, Layout, float]:
    base = CostModel(MODEL_PRESETS["llama-7b"], CLUSTER_PRESETS["a100-80g"], 8)
    config = Layout(tp=8, zero_stage=1, dp=1)
    live = LiveCostModel(base, [])
    raw_gb = base.estimate(config).memory_gb
    if memory_scale is not None:
        live.calibration = Calibration(model=base, memory_scale=memory_scale, trials=[],
                                       multipliers={})
    return live, config, raw_gb


def test_pruning_message_states_the_calibrated_prediction_and_the_raw_one():
    live, config, raw_gb = _live_model(None)
    assert raw_gb < 80 and live.infeasible(config) is None  # fits before calibration
    live, config, raw_gb = _live_model(400 / raw_gb)  # beyond the memory model's margin
    result = live.infeasible(config)
    assert result is not None and result.status == "infeasible"
    predicted = float(re.match(r"predicted ([\d.]+) GB per device", result.error).group(1))
    assert predicted > 80.0
    assert predicted == round(result.extra["predicted_memory_gb"], 2)
    assert f"({raw_gb:.2f} GB before calibration)" in result.error
    assert result.error.endswith(f"> {80 * (1 + MEMORY_MARGIN):.2f} GB: 80.00 GB capacity plus "
                                 f"the memory model's {MEMORY_MARGIN:.0%} margin")


def test_pruning_message_without_calibration_states_one_figure():
    base = CostModel(MODEL_PRESETS["llama-70b"], CLUSTER_PRESETS["a100-80g"], 8)
    config = Layout(dp=1)
    result = LiveCostModel(base, []).infeasible(config)
    assert result is not None
    expected = base.estimate(config).memory_gb
    assert result.error == (f"predicted {expected:.2f} GB per device > "
                            f"{80 * (1 + MEMORY_MARGIN):.2f} GB: 80.00 GB capacity plus the "
                            f"memory model's {MEMORY_MARGIN:.0%} margin")


B = ("name: x\nmodel: tiny\ncluster: cpu-local\n"
     "scale: {nodes: 1, gpus_per_node: 2, global_batch_size: 8}\ntracking: {enabled: false}\n")


@pytest.mark.parametrize("name", sorted(BASH_READONLY))
def test_env_names_bash_holds_read_only_are_refused(cli, spec_file, runs_dir, name):
    one_line_error(cli("run", spec_file(B + f"trial: {{env: {{{name}: x}}}}\n"), "--dry-run"),
                   f"spec.yaml: trial.env.{name}: ", "read-only", "drop it or rename it")
    assert not runs_dir.exists()


def test_every_name_bash_holds_read_only_is_refused():
    shown = subprocess.run(["bash", "-c", "readonly -p"], capture_output=True, text=True,
                           env={}, check=True).stdout
    held = set(re.findall(r"^declare -\w+ (\w+)", shown, flags=re.M))
    assert held and held <= BASH_READONLY


def test_launch_lines_never_export_a_read_only_name():
    assert env_line("OMP_NUM_THREADS", "4") == "export OMP_NUM_THREADS=4"
    with pytest.raises(ValueError, match="trial.env.UID"):
        env_line("UID", "1000")


def test_exported_env_runs_in_bash(spec_file):
    from orchestrator.campaign_spec import load_spec

    spec = load_spec(spec_file(B + "trial: {env: {OMP_NUM_THREADS: 4, NCCL_DEBUG: 'a b'}}\n"))
    script = "set -euo pipefail\n" + run_context(spec, in_workdir=False) + 'echo "$NCCL_DEBUG"\n'
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout == "a b\n", ran.stderr


def test_listed_layout_off_the_world_size_names_the_spec_file(cli, spec_file, runs_dir):
    path = spec_file(B + "space: {kind: list, configs: [{tp: 2, pp: 2, dp: 1}]}\n")
    err = one_line_error(cli("run", path, "--dry-run"), "WORLD_SIZE(2)")
    assert err.startswith(f"error: {path}: space.configs[0]: tp(2) * pp(2) * dp(1) = 4"), err
    assert not runs_dir.exists()


@pytest.mark.parametrize("written", ["1e308", "1e+308", "3e3", "1E-4", "5e-324", "-2.5e3",
                                     "12345678e3", "1_000e3"])
def test_number_hint_spells_numbers_yaml_reads_as_those_numbers(cli, spec_file, runs_dir,
                                                                written):
    err = one_line_error(cli("run", spec_file(B + f"budget: {{gpu_hours: {written}}}\n")),
                         "budget.gpu_hours", f"YAML reads {written} as text: write it ")
    suggested = re.findall(r"\(([^()]+)\)", err.partition(" as text: ")[2])
    for spelling in suggested:
        read = yaml.safe_load(f"a: {spelling}")["a"]
        assert isinstance(read, (int, float)) and read == float(written), (spelling, read)
    assert re.fullmatch(r"-?\d\.\d*e[-+]\d+", suggested[0]), suggested


def test_number_hint_for_whole_numbers_and_numbers_no_float_holds(cli, spec_file, runs_dir):
    one_line_error(cli("run", spec_file(B + "budget: {max_trials: 3e3}\n")),
                   "budget.max_trials", "write it in full (3000)")
    one_line_error(cli("run", spec_file(B + "budget: {max_trials: 1e-1}\n")),
                   "budget.max_trials", "not a whole number")
    err = one_line_error(cli("run", spec_file(B + "budget: {gpu_hours: 1e999}\n")),
                         "budget.gpu_hours", "out of a float's range")
    assert "write it" not in err


def test_resume_shows_no_artifact_progress_bar_and_keeps_one_row_per_trial(
        cli, tmp_path, runs_dir, monkeypatch):
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")  # restored after the test
    spec = tmp_path / "tracked.yaml"
    spec.write_text(B.replace("tracking: {enabled: false}\n", "")
                    + "backend: {kind: simulated}\nbudget: {max_trials: 2}\n")
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    code, out, err = cli("resume", "x")
    assert code == 0, err
    for mark in ("Downloading artifacts", "it/s]", "█"):
        assert mark not in out + err, (mark, err[-2000:])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("paratune/x")
    (campaign,) = [r for r in client.search_runs([experiment.experiment_id])
                   if r.data.tags.get("paratune.kind") == "campaign"]
    table = json.loads(Path(client.download_artifacts(
        campaign.info.run_id, "campaign_summary.json", str(tmp_path))).read_text())
    assert sorted(row[0] for row in table["data"]) == ["t0001", "t0002"]
