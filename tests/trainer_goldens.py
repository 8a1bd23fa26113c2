"""What each trainer renders and reads, as plain text, so that a change of how trainers are
organised is shown to change none of it: the trial program of several layouts of each
example campaign, every launch-file format for them, and each log parser on a log in its
tool's format. `python tests/trainer_goldens.py --write` records the files under
tests/fixtures/trainer_goldens/; tests/trainers/test_goldens.py compares against them."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = ROOT / "tests" / "fixtures" / "trainer_goldens"
TRIAL_DIR = Path("/golden/runs/campaign/trials/t0003")

# One example campaign per trainer and per feature the adapters render differently.
EXAMPLES = ("quickstart", "modes", "moe-cpu", "long-context-cpu", "deepspeed", "deepspeed-moe",
            "megatron-lm", "megatron-deepspeed", "megatron-fp8", "megatron-moe",
            "megatron-long-context", "torchtitan", "torchtitan-float8", "torchtitan-fp8-rowwise",
            "command-ddp", "zero-offload-10b", "deepseek-v3")
LAYOUTS_PER_EXAMPLE = 4
# The launch-file formats the goldens were recorded for: every format of the trainers that
# existed before trainers became folders (a later trainer's files are checked by its own tests).
RECORDED_FORMATS = ("yaml", "torchrun", "sbatch", "deepspeed", "megatron-lm",
                    "megatron-deepspeed", "megatron", "torchtitan", "command")

# Logs in each tool's own format (the lines the parsers' docstrings cite), with a crash.
LOGS = {
    "megatron-lm": (
        "[2026-11-30 10:00:00.123456] iteration        1/      10 | consumed samples: 32 | "
        "elapsed time per iteration (ms): 2234.5 | throughput per GPU (TFLOP/s/GPU): 103.4 | "
        "learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 1.100000E+01 | "
        "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |\n"
        "[Rank 0] (after 1 iterations) memory (MB) | allocated: 1024.5 | max allocated: "
        "40960.25 | reserved: 50000.0 | max reserved: 50000.0\n"
        "[2026-11-30 10:00:02.123456] iteration        2/      10 | consumed samples: 64 | "
        "elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | "
        "learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 1.000000E+01 | "
        "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |\n"
        "Traceback (most recent call last):\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"),
    "megatron-deepspeed": (
        " iteration        1/      10 | consumed samples:           32 | consumed tokens: "
        "65536 | elapsed time per iteration (ms): 7180.1 | learning rate: 1.000E-04 | global "
        "batch size:    32 | lm loss: 1.100000E+01 | loss scale: 1.0 | actual seqlen:  2048 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 | samples per "
        "second: 4.457 | tokens per gpu per second (tgs): 142.612 | TFLOPs: 153.38 |\n"
        " iteration        2/      10 | consumed samples:           64 | consumed tokens: "
        "131072 | elapsed time per iteration (ms): 7000.0 | learning rate: 1.000E-04 | global "
        "batch size:    32 | lm loss: 1.000000E+01 | loss scale: 1.0 | actual seqlen:  2048 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 | samples per "
        "second: 4.571 | tokens per gpu per second (tgs): 146.3 | TFLOPs: 157.0 |\n"),
    "torchtitan": (
        "[rank0]:[titan] 2026-11-30 10:00:00,000 - root - INFO - step:  1  loss: 12.0000  "
        "grad_norm:  3.1000  memory: 30.12GiB(38.06%)  tps: 1,234  tflops: 71.52  mfu: 7.23%\n"
        "[rank1]:[titan] 2026-11-30 10:00:00,000 - root - INFO - step:  1  loss: -1.0000  "
        "grad_norm:  3.1000  memory: 31.50GiB(39.80%)  tps: 1,250  tflops: 72.00  mfu: 7.28%\n"
        "[rank0]:[titan] 2026-11-30 10:00:05,000 - root - INFO - step:  2  loss: 11.5000  "
        "grad_norm:  2.9000  memory: 30.12GiB(38.06%)  tps: 5,678  tflops: 329.10  mfu: N/A\n"
        "RuntimeError: NCCL communicator was aborted on rank 1\n"),
    "deepspeed": (
        "[2026-11-30 10:00:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] step=1, skipped=0, "
        "lr=[0.0001], mom=[(0.9, 0.999)]\n"
        "[2026-11-30 10:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=2/"
        "global_step=1, RunningAvgSamplesPerSec=3.95, CurrSamplesPerSec=3.97, "
        "MemAllocated=1.5GB, MaxMemAllocated=2.25GB\n"
        "step 1 loss: 10.875\n"
        "[2026-11-30 10:00:01,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=4/"
        "global_step=2, RunningAvgSamplesPerSec=4.01, CurrSamplesPerSec=4.05, "
        "MemAllocated=1.5GB, MaxMemAllocated=2.5GB\n"
        "step 2 loss = 10.5\n"),
}


# Examples whose base DeepSpeed config lives on their cluster: the one of examples/deepspeed/
# stands in, so that the config the trials write is rendered too.
BASE_CONFIG_KEYS = {"megatron-deepspeed": ("megatron", "deepspeed_config"),
                    "zero-offload-10b": ("deepspeed", "config")}


_SPEC_FOLDERS: list[str] = []  # where a stand-in spec was written, named in what it renders


def _example_specs():
    import tempfile

    import yaml

    from orchestrator.campaign_spec import load_spec
    for name in EXAMPLES:
        path = ROOT / "examples" / f"{name}.yaml"
        if name not in BASE_CONFIG_KEYS:
            yield name, load_spec(path)
            continue
        raw = yaml.safe_load(path.read_text())
        section, key = BASE_CONFIG_KEYS[name]
        raw["trial"][section][key] = str(ROOT / "examples" / "deepspeed" / "ds_config.json")
        with tempfile.TemporaryDirectory() as folder:
            _SPEC_FOLDERS.append(folder)
            copy = Path(folder) / path.name
            copy.write_text(yaml.safe_dump(raw, sort_keys=False))
            yield name, load_spec(copy)


def _layouts(spec):
    from orchestrator.campaign_spec.planning import fitted_candidates
    configs = sorted(fitted_candidates(spec), key=lambda c: c.key())
    if len(configs) <= LAYOUTS_PER_EXAMPLE:
        return configs
    step = len(configs) / LAYOUTS_PER_EXAMPLE
    return [configs[int(i * step)] for i in range(LAYOUTS_PER_EXAMPLE)]


def _normalised(text: str) -> str:
    """Paths of this checkout, this interpreter and a stand-in spec, which differ between runs."""
    for folder in _SPEC_FOLDERS:
        text = text.replace(folder, "<spec-folder>")
    return text.replace(sys.executable, "<python>").replace(str(ROOT), "<root>")


def _attempt(produce) -> str:
    try:
        return produce()
    except Exception as error:  # noqa: BLE001  (a refusal is rendered behaviour too)
        return f"raises {type(error).__name__}: {error}"


def rendered_programs() -> dict[str, str]:
    """`<example>.json`: each layout's trial program, files and environment."""
    from orchestrator.trainers import trainer_for
    from orchestrator.trial.folder import TrialFolder
    out = {}
    for name, spec in _example_specs():
        adapter, entries = trainer_for(spec), {}
        for config in _layouts(spec):
            def run(config=config):
                r = adapter.run(spec, config, "t0003", TrialFolder(TRIAL_DIR), 5)
                return json.dumps(asdict(r), indent=1, sort_keys=True)
            entries[config.key()] = _attempt(run)
        out[f"programs/{name}.json"] = _normalised(json.dumps(entries, indent=1))
    return out


def exported_files() -> dict[str, str]:
    """`<example>.<format>.txt`: every launch-file format for the example's first layout."""
    from orchestrator.export import export
    out = {}
    for name, spec in _example_specs():
        layouts = _layouts(spec)
        if not layouts:
            continue
        for fmt in RECORDED_FORMATS:
            text = _attempt(lambda fmt=fmt: export(fmt, spec, "t0003", layouts[0], None))
            out[f"exports/{name}.{fmt}.txt"] = _normalised(text)
    return out


def parsed_logs() -> dict[str, str]:
    """`<trainer>.json`: what each parser reads from its tool's log."""
    from orchestrator.trainers import (DeepSpeedTrainer, MegatronDeepSpeedTrainer,
                                       MegatronLMTrainer, TorchtitanTrainer)
    adapters = {"megatron-lm": MegatronLMTrainer(), "megatron-deepspeed": MegatronDeepSpeedTrainer(),
                "torchtitan": TorchtitanTrainer(), "deepspeed": DeepSpeedTrainer()}
    out = {}
    for name, log in LOGS.items():
        adapter = adapters[name]
        parsed = {"metrics": asdict(adapter.parse_log(log)),
                  "out_of_memory": adapter.out_of_memory(log)}
        out[f"logs/{name}.json"] = json.dumps(parsed, indent=1, sort_keys=True)
    return out


def everything() -> dict[str, str]:
    return {**rendered_programs(), **exported_files(), **parsed_logs()}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/trainer_goldens.py --write")
    sys.path.insert(0, str(ROOT))
    for relative, text in everything().items():
        path = GOLDENS / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {len(everything())} files under {GOLDENS.relative_to(ROOT)}")
