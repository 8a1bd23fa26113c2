"""Campaigns saved by the 0.1 layout (a flat backend section with every kind's keys) still load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from orchestrator.common.errors import CampaignStateError, SpecError
from orchestrator.campaign_spec import SPEC_FILE, SimulatedBackendSpec, load_campaign_spec, load_spec

LEGACY = Path(__file__).resolve().parent.parent / "fixtures" / "legacy"
# name -> what its saved spec.yaml holds
SAVED = {"legacy-grid": dict(seed=2, max_trials=10, nodes=1),
         "legacy-halving": dict(seed=1, max_trials=8, nodes=2)}


@pytest.mark.parametrize("name", sorted(SAVED))
def test_saved_flat_backend_loads_as_its_kinds_model(tmp_path, name):
    runs_dir = tmp_path / "runs"
    shutil.copytree(LEGACY / name, runs_dir / name)
    spec = load_campaign_spec(runs_dir, name)
    expected = SAVED[name]
    assert isinstance(spec.backend, SimulatedBackendSpec)
    assert spec.backend.seed == expected["seed"] and spec.backend.noise == 0.03
    assert spec.name == name and spec.budget.max_trials == expected["max_trials"]
    assert spec.scale.nodes == expected["nodes"]
    assert spec.tracking.runs_dir == str(runs_dir)
    assert "partition" not in spec.model_dump()["backend"]


def test_every_fixture_is_covered():
    assert sorted(p.name for p in LEGACY.iterdir() if (p / SPEC_FILE).exists()) == sorted(SAVED)


def test_a_saved_key_of_no_kind_still_fails(tmp_path):
    runs_dir = tmp_path / "runs"
    shutil.copytree(LEGACY / "legacy-grid", runs_dir / "legacy-grid")
    path = runs_dir / "legacy-grid" / SPEC_FILE
    data = yaml.safe_load(path.read_text())
    data["backend"]["colour"] = "red"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="backend.colour: unknown key for backend kind 'simulated'"):
        load_campaign_spec(runs_dir, "legacy-grid")


def test_the_same_flat_section_in_a_users_spec_is_an_error(tmp_path):
    path = tmp_path / "campaign.yaml"
    shutil.copy(LEGACY / "legacy-grid" / SPEC_FILE, path)
    with pytest.raises(SpecError, match="unknown key for backend kind 'simulated'"):
        load_spec(path)


def test_missing_campaign_is_a_state_error(tmp_path):
    with pytest.raises(CampaignStateError, match="no campaign 'nope'"):
        load_campaign_spec(tmp_path, "nope")
