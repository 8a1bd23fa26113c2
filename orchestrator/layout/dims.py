"""`ParallelDims`: the one place a layout's sizes are derived from its degrees (after
torchtitan's ParallelDims): the world, the ranks a model copy spans, the group gradients
average over, the experts' groups, what a sequence length must divide by, and the order ranks
are laid out in, the share of a node each group takes, and the samples a step consumes. The
search space, the spec, the cost model and the trial job ask it rather than multiplying (or
dividing) degrees themselves.

Ranks are numbered tp fastest, then cp, then dp, then pp (`RANK_ORDER`, outermost first), as
the trial job's device mesh and Megatron-Core's default order lay them out: a tp group is
consecutive ranks, a cp group's ranks are tp apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

RANK_ORDER = ("pp", "dp", "cp", "tp")  # outermost first: tp's ranks are consecutive


@dataclass(frozen=True)
class ParallelDims:
    """A layout's parallel degrees and every size derived from them.

    `etp` None means the experts' tensor-parallel degree is tp's (Megatron-Core's default);
    `sequence_parallel` shards the sequence over the tp group outside attention.
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int | None = None
    sequence_parallel: bool = False

    @classmethod
    def of(cls, layout: Mapping[str, Any] | Any) -> "ParallelDims":
        """The dims of a layout: knob values by name, or any object with the knobs as
        attributes (`Layout`, the job's `JobConfig`); a degree it lacks is 1."""
        if isinstance(layout, Mapping):
            return cls(**{f.name: layout.get(f.name, f.default) for f in fields(cls)})
        return cls(**{f.name: getattr(layout, f.name, f.default) for f in fields(cls)})

    @classmethod
    def filling(cls, world_size: int, **degrees: Any) -> "ParallelDims | None":
        """The layout of these degrees whose dp fills `world_size`, or None where the ranks a
        model copy spans do not divide it."""
        spans = cls(**{**degrees, "dp": 1})
        if world_size % spans.model_parallel:
            return None
        return cls(**{**degrees, "dp": spans.copies_in(world_size)})

    @property
    def world(self) -> int:
        """Every rank: dp copies of a model spread over tp x pp x cp ranks."""
        return self.dp * self.model_parallel

    @property
    def model_parallel(self) -> int:
        """The ranks one data-parallel copy of the model spans: tp x pp x cp."""
        return self.tp * self.pp * self.cp

    def copies_in(self, ranks: int) -> int:
        """The whole model copies (tp x pp x cp ranks each) that `ranks` ranks hold: the dp that
        fills a world of that many, rounded down where it does not divide."""
        return ranks // self.model_parallel

    @property
    def gradient_group(self) -> int:
        """The ranks whose parameter gradients average: dp x cp (each cp rank holds the
        whole model and sees a share of every sequence)."""
        return self.dp * self.cp

    @property
    def stage_ranks(self) -> int:
        """The ranks of one pipeline stage: tp x cp x dp, what expert parallelism folds."""
        return self.tp * self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        """The experts' tensor-parallel degree: etp, or tp when unset."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_group(self) -> int:
        """The ranks one copy of a MoE layer's experts spans: ep x etp."""
        return self.ep * self.expert_tp

    @property
    def experts_fit(self) -> bool:
        """Whether ep x etp divides a stage's ranks (MoE Parallel Folding)."""
        return self.stage_ranks % self.expert_group == 0

    @property
    def expert_dp(self) -> int:
        """The experts' data-parallel degree: a stage's ranks over ep x etp."""
        return self.stage_ranks // self.expert_group

    @property
    def context_chunks(self) -> int:
        """The chunks context parallelism splits a sequence into: 2 x cp, two per cp rank, one
        early and one late (head-tail load balancing under the causal mask)."""
        return 2 * self.cp

    @property
    def seq_divisor(self) -> int:
        """What the sequence length must divide by: the context chunks where cp > 1, times tp
        with sequence parallelism (each tp rank holds a share of every chunk's tokens);
        torchtitan's seq_len_divisor."""
        chunks = self.context_chunks if self.cp > 1 else 1
        return chunks * (self.tp if self.sequence_parallel else 1)

    def size(self, name: str) -> int:
        return getattr(self, name)

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The degrees in `RANK_ORDER`."""
        return tuple(self.size(name) for name in RANK_ORDER)

    def span(self, name: str) -> int:
        """The ranks a group of `name` reaches across: its size times the sizes laid out
        inside it (a cp group's ranks are tp apart, so it spans cp x tp consecutive ranks)."""
        inner = RANK_ORDER[RANK_ORDER.index(name):]
        span = 1
        for dim in inner:
            span *= self.size(dim)
        return span

    def _group(self, name: str) -> tuple[int, int]:
        """(size, stride) of one `name` group: its ranks sit `stride` apart, the ranks laid out
        inside it. ep's ranks are etp apart (inside ep x etp consecutive ranks), etp's
        consecutive."""
        if name == "ep":
            return self.ep, self.expert_tp
        if name == "etp":
            return self.expert_tp, 1
        return self.size(name), self.span(name) // self.size(name)

    def node_split(self, name: str, gpus_per_node: int) -> tuple[int, int]:
        """(ranks in a node, nodes) of one `name` group on nodes of `gpus_per_node`: a node
        holds gpus_per_node / stride of its ranks (at least one, at most the group), and the
        group spans as many nodes as that takes, the last maybe partly."""
        size, stride = self._group(name)
        in_node = min(size, max(1, gpus_per_node // stride))
        return in_node, -(-size // in_node)

    def even_node_split(self, name: str, gpus_per_node: int) -> tuple[int, int]:
        """(ranks in a node, nodes) of one `name` group with every node holding the same share:
        `node_split`'s share lowered to a divisor of the group, as a two-level collective (the
        AMSP and hierarchical ZeRO factors) needs in-node x nodes = the group."""
        size = self._group(name)[0]
        in_node = self.node_split(name, gpus_per_node)[0]
        while size % in_node:
            in_node -= 1
        return in_node, size // in_node

    def samples_per_micro_batch(self, micro_batch_size: int) -> int:
        """The samples one micro-batch takes across the data-parallel copies (each copy a
        micro-batch of its own; the tp, pp and cp ranks of a copy share its samples): what a
        global batch must be a multiple of, and its grad_accum_steps once divided by."""
        return micro_batch_size * self.dp

    def samples_per_step(self, micro_batch_size: int, grad_accum_steps: int) -> int:
        """The global batch: the samples one optimizer step consumes, grad_accum_steps
        micro-batches on each data-parallel copy."""
        return self.samples_per_micro_batch(micro_batch_size) * grad_accum_steps
