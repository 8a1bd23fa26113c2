"""`Knob`: one layout knob's declaration (type, default, values, default range, the rule it
adds), and the bounds every knob's values keep to."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Bounds far beyond any real run, so absurd sizes are errors rather than hours of enumeration.
MAX_FACTOR = 65_536  # parallel degrees, micro-batch size, virtual stages, layer counts
MAX_COUNT = 10_000_000  # accumulation steps

Values = Mapping[str, Any]  # one layout's knob values, by name
Ranges = Any  # the search space's ranges (space/ranges.py), one tuple per searched knob


@dataclass(frozen=True)
class Knob:
    """One layout knob.

    `kind` is int, bool or str; `nullable` makes None a value (`none_means` says which).
    `space` is the spec's default range; None marks a knob that follows from others (dp and
    the accumulation steps follow from the world size and the global batch) and is never
    searched. `rule` returns why a layout breaks the rule this knob adds, or None; `fits`
    likewise for a rule that also sees the model's shape (an object with its sizes: seq_len,
    num_heads, ...);
    `redundant` says when the space skips a combination (the knob means nothing there, or
    breaks its rule); `active_when` names the knob whose value decides whether this one
    matters, for searchers with conditional dimensions; `key` is its part of a layout's
    short name (by default `-<name><value>` when not at its default).
    """

    name: str
    kind: type
    default: Any
    doc: str
    choices: tuple = ()
    nullable: bool = False
    none_means: str = ""
    maximum: int = MAX_FACTOR
    space: tuple | None = None
    range_words: tuple[str, ...] = ()  # words a range may hold besides values ("fit")
    rule: Callable[[Values], str | None] | None = None
    redundant: Callable[[Values, Ranges], bool] | None = None
    active_when: tuple[str, Callable[[Any], bool]] | None = None
    key: Callable[[Values], str] | None = None
    fits: Callable[[Values, Any], str | None] | None = None

    @property
    def searched(self) -> bool:
        return self.space is not None

    @property
    def ordinal(self) -> bool:
        """Values with a distance between them (degrees, sizes), not categories."""
        return self.kind is int and not self.nullable and not self.choices

    @property
    def annotation(self) -> str:
        """The field's type as the dataclasses built from this schema declare it."""
        return self.kind.__name__ + (" | None" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        """Why `value` is not one of this knob's values, or None."""
        if value is None and self.nullable:
            return None
        if self.choices:
            if value in self.choices and isinstance(value, bool) == (self.kind is bool):
                return None
            return f"{self.name}({value!r}) must be one of {', '.join(map(str, self.choices))}"
        if self.kind is int and (not isinstance(value, int) or isinstance(value, bool)
                                 or value < 1):
            null = f", or null {self.none_means}" if self.nullable else ""
            return f"{self.name}({value!r}) must be a positive integer{null}"
        return None

    def parse(self, text: str) -> Any:
        """A value back from its text (MLflow params, flags)."""
        if self.nullable and text in ("None", "", "null"):
            return None
        if self.kind is bool:
            return text.lower() in ("true", "1", "yes")
        return self.kind(text)

    def key_part(self, values: Values) -> str:
        if self.key is not None:
            return self.key(values)
        value = values[self.name]
        if value == self.default:
            return ""
        return f"-{self.name}" if value is True else f"-{self.name}{value}"
