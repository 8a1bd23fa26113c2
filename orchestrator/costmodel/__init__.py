"""The analytic cost model: pure functions that predict memory and speed of a layout.

It prunes configurations that cannot fit before any trial runs, and ranks the rest.
"""

from orchestrator.costmodel.estimate import Estimate, estimate, precision_for
from orchestrator.costmodel.memory import GB, model_state_bytes

__all__ = ["GB", "Estimate", "estimate", "model_state_bytes", "precision_for"]
