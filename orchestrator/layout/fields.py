"""Dataclass fields from the schema: a field per declared knob, typed and defaulted by it, for
`Layout`, the job's `JobConfig` and the search space's ranges."""

from __future__ import annotations

from typing import Any

from orchestrator.layout.catalog import knobs


def add_fields(cls: type, fields: dict[str, tuple[str, Any]], *, ahead: bool) -> type:
    """Give a class about to become a dataclass these (annotation, default) fields, ahead of
    its own or after them; a field it declares itself is an error."""
    own = dict(cls.__dict__.get("__annotations__", {}))
    clash = set(fields) & set(own)
    if clash:
        raise TypeError(f"{cls.__name__} declares schema fields itself: {sorted(clash)}")
    added = {name: annotation for name, (annotation, _) in fields.items()}
    cls.__annotations__ = {**added, **own} if ahead else {**own, **added}
    for name, (_, default) in fields.items():
        setattr(cls, name, default)
    return cls


def with_knob_fields(cls: type) -> type:
    """Class decorator, applied under @dataclass: a field per declared knob, ahead of the
    class's own fields, typed and defaulted by the schema."""
    return add_fields(cls, {k.name: (k.annotation, k.default) for k in knobs()}, ahead=True)
