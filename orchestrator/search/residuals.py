"""Where the cost model is wrong: a Bayesian model of the residual log(measured / predicted).

The residual of a config is an intercept, plus one effect per knob value, plus one effect per
pair of knob values (so a collective that is slow only for some (tp, layout) pairs, or a kernel
fast only for some (micro-batch, tp) shapes, is learned as such), each effect a priori
N(0, std²). That is Bayesian linear regression on one-hot knobs and their pairwise products,
computed in its kernel form: the prior covariance of two configs is

    INTERCEPT² + MAIN² · s + PAIR² · s(s - 1)/2,     s = how many knobs they share,

so the cost is cubic in the number of measurements, not in the (large) number of features.
The interaction prior is spread over the pairs: all pairs of one config together have std
INTERACTION, whatever the number of knobs.

How large the effects are is learned too: the knob and pair stds are scaled by the factor of
SCALES that makes the measured residuals most likely (type-II maximum likelihood), so a model
that is nearly right soon explores less, and a badly wrong one keeps exploring (a log-normal
prior on the factor keeps a few measurements from shrinking it much). A value of a knob with
at most FEW_VALUES values that no measurement has used keeps the full MAIN prior: such a knob
is cheap to try value by value, while a knob with many values (AMSP's sharding layouts) is not.

The measurement noise of a fit is the campaign's estimate from its repeats (repeats.py), no
less than NOISE_FLOOR: a landscape measured noiseless still leaves the fit a little slack.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

INTERCEPT = 0.2  # prior std of the model's overall bias (calibration removes most of it)
MAIN = 0.2  # prior std of one knob value's effect
INTERACTION = 0.15  # prior std of the sum of a config's pairwise effects
NOISE_FLOOR = 0.005  # the least measurement noise a fit assumes (std of log throughput)
SCALES = (0.35, 0.5, 0.7, 1.0)  # candidate factors on MAIN and INTERACTION
FEW_VALUES = 3
SCALE_PRIOR = 0.5  # std of log(scale) a priori: few measurements cannot shrink it much


class KnobCodes:
    """Configs as integer codes, one per knob of the space; values the space lacks get a code
    that matches nothing (prior residuals from another campaign)."""

    def __init__(self, values: dict[str, list]):
        self.knobs = list(values)
        self._index = [{v: i for i, v in enumerate(vs)} for vs in values.values()]
        self.sizes = [len(vs) for vs in values.values()]
        self._unknown = -1

    def encode(self, point: dict[str, Any]) -> np.ndarray:
        row = []
        for knob, index in zip(self.knobs, self._index):
            code = index.get(point.get(knob))
            if code is None:
                self._unknown -= 1
                code = self._unknown
            row.append(code)
        return np.array(row, dtype=np.int64)


def shared_knobs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """s[i, j]: how many knobs configs a[i] and b[j] share (codes below 0 match nothing)."""
    s = np.zeros((len(a), len(b)))
    for k in range(a.shape[1] if a.ndim == 2 else 0):
        s += (a[:, k, None] == b[None, :, k]) & (a[:, k, None] >= 0)
    return s


class ResidualModel:
    """Posterior mean and std of the residual of every candidate, refit on measured residuals.
    The prior's stds are class attributes, and `effect_columns` (None: every knob) names the
    knobs that carry effects, so a variant with another prior is a subclass."""

    intercept, main, interaction, scales = INTERCEPT, MAIN, INTERACTION, SCALES
    effect_columns: list[int] | None = None

    def __init__(self, codes: KnobCodes, candidates: np.ndarray):
        self.codes = codes
        self.candidates = candidates  # (m, knobs) codes
        knobs = candidates.shape[1] if candidates.ndim == 2 else 0
        self.columns = list(range(knobs)) if self.effect_columns is None else self.effect_columns
        pairs = len(self.columns) * (len(self.columns) - 1) / 2
        self.pair_var = self.interaction**2 / pairs if pairs else 0.0
        self.noise = NOISE_FLOOR
        self.scale = 1.0
        self.mean = np.zeros(len(candidates))
        self.std = np.sqrt(self._prior_var())
        self.fitted = False

    def _shared(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return shared_knobs(a[:, self.columns], b[:, self.columns])

    def _prior_var(self) -> np.ndarray:
        return self._kernel_of(np.full(len(self.candidates), float(len(self.columns))))

    def _kernel_of(self, shared: np.ndarray, scale: float | None = None) -> np.ndarray:
        s2 = (self.scale if scale is None else scale) ** 2
        return self.intercept**2 + s2 * (
            self.main**2 * shared + self.pair_var * shared * (shared - 1) / 2)

    def prior_std(self) -> float:
        return float(self.std.max()) if len(self.std) else self.intercept

    def fit(self, rows: np.ndarray, residuals: np.ndarray, noise: float) -> None:
        """`rows`: codes of the measured configs (a config measured twice appears twice)."""
        self.noise = noise
        if len(rows) == 0:
            self.__init__(self.codes, self.candidates)
            return
        shared = self._shared(rows, rows)
        fits = []
        for scale in self.scales:
            chol = np.linalg.cholesky(self._kernel_of(shared, scale) + noise**2 * np.eye(len(rows)))
            z = np.linalg.solve(chol, residuals)
            log_prior = -0.5 * (math.log(scale) / SCALE_PRIOR) ** 2
            fits.append((-0.5 * z @ z - np.log(np.diag(chol)).sum() + log_prior, scale, chol, z))
        _, self.scale, chol, z = max(fits, key=lambda f: f[0])
        k_oc = self._kernel_of(self._shared(rows, self.candidates))
        alpha = np.linalg.solve(chol.T, z)
        v = np.linalg.solve(chol, k_oc)
        self.mean = k_oc.T @ alpha
        unseen = np.zeros(len(self.candidates))
        for k in self.columns:
            if self.codes.sizes[k] <= FEW_VALUES:
                unseen += ~np.isin(self.candidates[:, k], rows[:, k])
        prior = self._prior_var() + (1 - self.scale**2) * self.main**2 * unseen
        self.std = np.sqrt(np.maximum(prior - (v * v).sum(axis=0), 1e-12))
        self.fitted = True


def group_by(items: list[tuple[Any, float]]) -> dict[Any, list[float]]:
    groups: dict[Any, list[float]] = defaultdict(list)
    for key, value in items:
        groups[key].append(value)
    return groups
