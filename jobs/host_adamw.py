"""AdamW stepped on the host, for the layout's `offload: optimizer` (jobs/offload.py): fp32 master
weights and AdamW's moments and step count live on the host (ZeRO-Offload's split). After the
backward and the data-parallel reduction the gradients are copied to the host, AdamW steps
there, and the new weights are copied back into the device parameters. It steps whatever
parameters it is given, so it composes with DDP (all parameters), ZeRO-1
(ZeroRedundancyOptimizer's `optimizer_class`: this rank's partition, then ZeRO broadcasts the
results) and FSDP, TP and EP (the local shards of DTensor parameters).

On a CPU device the host is the same memory: the masters are still separate copies and the
copies still run, which is how the CPU tests exercise this path.
"""

from __future__ import annotations

import torch
from torch import nn


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, or the tensor itself."""
    return tensor._local_tensor if hasattr(tensor, "_local_tensor") else tensor


def _gradient_shard(param: torch.Tensor) -> torch.Tensor:
    """The local part of a parameter's gradient, laid out as the parameter's local shard (a
    DTensor gradient may come in another placement, e.g. a TP embedding's replicated one)."""
    grad = param.grad
    if hasattr(grad, "placements") and grad.placements != param.placements:
        grad = grad.redistribute(param.device_mesh, param.placements)
    return _local(grad)


class HostOffloadAdamW(torch.optim.Optimizer):
    """AdamW stepped on the host: `param_groups` hold the device parameters (so ZeRO-1 and
    learning-rate changes see them as usual); a host AdamW steps fp32 master copies of their
    local shards."""

    def __init__(self, params, lr: float = 1e-3, **adamw):
        super().__init__(params, {"lr": lr, **adamw})
        # (A ZeRO-1 partition may be empty on a rank.)
        self._pinned = any(p.device.type == "cuda" for g in self.param_groups for p in g["params"])
        self._pairs: list[tuple[nn.Parameter, torch.Tensor, torch.Tensor]] = []
        host_groups = []
        for group in self.param_groups:
            masters = []
            for param in group["params"]:
                master = self._host_copy(_local(param).detach())
                self._pairs.append((param, master, self._host_copy(master)))
                masters.append(master)
            host_groups.append({**_hyperparameters(group), "params": masters})
        self.host = torch.optim.AdamW(host_groups)
        self.state = self.host.state  # the states live on the host, keyed by the masters

    def _host_copy(self, tensor: torch.Tensor) -> torch.Tensor:
        host = torch.empty(tensor.shape, dtype=torch.float32, device="cpu",
                           pin_memory=self._pinned)
        return host.copy_(tensor)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._copy_gradients_to_host()
        for group, host_group in zip(self.param_groups, self.host.param_groups):
            host_group.update(_hyperparameters(group))  # e.g. a scheduler's learning rate
        self.host.step()
        self._copy_weights_back()
        return loss

    def _copy_gradients_to_host(self) -> None:
        for param, master, buffer in self._pairs:
            if param.grad is None:
                master.grad = None  # AdamW skips it, as it would on the device
                continue
            buffer.copy_(_gradient_shard(param), non_blocking=self._pinned)
            master.grad = buffer
        if self._pinned:
            torch.cuda.current_stream().synchronize()  # the host step reads the buffers

    def _copy_weights_back(self) -> None:
        for param, master, _ in self._pairs:
            if master.grad is not None:
                _local(param).copy_(master, non_blocking=self._pinned)

    def state_dict(self) -> dict:
        return self.host.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.host.load_state_dict(state_dict)


def _hyperparameters(group: dict) -> dict:
    return {k: v for k, v in group.items() if k != "params"}
