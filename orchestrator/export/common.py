"""What every launch file shares: the line that says where it came from, and the folder and
environment its program ran in."""

from __future__ import annotations

import shlex
from importlib.metadata import version

from orchestrator.space import ParallelConfig
from orchestrator.spec import CampaignSpec
from orchestrator.spec.strings import ENV_NAME
from orchestrator.spec.trial import BASH_READONLY, is_shell_variable
from orchestrator.trainers.builtin import BuiltinTrainer

BUILTIN_TOOL = f"{BuiltinTrainer.tool} under torchrun, PyTorch {version('torch')}"


def origin(spec: CampaignSpec, trial_id: str, config: ParallelConfig,
           tool: str = BUILTIN_TOOL) -> str:
    """Where the file came from, as one line of printable text: it goes into `#` comments, so
    no name may end the comment line (the spec refuses such names; this holds regardless)."""
    text = (
        f"ParaTune campaign {spec.name!r}, trial {trial_id} ({config.key()}); "
        f"model {spec.model.name!r}, {spec.world_size} ranks on {spec.cluster.name!r}; "
        f"written for {tool}"
    )
    return "".join(c if c.isprintable() else "?" for c in text)


def env_line(name: str, value: str) -> str:
    if not ENV_NAME.fullmatch(name):  # the spec refuses these; never write one into a script
        raise ValueError(f"trial.env: {name!r} is not an environment variable name")
    if name in BASH_READONLY:  # the spec refuses these too: bash would stop at the export
        raise ValueError(f"trial.env.{name}: bash holds {name} read-only; drop it or rename it")
    if is_shell_variable(name):  # and these: the script's shell would act on it
        raise ValueError(f"trial.env.{name}: the shell acts on {name}; drop it or rename it")
    return f"export {name}={shlex.quote(value)}"


def run_context(spec: CampaignSpec, in_workdir: bool = True) -> str:
    """Shell lines that give a script the campaign's `trial.env` and, `in_workdir`, put it
    where the trials ran (`trial.workdir`, which a saved spec holds absolute), for a program
    whose relative paths start there; each line ends in a newline."""
    lines = []
    if in_workdir and spec.trial.workdir:
        lines += ["# The folder the campaign's trials ran in: their relative paths start here.",
                  f"cd {shlex.quote(spec.trial.workdir)}"]
    lines += [env_line(k, v) for k, v in spec.trial.env.items()]
    return "".join(line + "\n" for line in lines)
