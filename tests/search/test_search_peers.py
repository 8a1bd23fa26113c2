"""DeepHyper, Optuna and HyperOpt learn from the layouts that ran: a suggestion mapped to
another layout is not told that layout's value, an invalid one is told as such, and a
resumed campaign's journal reaches each library before its next suggestion. Optuna suggests
only valid layouts (define-by-run), and DeepHyper's forbidden clauses keep most invalid ones
out of its suggestions."""

from __future__ import annotations

from functools import partial

import pytest
from builders import layout

from orchestrator.common.objective import Objective
from orchestrator.record.best import finish_order
from orchestrator.record.journal import Journal, TrialRecord
from orchestrator.result import TrialResult
from orchestrator.scheduling.loop import teaches_searcher
from orchestrator.search import make_searcher
from orchestrator.space import Layout

PEERS = ["deephyper-cbo", "optuna", "hyperopt"]


# Two ranks of data parallelism over a global batch of 8 sequences: only the knobs below vary.
peer_layout = partial(layout, tp=1, dp=2, batch=8)
# A diagonal of the 4 x 3 knob grid: two suggestions in three are no valid layout.
DIAGONAL = [peer_layout(zero_stage=z, micro_batch_size=m)
            for z, m in ((0, 1), (1, 2), (2, 4), (3, 1))]
FULL = [peer_layout(zero_stage=z, micro_batch_size=m) for z in range(4) for m in (1, 2, 4)]
# The diagonal with checkpointing free: two points of the 36 in three are no valid layout,
# each for a pair of values (ZeRO stage, micro-batch) that no layout has.
SPARSE = [peer_layout(zero_stage=z, micro_batch_size=m, activation_checkpointing=ac)
          for z, m in ((0, 1), (1, 2), (2, 4), (3, 1)) for ac in ("none", "selective", "full")]
# Each ZeRO stage with some of the micro-batches: a define-by-run sampler choosing the stage
# first is then offered two micro-batches of three, or one.
BAND = [peer_layout(zero_stage=z, micro_batch_size=m, activation_checkpointing=ac)
        for z, micro in ((0, (1, 2)), (1, (2, 4)), (2, (1, 4)), (3, (1,)))
        for m in micro for ac in ("none", "full")]
EVERY = list(dict.fromkeys(FULL + SPARSE + BAND))


def gain(layout: Layout) -> float:
    return 10.0 + EVERY.index(layout)


def searcher_for(algorithm: str, candidates: list[Layout], forbid: bool = True):
    if algorithm == "deephyper-cbo":
        from orchestrator.search.deephyper_cbo import DeepHyperCBOSearcher

        return DeepHyperCBOSearcher(candidates, Objective(), seed=0, n_initial_points=3,
                                    forbid=forbid)
    return make_searcher(algorithm, candidates, Objective(), seed=0)


def history(algorithm: str, searcher) -> list[tuple[tuple, float | None]]:
    """The library's own record: (the point's key, the gain it holds; None for a failure)."""
    space = searcher.space
    if algorithm == "deephyper-cbo":
        names = searcher.problem.hyperparameter_names
        opt = searcher.cbo._opt
        return [(space.key(searcher._to_point(dict(zip(names, x)))),
                 None if y == "F" else -y) for x, y in zip(opt.Xi, opt.yi)]
    if algorithm == "optuna":
        import optuna

        return [(space.key(searcher.point_of(t.params)),
                 t.value if t.state == optuna.trial.TrialState.COMPLETE else None)
                for t in searcher.study.trials if t.state.is_finished()]
    trials = searcher.searcher.get_state()["hyperopt_trials"]  # failures drop out of .trials
    return [(space.key(searcher._point({k: v[0] for k, v in doc["misc"]["vals"].items()})),
             -doc["result"]["loss"] if doc["result"]["status"] == "ok" else None)
            for doc in trials._dynamic_trials if doc["result"]["status"] in ("ok", "fail")]


def key(searcher, layout: Layout) -> tuple:
    return searcher.space.key(searcher.space.point(layout))


@pytest.mark.parametrize("algorithm", ["deephyper-cbo", "hyperopt"])
def test_a_mapped_suggestion_teaches_the_layout_that_ran(algorithm):
    """Without forbidden clauses DeepHyper suggests invalid layouts as HyperOpt does, as it
    still may for a rule no clause expresses."""
    searcher = searcher_for(algorithm, DIAGONAL, forbid=False)
    told: dict[tuple, float] = {}
    for _ in range(3):
        for config in searcher.ask(1):
            searcher.tell(config, TrialResult(status="ok", tokens_per_s=gain(config)))
            told[key(searcher, config)] = gain(config)
    seen = history(algorithm, searcher)
    valid = {key(searcher, c) for c in DIAGONAL}
    invalid = [value for point, value in seen if point not in valid]
    assert invalid, "no suggestion was mapped: the test proves nothing"
    # an invalid suggestion is a failure (DeepHyper) or the worst gain (the TPEs), never a
    # value measured on another layout
    assert set(invalid) == ({None} if algorithm == "deephyper-cbo" else {0.0})
    measured = [(point, value) for point, value in seen if point in valid]
    assert set(measured) == set(told.items())


def journal_of_a_campaign(tmp_path) -> Journal:
    journal = Journal(tmp_path / "journal.jsonl")
    for i, (config, result) in enumerate([
            (FULL[4], TrialResult(status="ok", tokens_per_s=gain(FULL[4]))),
            (FULL[0], TrialResult(status="oom", error="out of memory")),
            (FULL[9], TrialResult(status="ok", tokens_per_s=gain(FULL[9]))),
            (FULL[2], None)]):  # still running when the controller died
        record = TrialRecord(f"t{i:04d}", config, handle={"pid": i})
        journal.record_submitted(record)
        if result is not None:
            journal.record_finished(record, result)
    return journal


@pytest.mark.parametrize("algorithm", PEERS)
def test_a_replayed_journal_reaches_the_library_before_its_next_suggestion(tmp_path, algorithm):
    searcher = searcher_for(algorithm, FULL)
    records = list(journal_of_a_campaign(tmp_path).trials().values())
    for record in finish_order(records):  # as the controller's replay tells them
        if teaches_searcher(record):
            searcher.tell(record.config, record.result)
    for record in records:
        if not record.done:
            searcher.running(record.config)
    expected = {(key(searcher, FULL[4]), gain(FULL[4])), (key(searcher, FULL[0]), None),
                (key(searcher, FULL[9]), gain(FULL[9]))}
    assert set(history(algorithm, searcher)) == expected
    asked = searcher.ask(2)
    assert expected <= set(history(algorithm, searcher))
    while batch := searcher.ask(4):  # the rest of the space, the running layout left out
        asked += batch
    assert sorted(asked) == sorted(set(FULL) - {FULL[0], FULL[2], FULL[4], FULL[9]})


def run_out(searcher, candidates: list[Layout]) -> list[Layout]:
    """Ask one at a time until the space is exhausted, telling each layout's gain (the first
    layout asked runs out of memory)."""
    asked: list[Layout] = []
    while batch := searcher.ask(1):
        (config,) = batch
        result = (TrialResult(status="oom", error="out of memory") if not asked
                  else TrialResult(status="ok", tokens_per_s=gain(config)))
        searcher.tell(config, result)
        asked.append(config)
        assert len(asked) <= len(candidates)
    return asked


def test_every_optuna_suggestion_is_a_valid_layout_and_the_study_holds_what_ran():
    searcher = make_searcher("optuna", BAND, Objective(), seed=0)
    asked = run_out(searcher, BAND)
    assert sorted(asked) == sorted(BAND)  # each valid layout once, until none is left
    valid = {key(searcher, c) for c in BAND}
    trials = searcher.study.trials
    assert len(trials) >= len(SPARSE)
    assert all(searcher.point_of(t.params) is not None for t in trials)
    assert {searcher.space.key(searcher.point_of(t.params)) for t in trials} <= valid
    # the later choices were narrowed by the earlier ones, under names of their own
    assert {"micro_batch_size|1/2", "micro_batch_size|2/4"} <= {n for t in trials for n in t.params}
    measured = {(key(searcher, c), None if c == asked[0] else gain(c)) for c in BAND}
    assert set(history("optuna", searcher)) == measured


def invalid_suggestions(forbid: bool, seed: int) -> int:
    from orchestrator.search.deephyper_cbo import DeepHyperCBOSearcher

    searcher = DeepHyperCBOSearcher(SPARSE, Objective(), seed=seed, n_initial_points=4,
                                    forbid=forbid)
    run_out(searcher, SPARSE)
    valid = {key(searcher, c) for c in SPARSE}
    return sum(point not in valid for point, _ in history("deephyper-cbo", searcher))


def test_forbidden_clauses_keep_invalid_layouts_out_of_deephypers_suggestions():
    without = sum(invalid_suggestions(False, seed) for seed in range(3))
    with_clauses = sum(invalid_suggestions(True, seed) for seed in range(3))
    assert without > 0 and with_clauses < without / 2


def test_no_candidate_holds_a_forbidden_combination():
    """On a space with conditional knobs (the schedule when pp > 1, virtual stages with the
    interleaved schedule): the combinations forbidden keep every candidate allowed."""
    from conftest import EXAMPLES

    from orchestrator.search.encoding import KnobSpace
    from orchestrator.campaign_spec import load_spec

    spec = load_spec(EXAMPLES / "frontier-175b.yaml", [
        "space.pp_schedule=[1f1b, interleaved]", "space.virtual_stages=[1, 2]"])
    space = KnobSpace.of(spec.search_space().candidates())
    forbidden = space.forbidden()
    assert any(len(combo) == 3 for combo in forbidden)  # tp, pp and a micro-batch
    for point in space.points():
        held = [c for c in forbidden if all(point[k] == v for k, v in c)]
        assert all(not all(space._matters(k, point) for k, _ in c) for c in held), held
