"""The pipeline split (`pipeline_split`: even, or the embedding and the loss counted as a layer
each): where the layers go is megatron-core's and torchtitan's own answer, the layouts each
trainer refuses say so in one line, and the cost model prices the stage every step waits on.
"""

from __future__ import annotations

import dataclasses
import itertools
import subprocess

import pytest
from conftest import EXAMPLES
from test_moe_trainers import generated, mcore  # noqa: F401  (megatron-core's fixtures)
from test_torchtitan import _trial_args
from test_torchtitan import parse  # noqa: F401  (torchtitan's own parser)
from trainer_checks import run_and_best

from orchestrator.common.errors import SpecError
from orchestrator.export import export
from orchestrator.space import ParallelConfig
from orchestrator.pipeline_split import busiest_chunk_layers, split_problem, stage_layers
from orchestrator.spec import load_spec, spec_from_dict
from orchestrator.spec.planning import cost_model_for
from orchestrator.spec.trainer_layouts import layout_refusal
from orchestrator.trainers.megatron import megatron_args
from orchestrator.trainers.megatron_flags import MEGATRON_LM_FLAGS, problems

SPLITS = ("even", "embedding_loss")
GRID = [(layers, pp, v, split) for layers, pp, v, split
        in itertools.product(range(2, 20), (2, 3, 4, 8), (1, 2, 4), SPLITS)]


def megatron_layers(layers: int, pp: int, v: int, split: str) -> list[list[int]] | None:
    """Layers per (rank, chunk) as megatron-core builds them, or None where it refuses."""
    import torch
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    counted = split == "embedding_loss"
    try:
        config = TransformerConfig(
            num_layers=layers, hidden_size=64, num_attention_heads=4,
            pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32,
            virtual_pipeline_model_parallel_size=v if v > 1 else None,
            account_for_embedding_in_pipeline_split=counted,
            account_for_loss_in_pipeline_split=counted)
        return [[get_num_layers_to_build(config, vp_stage=c if v > 1 else None, pp_rank=r)
                 for c in range(v)] for r in range(pp)]
    except (ValueError, AssertionError):
        return None


def test_the_split_is_megatron_cores_on_every_layout_it_builds(mcore):  # noqa: F811
    """Layers per pipeline rank and the largest model chunk match get_num_layers_to_build;
    a split ParaTune refuses, megatron-core refuses too, save a first stage holding the
    embedding alone (megatron-core builds it; ParaTune leaves such a stage out)."""
    agreed = 0
    for layers, pp, v, split in GRID:
        built = megatron_layers(layers, pp, v, split)
        problem = split_problem(layers, pp, v, split)
        if problem is None:
            assert built is not None, (layers, pp, v, split)
            assert stage_layers(layers, pp, v, split) == tuple(map(sum, built))
            assert busiest_chunk_layers(layers, pp, v, split) == max(map(max, built))
            agreed += 1
        elif built is not None:
            assert split == "embedding_loss" and "no transformer layer" in problem
    assert agreed > 60
    assert stage_layers(126, 16, 8, "embedding_loss") == (7, *[8] * 14, 7)


def _titan_spec(layers: int, **space):
    return spec_from_dict({
        "name": "titan", "model": {"preset": "llama-7b", "num_layers": layers},
        "cluster": "h100-80g", "scale": {"nodes": 2, "global_batch_size": 32},
        "space": {"tp": [1], "pp": [2], "zero_stage": [3], "micro_batch_size": [1], **space},
        "trial": {"trainer": "torchtitan", "torchtitan": {"module": "llama3",
                                                          "config": "llama3_8b"}}})


@pytest.mark.parametrize("split,schedule,v,layers", [
    ("even", "1f1b", 1, 32), ("embedding_loss", "1f1b", 1, 32),
    ("even", "interleaved", 2, 32), ("embedding_loss", "interleaved", 2, 30)])
def test_the_split_is_torchtitans_own(split, schedule, v, layers, parse, tmp_path):  # noqa: F811
    """torchtitan's rendered less-layers and layers per stage give, through its own module
    split, the layers ParaTune priced on each rank (the 1F1B even split was torchtitan's
    default of one layer less at each end before ParaTune rendered 0)."""
    from torchtitan.distributed.pipeline_parallel import (
        _generate_llm_fqn_per_model_part,
        _get_pp_rank_to_stage_indices_mapping,
    )

    spec = _titan_spec(layers, pp_schedule=[schedule], virtual_stages=[v],
                       pipeline_split=[split])
    config = spec.search_space().candidates()[0]
    p = parse(_trial_args(spec, config, tmp_path)).parallelism
    weight = p.pipeline_parallel_first_stage_less_layers
    assert weight == p.pipeline_parallel_last_stage_less_layers == int(split != "even")
    if v > 1:
        assert p.pipeline_parallel_layers_per_stage == config.busiest_chunk_layers(layers)
    parts = _generate_llm_fqn_per_model_part(2 * v, layers, weight, weight)
    per_rank = tuple(
        sum(sum(name.startswith("layers.") for name in parts[stage])
            for stage in _get_pp_rank_to_stage_indices_mapping(
                rank, 2, p.pipeline_parallel_schedule, 2 * v))
        for rank in range(2))
    assert per_rank == config.stage_layers(layers)


def _llama3(**space):
    return load_spec(EXAMPLES / "llama3-405b-128k.yaml",
                     [f"space.{k}={v}" for k, v in space.items()])


def test_the_llama3_example_renders_megatron_lms_split_flags(generated):  # noqa: F811
    spec = _llama3()
    config = next(c for c in spec.search_space().candidates() if c.pp == 16)
    assert config.pipeline_split == "embedding_loss" and spec.model.num_layers == 126
    args = megatron_args("megatron-lm", spec, config)
    assert "--account-for-embedding-in-pipeline-split" in args
    assert "--account-for-loss-in-pipeline-split" in args and "--num-layers=126" in args
    assert problems(args, {**MEGATRON_LM_FLAGS, **generated}) == []
    even = megatron_args("megatron-lm", spec, dataclasses.replace(
        config, pp=1, dp=config.dp * 16, virtual_stages=1, pp_schedule="1f1b"))
    assert not [a for a in even if a.startswith("--account-for")]  # no pipeline, no split


@pytest.mark.parametrize("trainer", ["deepspeed", "megatron-deepspeed"])
def test_trainers_whose_pipelines_partition_their_own_way_refuse_the_split(trainer):
    spec = _llama3()
    config = next(c for c in spec.search_space().candidates() if c.pp == 16 and c.cp == 1)
    reason = layout_refusal(trainer, spec, config)
    assert reason.startswith(f"{trainer}: pipeline_split embedding_loss")
    assert "space.pipeline_split to [even]" in reason and "\n" not in reason
    assert layout_refusal("torchtitan", spec, config) is None
    assert layout_refusal("builtin", spec, config) is None


def test_a_depth_only_the_other_split_takes_is_refused_with_that_fix():
    with pytest.raises(SpecError, match=r"space.pp: pp=16 does not divide model.num_layers=126; "
                       r"use one of .*, or set space.pipeline_split to \[embedding_loss\]"):
        _llama3(pipeline_split="[even]", pp="[16]")
    with pytest.raises(SpecError, match=r"space.pp: pp=7: pipeline_split embedding_loss: "
                       r"num_layers\(126\) \+ 2 .* or set space.pipeline_split to \[even\]"):
        _llama3(pp="[7]")


def test_the_step_waits_on_the_busiest_stage():
    """Llama 3's 126 layers split 7 + 14 x 8 + 7 take the step of 128 layers split evenly
    (8 a stage), and its TFLOP/s count the 126 it has."""
    spec = _llama3(cp="[16]", tp="[8]", pp="[16]", activation_checkpointing="[selective]",
                   cp_comm_type="[allgather]", virtual_stages="[8]")
    uneven = spec.search_space().candidates()[0]
    stand_in = load_spec(EXAMPLES / "llama3-405b-128k.yaml", [
        "model.num_layers=128", "space.pipeline_split=[even]", "space.cp=[16]", "space.tp=[8]",
        "space.pp=[16]", "space.activation_checkpointing=[selective]",
        "space.cp_comm_type=[allgather]", "space.virtual_stages=[8]"])
    even = stand_in.search_space().candidates()[0]
    real, padded = cost_model_for(spec).estimate(uneven), cost_model_for(stand_in).estimate(even)
    assert real.step_time_s == pytest.approx(padded.step_time_s, rel=1e-3)
    assert real.memory.total == pytest.approx(padded.memory.total, rel=1e-3)
    assert real.tflops_per_gpu == pytest.approx(padded.tflops_per_gpu * 126 / 128, rel=1e-3)


def test_a_layout_key_names_the_split_only_where_there_is_a_pipeline():
    config = ParallelConfig(pp=2, dp=2, grad_accum_steps=2, pipeline_split="embedding_loss")
    assert config.key().endswith("-embloss")
    assert "embloss" not in ParallelConfig(dp=4, pipeline_split="embedding_loss").key()


def test_the_llama3_campaigns_launch_files_are_for_its_126_layers(runs_dir, monkeypatch):
    """The winner's launch files, in every format of its program, build Llama 3's own 126
    layers with the split it was priced on."""
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / "llama3-405b-128k.yaml",
                     ["budget.max_trials=3", "tracking.enabled=false"])
    view, best = run_and_best(spec)
    assert best.config.pp > 1
    for fmt in ("megatron-lm", "torchrun", "sbatch"):
        text = export(fmt, spec, best.trial_id, best.config, view.trial_dir(best.trial_id))
        (runs_dir.parent / fmt).write_text(text)
        check = subprocess.run(["bash", "-n", str(runs_dir.parent / fmt)], capture_output=True,
                               text=True)
        assert check.returncode == 0, (fmt, check.stderr)
        assert "--num-layers=126" in text, fmt
        assert "--account-for-embedding-in-pipeline-split" in text
        assert "--account-for-loss-in-pipeline-split" in text


def test_the_built_in_jobs_stages_hold_the_layers_the_layout_priced():
    """4 layers on 2 ranks of 3 chunks, the embedding and the loss as layers: the first chunk
    holds the embedding alone and the last the norm and output alone (tests/test_modes.py
    trains this layout to a single process's losses)."""
    from jobs.config import JobConfig
    from jobs.model import ModelArgs, Transformer
    from jobs.pipeline import split_stage
    from jobs.trainer import Infeasible, check_feasible

    from orchestrator.pipeline_split import layer_chunks

    config = JobConfig(model=ModelArgs(num_layers=4), dp=1, pp=2, grad_accum_steps=4,
                       pp_schedule="interleaved", virtual_stages=3,
                       pipeline_split="embedding_loss")
    check_feasible(config, 2)
    model = Transformer(config.model)
    chunks = [split_stage(model, s, 6, layer_chunks(4, 2, 3, "embedding_loss")) for s in range(6)]
    assert [sorted(c.layers) for c in chunks] == [[], ["0"], ["1"], ["2"], ["3"], []]
    assert chunks[0].tok_embeddings is not None and chunks[5].output is not None
    assert all(c.tok_embeddings is None for c in chunks[1:])
    assert all(c.output is None for c in chunks[:5])
    with pytest.raises(Infeasible, match=r"num_layers\(4\) \+ 2 .* pp\(2\) \* virtual_stages\(2\)"):
        check_feasible(dataclasses.replace(config, virtual_stages=2), 2)


def test_a_split_that_places_the_layers_as_one_listed_before_is_one_layout():
    """Both splits apply only at pp 2 with an even layer count and no virtual stages (pp
    divides both the layers and the layers + 2), and there they place the layers alike: the
    space keeps the first listed, and the note on the other says why. Elsewhere one applies."""
    from test_space_notes import notes_of

    both = "space.pipeline_split=[even, embedding_loss]"
    spec = load_spec(EXAMPLES / "quickstart.yaml", ["space.pp=[2]", both])
    assert {c.pipeline_split for c in spec.search_space().candidates()} == {"even"}
    assert ("space.pipeline_split: embedding_loss is in no layout of this space: every layout "
            "it makes is one another listed value makes already") in notes_of(
        EXAMPLES / "quickstart.yaml", ["space.pp=[2]", both])
    deeper = load_spec(EXAMPLES / "quickstart.yaml", [
        "model.num_layers=6", "space.pp=[4]", "scale.nodes=2", both])
    assert {c.pipeline_split for c in deeper.search_space().candidates()} == {"embedding_loss"}
    assert {c.pipeline_split for c in load_spec(EXAMPLES / "quickstart.yaml", [
        "model.num_layers=8", "space.pp=[4]", "scale.nodes=2", both]).search_space()
        .candidates()} == {"even"}
