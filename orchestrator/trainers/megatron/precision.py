"""A layout's precision, offload, overlap and bucket size as Megatron-LM's flags; the values it
cannot run are refused first (capabilities.py). Megatron-DeepSpeed takes these from
its DeepSpeed config (deepspeed_config.py) and has no FP8, so it gets no flags here.

Read in megatron-core 0.19.2 (megatron/core and the megatron/training it ships):

- FP8: `--fp8-format` and `--fp8-recipe`, generated from TransformerConfig's `fp8`
  (Literal['e4m3', 'hybrid']) and `fp8_recipe` (Literal['tensorwise', 'delayed', 'mxfp8',
  'blockwise', 'custom']). core/fp8_utils.py hands the format to Transformer Engine's recipe:
  Float8CurrentScaling (tensorwise), DelayedScaling, Float8BlockScaling (blockwise) or
  MXFP8BlockScaling. The format rendered is each TE recipe's own default (TE's
  docs/api/common.rst): HYBRID (e4m3 forward, e5m2 gradients) for the per-tensor recipes,
  E4M3 everywhere for the block-scaled ones, as DeepSeek-V3's recipe is. FP8 runs in
  Transformer Engine's layers, so `--transformer-impl=transformer_engine` (the default,
  stated, so a base argument never outvotes it); GPU clusters only.
- Optimizer offload: `--optimizer-cpu-offload` with `--use-precision-aware-optimizer`, which
  arguments.py asserts ("The optimizer cpu offload must be used in conjunction with
  `--use-precision-aware-optimizer`") and OptimizerConfig allows only with adam and the
  distributed optimizer (ZeRO-1: the spec refuses offload at stage 0). `--optimizer-offload-
  fraction=1.0`, the parser's default, stated: every state goes to the host, as the layout says.
- Overlap: true renders `--overlap-grad-reduce` and, with the distributed optimizer,
  `--overlap-param-gather` ("--overlap-param-gather only supported with distributed optimizer"
  and "Must use --overlap-param-gather with --overlap-grad-reduce"); false removes them, and
  `--overlap-param-gather-with-optimizer-step` that needs them, from the user's base arguments
  (these are switches with no negative form), noted in the trial's megatron_args.changes.txt;
  None keeps the base arguments as they are.
- Bucket: `--ddp-bucket-size` (DistributedDataParallelConfig.bucket_size, parameters per
  bucket). Megatron uses it only while it overlaps (training.py, resolve_ddp_bucket_size: "if
  overlap_grad_reduce is False: None"), so a bucket without overlap is refused.
"""

from __future__ import annotations

from orchestrator.common.errors import SpecError
from orchestrator.trainers.megatron.flags import LM

# ParaTune's precision -> (--fp8-format, --fp8-recipe).
FP8_FLAGS = {"fp8-tensorwise": ("hybrid", "tensorwise"), "fp8-delayed": ("hybrid", "delayed"),
             "fp8-blockwise": ("e4m3", "blockwise"), "mxfp8": ("e4m3", "mxfp8")}
OVERLAP_FLAGS = ("--overlap-grad-reduce", "--overlap-param-gather",
                 "--overlap-param-gather-with-optimizer-step")
OFFLOAD_FLAGS = ("--optimizer-cpu-offload", "--use-precision-aware-optimizer",
                 "--optimizer-offload-fraction=1.0")
CHANGES_FILE = "megatron_args.changes.txt"  # what a trial removed from the base arguments


def _flag(item: str) -> str:
    return item.split("=", 1)[0]


def user_args(spec) -> list[str]:
    """The campaign's base arguments (`trial.megatron.args`), unfilled."""
    return list(spec.trial.megatron.args) if spec.trial.megatron else []


def precision_args(tool: str, spec, layout) -> list[str]:
    """Megatron-LM's flags for the layout's precision, offload, overlap and bucket size; the
    base arguments decide overlap where the layout leaves it None."""
    if tool != LM:
        return []
    args: list[str] = []
    if layout.precision != "bf16":
        if spec.cluster.device == "cpu":
            raise SpecError(f"layout {layout.key()}: megatron-lm: precision {layout.precision} "
                            "runs in Transformer Engine's GPU kernels, not on a CPU cluster; set "
                            "space.precision to [bf16]")
        fmt, recipe = FP8_FLAGS[layout.precision]
        args += [f"--fp8-format={fmt}", f"--fp8-recipe={recipe}"]
        if layout.cp == 1:  # cp > 1 renders it already (megatron_context.py)
            args.append("--transformer-impl=transformer_engine")
    if layout.offload == "optimizer":
        args += OFFLOAD_FLAGS
    if layout.overlap_comm:
        args.append("--overlap-grad-reduce")
        if layout.zero_stage == 1:
            args.append("--overlap-param-gather")
    if layout.bucket_size is not None:
        overlaps = layout.overlap_comm or (
            layout.overlap_comm is None and "--overlap-grad-reduce" in map(_flag, user_args(spec)))
        if not overlaps:
            raise SpecError(
                f"layout {layout.key()}: megatron-lm: bucket_size {layout.bucket_size} without "
                "--overlap-grad-reduce in trial.megatron.args: Megatron reduces in one bucket "
                "unless it overlaps; set space.overlap_comm to [true] or space.bucket_size to "
                "[null]")
        args.append(f"--ddp-bucket-size={layout.bucket_size}")
    return args


def base_args_for(tool: str, layout, base_args: list[str]) -> tuple[list[str], list[str]]:
    """The user's base arguments less the overlap switches a layout with overlap_comm false
    turns off, and a line for each one removed."""
    if tool != LM or layout.overlap_comm is not False:
        return list(base_args), []
    kept = [a for a in base_args if _flag(a) not in OVERLAP_FLAGS]
    removed = [a for a in base_args if _flag(a) in OVERLAP_FLAGS]
    return kept, [f"removed {a} from trial.megatron.args (the layout's overlap_comm is false)"
                  for a in removed]
