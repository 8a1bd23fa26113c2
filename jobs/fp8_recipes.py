"""The layout schema's precision values the built-in trainer runs, and torchao's Float8Linear
recipe name for each: read by the trial job (precision.py) and by the trainer's capabilities
(orchestrator/trainers/builtin/capabilities.py), so both name the same recipes. Standard library
only, so the spec can ask without torch."""

FP8_RECIPES = {"fp8-tensorwise": "tensorwise", "fp8-rowwise": "rowwise"}
