"""DeepHyper, Optuna and HyperOpt learn from the layouts that ran: a suggestion mapped to
another layout is not told that layout's value, an invalid one is told as such, and a
resumed campaign's journal reaches each library before its next suggestion."""

from __future__ import annotations

import pytest

from orchestrator.common.objective import Objective
from orchestrator.record.best import finish_order
from orchestrator.record.journal import Journal, TrialRecord
from orchestrator.result import TrialResult
from orchestrator.scheduling.loop import teaches_searcher
from orchestrator.search import make_searcher
from orchestrator.space import ParallelConfig

PEERS = ["deephyper-cbo", "optuna", "hyperopt"]


def layout(zero: int, micro: int) -> ParallelConfig:
    return ParallelConfig(dp=2, zero_stage=zero, micro_batch_size=micro,
                          grad_accum_steps=4 // micro)


# A diagonal of the 4 x 3 knob grid: two suggestions in three are no valid layout.
DIAGONAL = [layout(0, 1), layout(1, 2), layout(2, 4), layout(3, 1)]
FULL = [layout(z, m) for z in range(4) for m in (1, 2, 4)]


def gain(config: ParallelConfig) -> float:
    return 10.0 + FULL.index(config)


def searcher_for(algorithm: str, candidates: list[ParallelConfig]):
    if algorithm == "deephyper-cbo":
        from orchestrator.search.deephyper_cbo import DeepHyperCBOSearcher

        return DeepHyperCBOSearcher(candidates, Objective(), seed=0, n_initial_points=3)
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

        return [(space.key(searcher._point(t.params)),
                 t.value if t.state == optuna.trial.TrialState.COMPLETE else None)
                for t in searcher.searcher._ot_study.trials if t.state.is_finished()]
    trials = searcher.searcher.get_state()["hyperopt_trials"]  # failures drop out of .trials
    return [(space.key(searcher._point({k: v[0] for k, v in doc["misc"]["vals"].items()})),
             -doc["result"]["loss"] if doc["result"]["status"] == "ok" else None)
            for doc in trials._dynamic_trials if doc["result"]["status"] in ("ok", "fail")]


def key(searcher, config: ParallelConfig) -> tuple:
    return searcher.space.key(searcher.space.point(config))


@pytest.mark.parametrize("algorithm", PEERS)
def test_a_mapped_suggestion_teaches_the_layout_that_ran(algorithm):
    searcher = searcher_for(algorithm, DIAGONAL)
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
