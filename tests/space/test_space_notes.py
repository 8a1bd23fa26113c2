"""A value the spec lists in its space that no layout takes is named, with the reason, by
`plan`, `run --dry-run`, `run` and the service's answer to a submission, instead of being
dropped without a word."""

from __future__ import annotations

import json

from conftest import EXAMPLES, on_database

from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.unused_values import unused_values

MOE_SPEC = """\
name: moe-notes
model: {preset: mixtral-8x7b, seq_len: 4096}
cluster: h100-80g
scale: {nodes: 4, global_batch_size: 256}
space:
  tp: [1, 2]
  ep: [3, 8]
  cp_comm_type: [p2p, a2a]
  micro_batch_size: [1, 2]
"""


def notes_of(path, overrides=()) -> list[str]:
    spec = load_spec(path, list(overrides))
    return unused_values(spec, spec.candidates())


def test_each_value_no_layout_takes_is_named_with_its_own_reason(tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(MOE_SPEC)
    notes = notes_of(path)
    assert len(notes) == 3, notes
    ep, tp, comm = (next(n for n in notes if n.startswith(f"space.{k}: ")) for k in
                    ("ep", "tp", "cp_comm_type"))
    assert ep.startswith("space.ep: 3 is in no layout") and "ep(3)" in ep
    # tp 2 is refused by the built-in trainer (experts whole), not for ep 3's reason
    assert "built-in trainer keeps experts whole" in tp and "ep(3)" not in tp
    assert "a2a" in comm and "cp 1" in comm and "p2p, stands for them" in comm


def test_values_every_layout_space_uses_and_unset_keys_get_no_note(tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(MOE_SPEC)
    assert notes_of(path, ["space.ep=[2, 8]", "space.tp=[1]", "space.cp_comm_type=[p2p]"]) == []
    assert notes_of(EXAMPLES / "llama3-405b-128k.yaml") == []


def test_plan_dry_run_and_json_carry_the_notes(cli, tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(MOE_SPEC.replace("  tp: [1, 2]\n", "").replace(
        "  cp_comm_type: [p2p, a2a]\n", ""))
    for command in (["plan", str(path)], ["run", str(path), "--dry-run"]):
        code, out, err = cli(*command)
        assert code == 0, err
        assert "note: space.ep: 3 is in no layout" in err and "valid configs" in out
    code, out, _ = cli("plan", str(path), "--json")
    assert code == 0 and len(json.loads(out)["notes"]) == 1


def test_a_campaign_run_names_them_before_its_trials(cli, tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(MOE_SPEC + "backend: {kind: simulated}\nbudget: {max_trials: 1}\n"
                    f"tracking: {{runs_dir: {tmp_path / 'runs'}, enabled: false}}\n")
    code, _, err = cli("run", str(path))
    assert code == 0, err
    assert err.count("note: space.") == 3


def test_a_space_where_nothing_fits_names_the_knobs_that_cut_memory(cli, tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text(MOE_SPEC)
    code, _, err = cli("plan", str(path), "--set", "model.seq_len=3000000")
    assert code == 2 and err.splitlines()[-1].startswith("error: moe-notes: no configuration fits")
    # each key that cuts memory and is not at its widest, as the --set that widens it
    for widened in ("space.tp=[1,2,4,8]", "space.cp=[1,2,4,8,16,32]", "space.ep=[1,2,4,8]",
                    "space.offload=[none,optimizer,optimizer+params]"):
        assert f"--set '{widened}'" in err, err
    dense = EXAMPLES / "quickstart.yaml"
    code, _, err = cli("plan", str(dense), "--set", "model.seq_len=3000000", "--set",
                       "space.activation_checkpointing=[none]")
    assert code == 2 and "--set 'space.activation_checkpointing=[none,selective,full]'" in err
    assert "space.ep" not in err


@on_database("sqlite")
def test_the_service_answers_a_submission_with_the_notes_and_its_log_has_them(service):
    server = service().start()
    token = server.token("alice")
    response = server.submit(token, EXAMPLES / "frontier-175b.yaml", "name=noted",
                             "space.sequence_parallel=[true]", "budget.max_trials=1",
                             "tracking.enabled=false", "backend.latency_s=0.1")
    assert response.status_code == 201, response.text
    notes = response.json()["notes"]
    assert len(notes) == 1 and notes[0].startswith("space.tp: 1 is in no layout")
    assert server.wait_final(token, ["noted"])["noted"]["state"] == "finished", server.logs()
    log = (server.state_dir / "logs" / "noted.log").read_text()
    assert "note: space.tp: 1 is in no layout" in log
