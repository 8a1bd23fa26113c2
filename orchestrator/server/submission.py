"""A submitted campaign spec, checked the way `paratune run` checks it, before it is queued.

Every failure is the CLI's own one-line message (the API answers it with HTTP 422). The spec
is pinned to the service's runs directory, and a relative `trial.workdir` is read from the
directory the client submitted from, as `paratune run` would read it there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from orchestrator.common.errors import SpecError
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.campaign_spec.loading import apply_override, spec_from_dict
from orchestrator.campaign_spec.preflight import preflight
from orchestrator.campaign_spec.unused_values import unused_values
from orchestrator.campaign_spec.yaml_input import MAX_BYTES, load_yaml_text

SOURCE = "submitted spec"


def read_submission(spec_yaml: str, overrides: list[str]) -> dict[str, Any]:
    """The submitted YAML with its overrides applied, not yet validated (nothing read from
    the files it names), so what it asks for can be weighed first."""
    data = load_yaml_text(spec_yaml, SOURCE)
    if not isinstance(data, dict):
        raise SpecError(f"{SOURCE}: expected a mapping of keys (name, model, cluster, ...), "
                        f"got {type(data).__name__}")
    for item in overrides:
        apply_override(data, item, source=SOURCE)
    return data


def parse_submission(data: dict[str, Any], runs_dir: Path, workdir: str | None = None,
                     *, pinned_workdir: Path | None = None,
                     notes: list[str] | None = None) -> CampaignSpec:
    """The campaign spec, pinned to the service's runs directory; `pinned_workdir`, for users
    who may not choose one, is where its trials run. `notes` collects what `paratune run`
    would note about the space (values no layout takes)."""
    tracking = data.setdefault("tracking", {})
    if isinstance(tracking, dict):
        tracking["runs_dir"] = str(runs_dir)
    trial = data.get("trial")  # one given as null or not a mapping is refused by the spec
    if pinned_workdir is not None and ("trial" not in data or isinstance(trial, dict)):
        data.setdefault("trial", {})["workdir"] = str(pinned_workdir)
    elif workdir and ("trial" not in data or isinstance(trial, dict)):
        trial = data.setdefault("trial", {})
        given = trial.get("workdir")
        if given is None or (isinstance(given, str) and not os.path.isabs(given)):
            trial["workdir"] = os.path.normpath(os.path.join(workdir, given or "."))
    spec = spec_from_dict(data, source=SOURCE)
    candidates = preflight(spec)
    if notes is not None:
        notes += unused_values(spec, candidates)
    check_resolved(spec)
    return spec


def check_resolved(spec: CampaignSpec) -> None:
    """What the controller will read is bounded as a spec a user writes."""
    resolved = resolved_yaml(spec)
    if len(resolved.encode()) > MAX_BYTES:
        raise SpecError(f"{SOURCE}: larger than {MAX_BYTES // 1024} KiB once resolved; a "
                        "campaign spec is a few KB: shorten its values")
    load_yaml_text(resolved, SOURCE)


def resolved_yaml(spec: CampaignSpec) -> str:
    """The spec as the controller will run it (overrides applied, paths pinned), unset fields
    left out (a list space's layouts name a few each) so that it stays within the limits of a
    spec a user writes."""
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)
