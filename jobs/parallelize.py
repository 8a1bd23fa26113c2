"""Apply parallelism to a model (or a pipeline stage of it) in small steps, in a fixed order:
tensor parallelism, activation checkpointing, compile, then data parallelism (torchtitan's
`parallelize_llama` order). Each `apply_*` reads on its own; jobs/layout.py says which
data-parallel mode a config gets.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from jobs.expert_parallel import Optimizers, expert_modules, expert_parameters
from jobs.layout import DataParallelPlan
from jobs.model import Transformer
from jobs.moe import MoE
from jobs.host_adamw import HostOffloadAdamW


class Checkpointed(nn.Module):
    """Runs the wrapped module under activation checkpointing (recomputed in backward)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.module, *args, use_reentrant=False)


def apply_tp(model: Transformer, tp_mesh, sequence_parallel: bool) -> None:
    """Megatron-style TP: q/k/v and w1/w3 split by columns, wo and w2 by rows; embeddings split
    by rows and the output head by columns (logits gathered). With sequence parallelism the
    norms and the residual stream are split along the sequence between the TP regions."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    stream = Shard(1) if sequence_parallel else Replicate()
    top: dict[str, object] = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=stream)
    if model.output is not None:
        top["output"] = ColwiseParallel(input_layouts=stream, output_layouts=Replicate(),
                                        use_local_output=True)
        if sequence_parallel:
            top["norm"] = SequenceParallel()
    if top:
        parallelize_module(model, tp_mesh, top)
    for block in model.layers.values():
        plan: dict[str, object] = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=stream),
        }
        if isinstance(block.feed_forward, MoE):
            plan.update(_moe_tp_plan(block.feed_forward, sequence_parallel))
        else:
            plan.update({"feed_forward.w1": ColwiseParallel(),
                         "feed_forward.w2": RowwiseParallel(output_layouts=stream)})
            if block.feed_forward.w3 is not None:
                plan["feed_forward.w3"] = ColwiseParallel()
        if sequence_parallel:
            plan.update({
                "attention_norm": SequenceParallel(),
                "ffn_norm": SequenceParallel(),
                "attention": PrepareModuleInput(
                    input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)),
            })
            plan.setdefault("feed_forward", PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)))
        parallelize_module(block, tp_mesh, plan)


def _moe_tp_plan(moe: MoE, sequence_parallel: bool) -> dict[str, object]:
    """A MoE layer under TP: every TP rank routes all of the (replicated) tokens, then hands
    its experts only its 1/tp share of them and gathers the results (a split whose backward
    gathers, and a gather whose backward splits: exact, no expert runs a token twice). The
    router stays replicated; the shared experts split like the dense MLP."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInputOutput,
        RowwiseParallel,
    )

    plan: dict[str, object] = {"feed_forward.experts": PrepareModuleInputOutput(
        input_layouts=(Replicate(),) * 3, desired_input_layouts=(Shard(0),) * 3,
        use_local_input=True, output_layouts=Shard(0), desired_output_layouts=Replicate())}
    if moe.shared_expert is not None:
        plan.update({"feed_forward.shared_expert.w1": ColwiseParallel(),
                     "feed_forward.shared_expert.w2": RowwiseParallel()})
        if moe.shared_expert.w3 is not None:
            plan["feed_forward.shared_expert.w3"] = ColwiseParallel()
    if sequence_parallel:  # gather the sequence in, split it again out
        plan["feed_forward"] = PrepareModuleInputOutput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
            use_local_input=True, output_layouts=Replicate(), desired_output_layouts=Shard(1))
    return plan


def apply_ac(model: Transformer, mode: str, recompute_num_layers: int | None = None) -> None:
    """full: recompute each whole block, or only the first `recompute_num_layers` of this
    stage (Megatron-LM's block method); selective: recompute only the attention sublayer."""
    if mode == "none":
        return
    if recompute_num_layers is not None and mode != "full":
        raise ValueError(f"recompute_num_layers needs activation_checkpointing full, not {mode!r}")
    for index, (name, block) in enumerate(model.layers.items()):
        if mode == "full" and recompute_num_layers is not None and index >= recompute_num_layers:
            continue
        if mode == "full":
            model.layers[name] = Checkpointed(block)
        elif mode == "selective":
            block.attention = Checkpointed(block.attention)
        else:
            raise ValueError(f"activation_checkpointing must be none, selective or full, not {mode!r}")


def apply_compile(model: Transformer) -> None:
    """Compile each block on its own (repeated structure compiles once, and FSDP still wraps
    blocks)."""
    for name, block in model.layers.items():
        model.layers[name] = torch.compile(block)


def apply_fsdp(model: Transformer, dp_mesh, plan: DataParallelPlan, mixed_precision: bool,
               expert_mesh=None, dp: int = 1, offload_policy=None) -> None:
    """FSDP2 on each block, then the root; a 2-D mesh (replicate, shard) makes it HSDP. Each
    layer's routed experts are sharded first, on their own over the expert-data-parallel mesh,
    their gradients summed there and divided by dp (jobs/expert_parallel.py). An
    `offload_policy` (FSDP2's CPUOffloadPolicy, jobs/offload.py) keeps the shards on the host."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {"mesh": dp_mesh, "reshard_after_forward": plan.reshard_after_forward}
    if offload_policy is not None:
        kwargs["offload_policy"] = offload_policy
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # A secondary (hpZ) shard size is for the dp mesh; experts reshard fully.
    expert_kwargs = {**kwargs, "mesh": expert_mesh,
                     "reshard_after_forward": bool(plan.reshard_after_forward)}
    for block in model.layers.values():
        for experts in expert_modules(block):
            fully_shard(experts, **expert_kwargs)
            experts.set_gradient_divide_factor(dp)
            # A divisor other than the group's size is NCCL's PreMulSum, which gloo lacks:
            # sum, then divide. (A group of one divides locally, and would divide twice.)
            experts.set_force_sum_reduction_for_comms(expert_mesh.size() > 1)
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)


def bucket_cap_mb(bucket_size: int | None, model: nn.Module) -> float | None:
    """DDP's bucket_cap_mb for a bucket of `bucket_size` gradient elements (gradients have
    their parameters' dtype: float32 here, autocast or not); None keeps DDP's 25 MiB."""
    if bucket_size is None:
        return None
    return bucket_size * next(model.parameters()).element_size() / 2**20


def apply_ddp(model: nn.Module, dp_group, device: torch.device,
              bucket_size: int | None = None) -> nn.Module:
    """DDP over the data-parallel group for every parameter but the routed experts', which
    differ between dp ranks under expert parallelism and reduce over their own group;
    `bucket_size` elements per gradient bucket (the layout's knob)."""
    from torch.nn.parallel import DistributedDataParallel

    experts = {id(p) for p in expert_parameters(model)}
    ignored = [name for name, p in model.named_parameters() if id(p) in experts]
    if ignored:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, process_group=dp_group, device_ids=device_ids,
                                   bucket_cap_mb=bucket_cap_mb(bucket_size, model))


def all_reduce_gradients(model: nn.Module, dp_group) -> None:
    """Average gradients over the data-parallel group by hand: DDP's job where DDP cannot run
    (tensor-parallel DTensor parameters, pipeline stages stepped by a schedule). Routed
    experts reduce over their own group (jobs/expert_parallel.py `sync_expert_gradients`)."""
    size = dist.get_world_size(dp_group)
    experts = {id(p) for p in expert_parameters(model)}
    for param in model.parameters():
        if param.grad is None or id(param) in experts:
            continue
        grad = param.grad
        local = grad._local_tensor if hasattr(grad, "_local_tensor") else grad
        dist.all_reduce(local, group=dp_group)
        local.div_(size)


def build_optimizer(model: nn.Module, plan: DataParallelPlan, lr: float, zero1_group,
                    expert_group=None, offload: str = "none"):
    """AdamW; ZeRO-1 shards its states over `zero1_group`, and the routed experts' states
    over `expert_group` (their expert-data-parallel ranks), in a second optimizer. With
    offload "optimizer" it steps on the host (jobs/host_adamw.py); with "optimizer+params" the
    FSDP shards it steps already live there."""
    experts = {id(p) for p in expert_parameters(model)}
    params = [p for p in model.parameters() if p.requires_grad and id(p) not in experts]
    host = offload == "optimizer"
    optimizer = _adamw(params, plan, lr, zero1_group, host)
    if not experts:
        return optimizer
    expert_params = [p for p in model.parameters() if id(p) in experts]
    return Optimizers(optimizer, _adamw(expert_params, plan, lr, expert_group, host))


def _adamw(params: list[nn.Parameter], plan: DataParallelPlan, lr: float, zero1_group,
           host: bool = False):
    adamw = HostOffloadAdamW if host else torch.optim.AdamW
    if plan.kind == "zero1" and dist.get_world_size(zero1_group) > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        # Bucket views: each rank broadcasts its updated shard as one flat buffer. Without
        # them ZeRO broadcasts parameter by parameter, one call per tensor (39 on the tiny
        # model), which on gloo cost more than the sharded optimizer step saved
        # (benchmarks/zero1_broadcast.py).
        return ZeroRedundancyOptimizer(params, optimizer_class=adamw, lr=lr,
                                       process_group=zero1_group,
                                       parameters_as_bucket_view=True)
    return adamw(params, lr=lr)
