"""The trial job's settings: a JSON (or YAML) file from the orchestrator, command-line flags, or
both (flags win). Exported launch files use the flags, so a winner reruns without ParaTune.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.model import ModelArgs
from orchestrator.layout import ParallelDims, knobs, layout_problems, with_knob_fields


@dataclass
@with_knob_fields
class JobConfig:
    """One trial's settings: a field per layout knob (orchestrator/layout/), the AMSP
    factors when a campaign sets them, then the model and the run."""

    model: ModelArgs = field(default_factory=ModelArgs)
    # AMSP factors (s0p, s1p, s0g, s1g, s0os, s1os), when a campaign sets them explicitly.
    s0p: int | None = None
    s1p: int | None = None
    s0g: int | None = None
    s1g: int | None = None
    s0os: int | None = None
    s1os: int | None = None
    # ZeRO++ secondary weight shard (FSDP2 reshard_after_forward=<int>).
    secondary: int | None = None
    # On CPU the job stops with `oom` once a rank's RSS passes this; on GPU it caps the
    # allocator (torch.cuda.set_per_process_memory_fraction).
    memory_limit_gb: float | None = None
    steps: int = 10
    warmup_steps: int = 2
    seed: int = 1234
    lr: float = 3e-4
    peak_tflops: float = 0.0
    result_file: str | None = None
    trial_id: str | None = None

    @property
    def global_batch_size(self) -> int:
        return self.dims.samples_per_step(self.micro_batch_size, self.grad_accum_steps)

    @property
    def dims(self) -> ParallelDims:
        """The layout's sizes: world, gradient group, expert groups, mesh order."""
        return ParallelDims.of(self)

    def layout_problem(self) -> str | None:
        """The layout schema's first reason these settings are no layout (a value outside a
        knob's values, a broken rule, one that sees the model's shape), or None: the same
        rules the spec and the search space apply, before the job's own."""
        problems = layout_problems({k.name: getattr(self, k.name) for k in knobs()}, self.model)
        return problems[0] if problems else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelArgs)}
_JOB_FIELDS = {f.name: f for f in dataclasses.fields(JobConfig) if f.name != "model"}


def _read_file(path: str) -> dict[str, Any]:
    text = Path(path).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        import yaml  # only needed for hand-written YAML configs

        return yaml.safe_load(text)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.train", description="Train a LLaMA-style model and report its speed."
    )
    parser.add_argument("--config", help="JSON or YAML file with these settings (flags win)")
    for fields in (_MODEL_FIELDS, _JOB_FIELDS):
        for name, f in fields.items():
            type_name = str(f.type).split(" |")[0]  # "int | None" -> "int"
            kind = {"int": int, "float": float}.get(type_name, str)
            if type_name == "bool":
                parser.add_argument(_flag(name), type=lambda v: v.lower() in ("1", "true", "yes"))
            else:
                parser.add_argument(_flag(name), type=kind)
    return parser


def parse_config(argv: list[str] | None = None) -> JobConfig:
    args = vars(_parser().parse_args(argv))
    data: dict[str, Any] = _read_file(args.pop("config")) if args.get("config") else {}
    model_data = dict(data.pop("model", {}) or {})
    model_data.update({k: v for k, v in args.items() if k in _MODEL_FIELDS and v is not None})
    data.update({k: v for k, v in args.items() if k in _JOB_FIELDS and v is not None})
    data = {k: v for k, v in data.items() if k in _JOB_FIELDS}
    model = ModelArgs(**{k: v for k, v in model_data.items() if k in _MODEL_FIELDS})
    config = JobConfig(model=model, **data)
    config.result_file = config.result_file or os.environ.get("PARATUNE_RESULT_FILE")
    return config
