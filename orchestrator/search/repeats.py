"""When a measured layout is worth measuring again, judged by the campaign's own noise.

A repeat costs a trial that could have measured an untried layout, so one is asked only while
the leader (the best mean log gain) and a rival are not told apart at the measured noise:

- Noise: the std of one measurement's log gain, pooled over the layouts measured more than
  once (their within-layout variance), shrunk towards a prior of NOISE_PRIOR worth
  NOISE_PRIOR_DOF pseudo-observations: σ² = (ν₀·σ₀² + Σ squares) / (ν₀ + dof). The first
  repeats move it; a campaign with no repeats uses the prior.
- Noiseless: once NOISELESS_DOF degrees of freedom of repeats agree within AGREEMENT (pooled
  std), the landscape is taken as measured without noise and the prior is dropped: the noise
  is the measured spread, no less than RESOLUTION. A layout with 2 measurements that agree
  (every repeat so far within AGREEMENT) is never measured a third time.
- Contender: a rival whose mean is within CONTENDER_Z standard errors of the leader's
  (standard error of the difference: σ·√(1/n_rival + 1/n_leader)), and whose difference is
  not yet known to within INDIFFERENCE (CONTENDER_Z standard errors of it exceed it): past
  that, naming either one loses at most INDIFFERENCE, which no repeat is worth.
- Needed: how many measurements each of a pair takes to be separated or resolved at the
  current noise, at most MAX_MEASUREMENTS; the searcher keeps that many trials of its budget
  for naming the winner.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NOISE_PRIOR = 0.025  # prior std of one measurement's log gain
NOISE_PRIOR_DOF = 2.0  # the prior is worth this many repeats
AGREEMENT = 0.002  # repeats this close (pooled std of log gain) agree
NOISELESS_DOF = 2  # this many degrees of freedom of agreeing repeats: no noise
RESOLUTION = 0.001  # the smallest noise assumed, once measured noiseless
CONTENDER_Z = 2.5  # a contender's mean is within this many standard errors of the leader's
INDIFFERENCE = 0.02  # a rival known to be at most this much better is not worth a trial
MAX_MEASUREMENTS = 6  # of each contender, repeats included, that the budget is kept for


@dataclass(frozen=True)
class Noise:
    """The noise estimate, and what the repeats themselves say."""

    std: float  # one measurement's std of log gain, for standard errors
    spread: float | None  # the repeats' pooled std, None without a repeat
    dof: int  # degrees of freedom of the repeats

    @property
    def agreeing(self) -> bool:
        """The repeats so far reproduced their layouts: pooled std within AGREEMENT."""
        return self.spread is not None and self.spread <= AGREEMENT

    @property
    def noiseless(self) -> bool:
        return self.agreeing and self.dof >= NOISELESS_DOF


def estimate_noise(groups: dict[Any, list[float]]) -> Noise:
    """Pooled within-layout std of `groups` (log gains by layout), shrunk to NOISE_PRIOR."""
    squares, dof = 0.0, 0
    for values in groups.values():
        if len(values) > 1:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            dof += len(values) - 1
    spread = math.sqrt(squares / dof) if dof else None
    if spread is not None and spread <= AGREEMENT and dof >= NOISELESS_DOF:
        return Noise(max(spread, RESOLUTION), spread, dof)
    shrunk = (NOISE_PRIOR_DOF * NOISE_PRIOR**2 + squares) / (NOISE_PRIOR_DOF + dof)
    return Noise(math.sqrt(shrunk), spread, dof)


class Standing:
    """The leader of `groups` (log gains by layout) and its contenders at `noise`."""

    def __init__(self, groups: dict[Any, list[float]], noise: Noise):
        self.groups = groups
        self.noise = noise
        self.means = {c: sum(v) / len(v) for c, v in groups.items()}
        self.leader = max(self.means, key=self.means.get)

    def count(self, config: Any) -> int:
        return len(self.groups[config])

    def _error(self, config: Any) -> float:
        """Standard error of the leader's lead over `config`."""
        return self.noise.std * math.sqrt(1 / self.count(config) + 1 / self.count(self.leader))

    def _lead(self, config: Any) -> float:
        return self.means[self.leader] - self.means[config]

    def z(self, config: Any) -> float:
        """The leader's lead over `config`, in standard errors."""
        return self._lead(config) / max(self._error(config), 1e-12)

    def rivals(self) -> list[Any]:
        """The contenders, the closest (smallest lead in standard errors) first."""
        close = [c for c in self.means if c != self.leader and self.z(c) < CONTENDER_Z
                 and CONTENDER_Z * self._error(c) > INDIFFERENCE]
        return sorted(close, key=self.z)

    def settled(self, config: Any, cap: int) -> bool:
        """No more measurements of `config`: it has `cap`, or 2 that agree."""
        n = self.count(config)
        return n >= cap or (n >= 2 and self.noise.agreeing)

    def needed(self, rivals: list[Any]) -> int:
        """Measurements the leader and `rivals` still take to be separated or resolved at
        the current noise, at most MAX_MEASUREMENTS each."""
        total, leader_needs = 0, 0
        for rival in rivals:
            margin = max(self._lead(rival), INDIFFERENCE)
            each = min(MAX_MEASUREMENTS, math.ceil(2 * (CONTENDER_Z * self.noise.std / margin) ** 2))
            total += max(0, each - self.count(rival))
            leader_needs = max(leader_needs, each - self.count(self.leader))
        return total + leader_needs
