"""What every launch file shares: the line that says where it came from and which PyTorch the
trials ran, the Python it runs with, and the folder and environment its program ran in."""

from __future__ import annotations

import ast
import importlib.util
import shlex
import sys
from pathlib import Path

from orchestrator.presets.cluster_env import CLUSTER_ENV
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec, SimulatedBackendSpec
from orchestrator.campaign_spec.strings import ENV_NAME
from orchestrator.campaign_spec.trial import BASH_READONLY, is_shell_variable
from orchestrator.trainers.builtin import BuiltinTrainer

BUILTIN_TOOL = f"{BuiltinTrainer.tool} under torchrun"
JOB_ID = '"${SLURM_JOB_ID:-$$}"'  # a value's {job}: the Slurm job, else the script's PID


def build_of(version_py: str, device: str) -> str:
    """PyTorch's build from the text of its `torch/version.py`: the release and its toolkit,
    or, with neither CUDA nor HIP, that it is a CPU build (to replace for a GPU cluster)."""
    values = {}
    for node in ast.parse(version_py).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    name = f"PyTorch {values.get('__version__', 'of unknown version')}"
    if values.get("cuda"):
        return f"{name} (CUDA {values['cuda']})"
    if values.get("hip"):
        return f"{name} (ROCm/HIP {values['hip']})"
    return f"{name}, a CPU build" + ("" if device == "cpu" else
                                      ": install the cluster's GPU build")


def torch_build(spec: CampaignSpec) -> str:
    """The build of this installation's PyTorch, the one its trials ran (read, not imported:
    importing torch takes seconds), said of a simulated campaign as what is installed."""
    found = importlib.util.find_spec("torch")
    try:
        text = (Path(found.origin).parent / "version.py").read_text()  # type: ignore[union-attr]
    except (AttributeError, TypeError, OSError):
        text = ""
    build = build_of(text, spec.cluster.device)
    if isinstance(spec.backend, SimulatedBackendSpec):
        return f"trials simulated (installed here: {build})"
    return f"the trials ran {build}"


def origin(spec: CampaignSpec, trial_id: str, layout: Layout,
           tool: str = BUILTIN_TOOL) -> str:
    """Where the file came from, as one line of printable text: it goes into `#` comments, so
    no name may end the comment line (the spec refuses such names; this holds regardless)."""
    text = (
        f"ParaTune campaign {spec.name!r}, trial {trial_id} ({layout.key()}); "
        f"model {spec.model.name!r}, {spec.world_size} ranks on {spec.cluster.name!r}; "
        f"written for {tool}; {torch_build(spec)}"
    )
    return printable(text)


def printable(text: str) -> str:
    """`text` as one line of printable characters, for a `#` comment."""
    return "".join(c if c.isprintable() else "?" for c in text)


def trials_python() -> str:
    """The Python the trials ran: this installation's, which ran them (a venv's, unresolved)."""
    return sys.executable or "python3"


def env_line(name: str, value: str) -> str:
    if not ENV_NAME.fullmatch(name):  # the spec refuses these; never write one into a script
        raise ValueError(f"trial.env: {name!r} is not an environment variable name")
    if name in BASH_READONLY:  # the spec refuses these too: bash would stop at the export
        raise ValueError(f"trial.env.{name}: bash holds {name} read-only; drop it or rename it")
    if is_shell_variable(name):  # and these: the script's shell would act on it
        raise ValueError(f"trial.env.{name}: the shell acts on {name}; drop it or rename it")
    return f"export {name}={shlex.quote(value)}"


def interpreter() -> str:
    """Shell lines that find the Python the trials ran with (this installation's, which ran
    them), or PARATUNE_PYTHON's, as $PYTHON, its folder first on PATH as a venv's activation
    puts it; without one, a line that says so and exit 127."""
    recorded = shlex.quote(trials_python())
    return f"""# The trials' Python: its environment's programs come first (PARATUNE_PYTHON: another).
TRIALS_PYTHON={recorded}
PYTHON=$(type -P -- "${{PARATUNE_PYTHON:-$TRIALS_PYTHON}}") || {{
  echo "${{0##*/}}: no Python at ${{PARATUNE_PYTHON:-$TRIALS_PYTHON}}, which the trials ran; set PARATUNE_PYTHON to this machine's Python with PyTorch" >&2
  exit 127
}}
case $PYTHON in /*) ;; *) PYTHON=$PWD/$PYTHON ;; esac
export PATH="${{PYTHON%/*}}${{PATH:+:$PATH}}"
"""


def cluster_env(spec: CampaignSpec) -> str:
    """Shell lines exporting the cluster's documented environment (presets/cluster_env.py),
    less the variables the trials' `trial.env` sets; each value one word."""
    documented = CLUSTER_ENV.get(spec.cluster.name)
    if documented is None:
        return ""
    lines = [f"# {spec.cluster.name}'s documented environment ({documented.source}); "
             "trial.env below wins.", *(f"# {note}" for note in documented.notes)]
    for name, value in documented.variables.items():
        if name not in spec.trial.env:
            words = JOB_ID.join(shlex.quote(part) if part else "" for part in value.split("{job}"))
            lines.append(f"export {name}={words}")
    return "".join(line + "\n" for line in lines)


def run_context(spec: CampaignSpec, in_workdir: bool = True) -> str:
    """Shell lines that give a script the cluster's documented environment and the campaign's
    `trial.env` and, `in_workdir`, put it where the trials ran (`trial.workdir`, which a saved
    spec holds absolute), for a program whose relative paths start there; each line ends in a
    newline."""
    lines = []
    if in_workdir and spec.trial.workdir:
        lines += ["# The folder the campaign's trials ran in: their relative paths start here.",
                  f"cd {shlex.quote(spec.trial.workdir)}"]
    lines += [env_line(k, v) for k, v in spec.trial.env.items()]
    return cluster_env(spec) + "".join(line + "\n" for line in lines)
