"""The spec's `space:` section, derived from the layout schema (orchestrator/layout/): a range
per searched knob, and for `kind: list` a layout entry with every knob optional. A knob's values
and bounds come from its declaration, so a new knob reaches the spec with no edit here."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_validator

from orchestrator.layout import Knob, knobs, searched_knobs
from orchestrator.space import SpaceRanges
from orchestrator.campaign_spec.sections import MAX_VALUES, Strict, factor

MAX_COMBINATIONS = 200_000  # the product of the space ranges' lengths


def no_bools(values: Any) -> Any:
    """Literal[0, 1, 2, 3] takes `true` as 1; a ZeRO stage is a number."""
    items = values if isinstance(values, list) else [values]
    if any(isinstance(v, bool) for v in items):
        raise ValueError("a ZeRO stage is a number 0-3, not true/false")
    return values


def _value_type(knob: Knob) -> Any:
    return Literal[knob.choices] if knob.choices else knob.kind


def _numeric_choices(knob: Knob) -> bool:
    return bool(knob.choices) and knob.kind is int


def _values_in_range(knob: Knob):
    """The one message for a wrong entry of a range that mixes numbers, null and words."""
    def check(cls, values: Any) -> Any:
        if not isinstance(values, list):
            return values
        bad = [v for v in values if not (
            (v is None and knob.nullable) or v in knob.range_words
            or (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= knob.maximum))]
        if bad:
            null = f", null ({knob.none_means})" if knob.nullable else ""
            words = "".join(f" or {w!r}" for w in knob.range_words)
            raise ValueError(f"values must be integers from 1 to {knob.maximum}{null}{words}, "
                             f"got {bad[0]!r}")
        return values
    return check


def _positive_sorted(knob: Knob):
    def check(cls, values: list[int]) -> list[int]:
        bad = [v for v in values if v < 1 or v > knob.maximum]
        if bad:
            raise ValueError(f"values must be integers from 1 to {knob.maximum}, got "
                             f"{', '.join(map(str, bad[:5]))}")
        return sorted(set(values))
    return check


def _range_field(knob: Knob) -> tuple[Any, Any]:
    value = _value_type(knob)
    if knob.nullable:
        value = value | None
    if knob.range_words:
        value = value | Literal[knob.range_words]
    return (list[value], Field(default=list(knob.space), min_length=1, max_length=MAX_VALUES))


def _range_validators() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for k in searched_knobs():
        if _numeric_choices(k):
            found[f"_{k.name}_numbers"] = field_validator(k.name, mode="before")(no_bools)
        elif (k.nullable or k.range_words) and k.kind is int:
            found[f"_{k.name}_values"] = field_validator(k.name, mode="before")(
                _values_in_range(k))
        elif k.ordinal:
            found[f"_{k.name}_positive"] = field_validator(k.name)(_positive_sorted(k))
    return found


def _entry_field(knob: Knob) -> tuple[Any, Any]:
    if knob.kind is int and not knob.choices:
        return (int | None, Field(default=None, gt=0, le=knob.maximum))
    return (_value_type(knob) | None, None)


class ShardingEntry(Strict):
    """AMSP's factors of one listed layout (see ShardingFactors)."""

    s0p: int = factor(1)
    s1p: int = factor(1)
    s0g: int = factor(1)
    s1g: int = factor(1)
    s0os: int = factor(1)
    s1os: int = factor(1)
    secondary: int = factor(1)


class _LayoutEntry(Strict):
    """One layout of `space.kind: list`: Layout's fields, each optional."""

    sharding: ShardingEntry | None = None

    def fields(self) -> dict[str, Any]:
        """The fields given, as Layout takes them."""
        return self.model_dump(exclude_none=True)


LayoutEntry = create_model(
    "LayoutEntry", __base__=_LayoutEntry, __module__=__name__, __doc__=_LayoutEntry.__doc__,
    __validators__={f"_{k.name}_numbers": field_validator(k.name, mode="before")(no_bools)
                    for k in knobs() if _numeric_choices(k)},
    **{k.name: _entry_field(k) for k in knobs()})


class _SpaceSpec(Strict):
    """Ranges the search space takes its candidates from; dp follows from world size."""

    # megatron-3d: ZeRO stages; amsp: AMSP's six sharding factors instead of zero_stage;
    # list: exactly the layouts in `configs` (each a mapping of Layout fields).
    kind: Literal["megatron-3d", "amsp", "list"] = "megatron-3d"
    configs: list[LayoutEntry] = Field(default_factory=list, max_length=1_000)

    @model_validator(mode="after")
    def _list_needs_configs(self) -> "_SpaceSpec":
        if (self.kind == "list") != bool(self.configs):
            raise ValueError("space.configs: give configs exactly when space.kind is 'list'")
        combinations = math.prod(len(set(getattr(self, k.name))) for k in searched_knobs())
        if combinations > MAX_COMBINATIONS:
            raise ValueError(f"space: the ranges make {combinations:,} combinations (at most "
                             f"{MAX_COMBINATIONS:,}); narrow tp, pp, micro_batch_size, ...")
        return self

    def ranges(self) -> SpaceRanges:
        """The same ranges as the plain tuples the search space takes."""
        return SpaceRanges(kind=self.kind, configs=tuple(c.fields() for c in self.configs),
                           **{k.name: tuple(getattr(self, k.name)) for k in searched_knobs()})


SpaceSpec = create_model(
    "SpaceSpec", __base__=_SpaceSpec, __module__=__name__, __doc__=_SpaceSpec.__doc__,
    __validators__=_range_validators(), **{k.name: _range_field(k) for k in searched_knobs()})
