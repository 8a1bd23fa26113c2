"""Layouts and ranges a trainer cannot run, refused before any trial in one line that names the
field and the fix, each rule the trainer's own (orchestrator/trainers/<tool>/capabilities.py,
asked through the registry): the spec only asks.

Two kinds of rule. What a trainer cannot take at all (a model feature, a range, its model
config) is refused as the spec is read (`check_trainer_space`, the adapter's `check_spec`,
which may also narrow a range the spec left at its default to the values the trainer runs).
What depends on one layout's values is applied to the candidates (`layout_refusal`, the
adapter's): the space keeps the layouts the trainer runs and says why it dropped the others,
and the adapters check the same rule before they render a layout.
"""

from __future__ import annotations

from orchestrator.common.errors import SpecError


def check_trainer_space(spec) -> None:
    """Refuse, as a spec's ValueError, a model or a range the spec's trainer cannot run."""
    from orchestrator.trainers.registry import trainer_for  # the adapters read the spec

    problems = trainer_for(spec).check_spec(spec)
    if problems:
        raise ValueError("\n".join(problems))


def layout_refusal(trainer: str | None, spec, layout) -> str | None:
    """Why `trainer` cannot run this layout of the spec, or None: its mixture-of-experts,
    context-parallel, precision, offload, overlap, bucket and pipeline-split rules."""
    from orchestrator.trainers.registry import adapter

    return adapter(trainer).layout_refusal(spec, layout)


def runnable(spec, configs: list, refused: list[str] | None = None) -> list:
    """The layouts of `configs` the spec's trainer can run; why each other was dropped goes to
    `refused`. None left of some is a SpecError with the first reason. A plan that names no
    trainer (`spec.trainer_rules` False) keeps them all."""
    if not getattr(spec, "trainer_rules", True):
        return list(configs)
    kept, reasons = [], []
    for config in configs:
        reason = layout_refusal(spec.trial.trainer, spec, config)
        if reason:
            reasons.append(reason)
        else:
            kept.append(config)
    if refused is not None:
        refused += reasons
    if configs and not kept:
        raise SpecError(f"{spec.name}: the search space holds no layout trainer "
                        f"{spec.trial.trainer} can run: {reasons[0]}")
    return kept


def check_listed(spec, configs: list) -> None:
    """`space.kind: list` names each layout: one the trainer cannot run is the spec's error."""
    for index, config in enumerate(configs):
        reason = layout_refusal(spec.trial.trainer, spec, config)
        if reason:
            raise ValueError(f"space.configs[{index}]: {reason}")
