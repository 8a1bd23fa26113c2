"""Search spaces: the typed `ParallelConfig` and the enumeration of valid candidates."""

from orchestrator.space.config import CHECKPOINT_MODES, PP_SCHEDULES, ParallelConfig
from orchestrator.space.errors import InvalidConfig
from orchestrator.space.ranges import SpaceRanges
from orchestrator.space.search_space import SearchSpace
from orchestrator.space.sharding import SCHEMES, ShardingFactors, dp_mesh

__all__ = [
    "CHECKPOINT_MODES", "PP_SCHEDULES", "SCHEMES", "InvalidConfig", "ParallelConfig",
    "SearchSpace", "ShardingFactors", "SpaceRanges", "dp_mesh",
]
