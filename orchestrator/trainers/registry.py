"""Which trainers `trial.trainer` can name, and the adapter of each: the one place that maps a
trainer's name to its code, so no stage branches on a trainer's name.

A trainer is one folder, `orchestrator/trainers/<tool>/`, holding a `TrainerAdapter` subclass
(base.py) whose hooks declare everything about it. It registers with ONE line, an entry of
`TRAINERS` below naming where its adapter class lives:

    "my-trainer": "orchestrator.trainers.my_trainer.adapter:MyTrainer",

The class is imported the first time its trainer is asked for, so the spec (which the adapters
read) can ask the registry without an import cycle. A plugin outside this package, or a test,
registers at run time instead: `register("my-trainer", MyTrainer)` (a class or a
"module:Class" path); the spec accepts the name from then on. A folder that reads a `trial`
section of its own holds it in its section.py (`SECTION`, a trainers/section.py
`TrainerSection`); the spec's `trial` is built from the sections registered when it is read.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from orchestrator.costmodel.zero_engine import ZeroEngine
from orchestrator.trainers.base import TrainerAdapter

DEFAULT = "builtin"  # `trial.trainer` when the spec gives neither it nor a `trial.command`

TRAINERS: dict[str, str | type[TrainerAdapter]] = {
    "builtin": "orchestrator.trainers.builtin:BuiltinTrainer",
    "deepspeed": "orchestrator.trainers.deepspeed:DeepSpeedTrainer",
    "torchtitan": "orchestrator.trainers.torchtitan:TorchtitanTrainer",
    "megatron-lm": "orchestrator.trainers.megatron:MegatronLMTrainer",
    "megatron-deepspeed": "orchestrator.trainers.megatron:MegatronDeepSpeedTrainer",
    "megatron-bridge": "orchestrator.trainers.megatron_bridge.adapter:MegatronBridgeTrainer",
    "command": "orchestrator.trainers.command:CommandTrainer",
}


def register(name: str, adapter: str | type[TrainerAdapter]) -> None:
    """Make `name` a trainer the spec accepts, run by `adapter` (a class or "module:Class").
    A trainer whose folder brings a section of its own registers before the spec is read:
    the spec's `trial` is built from the sections registered by then."""
    trial = sys.modules.get("orchestrator.campaign_spec.trial")
    folder = _folder_of(adapter)
    if trial is not None and folder is not None:
        section = getattr(importlib.import_module(f"{folder}.section"), "SECTION", None)
        if section is not None and section.trial_key not in trial.TrialSpec.model_fields:
            raise ValueError(f"trainer {name!r}: its section trial.{section.trial_key} must be "
                             "registered before the spec is read (register it first)")
    TRAINERS[name] = adapter


def unregister(name: str) -> None:
    """Forget a trainer registered at run time (a test's)."""
    TRAINERS.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered trainer's name, the built-in ones first."""
    return tuple(TRAINERS)


def adapter_class(name: str | None) -> type[TrainerAdapter]:
    """The adapter class of trainer `name` (None: the default)."""
    name = name or DEFAULT
    if name not in TRAINERS:
        raise ValueError(f"trial.trainer {name!r} is not a registered trainer; choose one of "
                         f"{', '.join(TRAINERS)}")
    entry = TRAINERS[name]
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = getattr(importlib.import_module(module), attribute)
        TRAINERS[name] = entry
    return entry


def adapter(name: str | None) -> TrainerAdapter:
    """Trainer `name`'s adapter as the spec does not shape it (for its capabilities)."""
    return adapter_class(name)()


def runtimes() -> dict[str, ZeroEngine]:
    """The runtimes `trial.runtime` may name for a `command` program, by that name."""
    found = {}
    for name in TRAINERS:
        cls = adapter_class(name)
        if cls.runtime_name is not None:
            found.setdefault(cls.runtime_name, cls.runtime)
    return found


def sections() -> dict[str, type]:
    """Every registered trainer folder's own `trial` section (its section.py's `SECTION`), by
    the key it sits under; two trainers of one folder share theirs. Only the section modules
    are imported, not the adapters (which read the spec these sections make up)."""
    found: dict[str, type] = {}
    for entry in TRAINERS.values():
        section = _section_of(entry)
        if section is not None:
            found.setdefault(section.trial_key, section)
    return found


def _section_of(entry: str | type[TrainerAdapter]) -> type | None:
    """The section a trainer's folder declares (its section.py's `SECTION`), or None."""
    folder = _folder_of(entry)
    if folder is None:
        return None
    return getattr(importlib.import_module(f"{folder}.section"), "SECTION", None)


def _folder_of(entry: str | type[TrainerAdapter]) -> str | None:
    """The package of a trainer's folder when it holds a section.py, else None."""
    module = entry.partition(":")[0] if isinstance(entry, str) else entry.__module__
    try:
        found = importlib.util.find_spec(module)
        is_package = bool(found and found.submodule_search_locations)
        package = module if is_package else module.rpartition(".")[0]
        found = importlib.util.find_spec(package) if found and package else None
    except ValueError:  # a module loaded without a spec (__main__): no folder to read
        return None
    locations = (found.submodule_search_locations if found else None) or []
    has_section = any((Path(place) / "section.py").is_file() for place in locations)
    return package if has_section else None


def readers_of(key: str) -> tuple[str, ...]:
    """The trainers that read `trial` key `key`: those whose folder's section sits under it,
    and those whose `trial_keys` name it (a command's program, its regexes and runtime)."""
    def reads(name: str) -> bool:
        section = _section_of(TRAINERS[name])
        return key in adapter_class(name).trial_keys or (
            section is not None and section.trial_key == key)

    return tuple(name for name in TRAINERS if reads(name))


def trainer_for(spec) -> TrainerAdapter:
    """The adapter that runs the trials of a spec's `trial.trainer`."""
    return adapter_class(spec.trial.trainer).for_spec(spec)
