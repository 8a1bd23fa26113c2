"""Spec keys that ask for a feature ParaTune does not model yet, each with the feature's name.

Such a key is refused as any key the spec does not know, but "unknown key" reads like a typo;
the user asked for something real, so the error names the feature. This table is the one
place that lists them: a feature that lands takes its keys out.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

# A glob over the key path as a user writes it; a `space.configs[N]` entry's key reads as the
# same key of `space`.
NOT_SUPPORTED_YET: dict[str, str] = {
    "model.num_experts": "mixture of experts",
    "model.moe_*": "mixture of experts",
    "model.top_k": "mixture of experts",
    "model.experts_*": "mixture of experts",
    "model.num_experts_per_tok": "mixture of experts",
    "space.ep": "expert parallelism",
    "space.expert_parallel*": "expert parallelism",
    "space.cp": "context parallelism",
    "space.context_parallel*": "context parallelism",
    "space.precision": "choosing the training precision",
    "trial.precision": "choosing the training precision",
    "*fp8*": "FP8 training",
    "space.offload*": "offloading to CPU memory",
    "trial.offload*": "offloading to CPU memory",
    "*.offload_optimizer": "offloading to CPU memory",
    "*.offload_param*": "offloading to CPU memory",
}

_INDEX = re.compile(r"\[\d+\]$")


def unsupported_feature(path: list[str]) -> str | None:
    """The feature a key path asks for that ParaTune does not have yet, or None."""
    parts = [_INDEX.sub("", part) for part in path]
    if parts[:2] == ["space", "configs"]:
        parts = ["space", *parts[2:]]
    key = ".".join(parts).lower()
    return next((feature for pattern, feature in NOT_SUPPORTED_YET.items()
                 if fnmatchcase(key, pattern)), None)
