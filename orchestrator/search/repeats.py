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
- Worth it: a contender pair is measured again only while one more measurement can avoid
  more regret, in GPU-hours, than it costs. Its cost is the layout's world size times its
  trial time. The regret it can avoid is its knowledge gradient (Frazier et al., 2008: the
  expected fall of the throughput lost by naming the leader, one measurement on) times the
  production use of the named layout, taken as PRODUCTION_HOURS of the same GPUs. The world
  size cancels out, so a repeat is asked while its trial time is under the knowledge gradient
  times PRODUCTION_HOURS. A pair of layouts equal within the noise has a gradient that falls
  with each measurement (1.4% for a first repeat of two equal layouts at 5% noise, 0.45% at
  the fifth), so repeats stop where telling them apart is worth less than the trial.
- Cap: no layout is measured more than MAX_REPEATS times (`search.max_repeats`), first
  measurement included. 3 is the smallest cap at which cost-guided, with every repeat deemed
  worth its cost, named a layout within 3% of the best in 10 of 10 seeds at both 3% and 5%
  noise (frontier-175b with interactions, 40 trials, seeds 0-9; 2 gave 9 of 10 at 5%); 4, 6
  and 12 added trials (median 24.5, 30.5, 37 at 5%), no winner.
- PRODUCTION_HOURS, a week, is a design choice: ParaTune is not told how long the named
  layout trains. With it, the same benchmark names 10 of 10 at 3% noise and 9 of 10 at 5%
  (a day: 8 of 10), at a median 17 trials rather than 24.5.
- Needed: how many measurements each of a pair takes to be separated or resolved at the
  current noise, at most the cap; the searcher keeps that many trials of its budget for
  naming the winner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from orchestrator.result import TrialResult

NOISE_PRIOR = 0.025  # prior std of one measurement's log gain
NOISE_PRIOR_DOF = 2.0  # the prior is worth this many repeats
AGREEMENT = 0.002  # repeats this close (pooled std of log gain) agree
NOISELESS_DOF = 2  # this many degrees of freedom of agreeing repeats: no noise
RESOLUTION = 0.001  # the smallest noise assumed, once measured noiseless
CONTENDER_Z = 2.5  # a contender's mean is within this many standard errors of the leader's
INDIFFERENCE = 0.02  # a rival known to be at most this much better is not worth a trial
MAX_REPEATS = 3  # measurements of one layout, its first included (`search.max_repeats`)
PRODUCTION_HOURS = 168.0  # the named layout's use afterwards, in hours on the campaign's GPUs


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

    def count(self, layout: Any) -> int:
        return len(self.groups[layout])

    def _error(self, layout: Any) -> float:
        """Standard error of the leader's lead over `layout`."""
        return self.noise.std * math.sqrt(1 / self.count(layout) + 1 / self.count(self.leader))

    def _lead(self, layout: Any) -> float:
        return self.means[self.leader] - self.means[layout]

    def z(self, layout: Any) -> float:
        """The leader's lead over `layout`, in standard errors."""
        return self._lead(layout) / max(self._error(layout), 1e-12)

    def rivals(self) -> list[Any]:
        """The contenders, the closest (smallest lead in standard errors) first."""
        close = [c for c in self.means if c != self.leader and self.z(c) < CONTENDER_Z
                 and CONTENDER_Z * self._error(c) > INDIFFERENCE]
        return sorted(close, key=self.z)

    def settled(self, layout: Any, cap: int) -> bool:
        """No more measurements of `layout`: it has `cap`, or 2 that agree."""
        n = self.count(layout)
        return n >= cap or (n >= 2 and self.noise.agreeing)

    def needed(self, rivals: list[Any], cap: int = MAX_REPEATS) -> int:
        """Measurements the leader and `rivals` still take to be separated or resolved at
        the current noise, at most `cap` each."""
        total, leader_needs = 0, 0
        for rival in rivals:
            margin = max(self._lead(rival), INDIFFERENCE)
            each = min(cap, math.ceil(2 * (CONTENDER_Z * self.noise.std / margin) ** 2))
            total += max(0, each - self.count(rival))
            leader_needs = max(leader_needs, each - self.count(self.leader))
        return total + leader_needs

    def avoidable_loss(self, layout: Any, rival: Any) -> float:
        """The regret one more measurement of `layout` (`rival` or the leader) can avoid: its
        knowledge gradient (Frazier et al., 2008, for two normal means), by how much it lowers
        in expectation the share of throughput lost by naming the better-looking of the pair."""
        n_rival, n_leader = self.count(rival), self.count(self.leader)
        before = 1 / n_rival + 1 / n_leader
        after = (1 / (n_rival + 1) + 1 / n_leader if layout == rival
                 else 1 / n_rival + 1 / (n_leader + 1))
        moves = self.noise.std * math.sqrt(before - after)  # std of the lead's change
        u = -self._lead(rival) / max(moves, 1e-12)
        return moves * (u * NormalDist().cdf(u) + NormalDist().pdf(u))

    def next_repeat(self, rivals: list[Any], cap: int, asked: Collection[Any],
                    price: Callable[[Any], tuple[int, float]]) -> Any | None:
        """The layout to measure again, or None: of the closest of `rivals` whose pair with the
        leader is worth a repeat, the less measured of the two that is below `cap` and not
        already `asked`; the leader alone while no layout has been measured twice (the noise
        is then the prior's guess). `price` gives a layout's (world size, trial seconds)."""
        def open_(layout: Any) -> bool:
            return not self.settled(layout, cap) and layout not in asked

        for rival in rivals:
            worth = [c for c in (rival, self.leader)
                     if open_(c) and worth_repeating(self.avoidable_loss(c, rival), *price(c))]
            if worth:
                return min(worth, key=self.count)
        return self.leader if self.noise.dof == 0 and open_(self.leader) else None


def trial_seconds(result: TrialResult) -> float | None:
    """How long a trial ran: the simulated backend's duration, else its timed steps (a real
    trial's start-up is not in its result, so a repeat is priced low and the cap still holds)."""
    simulated = result.extra.get("simulated_duration_s")
    if simulated:
        return float(simulated)
    if result.step_times_s:
        return float(sum(result.step_times_s))
    return result.step_time_s


def repeat_price(history, layout) -> tuple[int, float]:
    """(world size, mean trial seconds) of `config`'s successful measurements in `history`
    ((id, config, result) triples): what one more of them costs."""
    seconds = [trial_seconds(r) or 0.0 for _, c, r in history if c == layout and r.ok]
    return layout.world_size, sum(seconds) / len(seconds) if seconds else 0.0


def worth_repeating(avoidable_loss: float, world_size: int, trial_s: float) -> bool:
    """A repeat costs world_size x trial_s; the regret it can avoid is `avoidable_loss` (a
    share of throughput) of PRODUCTION_HOURS on the same GPUs: ask it when it costs less."""
    cost_gpu_hours = world_size * trial_s / 3600
    regret_gpu_hours = avoidable_loss * world_size * PRODUCTION_HOURS
    return cost_gpu_hours < regret_gpu_hours
