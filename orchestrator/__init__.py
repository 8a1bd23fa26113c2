"""ParaTune: tune the parallelism and sharding of LLM training with real trials.

The flow, one folder a stage: spec -> space -> search -> costmodel -> scheduling -> trial ->
backends -> trainers -> result -> record -> tracking -> export (and dashboards/ for the
report); cli and server sit on top, common holds the shared leaf helpers. ARCHITECTURE in the
README says which stage may import which.
"""

from orchestrator.common.legacy_paths import install as _install_legacy_paths

__version__ = "0.1.0"

_install_legacy_paths()
