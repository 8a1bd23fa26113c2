"""`paratune run SPEC` with no `space` searches the whole space its model, cluster and trainer
allow, as `plan` from presets does, and says what it searched; a spec's own space is kept."""

from __future__ import annotations

import json

import yaml
from conftest import EXAMPLES

from orchestrator.campaign_spec import load_spec


def _spec_without_space(path, **changes):
    data = yaml.safe_load((EXAMPLES / "frontier-175b.yaml").read_text())
    data.pop("space")
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_spec_without_space_runs_over_the_whole_space(tmp_path, runs_dir, cli):
    spec = _spec_without_space(tmp_path / "no-space.yaml", name="whole",
                               backend={"kind": "simulated", "seed": 0},
                               search={"algorithm": "cost-guided", "seed": 0},
                               budget={"max_trials": 2, "max_concurrent": 1},
                               tracking={"enabled": False})
    code, out, err = cli("run", str(spec))
    assert code == 0, err
    assert "searched the whole space" in out and "left out:" in out
    saved = load_spec(runs_dir / "whole" / "spec.yaml")
    # The whole space's ranges, as plan searches them for this model and world.
    assert saved.space.tp == [1, 2, 4, 8]
    assert 16 in saved.space.pp and set(saved.space.zero_stage) == {0, 1, 2, 3}
    assert set(saved.space.activation_checkpointing) == {"none", "selective", "full"}
    assert saved.trial.trainer == "builtin"  # the trainer that runs is the one whose rules apply


def test_a_spec_with_its_own_space_keeps_it(tmp_path, cli):
    code, out, err = cli("run", str(EXAMPLES / "frontier-175b.yaml"), "--dry-run")
    assert code == 0, err
    assert "searched the whole space" not in out


def test_plan_of_a_spec_without_space_searches_the_whole_space(tmp_path, cli):
    spec = _spec_without_space(tmp_path / "no-space.yaml")
    code, out, err = cli("plan", str(spec), "--json", "--top-k", "1")
    assert code == 0, err
    searched = json.loads(out)["full_space"]["searched"]
    assert searched["tp"] == [1, 2, 4, 8] and 16 in searched["pp"]
