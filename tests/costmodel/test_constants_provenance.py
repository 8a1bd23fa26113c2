"""The constants registry (orchestrator/costmodel/constants_provenance.py) against the code, the
published-figure tests and docs/costmodel.md: every constant that moves a published figure has
a source, a fit or the figures it moves; no figure a constant was fitted to is claimed as a
check; the docs' tables are the registry's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import EXAMPLES

from orchestrator.costmodel import constants_provenance as provenance
from orchestrator.costmodel import provenance_tables as tables
from orchestrator.costmodel import fit_verdict, memory
from orchestrator.costmodel.coefficients import Coefficients
from orchestrator.trainers.megatron.runtime import MEGATRON_EP_OVERLAP_FLAG
from orchestrator.presets import CLUSTER_PRESETS
from orchestrator.presets.clusters import NCCL

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "costmodel.md"
TESTS = Path(__file__).resolve().parents[1]
NCCL_PRESETS = ("a100-80g", "a800-80g", "h100-80g", "h800-80g", "h200-141g")


def test_every_coefficient_is_listed_or_only_calibration_sets_it():
    listed = {c.name for c in provenance.CONSTANTS}
    fields = set(provenance.coefficient_fields())
    assert fields - listed == set(provenance.CALIBRATION_ONLY)
    stock = Coefficients()
    for name in provenance.CALIBRATION_ONLY:  # the analytic model, unscaled
        assert getattr(stock, name) in (None, 1.0), name


@pytest.mark.parametrize("preset", NCCL_PRESETS)
def test_the_nvidia_presets_hold_the_nccl_set_the_registry_reads(preset):
    cluster = CLUSTER_PRESETS[preset]
    for field, value in NCCL.items():
        assert getattr(cluster, field) == value == provenance.constant(field).value, field


def test_the_v100_has_an_asymptote_of_its_own():
    v100 = provenance.constant("v100-32g.compute_efficiency").value
    assert CLUSTER_PRESETS["v100-32g"].compute_efficiency == v100 != NCCL["compute_efficiency"]


def test_values_are_read_from_the_code_not_copied(monkeypatch):
    monkeypatch.setattr(memory, "FRAGMENTATION_RESERVE", 0.123)
    assert provenance.constant("FRAGMENTATION_RESERVE").value == 0.123
    assert "| `FRAGMENTATION_RESERVE` | costmodel/memory.py | 0.123 |" in \
        tables.constants_table()


def test_each_constant_says_where_it_comes_from():
    figures = {f.id for f in provenance.FIGURES}
    for c in provenance.CONSTANTS:
        assert c.kind in (provenance.SOURCE, provenance.FIT, provenance.ASSUMPTION), c.name
        assert c.basis, c.name
        assert bool(c.fitted_to or c.fitted_to_rows) == (c.kind == provenance.FIT), c.name
        assert set(c.fitted_to) | set(c.moves) <= figures, c.name
        assert c.value is not None, c.name


def test_the_memory_margin_is_a_fit_to_measured_rows_and_moves_no_published_figure():
    margin = provenance.constant("MEMORY_MARGIN")
    assert margin.value == fit_verdict.MEMORY_MARGIN and margin.kind == provenance.FIT
    assert margin.fitted_to == () and "benchmarks/memory_margin.py" in margin.fitted_to_rows
    assert all("MEMORY_MARGIN" not in provenance.fitted_by(f.id) for f in provenance.FIGURES)
    row = f"| `MEMORY_MARGIN` | costmodel/fit_verdict.py | {fit_verdict.MEMORY_MARGIN:g} | fit |"
    assert row in tables.constants_table()


def test_the_gemm_constants_and_the_chunk_cost_are_fits_of_the_figures_they_were_chosen_for():
    """presets/clusters.py: 0.72 / 128 / 256 put AMSP 7B on 8 GPUs at 64% and Megatron-LM's 1T at
    52%; the 16 KB chunk cost is "the one constant of the set chosen against the AMSP figures"."""
    for gemm in ("compute_efficiency", "gemm_half_m", "gemm_half_n"):
        for figure_id in ("amsp-7b-8gpu-amsp-mfu", "megatron-1t-hfu"):
            assert gemm in provenance.fitted_by(figure_id)
    assert provenance.constant("msg_half_bytes").kind == provenance.FIT
    for figure_id in ("megatron-1t-hfu", "amsp-7b-8gpu-amsp-mfu", "amsp-table-iv-7b-plan"):
        assert provenance.role(figure_id) == provenance.FIT_ROLE
        with pytest.raises(ValueError, match="a fit, not a check"):
            provenance.check(figure_id)


def test_a_figure_made_a_fit_fails_the_test_that_claims_it_as_a_check(monkeypatch):
    """The rule end to end: mark a constant fitted to a figure a test checks, and that test
    fails; the figure's ratios and orderings become fits with it."""
    from test_costmodel_papers import test_frontier_strong_scaling

    args = ("frontier-175b-strong-scaling", "frontier-175b.yaml", "64,128", 0.89)
    test_frontier_strong_scaling(*args)  # a check as the registry stands
    tuned = provenance.Constant("tuned", "here", lambda: 1.0, provenance.FIT, "chosen so",
                                fitted_to=("frontier-175b-strong-scaling",
                                           "amsp-30b-1024-mics-mfu"))
    monkeypatch.setattr(provenance, "CONSTANTS", (*provenance.CONSTANTS, tuned))
    with pytest.raises(ValueError, match="frontier-175b-strong-scaling: tuned fitted to it"):
        test_frontier_strong_scaling(*args)
    assert provenance.role("amsp-30b-1024-mics-mfu") == provenance.FIT_ROLE
    assert provenance.fitted_by("amsp-30b-1024-ordering") == ["tuned"]
    with pytest.raises(ValueError, match="no constant is fitted to it"):
        provenance.fit("frontier-1t-mfu")


def test_every_check_has_a_test_that_names_it():
    text = "\n".join(p.read_text() for p in TESTS.rglob("test_*.py")
                     if p.name != Path(__file__).name)
    for f in provenance.FIGURES:
        if provenance.role(f.id) != provenance.FIT_ROLE:
            assert f'"{f.id}"' in text, f"{f.id}: a check no test names"


def doc_without_blocks() -> str:
    text = DOC.read_text()
    for name in tables.doc_blocks():
        text = re.sub(rf"<!-- BEGIN {name} -->.*?<!-- END {name} -->", "", text, flags=re.S)
    return text


def test_the_docs_constants_and_figures_tables_are_the_registrys():
    text = DOC.read_text()
    assert tables.with_blocks(text) == text, \
        "docs/costmodel.md: run .venv/bin/python -m orchestrator.costmodel.provenance_tables " \
        "--write docs/costmodel.md"
    for name in tables.doc_blocks():
        assert f"<!-- BEGIN {name} -->" in text


def test_the_docs_label_fits_and_misses_where_they_show_them():
    rows = [line for line in doc_without_blocks().splitlines() if line.startswith("| ")]
    for f in provenance.FIGURES:
        naming = [row for row in rows if f"`{f.id}`" in row]
        role = provenance.role(f.id)
        if role == provenance.FIT_ROLE:
            assert all("fit, not a check" in row for row in naming), f.id
        else:
            assert not any("fit, not a check" in row for row in naming), f.id
        if role == provenance.MISS and naming:
            assert any("miss" in row for row in naming), f.id


def test_only_the_deepseek_v3_figure_rests_on_the_expert_overlap():
    """docs/costmodel.md once said no check used `overlap_expert_comm`; a spec passing
    Megatron-LM's overlap flag prices its dispatch with it, so every such published spec's
    figure must be marked as resting on it."""
    passing = sorted(p.name for p in EXAMPLES.glob("*.yaml")
                     if MEGATRON_EP_OVERLAP_FLAG in p.read_text())
    published_specs = {"deepseek-v3.yaml": "deepseek-v3-mfu"}  # spec -> its published figure
    assert passing == list(published_specs)
    assert provenance.constant("overlap_expert_comm").kind == provenance.ASSUMPTION
    assert provenance.resting_on("deepseek-v3-mfu")[0] == "overlap_expert_comm"
    assert set(provenance.constant("overlap_expert_comm").moves) == set(published_specs.values())
