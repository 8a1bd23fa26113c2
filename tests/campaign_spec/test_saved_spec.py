"""A campaign's saved spec always opens again: the largest list space a user may write (1,000
layouts) is saved with every field written out, far more values than a user's spec may hold,
and `status`, `best`, `report` and `resume` still read it."""

from __future__ import annotations

import itertools
import json

from conftest import write_spec

from orchestrator.campaign_spec.space_section import SpaceSpec

LARGEST_LIST = SpaceSpec.model_fields["configs"].metadata[0].max_length


def layouts(count: int) -> list[dict]:
    """`count` layouts of the quickstart's world (2 ranks, 8 sequences a step)."""
    shapes = [dict(tp=1, pp=1, micro_batch_size=m, zero_stage=z, activation_checkpointing=a,
                   compile=c)
              for m, z, a, c in itertools.product([1, 2, 4], [0, 1, 2, 3],
                                                  ["none", "selective", "full"], [False, True])]
    return list(itertools.islice(itertools.cycle(shapes), count))


def test_the_largest_list_space_saves_and_opens_again(tmp_path, runs_dir, cli):
    assert LARGEST_LIST == 1_000
    spec = write_spec(tmp_path / "big.yaml", name="biglist",
                      space={"kind": "list", "configs": layouts(LARGEST_LIST)},
                      budget={"max_trials": 2}, backend={"kind": "simulated"},
                      tracking={"enabled": False})
    code, _, err = cli("run", str(spec))
    assert code == 0, err
    saved = (runs_dir / "biglist" / "spec.yaml").read_text()
    assert saved.count("micro_batch_size") >= LARGEST_LIST  # every field written out
    code, out, err = cli("status", "biglist", "--json")
    assert code == 0, err
    assert json.loads(out)["trials"] == 2
    for command in (("best", "biglist"), ("report", "biglist", "-o", str(tmp_path / "r.html"))):
        code, _, err = cli(*command)
        assert code == 0, (command, err)
    saved_path = runs_dir / "biglist" / "spec.yaml"
    saved_path.write_text(saved.replace("max_trials: 2", "max_trials: 3"))
    code, _, err = cli("resume", "biglist")
    assert code == 0, err
    assert json.loads(cli("status", "biglist", "--json")[1])["trials"] == 3
