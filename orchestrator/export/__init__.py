"""Launch files for a campaign's winner, to be reused as they are by production runs.

Formats: `yaml` (the built-in trainer's config, `python -m jobs.train --config FILE`),
`torchrun` (a shell script) and `sbatch` (a Slurm batch script: srun + torchrun), both of the
program the campaign measured, whichever trainer it was; and each trainer's own, written by its
folder (orchestrator/trainers/<tool>/export.py, described in its README.md; `paratune
trainers` lists them). Each names the campaign and trial it came from;
the scripts (scripts.py) run where the trials ran, with their environment, and the configs
(configs.py) are the tools' own. A trainer names its own formats (`export_formats`, the default
first) and may bring writers of formats of its own (`exporters`), so a registered trainer's
formats are exported with no change here.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.export.configs import export_yaml
from orchestrator.export.program_scripts import export_program_sbatch, export_program_torchrun
from orchestrator.export.scripts import export_sbatch, export_torchrun
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec
from orchestrator.trainers.registry import adapter, names, trainer_for

# ParaTune's own formats: its job's config and the scripts of whatever program was measured.
# Every other format is a registered trainer's (its folder's `exporters`); `formats()` lists all.
OWN_FORMATS = ("yaml", "torchrun", "sbatch")
SCRIPT_FORMATS = ("torchrun", "sbatch")  # written executable, with each trainer's own scripts

# The scripts that run whatever program a campaign measured; a trainer's own writer of one
# (its `exporters`) replaces it for that trainer's campaigns only.
PROGRAM_FORMATS = ("torchrun", "sbatch")


def own_formats(spec: CampaignSpec) -> tuple[str, ...]:
    """The formats that run the program the campaign measured, its own first; any other runs
    another program with the winner's layout, which the campaign never measured."""
    return trainer_for(spec).export_formats


def own_format(spec: CampaignSpec) -> str:
    return own_formats(spec)[0]


def formats() -> tuple[str, ...]:
    """Every format `export` writes: ParaTune's and each registered trainer's own."""
    extra = [fmt for name in names() for fmt in adapter(name).exporters() if fmt not in OWN_FORMATS]
    return OWN_FORMATS + tuple(dict.fromkeys(extra))


def script_formats() -> tuple[str, ...]:
    """The formats written executable."""
    return SCRIPT_FORMATS + tuple(fmt for name in names() for fmt in adapter(name).script_formats)


def unmeasured_note(fmt: str, spec: CampaignSpec) -> str | None:
    """A line to show with a launch file for a program the campaign did not measure."""
    trainer = spec.trial.trainer
    if fmt in own_formats(spec):
        return None
    note = (f"note: campaign {spec.name!r} measured trainer {trainer}; this {fmt} file runs "
            f"another program with its winner's layout, unmeasured (its own: --format "
            f"{own_format(spec)})")
    for name in names():  # the format's own trainer may say what else to edit
        if fmt in adapter(name).exporters():
            note += adapter(name).unmeasured_export_note(spec)
    return note


def _script(builtin, program):
    """A script format: ParaTune's own job's, or the measured program's."""
    def exporter(spec, trial_id, layout, trial_dir=None):
        if not trainer_for(spec).runs_a_program:
            return builtin(spec, trial_id, layout)
        return program(spec, trial_id, layout, trial_dir)
    return exporter


def _without_folder(exporter):
    return lambda spec, trial_id, layout, trial_dir=None: exporter(spec, trial_id, layout)


EXPORTERS = {"yaml": _without_folder(export_yaml),
             "torchrun": _script(export_torchrun, export_program_torchrun),
             "sbatch": _script(export_sbatch, export_program_sbatch)}


def export(fmt: str, spec: CampaignSpec, trial_id: str, layout: Layout,
           trial_dir: Path | None = None) -> str:
    """The launch file for `config`, the campaign's trial `trial_id`; `trial_dir`, that
    trial's folder, gives the DeepSpeed config it ran."""
    writers = dict(EXPORTERS)
    for name in names():
        writers.update({f: w for f, w in adapter(name).exporters().items()
                        if f not in PROGRAM_FORMATS})
    writers.update(trainer_for(spec).exporters())
    if fmt not in writers:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(formats())}")
    return writers[fmt](spec, trial_id, layout, trial_dir)
