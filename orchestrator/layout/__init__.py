"""The layout schema: the layout knobs, each declared once (its type, default, allowed values,
default search range and the rule it adds to a layout), and `ParallelDims`, the one object
that derives a layout's sizes (world, model-parallel ranks, gradient group, expert groups, the
sequence divisor, the rank order).

Standard library only, so the trial job (jobs/) imports it beside the result schema. Everything
that lists the knobs derives from here: `Layout` and the job's `JobConfig` (fields and
flags), the search space's ranges and enumeration, the spec's `space` section and list entries,
the searchers' encodings, the journal and MLflow params. What gives a knob meaning lives where
it belongs: its memory and time in the cost model, its mechanics in jobs/, its flags in each
trainer adapter. Adding a knob is one `Knob(...)` in catalog.py (or `declare(knob)` before the
rest of ParaTune is imported) plus the code that gives it meaning.

knob.py: the `Knob` declaration; choices.py: the categorical knobs' values; dims.py:
`ParallelDims`; rules.py: the rules knobs add; catalog.py: the declared knobs, a layout's
problems and key; fields.py: dataclass fields from the schema.
"""

from __future__ import annotations

from orchestrator.layout.catalog import declare, knobs, layout_key, layout_problems, searched_knobs
from orchestrator.layout.choices import (
    CHECKPOINT_MODES,
    CP_COMM_TYPES,
    OFFLOADS,
    PIPELINE_SPLITS,
    PP_SCHEDULES,
    PRECISIONS,
    SHARDING_FACTORS,
)
from orchestrator.layout.dims import RANK_ORDER, ParallelDims
from orchestrator.layout.fields import add_fields, with_knob_fields
from orchestrator.layout.knob import MAX_COUNT, MAX_FACTOR, Knob, Ranges, Values
from orchestrator.layout.rules import expert_tp

__all__ = [
    "CHECKPOINT_MODES", "CP_COMM_TYPES", "MAX_COUNT", "MAX_FACTOR", "OFFLOADS", "PIPELINE_SPLITS",
    "PP_SCHEDULES", "PRECISIONS", "RANK_ORDER", "SHARDING_FACTORS", "Knob", "ParallelDims",
    "Ranges", "Values", "add_fields", "declare", "expert_tp", "knobs", "layout_key",
    "layout_problems", "searched_knobs", "with_knob_fields",
]
