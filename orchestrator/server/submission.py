"""A submitted campaign spec, checked the way `paratune run` checks it, before it is queued.

Every failure is the CLI's own one-line message (the API answers it with HTTP 422). The spec
is pinned to the service's runs directory, and a relative `trial.workdir` is read from the
directory the client submitted from, as `paratune run` would read it there.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from orchestrator.common.errors import SpecError
from orchestrator.spec import CampaignSpec
from orchestrator.spec.loading import apply_override, spec_from_dict
from orchestrator.spec.preflight import preflight
from orchestrator.spec.yaml_input import load_yaml_text

SOURCE = "submitted spec"


def parse_submission(spec_yaml: str, overrides: list[str], runs_dir: Path,
                     workdir: str | None = None) -> CampaignSpec:
    data = load_yaml_text(spec_yaml, SOURCE)
    if not isinstance(data, dict):
        raise SpecError(f"{SOURCE}: expected a mapping of keys (name, model, cluster, ...), "
                        f"got {type(data).__name__}")
    for item in overrides:
        apply_override(data, item, source=SOURCE)
    tracking = data.setdefault("tracking", {})
    if isinstance(tracking, dict):
        tracking["runs_dir"] = str(runs_dir)
    trial = data.get("trial")
    if workdir and (trial is None or isinstance(trial, dict)):
        trial = data.setdefault("trial", {})
        given = trial.get("workdir")
        if given is None or (isinstance(given, str) and not os.path.isabs(given)):
            trial["workdir"] = os.path.normpath(os.path.join(workdir, given or "."))
    spec = spec_from_dict(data, source=SOURCE)
    preflight(spec)
    return spec


def resolved_yaml(spec: CampaignSpec) -> str:
    """The spec as the controller will run it (overrides applied, paths pinned)."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
