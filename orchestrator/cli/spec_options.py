"""The spec a `plan` or `estimate` prices: a SPEC file with the preset and layout options given
beside it as overrides, or a spec built from the preset options alone (--model, --cluster,
--gpus, and the batch and sequence length)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from orchestrator.common.errors import UserError
from orchestrator.campaign_spec import (
    CampaignSpec,
    apply_override,
    load_cluster,
    load_spec,
    spec_from_dict,
)


def spec_from_options(
    spec_file: Optional[Path], overrides: list[str], presets: dict[str, Any],
    space: dict[str, Any], kind: str,
) -> CampaignSpec:
    """A SPEC file, or a spec built from preset options; either way every option given and
    every --set applies. `presets`: model, cluster, gpus, global_batch_size, seq_len (None:
    not given); `space`: the layout options given, as space keys."""
    given = {k: v for k, v in presets.items() if v is not None}
    if spec_file is not None:
        if "gpus" in given:
            raise UserError("--gpus: with a SPEC file the world size is its scale; use --set "
                            "scale.nodes=N (and scale.gpus_per_node)")
        return load_spec(spec_file, [*file_options(given, space), *overrides])
    data = options_data(given, space, kind)
    for item in overrides:
        apply_override(data, item, source=f"paratune {kind}")
    return spec_from_dict(data, source=f"paratune {kind}")


def file_options(given: dict[str, Any], space: dict[str, Any]) -> list[str]:
    """The preset and layout options given beside a SPEC file, as its --set overrides."""
    keys = {"model": "model", "cluster": "cluster", "global_batch_size":
            "scale.global_batch_size", "seq_len": "model.seq_len"}
    return [*(f"{keys[k]}={v}" for k, v in given.items()),
            *(f"space.{k}={json.dumps(v)}" for k, v in space.items())]


def options_data(given: dict[str, Any], space: dict[str, Any], kind: str) -> dict[str, Any]:
    """A raw spec from the preset options given (None values dropped): a world of whole
    nodes, a global batch of one sequence a GPU unless given."""
    missing = [f"--{name}" for name in ("model", "cluster", "gpus") if name not in given]
    if missing:
        raise UserError(f"{', '.join(missing)}: required without a SPEC file; e.g. "
                        "--model llama-7b --cluster a100-80g --gpus 64")
    gpus, seq_len = given["gpus"], given.get("seq_len")
    per_node = load_cluster(given["cluster"], "--cluster").gpus_per_node
    if gpus > per_node and gpus % per_node:
        raise UserError(f"--gpus: {gpus} is not whole nodes of {per_node} ({given['cluster']}'s "
                        f"gpus_per_node); give up to {per_node} or a multiple of it")
    nodes = gpus // per_node if gpus > per_node else 1
    data = {
        "name": kind,
        "model": given["model"] if seq_len is None else {"preset": given["model"],
                                                         "seq_len": seq_len},
        "cluster": given["cluster"],
        "scale": {"nodes": nodes, "gpus_per_node": gpus // nodes,
                  "global_batch_size": given.get("global_batch_size", gpus)},
        "space": space,
    }
    return data
