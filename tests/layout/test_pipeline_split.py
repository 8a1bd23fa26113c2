"""The pipeline split (`pipeline_split`: even, the embedding and the loss counted as a layer
each, or first and last stages sized to the middle ones): where the layers go is megatron-core's
and torchtitan's own answer, the layouts each trainer refuses say so in one line, and the cost
model prices the stage every step waits on.
"""

from __future__ import annotations

import dataclasses
import json
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
from orchestrator.space import Layout
from orchestrator.pipeline_split import (
    busiest_chunk_layers,
    end_stage_layers,
    layer_chunks,
    split_problem,
    stage_layers,
)
from orchestrator.campaign_spec import load_spec, spec_from_dict
from orchestrator.campaign_spec.planning import cost_model_for
from orchestrator.campaign_spec.trainer_layouts import layout_refusal
from orchestrator.trainers.megatron import megatron_args
from orchestrator.trainers.megatron.flags import MEGATRON_LM_FLAGS, problems

SPLITS = ("even", "embedding_loss", "first_last")
GRID = [(layers, pp, v, split) for layers, pp, v, split
        in itertools.product(range(2, 20), (2, 3, 4, 8), (1, 2, 4), SPLITS)]


def _split_fields(layers: int, pp: int, v: int, split: str) -> dict:
    """megatron-core's TransformerConfig fields for a split (first_last: Megatron-LM's
    --decoder-first/last-pipeline-num-layers, as argument_utils.py maps them)."""
    if split == "first_last":
        first, _, last = end_stage_layers(layers, pp, v)
        return {"num_layers_in_first_pipeline_stage": first,
                "num_layers_in_last_pipeline_stage": last}
    counted = split == "embedding_loss"
    return {"account_for_embedding_in_pipeline_split": counted,
            "account_for_loss_in_pipeline_split": counted}


def megatron_layers(layers: int, pp: int, v: int, split: str
                    ) -> tuple[list[list[int]], list[list[int]]] | None:
    """Layers per (rank, chunk) as megatron-core builds them, and the first layer of each, or
    None where it refuses."""
    import torch
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    try:
        config = TransformerConfig(
            num_layers=layers, hidden_size=64, num_attention_heads=4,
            pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32,
            virtual_pipeline_model_parallel_size=v if v > 1 else None,
            **_split_fields(layers, pp, v, split))
        chunks = [[(c if v > 1 else None, r) for c in range(v)] for r in range(pp)]
        return ([[get_num_layers_to_build(config, vp_stage=c, pp_rank=r) for c, r in rank]
                 for rank in chunks],
                [[get_transformer_layer_offset(config, vp_stage=c, pp_rank=r) for c, r in rank]
                 for rank in chunks])
    except (ValueError, AssertionError):
        return None


def test_the_split_is_megatron_cores_on_every_layout_it_builds(mcore):  # noqa: F811
    """Layers per pipeline rank, the largest model chunk and the first layer of every chunk
    match get_num_layers_to_build and get_transformer_layer_offset; a split ParaTune refuses,
    megatron-core refuses too, save a first stage holding the embedding alone (megatron-core
    builds it; ParaTune leaves such a stage out) and first_last's interleaved chunks on 2
    stages (megatron-core builds them and then divides by its 0 middle stages for the offset)."""
    agreed = {split: 0 for split in SPLITS}
    for layers, pp, v, split in GRID:
        problem = split_problem(layers, pp, v, split)
        built = megatron_layers(layers, pp, v, split) if problem is None or pp > 2 or v == 1 \
            else None
        if problem is None:
            assert built is not None, (layers, pp, v, split)
            counts, offsets = built
            assert stage_layers(layers, pp, v, split) == tuple(map(sum, counts))
            assert busiest_chunk_layers(layers, pp, v, split) == max(map(max, counts))
            placed = layer_chunks(layers, pp, v, split)
            assert [[placed.index(c * pp + r) if c * pp + r in placed else None
                     for c in range(v)] for r in range(pp)] == \
                [[o if n else None for o, n in zip(*chunk)] for chunk in zip(offsets, counts)]
            agreed[split] += 1
        elif built is not None:
            assert split == "embedding_loss" and "no transformer layer" in problem
    assert min(agreed.values()) >= 30, agreed
    assert stage_layers(126, 16, 8, "embedding_loss") == (7, *[8] * 14, 7)
    assert stage_layers(61, 16, 1, "first_last") == (3, *[4] * 14, 2)  # DeepSeek-V3


def test_first_last_gives_the_busiest_stage_the_fewest_layers_any_split_could():
    """No stage holds more than ceil(layers / pp) layers, rounded up to the virtual stages
    (no split of whole chunks can do better), and the last stage, which also runs the output
    layer, holds no more than the first."""
    for layers, pp, v, _ in GRID:
        if pp > 2 and split_problem(layers, pp, v, "first_last") is None:
            first, *middle, last = stage_layers(layers, pp, v, "first_last")
            assert max(first, *middle, last) == v * -(-layers // (pp * v)), (layers, pp, v)
            assert last <= first and all(n % v == 0 for n in (first, last, *middle))
    assert "needs pp > 2" in split_problem(12, 2, 2, "first_last")
    with pytest.raises(ZeroDivisionError):  # why: megatron-core cannot place those chunks
        megatron_layers(12, 2, 2, "first_last")


def _titan_spec(layers: int, **space):
    return spec_from_dict({
        "name": "titan", "model": {"preset": "llama-7b", "num_layers": layers},
        "cluster": "h100-80g", "scale": {"nodes": 2, "global_batch_size": 32},
        "space": {"tp": [1], "pp": [2], "zero_stage": [3], "micro_batch_size": [1], **space},
        "trial": {"trainer": "torchtitan", "torchtitan": {"module": "llama3",
                                                          "config": "llama3_8b"}}})


@pytest.mark.parametrize("split,schedule,pp,v,layers", [
    ("even", "1f1b", 2, 1, 32), ("embedding_loss", "1f1b", 2, 1, 32),
    ("even", "interleaved", 2, 2, 32), ("embedding_loss", "interleaved", 2, 2, 30),
    ("first_last", "1f1b", 4, 1, 29), ("first_last", "1f1b", 2, 1, 31)])
def test_the_split_is_torchtitans_own(split, schedule, pp, v, layers, parse,  # noqa: F811
                                      tmp_path):
    """torchtitan's rendered less-layers and layers per stage give, through its own module
    split, the layers ParaTune priced on each rank (the 1F1B even split was torchtitan's
    default of one layer less at each end before ParaTune rendered 0; first_last on 29 layers
    and 4 stages is 7 + 8 + 8 + 6)."""
    from torchtitan.distributed.pipeline_parallel import (
        _generate_llm_fqn_per_model_part,
        _get_pp_rank_to_stage_indices_mapping,
    )

    spec = _titan_spec(layers, pp=[pp], pp_schedule=[schedule], virtual_stages=[v],
                       pipeline_split=[split])
    config = spec.search_space().candidates()[0]
    p = parse(_trial_args(spec, config, tmp_path)).parallelism
    first = p.pipeline_parallel_first_stage_less_layers
    last = p.pipeline_parallel_last_stage_less_layers
    if split != "first_last":
        assert first == last == int(split != "even")
    if v > 1:
        assert p.pipeline_parallel_layers_per_stage == config.busiest_chunk_layers(layers)
    parts = _generate_llm_fqn_per_model_part(pp * v, layers, first, last)
    per_rank = tuple(
        sum(sum(name.startswith("layers.") for name in parts[stage])
            for stage in _get_pp_rank_to_stage_indices_mapping(
                rank, pp, p.pipeline_parallel_schedule, pp * v))
        for rank in range(pp))
    assert per_rank == config.stage_layers(layers)
    assert layers != 29 or per_rank == (7, 8, 8, 6)


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
    config = Layout(pp=2, dp=2, grad_accum_steps=2, pipeline_split="embedding_loss")
    assert config.key().endswith("-embloss")
    assert "embloss" not in Layout(dp=4, pipeline_split="embedding_loss").key()


@pytest.mark.parametrize("example,flags", [
    ("llama3-405b-128k.yaml", ["--num-layers=126", "--account-for-embedding-in-pipeline-split",
                               "--account-for-loss-in-pipeline-split"]),
    ("deepseek-v3.yaml", ["--num-layers=61", "--decoder-first-pipeline-num-layers=3",
                          "--decoder-last-pipeline-num-layers=2"])])
def test_the_campaigns_launch_files_are_for_the_models_own_layers(example, flags, runs_dir,
                                                                   monkeypatch):
    """The winner's launch files, in every format of its program, build the model's own
    layers (Llama 3's 126, DeepSeek-V3's 61) with the split it was priced on."""
    monkeypatch.chdir(EXAMPLES.parent)
    spec = load_spec(EXAMPLES / example, ["budget.max_trials=3", "tracking.enabled=false"])
    view, best = run_and_best(spec)
    assert best.config.pp > 1
    for fmt in ("megatron-lm", "torchrun", "sbatch"):
        text = export(fmt, spec, best.trial_id, best.config, view.trial_dir(best.trial_id))
        (runs_dir.parent / fmt).write_text(text)
        check = subprocess.run(["bash", "-n", str(runs_dir.parent / fmt)], capture_output=True,
                               text=True)
        assert check.returncode == 0, (fmt, check.stderr)
        assert all(flag in text for flag in flags), fmt


def test_the_built_in_jobs_stages_hold_the_layers_the_layout_priced():
    """4 layers on 2 ranks of 3 chunks, the embedding and the loss as layers: the first chunk
    holds the embedding alone and the last the norm and output alone (tests/project/test_modes.py
    trains this layout to a single process's losses)."""
    from jobs.config import JobConfig
    from jobs.model import ModelArgs, Transformer
    from jobs.pipeline import split_stage
    from jobs.trainer import Infeasible, check_feasible

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
    # first_last: 5 layers on 3 stages are 2 + 2 + 1 (the same stage split, whose chunks of
    # 0 to 2 layers tests/project/test_modes.py trains through the embedding_loss case above)
    uneven = JobConfig(model=ModelArgs(num_layers=5), dp=1, pp=3, grad_accum_steps=4,
                       pipeline_split="first_last")
    check_feasible(uneven, 3)
    stages = [split_stage(Transformer(uneven.model), s, 3, layer_chunks(5, 3, 1, "first_last"))
              for s in range(3)]
    assert [sorted(c.layers) for c in stages] == [["0", "1"], ["2", "3"], ["4"]]


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


# --- first_last: DeepSeek-V3's 61 layers -----------------------------------------------------

PARSE_SPLIT = """
import json, sys, typing, warnings, argparse
warnings.filterwarnings("ignore")
if not hasattr(typing, "override"):
    import typing_extensions
    typing.override = typing_extensions.override
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
keys = ("num_layers", "pipeline_model_parallel_size", "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers")
print(json.dumps([{k: getattr(parser.parse_args(a), k) for k in keys}
                  for a in json.loads(sys.argv[1])]))
"""


def test_deepseek_v3s_61_layers_split_as_megatron_lm_builds_them(generated):  # noqa: F811
    """The example's layout renders Megatron-LM's first and last stage layers; Megatron-LM's
    own parser reads them, and megatron-core, given what it read (argument_utils.py maps the
    flags to num_layers_in_first/last_pipeline_stage), builds the layers ParaTune priced."""
    import torch
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig
    from test_moe_trainers import parsed_in_child

    spec = load_spec(EXAMPLES / "deepseek-v3.yaml")
    config = spec.search_space().candidates()[0]
    assert spec.model.num_layers == 61 and config.pipeline_split == "first_last"
    args = megatron_args("megatron-lm", spec, config)
    assert problems(args, {**MEGATRON_LM_FLAGS, **generated}) == []
    (parsed,) = parsed_in_child(PARSE_SPLIT, [args])
    assert (parsed["decoder_first_pipeline_num_layers"],
            parsed["decoder_last_pipeline_num_layers"]) == (3, 2)
    built = TransformerConfig(
        num_layers=parsed["num_layers"], hidden_size=64, num_attention_heads=4,
        pipeline_model_parallel_size=parsed["pipeline_model_parallel_size"],
        pipeline_dtype=torch.float32,
        num_layers_in_first_pipeline_stage=parsed["decoder_first_pipeline_num_layers"],
        num_layers_in_last_pipeline_stage=parsed["decoder_last_pipeline_num_layers"])
    assert tuple(get_num_layers_to_build(built, pp_rank=r) for r in range(16)) == \
        config.stage_layers(61) == (3, *[4] * 14, 2)


def test_deepseek_v3s_step_is_its_busiest_stages():
    """Every stage waits on a middle stage's 4 layers: the step of 64 layers split evenly
    (the dense and the MoE layers' FLOPs alike, within 1%), and the TFLOP/s of the 61 run."""
    spec = load_spec(EXAMPLES / "deepseek-v3.yaml", ["space.activation_checkpointing=[none]"])
    stand_in = load_spec(EXAMPLES / "deepseek-v3.yaml", [
        "model.num_layers=64", "space.pipeline_split=[even]",
        "space.activation_checkpointing=[none]"])
    real = cost_model_for(spec).estimate(spec.search_space().candidates()[0])
    padded = cost_model_for(stand_in).estimate(stand_in.search_space().candidates()[0])
    assert real.step_time_s == pytest.approx(padded.step_time_s, rel=1e-2)
    assert real.tflops_per_gpu == pytest.approx(padded.tflops_per_gpu * 61 / 64, rel=1e-2)


@pytest.mark.parametrize("trainer,reason", [
    ("deepspeed", "its pipeline partitions the layers its own way"),
    ("torchtitan", "torchtitan shortens only the first and last model chunks")])
def test_first_last_is_refused_where_the_trainer_cannot_place_it(trainer, reason):
    config = Layout(pp=4, dp=1, grad_accum_steps=8, pp_schedule="interleaved",
                            virtual_stages=2, pipeline_split="first_last")
    spec = _titan_spec(32, pp=[4], pp_schedule=["interleaved"], virtual_stages=[2])
    refused = layout_refusal(trainer, spec, config)
    assert reason in refused and "space.pipeline_split to [" in refused and "\n" not in refused
    assert layout_refusal("megatron-lm", spec, config) is None
    one_chunk = dataclasses.replace(config, pp_schedule="1f1b", virtual_stages=1)
    assert layout_refusal("torchtitan", spec, one_chunk) is None


def test_a_depth_only_first_last_takes_is_refused_with_that_fix():
    with pytest.raises(SpecError, match=r"space.pp: pp=16 does not divide model.num_layers=61; "
                       r"use one of 1, 61, or set space.pipeline_split to \[first_last\]"):
        load_spec(EXAMPLES / "deepseek-v3.yaml", ["space.pipeline_split=[even]"])


def test_first_last_where_it_places_the_layers_as_even_is_one_layout():
    both = "space.pipeline_split=[even, first_last]"
    spec = load_spec(EXAMPLES / "quickstart.yaml", ["space.pp=[2]", both])
    assert {c.pipeline_split for c in spec.search_space().candidates()} == {"even"}
    uneven = load_spec(EXAMPLES / "quickstart.yaml", ["model.num_layers=5", "space.pp=[2]", both])
    assert {c.pipeline_split for c in uneven.search_space().candidates()} == {"first_last"}
    assert Layout(pp=2, dp=2, grad_accum_steps=2,
                          pipeline_split="first_last").key().endswith("-firstlast")


def test_a_command_gets_each_stages_layers(tmp_path):
    from orchestrator.trainers import trainer_for
    from orchestrator.trial.folder import TrialFolder

    spec = spec_from_dict({
        "name": "split-cmd", "model": {"preset": "tiny", "num_layers": 5}, "cluster": "cpu-local",
        "scale": {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 8},
        "space": {"tp": [1], "pp": [2], "micro_batch_size": [1], "zero_stage": [0],
                  "pipeline_split": ["first_last"]},
        "trial": {"trainer": "command", "command": ["train.py", "--stages", "{stage_layers}"]}})
    (config,) = spec.candidates()
    run = trainer_for(spec).run(spec, config, "t1", TrialFolder.of(tmp_path, "t1"), 3)
    assert run.program[1:] == ["--stages", "3,2"]


def test_estimate_names_each_stages_layers(cli):
    code, out, err = cli("estimate", str(EXAMPLES / "deepseek-v3.yaml"))
    assert code == 0, err
    assert "pipeline stages: 3 + 14 × 4 + 2 transformer layers (first_last split)" in out
    code, out, err = cli("estimate", str(EXAMPLES / "deepseek-v3.yaml"), "--json")
    assert json.loads(out)["stage_layers"] == [3, *[4] * 14, 2]
    code, out, _ = cli("estimate", str(EXAMPLES / "quickstart.yaml"), "--pp", "1")
    assert code == 0 and "pipeline stages" not in out
