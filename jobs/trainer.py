"""Assemble a parallel training step from a JobConfig: mesh, pipeline split, parallelism,
optimizer, and one `step(global_batch) -> loss` that every layout computes identically."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist
from torch import nn

from jobs.config import JobConfig
from jobs.context_layout import apply_context_parallel, context_problem, shard_tokens
from jobs.expert_parallel import apply_ep, sync_expert_gradients
from jobs.layout import DataParallelPlan, build_expert_mesh, build_mesh, data_parallel_plan
from jobs.model import Transformer, num_params
from jobs.moe import is_moe_layer
from jobs.offload import cpu_offload_policy, offload_problem
from jobs.parallelize import (
    all_reduce_gradients,
    apply_ac,
    apply_compile,
    apply_ddp,
    apply_fsdp,
    apply_tp,
    build_optimizer,
)
from jobs.pipeline import build_schedule, cross_entropy, split_stage, stage_ids
from jobs.precision import apply_fp8, precision_problem
from orchestrator.pipeline_split import layer_chunks, split_problem


class Infeasible(Exception):
    """A layout this job cannot run; reported before any process group exists."""


def has_moe(config: JobConfig) -> bool:
    return any(is_moe_layer(config.model, i) for i in range(config.model.num_layers))


def check_feasible(config: JobConfig, world_size: int) -> DataParallelPlan:
    """The data-parallel plan of a layout this job runs on `world_size` ranks; Infeasible with
    the first reason it cannot (the layout's, the model shape's, the schedule's, context
    parallelism's, then the data-parallel mode's, the experts', offload's and precision's)."""
    if reason := config.layout_problem():
        raise Infeasible(reason)
    if config.dims.world != world_size:
        raise Infeasible(f"tp({config.tp}) * pp({config.pp}) * cp({config.cp}) * "
                         f"dp({config.dp}) != WORLD_SIZE({world_size})")
    if reason := shape_problem(config) or schedule_problem(config) or context_problem(config):
        raise Infeasible(reason)
    plan = data_parallel_plan(config)
    if plan.kind == "zero1" and config.tp > 1:
        raise Infeasible("ZeroRedundancyOptimizer takes no tensor-parallel (DTensor) "
                         "parameters; with tp > 1 use zero_stage 2 or 3")
    check_experts_feasible(config)
    if reason := offload_problem(config, plan) or precision_problem(config):
        raise Infeasible(reason)
    if config.overlap_comm is False:
        raise Infeasible("overlap_comm false: PyTorch's DDP and FSDP2 always overlap their "
                         "collectives here; leave overlap_comm unset (null)")
    return plan


def shape_problem(config: JobConfig) -> str | None:
    """Why the model's shape does not split as the layout asks (heads, feed-forward width and
    sequence over tp, layers over the pipeline's stages), or None."""
    m = config.model
    if m.num_heads % config.tp or m.kv_heads % config.tp:
        return (f"tp({config.tp}) must divide num_heads({m.num_heads}) and "
                f"num_kv_heads({m.kv_heads})")
    dense = any(not is_moe_layer(m, i) for i in range(m.num_layers))
    if dense and m.ffn_hidden % config.tp:
        return f"tp({config.tp}) must divide ffn_hidden({m.ffn_hidden})"
    if split := split_problem(m.num_layers, config.pp, config.virtual_stages,
                              config.pipeline_split):
        return split
    if config.sequence_parallel and m.seq_len % config.tp:
        return f"sequence_parallel needs tp > 1 dividing seq_len({m.seq_len})"
    if config.tp > 1 and m.tied_embeddings:
        return "tensor parallelism with tied embeddings is not supported; untie them"
    return None


def schedule_problem(config: JobConfig) -> str | None:
    """Why the pipeline schedule cannot run the layout's micro-batches, or None."""
    if config.pp > 1 and config.grad_accum_steps < config.pp and config.pp_schedule != "gpipe":
        return (f"1F1B schedules need grad_accum_steps({config.grad_accum_steps}) >= "
                f"pp({config.pp}) micro-batches")
    if config.pp_schedule == "interleaved" and config.grad_accum_steps % config.pp:
        return (f"interleaved 1F1B needs grad_accum_steps({config.grad_accum_steps}) "
                f"divisible by pp({config.pp})")
    if (config.virtual_stages > 1) != (config.pp_schedule == "interleaved" and config.pp > 1):
        return (f"virtual_stages({config.virtual_stages}) > 1 goes with pp > 1 and "
                "pp_schedule 'interleaved'")
    return None


def check_experts_feasible(config: JobConfig) -> None:
    """What expert parallelism here implements: ep of a stage's tp x dp ranks, whole experts
    (etp 1), under any data-parallel mode, TP (with or without SP), PP, recompute and compile;
    not with context parallelism."""
    m, ep, tp = config.model, config.ep, config.tp
    if not has_moe(config):
        if ep > 1:
            raise Infeasible(f"ep({ep}) > 1 needs a model with MoE layers (num_experts > 0)")
        return
    if config.cp > 1:
        raise Infeasible(f"cp({config.cp}) with MoE layers: experts laid out over context-"
                         "parallel ranks are not implemented")
    etp = config.dims.expert_tp
    if etp != 1:
        unset = ", tp's when unset" if config.etp is None else ""
        raise Infeasible(f"etp({etp}{unset}): experts split over tensor-parallel ranks are "
                         "not implemented; set etp 1 (whole experts)")
    whole_experts = replace(config.dims, etp=1)  # cp is 1 here: ep folds into tp x dp
    if m.num_experts % ep or not whole_experts.experts_fit:
        raise Infeasible(f"ep({ep}) must divide num_experts({m.num_experts}) and "
                         f"tp({tp}) x dp({config.dp})")
    if not 1 <= m.experts_per_token <= m.num_experts:
        raise Infeasible(f"experts_per_token({m.experts_per_token}) must be 1 to "
                         f"num_experts({m.num_experts})")
    if tp > 1 and (config.micro_batch_size * m.seq_len) % tp:
        raise Infeasible(f"tp({tp}) must divide a micro-batch's tokens "
                         f"({config.micro_batch_size} x {m.seq_len}): each TP rank routes a share")
    if m.shared_expert_ffn_hidden % tp:
        raise Infeasible(f"tp({tp}) must divide shared_expert_ffn_hidden"
                         f"({m.shared_expert_ffn_hidden})")


@dataclass
class Trainer:
    config: JobConfig
    plan: DataParallelPlan
    mesh: object
    device: torch.device
    modules: list[nn.Module]
    optimizer: torch.optim.Optimizer
    schedule: object | None
    ddp: nn.Module | None
    manual_grad_sync: bool
    expert_mesh: object | None = None  # with MoE layers: ("pp", "edp", "ep", "etp")

    def held_parameter_fraction(self) -> float:
        """Parameters this rank stores, as a fraction of the model: proof the layout is real
        (DDP holds 1.0; TP, PP and FSDP shards hold less)."""
        local = sum(
            (p._local_tensor if hasattr(p, "_local_tensor") else p).numel()
            for module in self.modules for p in module.parameters()
        )
        with torch.device("meta"):
            whole = num_params(Transformer(self.config.model))
        return local / whole

    @property
    def dp_rank(self) -> int:
        return self.mesh["dp"].get_local_rank()

    def step(self, batch: torch.Tensor) -> float:
        """One optimizer step on this rank's share of the global batch; the global mean loss."""
        c = self.config
        rows = c.micro_batch_size * c.grad_accum_steps
        mine = batch[self.dp_rank * rows:(self.dp_rank + 1) * rows].to(self.device)
        # Under context parallelism, this rank's share of each sequence.
        inputs, targets = (shard_tokens(t, self.mesh, c.cp) for t in (mine[:, :-1], mine[:, 1:]))
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.device.type == "cuda")
        with autocast:
            loss = self._pipeline(inputs, targets) if self.schedule else self._accumulate(inputs, targets)
        if self.manual_grad_sync:
            for module in self.modules:
                all_reduce_gradients(module, self.mesh["dp_cp"].get_group())
        if self.expert_mesh is not None and self.plan.kind != "fsdp":  # FSDP reduces them
            for module in self.modules:
                sync_expert_gradients(module, self.expert_mesh["edp"].get_group(), c.dp)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        # Sum the contributions over the world: one per data-parallel replica and cp rank,
        # each the mean over the same number of tokens.
        total = torch.tensor([loss], dtype=torch.float64, device=self.device)
        dist.all_reduce(total)
        return total.item() / c.dims.gradient_group

    def _accumulate(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        c = self.config
        model = self.ddp or self.modules[0]
        loss_sum = 0.0
        for micro in range(c.grad_accum_steps):
            rows = slice(micro * c.micro_batch_size, (micro + 1) * c.micro_batch_size)
            self._sync_grads(micro == c.grad_accum_steps - 1)
            loss = cross_entropy(model(inputs[rows]), targets[rows])
            (loss / c.grad_accum_steps).backward()
            loss_sum += loss.item() / c.grad_accum_steps
        return loss_sum if self.mesh["tp"].get_local_rank() == 0 else 0.0

    def _pipeline(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        pp_mesh = self.mesh["pp"]
        first, last = pp_mesh.get_local_rank() == 0, pp_mesh.get_local_rank() == pp_mesh.size() - 1
        losses: list[torch.Tensor] = []
        args = (inputs,) if first else ()
        self.schedule.step(*args, target=targets if last else None, losses=losses)
        if not (last and self.mesh["tp"].get_local_rank() == 0):
            return 0.0
        return float(torch.stack([loss.detach().float() for loss in losses]).mean())

    def _sync_grads(self, enabled: bool) -> None:
        if self.ddp is not None:
            self.ddp.require_backward_grad_sync = enabled
        elif self.plan.kind == "fsdp" and self.config.pp == 1:
            self.modules[0].set_requires_gradient_sync(enabled)


def build_trainer(config: JobConfig, plan: DataParallelPlan, device: torch.device) -> Trainer:
    mesh = build_mesh(config, plan, device.type)
    expert_mesh = build_expert_mesh(config, device.type) if has_moe(config) else None
    edp = None if expert_mesh is None else expert_mesh["edp"]
    torch.manual_seed(config.seed)  # the same full model on every rank, whatever the layout
    model = Transformer(config.model)
    if config.pp > 1:
        num_stages = config.pp * config.virtual_stages
        ids = stage_ids(mesh["pp"].get_local_rank(), config.pp, config.virtual_stages)
        layer_stages = layer_chunks(config.model.num_layers, config.pp, config.virtual_stages,
                                    config.pipeline_split)
        modules = [split_stage(model, i, num_stages, layer_stages) for i in ids]
    else:
        ids, modules = [0], [model]
    del model
    apply_context_parallel(modules, config, mesh, device)

    for module in modules:
        module.to(device)
        apply_fp8(module, config.precision, config.tp)
        if expert_mesh is not None:
            apply_ep(module, expert_mesh["ep"])
        if config.tp > 1:
            apply_tp(module, mesh["tp"], config.sequence_parallel)
        apply_ac(module, config.activation_checkpointing, config.recompute_num_layers)
        if config.compile:
            apply_compile(module)
        if plan.kind == "fsdp":
            dp_mesh = (mesh["dp_replicate", "dp_shard_cp"] if plan.replicate > 1
                       else mesh["dp_shard_cp"])
            apply_fsdp(module, dp_mesh, plan, mixed_precision=device.type == "cuda",
                       expert_mesh=edp, dp=config.dp,
                       offload_policy=cpu_offload_policy(config.offload, device))

    ddp = None
    replicas = config.dims.gradient_group  # ranks whose gradients average
    if plan.kind in ("ddp", "zero1") and replicas > 1 and config.tp == 1 and config.pp == 1:
        ddp = apply_ddp(modules[0], mesh["dp_cp"].get_group(), device, config.bucket_size)
    manual = plan.kind in ("ddp", "zero1") and replicas > 1 and ddp is None

    params = nn.ModuleList(modules)
    optimizer = build_optimizer(params, plan, config.lr, mesh["dp_shard_cp"].get_group(),
                                None if edp is None else edp.get_group(), config.offload)

    schedule = None
    if config.pp > 1:
        from torch.distributed.pipelining import PipelineStage

        stages = [PipelineStage(m, i, config.pp * config.virtual_stages, device,
                                group=mesh["pp"].get_group()) for m, i in zip(modules, ids)]
        schedule = build_schedule(config.pp_schedule, stages, config.grad_accum_steps)
    return Trainer(config, plan, mesh, device, modules, optimizer, schedule, ddp, manual,
                   expert_mesh)
