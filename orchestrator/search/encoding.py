"""Knobs of a candidate list, for searchers that think in dimensions rather than in configs.

A model-based searcher proposes a point of the knob grid (one value per knob); not every point
is a valid layout (tp · pp must divide the world, ...), so `nearest` maps a point to the closest
valid candidate not yet taken: ordinal distance on numeric knobs, 0/1 on categorical ones.
`key` and `matching` tell whether a suggestion was a valid layout at all, so a searcher can
teach its library the layout that ran and mark an invalid suggestion as such. `shared` and
`forbidden` let a library that can take conditional choices or forbidden combinations
suggest valid layouts up front.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations, product
from typing import Any

from orchestrator.layout import searched_knobs
from orchestrator.space import Layout

# The searched knobs, zero_stage standing for the whole sharding choice (a ZeRO stage or a set
# of AMSP factors).
KNOBS = tuple("sharding" if k.name == "zero_stage" else k.name for k in searched_knobs())
NUMERIC = {k.name for k in searched_knobs() if k.ordinal}
# Knob -> (the knob deciding whether it matters, and when it does), for conditional searchers.
CONDITIONS = {k.name: k.active_when for k in searched_knobs() if k.active_when}


def knob_values(layout: Layout) -> dict[str, Any]:
    """A config as knob values; `sharding` is the ZeRO stage or the AMSP factors as text."""
    values = layout.knob_values()
    values["sharding"] = (f"amsp{layout.sharding.as_tuple()}" if layout.sharding is not None
                          else f"zero{layout.zero_stage}")
    return {knob: values[knob] for knob in KNOBS}


@dataclass
class KnobSpace:
    candidates: list[Layout]
    values: dict[str, list]  # knob -> its distinct values, sorted; only knobs that vary
    _index: dict[tuple, list[Layout]] | None = field(default=None, repr=False,
                                                              compare=False)
    _points: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, candidates: list[Layout]) -> "KnobSpace":
        seen: dict[str, set] = {k: set() for k in KNOBS}
        for config in candidates:
            for knob, value in knob_values(config).items():
                seen[knob].add(value)
        values = {k: sorted(v, key=str) if k not in NUMERIC else sorted(v)
                  for k, v in seen.items() if len(v) > 1}
        return cls(candidates, values)

    def point(self, layout: Layout) -> dict[str, Any]:
        values = knob_values(layout)
        return {k: values[k] for k in self.values}

    def points(self) -> list[dict[str, Any]]:
        if self._points is None:
            self._points = [self.point(config) for config in self.candidates]
        return self._points

    def shared(self, knob: str, chosen: dict[str, Any]) -> list:
        """The values of `knob` that some candidate shares with the values `chosen` so far, in
        order: choosing knob after knob from these always ends on a valid layout."""
        found = {p[knob] for p in self.points() if all(p[k] == v for k, v in chosen.items())}
        return [value for value in self.values[knob] if value in found]

    def forbidden(self, order: int = 3) -> list[tuple[tuple[str, Any], ...]]:
        """The smallest combinations of values of up to `order` knobs that no candidate has
        (tp 4 with pp 2 in a world of 4; tp, pp and a micro-batch that does not divide the
        global batch): a point holding one is no layout. Only combinations whose knobs all
        matter wherever they hold, so that one never matches a value a library left in a
        moot knob; rules over more knobs are left to `nearest`."""
        seen: set[tuple] = set()  # combinations some candidate has, their knobs all mattering
        for point in self.points():
            active = [k for k in self.values if self._matters(k, point)]
            for size in range(1, order + 1):
                seen.update(tuple((k, point[k]) for k in knobs)
                            for knobs in combinations(active, size))
        found: set[tuple] = set()
        for size in range(1, order + 1):
            for knobs in combinations(self.values, size):
                for values in product(*(self.values[k] for k in knobs)):
                    combo = tuple(zip(knobs, values))
                    if combo not in seen and all(self._surely(k, dict(combo)) for k in knobs) \
                            and not any(part in found for n in range(1, size)
                                        for part in combinations(combo, n)):
                        found.add(combo)
        return sorted(found, key=lambda combo: (len(combo), str(combo)))

    def _surely(self, knob: str, where: dict[str, Any]) -> bool:
        """Whether `knob` matters at every point holding the values `where`."""
        if knob not in CONDITIONS or CONDITIONS[knob][0] not in self.values:
            return True
        parent, when = CONDITIONS[knob]
        if parent in where:
            return when(where[parent]) and self._surely(parent, where)
        return all(when(v) for v in self.values[parent]) and self._surely(parent, where)

    def _matters(self, knob: str, point: dict[str, Any]) -> bool:
        if knob not in CONDITIONS:
            return True
        parent, when = CONDITIONS[knob]
        if parent not in point:  # the parent does not vary: it decided what the child takes
            return True
        return self._matters(parent, point) and when(point[parent])

    def key(self, point: dict[str, Any]) -> tuple:
        """What tells two points apart: the knobs that matter in them. A knob another one makes
        moot (the pipeline schedule without pipelining) is whatever a library left there."""
        return tuple((k, point[k]) for k in self.values if self._matters(k, point))

    def matching(self, point: dict[str, Any]) -> list[Layout]:
        """The candidates a point stands for; none when it is not a valid layout."""
        if self._index is None:
            self._index = {}
            for config in self.candidates:
                self._index.setdefault(self.key(self.point(config)), []).append(config)
        return self._index.get(self.key(point), [])

    def _distance(self, a: dict[str, Any], b: dict[str, Any]) -> float:
        total = 0.0
        for knob, values in self.values.items():
            if knob in NUMERIC:
                total += abs(values.index(a[knob]) - values.index(b[knob]))
            else:
                total += 0.0 if a[knob] == b[knob] else 1.0
        return total

    def nearest(self, point: dict[str, Any], taken: set[Layout]) -> Layout | None:
        best, best_distance = None, float("inf")
        for config in self.candidates:
            if config in taken:
                continue
            distance = self._distance(point, self.point(config))
            if distance < best_distance:
                best, best_distance = config, distance
                if distance == 0:
                    break
        return best
