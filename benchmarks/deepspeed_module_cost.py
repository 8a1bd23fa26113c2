"""DeepSpeed ZeRO-3's host cost per gathered module, against ZeRO-1, on this machine.

ZeRO-3 (and MiCS and ZeRO++, built on its engine) runs hooks around every submodule: fetch,
release, gradient hand-off. Their host time is not a property of the links, so the cost model
does not price it (docs/costmodel.md, MiCS 13B). This measures it on its own: a stack of small
linear modules at world size 1 (collectives over one rank are nearly free), one training step
under ZeRO-1 and under ZeRO-3, the difference per module and step.

Run: DS_ACCELERATOR=cpu .venv/bin/torchrun --nproc-per-node 1 benchmarks/deepspeed_module_cost.py
     [--modules 50,200] (about 30 s; results in docs/costmodel.md)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

WIDTH = 64
STEPS = 10


def step_seconds(stage: int, modules: int) -> float:
    """Median seconds of one DeepSpeed step of `modules` linear layers under ZeRO `stage`."""
    config = {"train_micro_batch_size_per_gpu": 1, "steps_per_print": 10**9,
              "optimizer": {"type": "SGD", "params": {"lr": 1e-6}},
              "zero_allow_untested_optimizer": True,
              "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0}}
    with deepspeed.zero.Init(enabled=stage == 3, config_dict_or_path=config):
        net = nn.Sequential(*(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(modules)))
    engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(),
                                      config=config)
    x = torch.randn(4, WIDTH)

    def step() -> None:
        loss = engine(x).square().mean()
        engine.backward(loss)
        engine.step()

    for _ in range(3):
        step()
    samples = []
    for _ in range(STEPS):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", default="50,200")
    args = parser.parse_args()
    deepspeed.init_distributed(dist_backend="gloo")
    rows = []
    for modules in (int(m) for m in args.modules.split(",")):
        zero1, zero3 = step_seconds(1, modules), step_seconds(3, modules)
        rows.append({"modules": modules, "zero1_s": zero1, "zero3_s": zero3,
                     "zero3_extra_us_per_module": (zero3 - zero1) / modules * 1e6})
    print(json.dumps({"deepspeed": deepspeed.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
