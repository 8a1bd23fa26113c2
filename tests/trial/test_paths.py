"""The runs directory and the default MLflow URI: an option, then the environment, then the spec."""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLES

from orchestrator.common.paths import default_tracking_uri, runs_root
from orchestrator.campaign_spec import load_spec


def test_runs_root_prefers_option_then_environment_then_configured(monkeypatch, tmp_path):
    monkeypatch.delenv("PARATUNE_RUNS_DIR", raising=False)
    assert runs_root() == Path("runs")
    assert runs_root(None, "elsewhere") == Path("elsewhere")
    monkeypatch.setenv("PARATUNE_RUNS_DIR", str(tmp_path / "env"))
    assert runs_root(None, "elsewhere") == tmp_path / "env"
    assert runs_root(str(tmp_path / "opt"), "elsewhere") == tmp_path / "opt"
    assert runs_root(tmp_path / "opt") == tmp_path / "opt"


def test_default_tracking_uri(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_tracking_uri(tmp_path) == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert default_tracking_uri(tmp_path) == "http://mlflow:5000"


def test_spec_uses_them_and_its_own_uri_wins(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("PARATUNE_RUNS_DIR", str(tmp_path))
    spec = load_spec(EXAMPLES / "quickstart.yaml", ["tracking.runs_dir=ignored"])
    assert spec.runs_dir() == tmp_path and spec.campaign_dir() == tmp_path / spec.name
    assert spec.tracking_uri() == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert spec.tracking_uri() == "http://mlflow:5000"
    spec = load_spec(EXAMPLES / "quickstart.yaml", ["tracking.uri=file:///tmp/ml"])
    assert spec.tracking_uri() == "file:///tmp/ml"


def test_a_trial_gets_its_result_path_absolute(monkeypatch, tmp_path):
    """The trial program runs in its folder (or the spec's workdir): a relative runs folder
    must not reach it relative, in its environment or its folder."""
    from orchestrator.trial.folder import TrialFolder
    from orchestrator.trial.process import trial_env

    monkeypatch.chdir(tmp_path)
    env = trial_env(TrialFolder.of(Path("runs/c"), "t0001"), "t0001", {})
    assert env["PARATUNE_RESULT_FILE"] == str(tmp_path / "runs/c/trials/t0001/result.json")
    assert TrialFolder(Path("p")).path == tmp_path / "p"
