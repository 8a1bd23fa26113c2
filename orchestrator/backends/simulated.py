"""Simulated backend: trials answered by the cost model, for dry runs and search benchmarks.

A trial's throughput is the model's prediction times seeded log-normal noise. With
`perturbation` > 0, a hidden factor per knob value (drawn once per seed) makes the ground truth
differ from the model the searchers see, so a benchmark cannot win by reading the model back.
With `interactions` > 0, quirks that depend on several knobs at once (quirks.py: a collective
off its fast path, a shape-specific kernel, an overhead growing with a product of knobs) are
added on top, scaled by it. With `parallel_quirks` > 0, quirks of expert, context and
interleaved pipeline parallelism (a threshold past which the expert all-to-all slows with scale,
an exchange that depends on cp, its kind and tp together, interleaving that pays off only with
enough micro-batches: parallel_quirks.py) are added, scaled by it. With `congestion` > 0, a
shared network slows the data-parallel collectives as the nodes they span grow: each step pays
`congestion` x log2(nodes) times the model's data-parallel collective time more, none of it
hidden (a form the cost model does not have, so tuning on fewer nodes than the target meets a
scale effect it must confirm).
A trial whose (perturbed) memory exceeds the device is `oom`, unless the layout is risky (over
the device within the memory margin) and runs with the chance the memory verdict gives it,
reporting the device nearly full; `failure_rate` of trials fail,
as a crash (`failed`), a hang (`timeout`) or an out-of-memory (`oom`) in equal shares.
`latency_s` makes each trial take that much wall time, for tests that kill a controller
mid-campaign.
"""

from __future__ import annotations

import math
import time
from typing import Any

from orchestrator.backends import quirks
from orchestrator.backends.parallel_quirks import HiddenParameters
from orchestrator.backends.parallel_quirks import log_factor as parallel_log_factor
from orchestrator.backends.base import Backend, TrialHandle, TrialRequest
from orchestrator.costmodel.fit_verdict import fit_chance
from orchestrator.costmodel.memory import GB
from orchestrator.result import TrialResult

# Knobs whose values get a hidden factor each.
PERTURBED_KNOBS = (
    "tp", "pp", "zero_stage", "micro_batch_size", "activation_checkpointing",
    "sequence_parallel", "pp_schedule",
)


_rng = quirks.rng


class SimulatedHandle(TrialHandle):
    def __init__(self, result: TrialResult, latency_s: float = 0.0):
        self.result = result
        self.ready_at = time.monotonic() + latency_s

    def poll(self) -> TrialResult | None:
        return self.result if time.monotonic() >= self.ready_at else None

    def cancel(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"simulated": True}


class SimulatedBackend(Backend):
    """`cost_model` is an orchestrator.costmodel.CostModel; `steps` the trial's timed steps."""

    def __init__(self, cost_model, *, noise: float = 0.03, failure_rate: float = 0.0,
                 perturbation: float = 0.0, seed: int = 0, steps: int = 10,
                 latency_s: float = 0.0, interactions: float = 0.0,
                 parallel_quirks: float = 0.0, congestion: float = 0.0):
        self.cost_model = cost_model
        self.noise = noise
        self.failure_rate = failure_rate
        self.perturbation = perturbation
        self.seed = seed
        self.steps = steps
        self.latency_s = latency_s
        self.interactions = interactions
        self.parallel_quirks = parallel_quirks
        self.hidden = HiddenParameters.draw(seed) if parallel_quirks > 0 else None
        self.congestion = congestion

    def knob_factor(self, knob: str, value: object) -> float:
        if self.perturbation <= 0:
            return 1.0
        return math.exp(_rng(self.seed, "knob", knob, value).gauss(0.0, self.perturbation))

    def truth_factor(self, settings: dict[str, Any]) -> float:
        """The hidden multiplier of the ground truth over the model, for one config."""
        factor = 1.0
        for knob in PERTURBED_KNOBS:
            if knob in settings:
                factor *= self.knob_factor(knob, settings[knob])
        log = quirks.log_factor(self.seed, settings, self.interactions)
        if self.hidden is not None:
            log += float(parallel_log_factor(self.hidden, settings, self.parallel_quirks))
        return factor * math.exp(log)

    def run(self, layout, trial_id: str, steps: int | None = None) -> TrialResult:
        est = self.cost_model.estimate(layout)
        rng = _rng(self.seed, "trial", trial_id, layout.key())
        world = layout.world_size
        settings = layout.to_params()
        # What a measurement would see (no fragmentation reserve); the reserve is still lost
        # to fragmentation, so the trial runs out of memory once both exceed the device.
        memory_scale = self.knob_factor("memory", layout.zero_stage) ** 0.25
        memory_gb = est.memory_gb_used * memory_scale
        if not est.fits_scaled(memory_scale):
            if not self._risky_runs(est, layout, memory_scale):
                return TrialResult(
                    status="oom", world_size=world, peak_memory_gb=memory_gb,
                    error=f"simulated out-of-memory: {memory_gb:.1f} GB > {est.capacity_gb:g} GB",
                )
            usable_gb = est.capacity_gb - est.memory.reserve / GB
            memory_gb = usable_gb * _rng(self.seed, "peak", layout.key()).uniform(0.93, 0.99)
        if rng.random() < self.failure_rate:
            status, error = rng.choice((
                ("failed", "RuntimeError: simulated crash"),
                ("timeout", "simulated hang, killed at the trial timeout"),
                ("oom", "simulated out-of-memory on rank 0"),
            ))
            return TrialResult(status=status, world_size=world, error=error)
        speed = self.truth_factor(settings) * math.exp(rng.gauss(0.0, self.noise))
        step_time = (est.step_time_s + self.congested_s(est, world)) / speed
        steps = steps or self.steps
        times = [step_time * math.exp(rng.gauss(0.0, self.noise / 2)) for _ in range(steps)]
        tokens_per_s = est.tokens_per_step / step_time
        tflops = est.model_flops_per_step / step_time / world / 1e12
        return TrialResult(
            status="ok", tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=tokens_per_s / world,
            tflops_per_gpu=tflops, mfu=tflops / est.peak_tflops, step_time_s=step_time,
            step_time_p90_s=sorted(times)[int(0.9 * (len(times) - 1))],
            peak_memory_gb=memory_gb, world_size=world, step_times_s=times,
            extra={"simulated_duration_s": step_time * steps},
        )

    def noise_free_step_s(self, layout) -> float | None:
        """The layout's step time in this landscape without noise, or None where it runs out
        of memory: the truth a benchmark's oracle ranks by."""
        est = self.cost_model.estimate(layout)
        memory_scale = self.knob_factor("memory", layout.zero_stage) ** 0.25
        if not est.fits_scaled(memory_scale) and not self._risky_runs(est, layout, memory_scale):
            return None
        return ((est.step_time_s + self.congested_s(est, layout.world_size))
                / self.truth_factor(layout.to_params()))

    def congested_s(self, est, world: int) -> float:
        """What congestion adds to a step on `world` devices (see the module's docstring)."""
        nodes = max(1, world // self.cost_model.gpus_per_node)
        if self.congestion <= 0 or nodes == 1:
            return 0.0
        return self.congestion * math.log2(nodes) * est.time.dp_comm.total

    def _risky_runs(self, est, layout, memory_scale: float) -> bool:
        """Whether a layout predicted over the device runs all the same: with the chance the
        memory verdict gives it (fit_verdict.fit_chance, seeded per layout), so a campaign
        that measures risky layouts meets what the margin assumes rather than a model that is
        exactly right. A layout predicted within capacity keeps the model's figure."""
        memory = est.memory
        need = ((memory.total - memory.reserve) * memory_scale + memory.reserve) / GB
        chance = float(fit_chance(need / est.capacity_gb, est.memory_margin))
        return _rng(self.seed, "memory", layout.key()).random() < chance

    def submit(self, request: TrialRequest) -> SimulatedHandle:
        result = self.run(request.config, request.trial_id, request.steps)
        if result.status == "timeout":  # a hang holds its devices until the timeout kills it
            result.extra = {**result.extra, "simulated_duration_s": request.timeout_s}
        return SimulatedHandle(result, self.latency_s)
