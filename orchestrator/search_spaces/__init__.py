"""Search spaces: the typed `ParallelConfig` and the enumeration of valid candidates."""

from orchestrator.search_spaces.config import CHECKPOINT_MODES, PP_SCHEDULES, ParallelConfig
from orchestrator.search_spaces.errors import InvalidConfig
from orchestrator.search_spaces.ranges import SpaceRanges
from orchestrator.search_spaces.sharding import SCHEMES, ShardingFactors, dp_mesh
from orchestrator.search_spaces.space import SearchSpace

__all__ = [
    "CHECKPOINT_MODES", "PP_SCHEDULES", "SCHEMES", "InvalidConfig", "ParallelConfig",
    "SearchSpace", "ShardingFactors", "SpaceRanges", "dp_mesh",
]
