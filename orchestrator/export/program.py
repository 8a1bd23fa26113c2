"""The program a campaign measured, as shell words for a launch file: rendered by the trainer's
own adapter (so a launch file runs what the trials ran), with the trial folder's paths moved
into the run's own folder, $RUN_DIR, and the files the program reads written there first.

What only a trial needs is left behind or named: the DeepSpeed config loses its trial-only
keys (the winner's own copy, as it ran, is the source), and the arguments that carry the
trial's length are found by rendering the program at two lengths and named in the file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from orchestrator.common.bounded_files import UnreadableFile, read_bounded
from orchestrator.common.bounded_json import NotJson, UnfitJson, loads_bounded
from orchestrator.common.errors import SpecError
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers import trainer_for
from orchestrator.trainers.deepspeed.config import base_config, production_config
from orchestrator.trial.folder import DEEPSPEED_CONFIG_FILE, RESULT_FILE, SETTINGS_FILE

# Stands for the run folder in rendered arguments; no spec value can hold a NUL.
RUN_DIR_MARK = "\0RUN_DIR\0"
RUN_DIR_FOLDER = SimpleNamespace(
    path=RUN_DIR_MARK, deepspeed_config=f"{RUN_DIR_MARK}/{DEEPSPEED_CONFIG_FILE}",
    settings_file=f"{RUN_DIR_MARK}/{SETTINGS_FILE}", result_file=f"{RUN_DIR_MARK}/{RESULT_FILE}")
CONFIG_MAX_BYTES = 1 << 20  # a DeepSpeed config is a few KB
CONFIG_MAX_DEPTH = 32  # it nests 3 or 4 levels
LONGER = 7919  # extra steps for the second rendering: the words that change carry the length


@dataclass(frozen=True)
class ExportedProgram:
    """A measured program for a launch file: its argv as shell words, how its ranks start,
    the files it reads from $RUN_DIR and the environment the trainer set."""

    words: list[str]
    launcher: str
    files: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    length_args: list[str] = field(default_factory=list)  # as the trials had them
    measurement_args: list[str] = field(default_factory=list)  # logging only a trial needs


def run_dir_word(item: str) -> str:
    """One argument as one shell word: text single-quoted, the run folder double-quoted so
    that only $RUN_DIR expands."""
    parts = item.split(RUN_DIR_MARK)
    return '"$RUN_DIR"'.join(shlex.quote(p) if p else "" for p in parts) or "''"


def length_args(short: list[str], long: list[str]) -> list[str]:
    """The arguments of a program rendered at two lengths that differ (the trial's length),
    each with the flag before it where it is a flag's value."""
    found: list[str] = []
    for i, (a, b) in enumerate(zip(short, long)):
        if a != b:
            flag = short[i - 1] if i and short[i - 1].startswith("-") and \
                not a.startswith("-") else None
            found += [flag, a] if flag and flag not in found[-1:] else [a]
    return found


def paired(words: list[str]) -> list[str]:
    """Shell words with each flag and its value on one line, for a file a person edits."""
    lines: list[str] = []
    for word in words:
        if lines and lines[-1].startswith("-") and " " not in lines[-1] \
                and not word.startswith("-"):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def winner_deepspeed_config(spec: CampaignSpec, trial_dir: Path | None,
                            render: Callable[[], dict]) -> dict:
    """The DeepSpeed config the winner ran (its folder's copy, else `render()`, the layout's
    as it renders now), less the keys only a trial needs (back to the base config's values
    where it still reads)."""
    data = None
    if trial_dir is not None:
        # The trial's own copy, read as the trial left it: never through a link (the reader may
        # be the service, entitled to files the trial is not), bounded in size and nesting.
        try:
            data = loads_bounded(read_bounded(trial_dir / DEEPSPEED_CONFIG_FILE,
                                              CONFIG_MAX_BYTES), CONFIG_MAX_DEPTH)
        except (UnreadableFile, UnfitJson, NotJson):
            data = None  # missing or damaged: the layout's config as rendered now
    if not isinstance(data, dict):
        data = render()
    try:
        base = base_config(spec)
    except SpecError:
        base = None  # the base file is gone: the trial's copy is all the export needs
    return production_config(data, base)


def exported_program(spec: CampaignSpec, trial_id: str, layout: Layout,
                     trial_dir: Path | None = None) -> ExportedProgram:
    """The campaign's trainer's program for `config`, as its trial `trial_id` ran it."""
    trainer = trainer_for(spec)
    run = trainer.run(spec, layout, trial_id, RUN_DIR_FOLDER, spec.trial.steps)
    longer = trainer.run(spec, layout, trial_id, RUN_DIR_FOLDER, spec.trial.steps + LONGER)
    read = [name for name in run.files
            if any(f"{RUN_DIR_MARK}/{name}" in item for item in run.program)]
    files = {name: run.files[name] for name in read}
    if DEEPSPEED_CONFIG_FILE in files:
        rendered = json.loads(files[DEEPSPEED_CONFIG_FILE])
        files[DEEPSPEED_CONFIG_FILE] = json.dumps(
            winner_deepspeed_config(spec, trial_dir, lambda: rendered), indent=2)
    return ExportedProgram(
        words=[run_dir_word(item) for item in run.program], launcher=run.launcher,
        files=files, env=dict(run.env), length_args=length_args(run.program, longer.program),
        measurement_args=[a for a in run.program if a in trainer.measurement_args])


def uses_run_dir(program: ExportedProgram) -> bool:
    """Whether a launch file needs $RUN_DIR: a file to write there, or an argument naming it
    (a result file the program writes); else it makes no folder."""
    return bool(program.files) or any('"$RUN_DIR"' in word for word in program.words)


def write_files(files: dict[str, str]) -> str:
    """Shell lines that make $RUN_DIR (default ./paratune-run, made absolute) and write each
    file into it with printf, each of its lines one single-quoted word: no text can end that
    quoting early (a here-document would end at any line that reads as its terminator), and
    nothing in it expands."""
    lines = 'mkdir -p "${RUN_DIR:=paratune-run}"\nRUN_DIR=$(cd "$RUN_DIR" && pwd)\n'
    for name, text in files.items():
        words = "".join(f"  {shlex.quote(line)} \\\n" for line in text.split("\n"))
        lines += (f"# $RUN_DIR/{shlex.quote(name)}: each line below is one line of it, quoted\n"
                  f"printf '%s\\n' \\\n{words}  > \"$RUN_DIR\"/{shlex.quote(name)}\n")
    return lines


def measurement_note(args: list[str]) -> str:
    """A comment that names the arguments the trials added only to be measured."""
    if not args:
        return ""
    return (f"# Trial logging: {' '.join(map(shlex.quote, args))} logged every step for the "
            "trials' measurement; drop them for a production run.\n")


def length_note(spec: CampaignSpec, args: list[str]) -> str:
    """A comment that names the arguments carrying the trials' length."""
    if not args:
        return ""
    shown = " ".join(shlex.quote(a.replace(RUN_DIR_MARK, "$RUN_DIR")) for a in args)
    return (f"# Trial length: {shown} ran the trials' {spec.trial.steps} timed + "
            f"{spec.trial.warmup_steps} warm-up steps; set the run's own length.\n")
