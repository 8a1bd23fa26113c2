"""The terms of a predicted step time: AMSP's data-parallel communication and the step."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataParallelComm:
    """AMSP's four terms, raw (before overlap), in seconds."""

    t_p: float
    t_g: float
    t_os0: float
    t_os1: float

    @property
    def total(self) -> float:
        return self.t_p + self.t_g + self.t_os0 + self.t_os1

    def __add__(self, other: "DataParallelComm") -> "DataParallelComm":
        """Two groups' terms summed (the dense weights' over dp, the experts' over
        expert-DP): their collectives run one after the other."""
        return DataParallelComm(self.t_p + other.t_p, self.t_g + other.t_g,
                                self.t_os0 + other.t_os0, self.t_os1 + other.t_os1)


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    bubble_s: float
    overhead_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm: DataParallelComm
    dp_exposed_s: float
    # The optimizer step over this rank's shard of the weights (scaled with compute).
    optimizer_s: float = 0.0
    # The part of tp_comm_s + pp_comm_s + ep_comm_s that is per-step latency, not bandwidth.
    model_parallel_latency_s: float = 0.0
    # Mixture of experts: the token dispatch and combine the step waits for (moe_time.py).
    ep_comm_s: float = 0.0
    # Context parallelism: the exposed K/V exchange of attention (context_parallel.py).
    cp_comm_s: float = 0.0
    # Offload: the exposed host transfers and the host optimizer step (offload.py).
    offload_s: float = 0.0

    @property
    def total_s(self) -> float:
        return (self.compute_s + self.bubble_s + self.overhead_s + self.tp_comm_s
                + self.pp_comm_s + self.dp_exposed_s + self.optimizer_s + self.ep_comm_s
                + self.cp_comm_s + self.offload_s)

    def as_dict(self) -> dict[str, float]:
        return {
            "compute_s": self.compute_s, "bubble_s": self.bubble_s, "overhead_s": self.overhead_s,
            "tp_comm_s": self.tp_comm_s, "pp_comm_s": self.pp_comm_s,
            "ep_comm_s": self.ep_comm_s, "cp_comm_s": self.cp_comm_s,
            "model_parallel_latency_s": self.model_parallel_latency_s,
            "dp_t_p_s": self.dp_comm.t_p, "dp_t_g_s": self.dp_comm.t_g,
            "dp_t_os0_s": self.dp_comm.t_os0, "dp_t_os1_s": self.dp_comm.t_os1,
            "dp_comm_s": self.dp_comm.total, "dp_exposed_s": self.dp_exposed_s,
            "optimizer_s": self.optimizer_s, "offload_s": self.offload_s,
            "step_time_s": self.total_s,
        }
