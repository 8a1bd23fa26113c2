"""One declaration per knob: a knob declared in the layout schema alone (here from a module of
this test's, before the rest of ParaTune is imported) reaches the spec, the search space, every
searcher's encoding, the journal, MLflow params and the trial job's flags."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

from orchestrator.layout import Knob, declare, knobs, layout_problems

DUMMY_KNOB = '''
from orchestrator.layout import Knob, declare

declare(Knob("bucket_chunks", int, 1, "a knob only this test declares", space=(1,),
             rule=lambda v: "bucket_chunks > 1 needs zero_stage > 0"
             if v["bucket_chunks"] > 1 and v["zero_stage"] == 0 else None))
'''

CHECKS = '''
import json, sys
from pathlib import Path

import dummy_knob  # declares before anything derives from the schema

from jobs.config import parse_config
from orchestrator.cli import main
from orchestrator.common.objective import Objective
from orchestrator.record.journal import Journal
from orchestrator.search import make_searcher
from orchestrator.search.encoding import KnobSpace
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for
from orchestrator.trainers.builtin import job_settings

spec_path, runs = Path(sys.argv[1]), Path(sys.argv[2])
out = {}
spec = load_spec(spec_path)
out["spec_range"] = spec.space.bucket_chunks
candidates = spec.candidates()
out["space_values"] = sorted({c.bucket_chunks for c in candidates})
out["refused_by_rule"] = not any(c.bucket_chunks > 1 and c.zero_stage == 0 for c in candidates)
out["keys_distinct"] = len({c.key() for c in candidates}) == len(candidates)
out["encoding"] = KnobSpace.of(candidates).values.get("bucket_chunks")
objective = Objective("tokens_per_s", "max")
asked = {}
for algorithm in ("grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided"):
    searcher = make_searcher(algorithm, candidates, objective, seed=0,
                             cost_model=cost_model_for(spec))
    seen = set()
    for _ in range(len(candidates)):
        for config in searcher.ask(1):
            seen.add(config.bucket_chunks)
            from orchestrator.result import TrialResult
            searcher.tell(config, TrialResult(status="ok", tokens_per_s=1000.0 * config.bucket_chunks))
    asked[algorithm] = sorted(seen)
out["searchers"] = asked
config = next(c for c in candidates if c.bucket_chunks == 4)
out["params_round_trip"] = Layout.from_params(
    {k: str(v) for k, v in config.to_params().items()}) == config
settings = job_settings(spec, config, "t0001")
(runs / "settings.json").write_text(json.dumps(settings))
out["job_from_settings"] = parse_config(["--config", str(runs / "settings.json")]).bucket_chunks
out["job_flag"] = parse_config(["--bucket-chunks", "3"]).bucket_chunks
code = main(["run", str(spec_path), "--runs-dir", str(runs)])
records = Journal(runs / "dummy" / "journal.jsonl").trials().values()
out["run_code"] = code
out["journal_values"] = sorted({r.config.bucket_chunks for r in records})
print("RESULT " + json.dumps(out))
'''

SPEC = textwrap.dedent("""\
    name: dummy
    model: tiny
    cluster: cpu-local
    scale: {nodes: 1, gpus_per_node: 2, global_batch_size: 8}
    space:
      zero_stage: [0, 1]
      micro_batch_size: [4]
      activation_checkpointing: [none]
      bucket_chunks: [1, 2, 4]
    backend: {kind: simulated}
    search: {algorithm: grid}
    budget: {max_trials: 10}
    tracking: {enabled: false}
    """)


def test_a_knob_declared_in_the_schema_alone_reaches_every_stage(tmp_path):
    (tmp_path / "dummy_knob.py").write_text(DUMMY_KNOB)
    (tmp_path / "checks.py").write_text(CHECKS)
    spec = tmp_path / "dummy.yaml"
    spec.write_text(SPEC)
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(tmp_path / "checks.py"), str(spec), str(runs)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["spec_range"] == [1, 2, 4]
    assert out["space_values"] == [1, 2, 4]
    assert out["refused_by_rule"] and out["keys_distinct"]
    assert out["encoding"] == [1, 2, 4]
    # 4 layouts: zero_stage 0 only with bucket_chunks 1; every searcher reaches all of them.
    assert out["searchers"] == {a: [1, 2, 4] for a in (
        "grid", "random", "deephyper-cbo", "optuna", "hyperopt", "cost-guided")}
    assert out["params_round_trip"]
    assert out["job_from_settings"] == 4 and out["job_flag"] == 3
    assert out["run_code"] == 0 and out["journal_values"] == [1, 2, 4]


def test_a_spec_range_outside_a_knobs_values_names_the_key(tmp_path, cli):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.replace("  bucket_chunks: [1, 2, 4]\n", "  tp: [0]\n"))
    code, _, err = cli("run", str(spec), "--runs-dir", str(tmp_path / "runs"))
    assert code == 2 and "space.tp" in err and "integers from 1" in err
    assert len(err.strip().splitlines()) == 1


def test_an_undeclared_knob_is_an_unknown_key_listing_the_declared_ones(tmp_path, cli):
    spec = tmp_path / "dummy.yaml"
    spec.write_text(SPEC)  # bucket_chunks: declared only in the subprocess test above
    code, _, err = cli("run", str(spec), "--runs-dir", str(tmp_path / "runs"))
    assert code == 2 and "space.bucket_chunks: unknown key" in err
    assert "sequence_parallel, pp_schedule, virtual_stages, pipeline_split, compile" in err


def test_a_layout_names_every_broken_domain_before_any_rule():
    values = {k.name: k.default for k in knobs()}
    assert layout_problems(values) == []
    assert layout_problems({**values, "zero_stage": True}) == [
        "zero_stage(True) must be one of 0, 1, 2, 3"]
    assert layout_problems({**values, "sequence_parallel": True, "tp": 0}) == [
        "tp(0) must be a positive integer"]
    assert layout_problems({**values, "sequence_parallel": True}) == [
        "sequence_parallel needs tp > 1"]


def test_a_knob_is_declared_once_and_before_anything_derives():
    with pytest.raises(RuntimeError, match="before importing the rest"):
        declare(Knob("late", int, 1, "declared after the layout classes were built"))
