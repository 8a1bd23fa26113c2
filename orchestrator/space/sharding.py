"""AMSP sharding factors: how far parameters, gradients and optimizer states are each sharded.

AMSP (Chen et al., arXiv 2311.00257, §IV-B) gives each model-state component its own factor on
the two-level data-parallel mesh `s0dp × s1dp` (GPUs within a node × nodes): s_x = s0x · s1x.
Every named scheme is one point of this space (§IV-B, "existing schemes"):

| scheme       | (s_p, s_g, s_os)                         |
|--------------|------------------------------------------|
| DDP          | (1, 1, 1)                                |
| ZeRO-1       | (1, 1, dp)                               |
| ZeRO-2       | (1, dp, dp)                              |
| ZeRO-3, FSDP | (dp, dp, dp)                             |
| MiCS, HSDP   | (g, g, g), g < dp a shard group          |
| ZeRO++ (hpZ) | ZeRO-3, with `secondary` = g: a second   |
|              | copy of the weights sharded over g GPUs  |
|              | of a node, gathered in backward          |

`engine` names the implementation a scheme runs on, which sets how its collectives overlap
with compute (costmodel/data_parallel.py): "amsp" (AMSP/InternEvo, the default for factor sets),
"deepspeed" (ZeRO-1/2/3, MiCS, ZeRO++ as DeepSpeed ships them) or "torch" (DDP, FSDP, HSDP).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.layout import ParallelDims
from orchestrator.space.errors import InvalidConfig

SCHEMES = ("ddp", "zero1", "zero2", "zero3", "fsdp", "mics", "hsdp", "zero++")
ENGINES = ("amsp", "deepspeed", "torch")


@dataclass(frozen=True, order=True)
class ShardingFactors:
    s0p: int = 1
    s1p: int = 1
    s0g: int = 1
    s1g: int = 1
    s0os: int = 1
    s1os: int = 1
    # ZeRO++ hpZ: a secondary weight shard over this many GPUs of a node (1 = none).
    secondary: int = 1
    engine: str = "amsp"

    @property
    def sp(self) -> int:
        return self.s0p * self.s1p

    @property
    def sg(self) -> int:
        return self.s0g * self.s1g

    @property
    def sos(self) -> int:
        return self.s0os * self.s1os

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        return (self.s0p, self.s1p, self.s0g, self.s1g, self.s0os, self.s1os)

    def to_dict(self) -> dict[str, int]:
        names = ("s0p", "s1p", "s0g", "s1g", "s0os", "s1os")
        data = dict(zip(names, self.as_tuple()))
        if self.secondary > 1:
            data["secondary"] = self.secondary
        if self.engine != "amsp":
            data["engine"] = self.engine
        return data

    def validate(self, s0dp: int, s1dp: int) -> "ShardingFactors":
        """AMSP constraints (3)-(7) and s_g ∈ {s_p, s_os}; the message names every factor."""
        if self.engine not in ENGINES:
            raise InvalidConfig(f"engine({self.engine!r}) must be one of {', '.join(ENGINES)}")
        chain0 = (self.s0p, self.s0g, self.s0os, s0dp)
        chain1 = (self.s1p, self.s1g, self.s1os, s1dp)
        if not all(1 <= a <= b for a, b in zip(chain0, chain0[1:])):
            raise InvalidConfig(
                f"need 1 <= s0p({self.s0p}) <= s0g({self.s0g}) <= s0os({self.s0os}) <= s0dp({s0dp})"
            )
        if not all(1 <= a <= b for a, b in zip(chain1, chain1[1:])):
            raise InvalidConfig(
                f"need 1 <= s1p({self.s1p}) <= s1g({self.s1g}) <= s1os({self.s1os}) <= s1dp({s1dp})"
            )
        for name, value, whole in (("s0p", self.s0p, s0dp), ("s0g", self.s0g, s0dp),
                                   ("s0os", self.s0os, s0dp), ("s1p", self.s1p, s1dp),
                                   ("s1g", self.s1g, s1dp), ("s1os", self.s1os, s1dp)):
            if whole % value:
                raise InvalidConfig(f"{name}({value}) does not divide {name[:2]}dp({whole})")
        for comp, s0, s1 in (("p", self.s0p, self.s1p), ("g", self.s0g, self.s1g),
                             ("os", self.s0os, self.s1os)):
            if s1 > 1 and s0 != s0dp:
                raise InvalidConfig(
                    f"s1{comp}({s1}) > 1 needs s0{comp}({s0}) = s0dp({s0dp}): fill a node first"
                )
        if self.sg not in (self.sp, self.sos):
            raise InvalidConfig(
                f"s_g({self.sg}) must equal s_p({self.sp}) or s_os({self.sos})"
            )
        if self.secondary > 1 and (s0dp % self.secondary or self.sp <= self.secondary):
            raise InvalidConfig(
                f"secondary({self.secondary}) must divide s0dp({s0dp}) and be < s_p({self.sp})"
            )
        return self

    @classmethod
    def from_zero_stage(cls, stage: int, s0dp: int, s1dp: int,
                        engine: str = "deepspeed") -> "ShardingFactors":
        """A ZeRO stage's factors, run on `engine` ("deepspeed" or "torch": PyTorch's DDP,
        ZeroRedundancyOptimizer and FSDP2, as the built-in trainer runs the stages); stage 0
        is DDP on that engine."""
        if stage == 0:
            return cls(engine=engine)
        names = {1: "zero1", 2: "zero2", 3: "zero3"}
        factors = cls.named(names[stage], s0dp, s1dp)
        return replace(factors, engine="torch") if engine == "torch" else factors

    @classmethod
    def named(cls, scheme: str, s0dp: int, s1dp: int, group: int | None = None) -> "ShardingFactors":
        """A named scheme on an `s0dp × s1dp` mesh; `group` is MiCS/HSDP's shard group size."""
        full = (s0dp, s1dp)
        ds, torch = {"engine": "deepspeed"}, {"engine": "torch"}
        if scheme == "ddp":
            return cls(**torch)
        if scheme == "zero1":
            return cls(1, 1, 1, 1, *full, **ds)
        if scheme == "zero2":
            return cls(1, 1, *full, *full, **ds)
        if scheme in ("zero3", "fsdp"):
            return cls(*full, *full, *full, **(ds if scheme == "zero3" else torch))
        if scheme == "zero++":
            return cls(*full, *full, *full, secondary=group or s0dp, **ds)
        if scheme in ("mics", "hsdp"):
            g = group or s0dp
            s0, s1 = (g, 1) if g <= s0dp else (s0dp, g // s0dp)
            return cls(s0, s1, s0, s1, s0, s1, **(ds if scheme == "mics" else torch))
        raise InvalidConfig(f"unknown sharding scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")


def dp_mesh(dp: int, tp: int, gpus_per_node: int) -> tuple[int, int]:
    """(s0dp, s1dp): a DP group's ranks are tp apart (ranks are laid out tp fastest), so a
    node holds gpus_per_node // tp of them (at most dp), evenly: `ParallelDims.even_node_split`."""
    return ParallelDims(dp=dp, tp=tp).even_node_split("dp", gpus_per_node)
