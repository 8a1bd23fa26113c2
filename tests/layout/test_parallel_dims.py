"""`ParallelDims`, the one object that derives a layout's sizes: each size checked against the
rank grid it describes (ranks numbered tp fastest), for any degrees Hypothesis draws."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.layout import RANK_ORDER, ParallelDims, knobs, layout_problems

degree = st.sampled_from([1, 2, 3, 4, 6, 8])
FAST = settings(max_examples=200, deadline=None, database=None)


@st.composite
def dims(draw) -> ParallelDims:
    return ParallelDims(tp=draw(degree), pp=draw(degree), cp=draw(degree), dp=draw(degree),
                        ep=draw(degree), etp=draw(st.none() | degree),
                        sequence_parallel=draw(st.booleans()))


def ranks_by_coordinate(d: ParallelDims) -> dict[tuple[int, ...], int]:
    """Each rank's (pp, dp, cp, tp) coordinate, numbering the ranks in RANK_ORDER."""
    shape = [{"pp": d.pp, "dp": d.dp, "cp": d.cp, "tp": d.tp}[name] for name in RANK_ORDER]
    return {coord: rank for rank, coord in enumerate(itertools.product(*map(range, shape)))}


def group(d: ParallelDims, ranks: dict, over: set[str], fixed: tuple[int, ...]) -> list[int]:
    """The ranks that differ from `fixed` only along the dims in `over`."""
    keep = [i for i, name in enumerate(RANK_ORDER) if name not in over]
    return sorted(r for c, r in ranks.items() if all(c[i] == fixed[i] for i in keep))


@FAST
@given(dims())
def test_the_world_is_every_rank_of_the_grid(d):
    ranks = ranks_by_coordinate(d)
    assert d.world == len(ranks) == d.dp * d.tp * d.pp * d.cp
    assert d.mesh_shape == tuple(getattr(d, name) for name in RANK_ORDER)
    assert math.prod(d.mesh_shape) == d.world


@FAST
@given(dims())
def test_a_model_copy_and_the_gradient_group_partition_the_world(d):
    ranks = ranks_by_coordinate(d)
    origin = (0,) * len(RANK_ORDER)
    copy = group(d, ranks, {"tp", "pp", "cp"}, origin)  # one data-parallel replica
    assert d.model_parallel == len(copy) == d.tp * d.pp * d.cp
    gradients = group(d, ranks, {"dp", "cp"}, origin)  # ranks holding the same weights
    assert d.gradient_group == len(gradients) == d.dp * d.cp
    assert d.gradient_group * d.tp * d.pp == d.world == d.model_parallel * d.dp


@FAST
@given(dims())
def test_a_groups_span_is_the_window_of_consecutive_ranks_it_reaches(d):
    ranks = ranks_by_coordinate(d)
    for name in RANK_ORDER:
        members = group(d, ranks, {name}, (0,) * len(RANK_ORDER))
        # Dims inside this one are held at 0, so the group ends one inner block short.
        inner = d.span(name) // getattr(d, name)
        assert members[-1] - members[0] + inner == d.span(name)
    assert d.span("tp") == d.tp and d.span("cp") == d.cp * d.tp and d.span("pp") == d.world


@FAST
@given(dims())
def test_the_expert_groups_fold_into_a_stages_ranks(d):
    assert d.stage_ranks == d.tp * d.cp * d.dp == d.world // d.pp
    assert d.expert_tp == (d.tp if d.etp is None else d.etp)
    assert d.expert_group == d.ep * d.expert_tp
    assert d.experts_fit == (d.stage_ranks % (d.ep * d.expert_tp) == 0)
    if d.experts_fit:
        assert d.expert_dp * d.ep * d.expert_tp == d.stage_ranks


@FAST
@given(dims(), st.integers(1, 4096))
def test_a_sequence_length_the_divisor_divides_splits_evenly(d, seq_len):
    divides = seq_len % d.seq_divisor == 0
    # Head-tail: 2 x cp equal chunks (the whole sequence without cp), each split over the tp
    # ranks with sequence parallelism.
    chunks = 2 * d.cp if d.cp > 1 else 1
    shards = d.tp if d.sequence_parallel else 1
    assert divides == (seq_len % chunks == 0 and (seq_len // chunks) % shards == 0)
    assert d.context_chunks == 2 * d.cp


@FAST
@given(st.integers(1, 512), degree, degree, degree)
def test_filling_a_world_gives_dp_the_ranks_left(world, tp, pp, cp):
    filled = ParallelDims.filling(world, tp=tp, pp=pp, cp=cp)
    if world % (tp * pp * cp):
        assert filled is None
    else:
        assert (filled.world, filled.tp, filled.pp, filled.cp) == (world, tp, pp, cp)


def test_the_dims_of_knob_values_and_of_a_config_agree():
    from orchestrator.space import Layout

    config = Layout(tp=2, pp=3, cp=2, dp=4, ep=2, etp=1)
    assert ParallelDims.of(config) == ParallelDims.of(config.knob_values()) == ParallelDims(
        tp=2, pp=3, cp=2, dp=4, ep=2, etp=1)
    assert ParallelDims.of({"tp": 4}) == ParallelDims(tp=4)


class Shape:
    seq_len = 36
    num_heads = 8


def test_a_rule_that_sees_the_models_shape_runs_when_a_model_is_given():
    values = {k.name: k.default for k in knobs()} | {"cp": 4}
    assert layout_problems(values) == []  # the knob values alone break no rule
    assert layout_problems(values, Shape()) == [
        "cp(4) splits a sequence into 2 x cp = 8 chunks: 2 x cp must divide seq_len(36)"]
    assert layout_problems(values | {"cp": 2}, Shape()) == []  # 36 splits into 4 chunks


power = st.sampled_from([1, 2, 4, 8])  # ranks split over nodes evenly only at powers of two


@st.composite
def power_dims(draw) -> ParallelDims:
    return ParallelDims(tp=draw(power), pp=draw(power), cp=draw(power), dp=draw(power),
                        ep=draw(power), etp=draw(st.none() | power))


def expert_groups(d: ParallelDims, name: str) -> list[list[int]]:
    """The ep (or etp) groups of the first stage's ranks: ep x etp consecutive ranks, etp
    fastest (MoE Parallel Folding), repeated expert_dp times."""
    shape = (d.expert_dp, d.ep, d.expert_tp)
    ranks = {c: r for r, c in enumerate(itertools.product(*map(range, shape)))}
    return groups_along(ranks, 1 if name == "ep" else 2)


def groups_along(ranks: dict[tuple[int, ...], int], along: int) -> list[list[int]]:
    """Every group of ranks whose coordinates agree but at index `along`."""
    groups: dict[tuple, list[int]] = {}
    for coord, rank in ranks.items():
        groups.setdefault(coord[:along] + coord[along + 1:], []).append(rank)
    return list(groups.values())


@FAST
@given(power_dims(), st.sampled_from([1, 2, 4, 8, 16, 72]),
       st.sampled_from(["tp", "cp", "dp", "pp", "ep", "etp"]))
def test_a_groups_node_split_is_where_its_ranks_land_on_the_nodes(d, gpus_per_node, name):
    if name in ("ep", "etp"):
        if not d.experts_fit:
            return
        groups = expert_groups(d, name)
    else:
        groups = groups_along(ranks_by_coordinate(d), RANK_ORDER.index(name))
    if gpus_per_node == 72 and any(max(g) >= 72 for g in groups):
        return  # 72 is no power of two: groups past the first node straddle nodes unevenly
    for members in groups:
        nodes = [rank // gpus_per_node for rank in members]
        in_node, spanned = d.node_split(name, gpus_per_node)
        assert in_node == max(nodes.count(n) for n in nodes)
        assert spanned == len(set(nodes))
        assert d.even_node_split(name, gpus_per_node) == (in_node, spanned)


SPLITS = [  # (dims, group, gpus_per_node, node_split, even_node_split), worked by hand
    (ParallelDims(dp=12), "dp", 8, (8, 2), (6, 2)),  # 8 + 4 ranks; evenly 6 + 6
    (ParallelDims(dp=6), "dp", 8, (6, 1), (6, 1)),
    (ParallelDims(dp=3, tp=4), "dp", 8, (2, 2), (1, 3)),  # 4 apart: 2 a node, 2 + 1
    (ParallelDims(cp=3, tp=4), "cp", 8, (2, 2), (1, 3)),
    (ParallelDims(tp=16), "tp", 8, (8, 2), (8, 2)),
    (ParallelDims(tp=2, cp=2, dp=2, pp=4), "pp", 8, (1, 4), (1, 4)),  # stages 8 apart
    (ParallelDims(ep=6, etp=2, dp=12), "ep", 8, (4, 2), (3, 2)),  # 2 apart: 4 a node
    (ParallelDims(ep=4, tp=4), "ep", 8, (2, 2), (2, 2)),  # etp unset: tp's 4
    (ParallelDims(ep=2, etp=16), "etp", 8, (8, 2), (8, 2)),
    (ParallelDims(tp=3), "tp", 72, (3, 1), (3, 1)),
]


def test_node_splits_worked_by_hand():
    for d, name, gpus_per_node, split, even in SPLITS:
        assert d.node_split(name, gpus_per_node) == split, (d, name)
        assert d.even_node_split(name, gpus_per_node) == even, (d, name)


@FAST
@given(dims(), st.integers(1, 96), st.sampled_from(["tp", "cp", "dp", "pp", "ep", "etp"]))
def test_an_even_split_is_the_largest_divisor_the_node_holds(d, gpus_per_node, name):
    size = d.expert_tp if name == "etp" else getattr(d, name)
    most = d.node_split(name, gpus_per_node)[0]
    largest = max(k for k in range(1, size + 1) if size % k == 0 and k <= most)
    assert d.even_node_split(name, gpus_per_node) == (largest, size // largest)


@FAST
@given(dims(), st.integers(1, 8), st.integers(1, 8))
def test_a_step_takes_the_samples_of_every_data_parallel_copy(d, micro_batch_size, accum):
    """The samples a step sees: ranks that share a dp coordinate (a model copy's tp, pp and
    cp ranks) share its samples, and each copy runs `accum` micro-batches."""
    dp_axis = RANK_ORDER.index("dp")
    seen = {(coord[dp_axis], step, i) for coord in ranks_by_coordinate(d)
            for step in range(accum) for i in range(micro_batch_size)}
    assert d.samples_per_step(micro_batch_size, accum) == len(seen)
    assert d.samples_per_micro_batch(micro_batch_size) == len(seen) // accum
    global_batch = len(seen)
    assert global_batch % d.samples_per_micro_batch(micro_batch_size) == 0
    assert global_batch // d.samples_per_micro_batch(micro_batch_size) == accum


@FAST
@given(dims(), st.integers(1, 600))
def test_the_copies_some_ranks_hold_are_the_most_whole_model_copies_that_fit(d, ranks):
    fits = [n for n in range(ranks + 1) if ParallelDims(tp=d.tp, pp=d.pp, cp=d.cp, dp=n).world
            <= ranks]
    assert d.copies_in(ranks) == max(fits)
    assert d.copies_in(d.world) == d.dp == len({c[RANK_ORDER.index("dp")]
                                                for c in ranks_by_coordinate(d)})
