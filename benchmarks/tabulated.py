"""A recorded sweep replayed as a landscape: what a real trial of each layout measured, drawn
again per trial, as Syne Tune's blackbox repository replays tabulated benchmarks.

A table (benchmarks/measure_landscape.py writes one) lists each layout's repeated
measurements. A trial of a layout answers with one of them, drawn by the run's seed and the
trial (the table's own run-to-run noise), or with their mean (`noisy=False`); a layout that
failed or ran out of memory in the table does so again. A layout measured again in one run
draws among the measurements it has not yet returned, while there are any: a real re-run
never reproduces an earlier one's figure to the digit, which a draw with replacement from
three recordings would do a third of the time, and a searcher would read as a noiseless
machine. The truth of a layout is the mean of
its measurements, and the searchers see the cost model of the table's spec, which wrote none
of them.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from orchestrator.result import TrialResult
from orchestrator.space import Layout
from orchestrator.campaign_spec import load_spec
from orchestrator.campaign_spec.planning import cost_model_for

ROOT = Path(__file__).resolve().parents[1]


class TabulatedLandscape:
    def __init__(self, path: Path, seed: int, noisy: bool = True):
        data = json.loads(Path(path).read_text())
        self.name = data["name"]
        self.spec = load_spec(ROOT / data["spec"], data["overrides"])
        self.cost = cost_model_for(self.spec)
        self.seed, self.noisy = seed, noisy
        self._returned: dict[Layout, set[int]] = {}  # measurements drawn so far
        self.rows = {Layout.from_dict(row["config"]): row for row in data["layouts"]}
        self.candidates = list(self.rows)
        self.truth = {config: statistics.mean(self.measured(config))
                      for config in self.candidates if self.measured(config)}

    def measured(self, layout: Layout) -> list[float]:
        row = self.rows[layout]
        return [v for v, s in zip(row["tokens_per_s"], row["status"]) if s == "ok" and v]

    def noise(self) -> float:
        """The table's run-to-run noise: the median relative spread of a layout's repeats."""
        spreads = [statistics.stdev(v) / statistics.mean(v)
                   for v in map(self.measured, self.candidates) if len(v) > 1]
        return statistics.median(spreads) if spreads else 0.0

    def _draw(self, layout: Layout, trial_id: str, count: int) -> int:
        """Which of `count` recorded measurements this trial returns: seeded by the run and
        the trial, among those this run has not yet returned for the layout while any are
        left (a layout's first draw is the same as a draw among all)."""
        returned = self._returned.setdefault(layout, set())
        fresh = [i for i in range(count) if i not in returned] or list(range(count))
        index = random.Random(f"{self.seed}/{trial_id}/{layout.key()}").choice(fresh)
        returned.add(index)
        return index

    def run(self, layout: Layout, trial_id: str) -> TrialResult:
        values = self.measured(layout)
        if not values:
            status = next((s for s in self.rows[layout]["status"] if s != "ok"), "failed")
            return TrialResult(status=status, error=f"{status} in the recorded sweep",
                               world_size=layout.world_size)
        if self.noisy:
            value = values[self._draw(layout, trial_id, len(values))]
        else:
            value = statistics.mean(values)
        tokens_per_step = layout.global_batch_size() * self.spec.model.seq_len
        return TrialResult(status="ok", tokens_per_s=value, world_size=layout.world_size,
                           step_time_s=tokens_per_step / value)
