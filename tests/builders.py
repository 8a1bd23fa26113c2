"""What many tests build, built one way: a layout, a spec (or the quickstart example's data, or
a cost-guided campaign of the frontier example), a CLI command's JSON, and the check that the CLI refused bad input in one line. A test states only what it changes from the defaults here, so the
defaults are written once and read in one place."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec, load_spec, spec_from_dict

RANKS = 16
"""Two nodes of eight GPUs: the default spec's scale, on which the default layout runs."""
BATCH = 16
"""The default spec's global batch, in sequences."""
LAYOUT = {"tp": 2, "pp": 1, "cp": 1, "zero_stage": 1, "micro_batch_size": 1}
"""The default layout: tensor parallel over pairs of GPUs, ZeRO-1, one sequence a micro-batch;
data parallelism over the ranks left (8 of the 16) and the accumulation steps the batch leaves
(2). A layout any trainer runs, so that a test's one changed knob is what it is about."""

SPEC = {"name": "test", "model": "llama-7b", "cluster": "h100-80g",
        "scale": {"nodes": RANKS // 8, "global_batch_size": BATCH}}
"""The default spec: llama-7b on two nodes of H100s, a global batch of 16 sequences."""


def layout(*, ranks: int = RANKS, batch: int = BATCH, **fields) -> Layout:
    """LAYOUT with `fields` replaced. Unless given, dp is what tp, pp and cp leave of `ranks`,
    and grad_accum_steps what dp and the micro-batch leave of `batch` (sequences a step)."""
    fields = {**LAYOUT, **fields}
    if "dp" not in fields:
        model_parallel = fields["tp"] * fields["pp"] * fields["cp"]
        assert ranks % model_parallel == 0, f"tp*pp*cp={model_parallel} does not divide {ranks}"
        fields["dp"] = ranks // model_parallel
    if "grad_accum_steps" not in fields:
        per_step = fields["dp"] * fields["micro_batch_size"]
        assert batch % per_step == 0, f"dp*micro_batch_size={per_step} does not divide {batch}"
        fields["grad_accum_steps"] = batch // per_step
    return Layout(**fields)


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QUICKSTART = EXAMPLES / "quickstart.yaml"


def laid_over(data: Mapping, *layers: Mapping) -> dict:
    """`data` with each layer's top-level keys laid over it in turn: a dict merges into the
    section below it (one level deep), anything else replaces it."""
    data = dict(data)
    for layer in layers:
        for key, value in layer.items():
            below = data.get(key)
            data[key] = {**below, **value} if isinstance(value, Mapping) and \
                isinstance(below, Mapping) else value
    return data


def make_spec(*layers: Mapping, trainer: str | None = None, **sections) -> CampaignSpec:
    """The spec SPEC with each of `layers`, then `sections` (top-level keys), laid over it
    (`laid_over`). `trainer` names trial.trainer."""
    return spec_from_dict(laid_over(SPEC, *layers, sections,
                                    {"trial": {"trainer": trainer}} if trainer else {}))


def quickstart_data(**sections) -> dict:
    """examples/quickstart.yaml as data, with `sections` laid over it (`laid_over`)."""
    return laid_over(yaml.safe_load(QUICKSTART.read_text()), sections)


def frontier_campaign(runs: Path, name: str, *sets: str) -> CampaignSpec:
    """examples/frontier-175b.yaml (a simulated backend) searched by cost-guided, recorded as
    `name` under `runs` without MLflow, with `sets` (KEY=VALUE, as --set takes them) after."""
    return load_spec(EXAMPLES / "frontier-175b.yaml", [
        f"name={name}", f"tracking.runs_dir={runs}", "tracking.enabled=false",
        "search.algorithm=cost-guided", *sets])


def one_line_error(result: tuple[int, str, str] | subprocess.CompletedProcess, *words) -> str:
    """The refusal as the user sees it: exit code 2 and one line on stderr (a short one, with
    each of `words`), no traceback; `result` is the `cli` fixture's (code, out, err) or a
    finished `paratune` process. The line, less its newline."""
    if isinstance(result, subprocess.CompletedProcess):
        result = (result.returncode, result.stdout, result.stderr)
    code, out, err = result
    assert code == 2, (code, out, err)
    assert err.endswith("\n") and err.count("\n") == 1 and len(err) <= 500, err
    assert err.startswith("error: ") and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err.rstrip("\n")


def cli_json(cli: Callable[..., tuple[int, str, str]], *args: str) -> dict:
    """What `paratune ARGS --json` prints, through the `cli` fixture, once it exited 0."""
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)
