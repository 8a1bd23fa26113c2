"""What a campaign optimises: one metric and whether more or less of it is better.

`Objective` is the only place that knows max from min. The controller, the campaign view,
halving, reports and every searcher ask it which of two values is better, what a result or a
cost-model estimate scores, and how to order records, so `mode: min` means the same everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

from orchestrator.result import TrialResult

if TYPE_CHECKING:
    from orchestrator.costmodel import Estimate

T = TypeVar("T")


@dataclass(frozen=True)
class Objective:
    metric: str = "tokens_per_s"
    mode: str = "max"

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ValueError(f"objective.mode must be max or min, not {self.mode!r}")

    @classmethod
    def of(cls, section: Any) -> "Objective":
        """From the spec's `objective` section (anything with `metric` and `mode`)."""
        return cls(section.metric, section.mode)

    @property
    def maximise(self) -> bool:
        return self.mode == "max"

    def better(self, a: float | None, b: float | None) -> bool:
        """True if `a` is strictly better than `b`; any value beats None."""
        if a is None:
            return False
        if b is None:
            return True
        return a > b if self.maximise else a < b

    def value(self, result: TrialResult | None) -> float | None:
        """The metric of a successful result, or None (failed, missing or not finite)."""
        if result is None or not result.ok:
            return None
        return result.metric(self.metric)

    def predicted(self, estimate: "Estimate") -> float:
        """The metric the cost model predicts for a layout."""
        if self.metric == "tokens_per_s_per_gpu":
            return estimate.tokens_per_s / estimate.config.world_size
        return float(getattr(estimate, self.metric))

    def gain(self, value: float | None) -> float | None:
        """A positive score that grows as the value gets better: the value itself when
        maximising, its reciprocal when minimising. Searchers that maximise (and model log
        ratios) see this, so they need not know the mode."""
        if value is None or not math.isfinite(value) or value <= 0:
            return None
        return value if self.maximise else 1.0 / value

    @property
    def gain_exponent(self) -> int:
        """The power of a layout's step time that its gain is proportional to: -1 where the gain
        grows as steps get faster (every sensible objective), +1 otherwise. Every metric is a
        rate per step time or the step time itself."""
        per_step = 1 if self.metric == "step_time_s" else -1
        return per_step if self.maximise else -per_step

    def result_gain(self, result: TrialResult | None) -> float | None:
        return self.gain(self.value(result))

    def ranked(self, items: Iterable[T], value_of) -> list[T]:
        """`items` whose value is known, best first."""
        scored = [(value_of(item), item) for item in items]
        scored = [(v, item) for v, item in scored if v is not None]
        scored.sort(key=lambda pair: pair[0], reverse=self.maximise)
        return [item for _, item in scored]

    def best(self, items: Iterable[T], value_of) -> T | None:
        ranked = self.ranked(items, value_of)
        return ranked[0] if ranked else None
