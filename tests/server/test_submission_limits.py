"""The service admits exactly what its controller will run: the spec it queues is read back
by the controller's own loader to the same campaign, and anything that loader would refuse
(too large a value or too many overrides, a spec past the limits once resolved) is refused at
submission with the same one-line message."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT
from pydantic import ValidationError
from test_saved_spec import LARGEST_LIST, layouts

from orchestrator.common.errors import SpecError, UserError
from orchestrator.server.routes.campaigns import Submission
from orchestrator.server.submission import parse_submission, read_submission, resolved_yaml
from orchestrator.campaign_spec.loading import spec_from_dict
from orchestrator.campaign_spec.yaml_input import load_yaml_text

SPECS = sorted(p for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("example", SPECS, ids=lambda p: p.stem)
def test_the_queued_spec_reads_back_to_the_same_campaign(example: Path, tmp_path, monkeypatch):
    # A command example runs `torchrun` as a user's shell finds it: the interpreter's own bin.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    try:
        spec = parse_submission(read_submission(example.read_text(), []), tmp_path, str(ROOT))
    except UserError as exc:
        assert "does not exist" in str(exc)
        pytest.skip("the example's trainer folder is not on this machine")
    again = spec_from_dict(load_yaml_text(resolved_yaml(spec), "queued"))
    assert again == spec


def test_the_largest_list_space_is_admitted_and_reads_back(tmp_path):
    text = (EXAMPLES / "quickstart.yaml").read_text()
    data = read_submission(text, ["space.kind=list"])
    data["space"] = {"kind": "list", "configs": layouts(LARGEST_LIST)}
    spec = parse_submission(data, tmp_path, str(tmp_path))
    assert spec_from_dict(load_yaml_text(resolved_yaml(spec), "queued")) == spec


def test_what_the_controller_would_refuse_is_refused_at_submission(tmp_path):
    text = (EXAMPLES / "quickstart.yaml").read_text()
    with pytest.raises(SpecError, match="larger than"):  # 1.5 MB in one value
        parse_submission(read_submission(text, ["trial.env.NCCL_X=" + "x" * 1_500_000]),
                         tmp_path)
    with pytest.raises(ValidationError, match="set"):  # 11,000 overrides
        Submission(spec_yaml=text, set=["budget.max_trials=2"] * 11_000)
    with pytest.raises(ValidationError, match="set"):
        Submission(spec_yaml=text, set=["name=" + "x" * 70_000])
    with pytest.raises(ValidationError, match="workdir"):
        Submission(spec_yaml=text, workdir="/" + "d" * 5000)
