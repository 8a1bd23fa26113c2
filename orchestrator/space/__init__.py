"""Search spaces: the typed `Layout` and the enumeration of valid candidates."""

from orchestrator.space.config import CHECKPOINT_MODES, PP_SCHEDULES, Layout
from orchestrator.space.config import ParallelConfig  # noqa: F401 - Layout's name before
from orchestrator.space.errors import InvalidConfig
from orchestrator.space.ranges import SpaceRanges
from orchestrator.space.search_space import SearchSpace
from orchestrator.space.sharding import SCHEMES, ShardingFactors, dp_mesh

__all__ = [
    "CHECKPOINT_MODES", "PP_SCHEDULES", "SCHEMES", "InvalidConfig", "Layout",
    "SearchSpace", "ShardingFactors", "SpaceRanges", "dp_mesh",
]
