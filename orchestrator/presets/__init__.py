"""Named models and clusters a spec can refer to (`model: llama-7b`, `cluster: frontier`)."""

from orchestrator.presets.clusters import CLUSTER_PRESETS, PEAK_RANGE_OTHER_END, Cluster
from orchestrator.presets.models import MODEL_PRESETS, ModelShape

__all__ = ["CLUSTER_PRESETS", "MODEL_PRESETS", "PEAK_RANGE_OTHER_END", "Cluster", "ModelShape"]
