"""Search spaces: the typed `ParallelConfig` and the enumeration of valid candidates."""

from orchestrator.search_spaces.config import CHECKPOINT_MODES, InvalidConfig, ParallelConfig
from orchestrator.search_spaces.space import SearchSpace

__all__ = ["CHECKPOINT_MODES", "InvalidConfig", "ParallelConfig", "SearchSpace"]
