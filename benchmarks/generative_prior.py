"""A reference for the search benchmark, not a searcher a campaign could use: the cost-guided
searcher told how a perturbed cost-model landscape was drawn.

On a landscape with per-knob perturbations and no quirks, the truth is the cost model times one
hidden factor exp(N(0, p²)) per value of each knob in the simulator's PERTURBED_KNOBS
(orchestrator/backends/simulated.py). This searcher's residual model has exactly that prior:
effects on those of the knobs that vary over the candidates only, each of std p, an overall
bias of std p·√(perturbed knobs that do not vary), no pairwise effects, the scale not learned,
and the cost model not recalibrated (the residuals are the whole difference).
No campaign knows which knobs its cost model misjudges or by how much, so what this searcher
needs on a landscape is a floor for its needle, not a rival: it says how many trials that
landscape's information allows an upper-bound search with the right prior.
"""

from __future__ import annotations

from orchestrator.backends.simulated import PERTURBED_KNOBS
from orchestrator.search.cost_guided import CostGuidedSearcher
from orchestrator.search.residuals import KnobCodes, ResidualModel

NAME = "generative-prior"
# The searcher's knob -> the simulator's setting (AMSP's sharding factors leave zero_stage fixed,
# so only the settings that vary over the candidates carry effects).
SIMULATOR_KNOB = {"sharding": "zero_stage"}


def generative_prior_searcher(perturbation: float, interactions: float, candidates, objective,
                              *, seed: int, cost_model, stop_margin: float = 0.0
                              ) -> CostGuidedSearcher:
    """The searcher for a landscape drawn with `perturbation` (the std of a knob's log factor)
    and no quirks (`interactions` 0: their form is not a prior this model can hold)."""
    if perturbation <= 0 or interactions:
        raise ValueError(f"{NAME} needs a landscape with per-knob perturbations and no quirks "
                         f"(perturbation {perturbation:g}, interactions {interactions:g})")

    settings = [config.to_params() for config in candidates]
    perturbed = {knob for knob in PERTURBED_KNOBS if len({str(s[knob]) for s in settings}) > 1}
    fixed = len(PERTURBED_KNOBS) - len(perturbed)  # their factors multiply every candidate

    class GenerativeResiduals(ResidualModel):
        intercept, main, interaction, scales = perturbation * fixed**0.5, perturbation, 0.0, (1.0,)

        def __init__(self, codes: KnobCodes, candidates):
            self.effect_columns = [i for i, knob in enumerate(codes.knobs)
                                   if SIMULATOR_KNOB.get(knob, knob) in perturbed]
            super().__init__(codes, candidates)

    class GenerativePriorSearcher(CostGuidedSearcher):
        residual_model = GenerativeResiduals
        recalibrates = False

    return GenerativePriorSearcher(candidates, cost_model, objective, seed=seed,
                                   stop_margin=stop_margin)
