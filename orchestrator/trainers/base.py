"""The trainer-adapter seam: what ParaTune needs to know of a training program to tune it.

An adapter renders the trial's program and files for a layout from the user's own base config
(`run`), names how its ranks are launched, and reads the program's real log output back into a
`TrialResult` (`parse_log`, plus the out-of-memory messages of CUDA and HIP). Adapters are plain,
picklable objects: a `TrialRequest` carries its adapter to the node that runs the trial, and the
result is read there.

Beside running and reading, an adapter answers for its trainer everywhere a stage needs a fact
of it (each hook has a default, so a new trainer overrides only what differs): which layouts
it refuses and why (`check_spec`, `layout_refusal`), how its code runs ZeRO for the cost model
(`runtime`, `runtime_for`, `runtime_name`, `priced_as`, `runtime_assumed`), its own launch-file
formats and their writers (`export_formats`, `exporters`, `script_formats`, `export_file`,
`unmeasured_export_note`, `runs_a_program`), what a campaign changes in the user's base config
(`base_config_notes`), the script preflight checks (`script`), the `trial` keys only it reads
(`trial_keys`) and what it does with `trial.flash_attention` (`attention_kernel`). The
registry (registry.py) maps `trial.trainer` names to adapters.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from orchestrator.costmodel.zero_engine import DEEPSPEED, ZeroEngine
# A trial's program; imported here too, where pickles of earlier releases name it.
from orchestrator.trial.program import Launcher, TrainerRun  # noqa: F401

# Out-of-memory messages of PyTorch's CUDA and HIP allocators, of the Python exception types,
# and of the kernel's OOM killer as torchrun reports it (a rank killed by SIGKILL).
OOM_PATTERNS = (
    re.compile(r"CUDA out of memory", re.I),
    re.compile(r"HIP out of memory", re.I),
    re.compile(r"torch\.(cuda\.)?OutOfMemoryError"),
    re.compile(r"\bOutOfMemoryError\b"),
    re.compile(r"CUBLAS_STATUS_ALLOC_FAILED|HIPBLAS_STATUS_ALLOC_FAILED"),
    re.compile(r"DefaultCPUAllocator: can't allocate memory"),
    re.compile(r"RESOURCE_EXHAUSTED: Out of memory"),
)


@dataclass(frozen=True)
class Measure:
    """Plain numbers that turn a log's raw figures into the result's fields."""

    world_size: int
    seq_len: int
    tokens_per_step: int  # global batch x sequence length
    model_flops_per_step: float  # the cost model's MFU convention (recompute not counted)
    peak_tflops: float  # per device
    warmup_steps: int  # logged steps to leave out of the timing


@dataclass
class LogMetrics:
    """What a trainer's log said, per logged step and overall, before anything is derived."""

    step_times_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    samples_per_s: list[float] = field(default_factory=list)  # sequences, whole job
    tokens_per_s: list[float] = field(default_factory=list)  # whole job, per logged step
    tokens_per_s_per_gpu: list[float] = field(default_factory=list)
    tflops_per_gpu: list[float] = field(default_factory=list)
    mfu: list[float] = field(default_factory=list)  # fractions, not percent
    peak_memory_gb: float | None = None
    error: str | None = None  # a failure the trainer reported in its own words

    @property
    def steps(self) -> int:
        return max(len(self.step_times_s), len(self.samples_per_s), len(self.tokens_per_s),
                   len(self.tokens_per_s_per_gpu), len(self.tflops_per_gpu))


# A launch-file writer: (spec, trial_id, config, trial_dir or None) -> the file's text.
Exporter = Callable[..., str]


class TrainerAdapter(ABC):
    """One trainer: built with no arguments (`for_spec` may read the spec), picklable."""

    name: ClassVar[str]
    # The release whose arguments, config classes and log format this adapter was written for.
    tool: ClassVar[str]
    oom_patterns: ClassVar[tuple[re.Pattern, ...]] = OOM_PATTERNS
    # Arguments a trial adds only to be measured (a log line per step); a launch file names
    # them for a production run to drop.
    measurement_args: ClassVar[tuple[str, ...]] = ()
    # How its code runs ZeRO and DDP, for the cost model (costmodel/zero_engine.py).
    runtime: ClassVar[ZeroEngine] = DEEPSPEED
    # The name `trial.runtime` gives that runtime, so a `command` program that runs this
    # trainer's engine is priced as it (None: not offered).
    runtime_name: ClassVar[str | None] = None
    # The launch-file formats that rerun the program it measured, its own default first
    # (`paratune best --format`); any other format runs another program, unmeasured.
    export_formats: ClassVar[tuple[str, ...]] = ("torchrun", "sbatch")
    # Which of the formats its `exporters` write are scripts (written executable).
    script_formats: ClassVar[tuple[str, ...]] = ()
    # The `trial` keys only this trainer reads (its section), refused under another trainer.
    trial_keys: ClassVar[tuple[str, ...]] = ()
    # Where `paratune best`'s hint suggests writing its own format's file.
    export_file: ClassVar[str] = "launch.sh"
    # Whether its trials run a program of the user's (TrainerRun's), which the generic
    # torchrun and sbatch launch files rerun; False: ParaTune's own job (their own scripts).
    runs_a_program: ClassVar[bool] = True
    # Whether `runtime` is an assumption about code ParaTune does not see (said with a plan).
    runtime_assumed: ClassVar[bool] = False
    # What it does with `trial.flash_attention: false`: None, it switches its attention kernel
    # by it; else the words for the kernel it runs anyway (campaign_spec/notices.py warns).
    attention_kernel: ClassVar[str | None] = "picks its own kernel"

    @classmethod
    def for_spec(cls, spec) -> "TrainerAdapter":
        """The adapter a campaign's trials use (one that reads a spec section overrides it)."""
        return cls()

    def check_spec(self, spec) -> list[str]:
        """Spec-level refusals (a space value it never runs, a missing base config), each one
        line naming the field and the fix."""
        return []

    def layout_refusal(self, spec, layout) -> str | None:
        """Why it cannot run layout `config` (a Layout) of `spec`, with the source that
        says so, or None when it can."""
        return None

    def runtime_for(self, spec) -> ZeroEngine:
        """Its runtime under the spec's base config (arguments may turn overlap on)."""
        return self.runtime

    def priced_as(self, spec) -> str:
        """Which runtime the cost model prices its trials as, and which key said so."""
        return f"{self.name} (trial.trainer)"

    def exporters(self) -> dict[str, Exporter]:
        """Writers of the formats that are its own tool's (a config, its flags), by format."""
        return {}

    def unmeasured_export_note(self, spec) -> str:
        """What to add to the note shown when one of its formats is exported for a campaign
        that ran another trainer (what in the file is not that campaign's)."""
        return ""

    def script(self, spec) -> tuple[str, str] | None:
        """(spec key, path) of the training script its trials launch, checked before a run."""
        return None

    def base_config_notes(self, spec, configs) -> list[str]:
        """What the campaign's trials change in the user's base config and which of its
        settings a layout contradicts, one line each, said at the campaign's start."""
        return []

    @abstractmethod
    def run(self, spec, layout, trial_id: str, folder, steps: int) -> TrainerRun:
        """The trial's program for a layout (`spec` the CampaignSpec, `config` the
        Layout, `folder` the TrialFolder, `steps` the timed steps to run)."""

    @abstractmethod
    def parse_log(self, text: str) -> LogMetrics:
        """Every step metric the trainer's log holds, in its real format."""

    def out_of_memory(self, text: str) -> str | None:
        """The last log line that says the trial ran out of memory (a traceback's last line
        holds the message), if one does."""
        for line in reversed(text.splitlines()):
            if any(p.search(line) for p in self.oom_patterns):
                return line.strip()[:500]
        return None
