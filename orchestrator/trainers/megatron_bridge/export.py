"""The `megatron-bridge` launch file: a bash script that runs the winner's recipe with its
overrides under torchrun, in the folder and environment the trials ran in, for a production
run (the trial's length, logging and checkpoint switches left out, named in a comment).

Every value from the spec (script, recipe, dataset, the user's overrides, the environment) is
one shell word quoted by shlex.quote (or, where it names the trial folder, quoted around
"$RUN_DIR"), so nothing from a spec reaches the shell unquoted.
"""

from __future__ import annotations

import shlex

from orchestrator.common.errors import SpecError
from orchestrator.export.common import env_line, interpreter, origin, run_context
from orchestrator.export.program import (
    RUN_DIR_FOLDER,
    ExportedProgram,
    run_dir_word,
    uses_run_dir,
    write_files,
)
from orchestrator.export.scripts import rendezvous
from orchestrator.trainers.megatron_bridge.capabilities import TOOL
from orchestrator.trainers.megatron_bridge.overrides import MEASUREMENT, TRIAL_ONLY
from orchestrator.trainers.megatron_bridge.program import trial_program

CONTINUED = " \\\n  "
LENGTH_KEY = "train.train_iters="


def production_words(spec, trial_id: str, layout) -> tuple[list[str], list[str]]:
    """The winner's argv as the trials ran it, less what only a trial needs, as shell words;
    and the words left out."""
    run = trial_program(spec, layout, trial_id, RUN_DIR_FOLDER, spec.trial.steps)
    trial_only = set(MEASUREMENT) | set(TRIAL_ONLY)
    dropped = [a for a in run.program if a in trial_only or a.startswith(LENGTH_KEY)]
    kept = [a for a in run.program if a not in dropped]
    return [run_dir_word(a) for a in kept], dropped


def export_megatron_bridge(spec, trial_id: str, layout) -> str:
    """A runnable torchrun script of the winner's recipe and overrides."""
    try:
        words, dropped = production_words(spec, trial_id, layout)
    except SpecError as exc:  # a layout Bridge cannot run: say so of the export
        raise SpecError(f"--format megatron-bridge: the winner {layout.key()} cannot be "
                        f"written for megatron-bridge ({exc})") from None
    script, options, overrides = words[0], words[1:7], words[7:]
    env = trial_program(spec, layout, trial_id, RUN_DIR_FOLDER, 1).env
    needs_dir = uses_run_dir(ExportedProgram(words=words, launcher="torchrun"))
    body = "".join(f"  {w}\n" for w in overrides)
    return (
        "#!/usr/bin/env bash\n"
        f"# {origin(spec, trial_id, layout, TOOL)}\n"
        f"# Left out, as only the trials needed them: {' '.join(map(shlex.quote, dropped))}\n"
        "# The run's length is the recipe's train.train_iters; add train.train_iters=N to set it.\n"
        "set -euo pipefail\n"
        f"{interpreter()}{write_files({}) if needs_dir else ''}{run_context(spec)}"
        + "".join(env_line(k, v) + "\n" for k, v in env.items() if k not in spec.trial.env)
        + f"{rendezvous(spec.scale.nodes)}\n"
        f"OVERRIDES=(\n{body})\n"
        f'exec "$PYTHON" -m torch.distributed.run "${{RDZV[@]}}" '
        f"--nproc_per_node={spec.gpus_per_node}{CONTINUED}{script} {' '.join(options)}"
        f'{CONTINUED}"${{OVERRIDES[@]}}"\n')
