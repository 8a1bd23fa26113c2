"""The campaign spec: one YAML file, validated by pydantic, with `--set a.b=value` overrides.

Every problem becomes one `SpecError` line naming the file, the key path, what was wrong and
what is allowed, so the CLI never shows a traceback for bad input.
"""

from orchestrator.campaign_spec.backends import (
    BACKEND_MODELS,
    BackendSpec,
    LocalBackendSpec,
    RayBackendSpec,
    SimulatedBackendSpec,
    SlurmBackendSpec,
)
from orchestrator.campaign_spec.campaign import CampaignSpec
from orchestrator.campaign_spec.loading import (
    SPEC_FILE,
    apply_override,
    load_campaign_spec,
    load_cluster,
    load_spec,
    spec_from_dict,
)
from orchestrator.campaign_spec.sections import (
    BudgetSpec,
    FidelitySpec,
    ObjectiveSpec,
    ScaleSpec,
    SearchSpec,
    TrackingSpec,
)
from orchestrator.campaign_spec.space_section import SpaceSpec
from orchestrator.campaign_spec.trial import TrialSpec

__all__ = [
    "BACKEND_MODELS", "SPEC_FILE", "BackendSpec", "BudgetSpec", "CampaignSpec",
    "FidelitySpec", "LocalBackendSpec", "ObjectiveSpec", "RayBackendSpec", "ScaleSpec",
    "SearchSpec", "SimulatedBackendSpec", "SlurmBackendSpec", "SpaceSpec", "TrackingSpec",
    "TrialSpec", "apply_override", "load_campaign_spec", "load_cluster", "load_spec", "spec_from_dict",
]
