"""Checks a campaign passes before it starts, against this machine rather than the spec alone:
a non-empty space, the trial's working directory, program or training script, a usable runs
directory. Each
failure is one UserError line naming the key, raised before anything is written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from orchestrator.common.errors import UserError, excerpt
from orchestrator.space import Layout
from orchestrator.campaign_spec import CampaignSpec


def preflight(spec: CampaignSpec) -> list[Layout]:
    candidates = spec.candidates()  # an empty space is an error that says why
    if spec.backend.kind == "local":  # other backends run trials on other machines
        workdir = _check_workdir(spec.trial.workdir)
        if spec.trial.command:
            _check_program(spec.trial.command[0], workdir, spec.trial.env.get("PATH"))
        script = _trainer_script(spec)
        if script is not None and not (workdir / script[1]).is_file():
            raise UserError(f"{script[0]}: {excerpt(script[1])} is not a file (relative paths "
                            f"start at trial.workdir, {excerpt(str(workdir))}); give the "
                            "training script's path")
    _check_runs_dir(spec)
    return candidates


def _trainer_script(spec: CampaignSpec) -> tuple[str, str] | None:
    """(spec key, path) of the script a torchrun-launched trainer runs, if it has one."""
    from orchestrator.trainers.registry import trainer_for  # the adapters read the spec

    return trainer_for(spec).script(spec)


def _check_workdir(workdir: str | None) -> Path:
    if workdir is None:
        return Path.cwd()
    path = Path(workdir)
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise UserError(f"trial.workdir: {excerpt(workdir)} {what}; give the directory the "
                        "trainer runs in")
    return path


def _check_program(program: str, workdir: Path, path_env: str | None) -> None:
    if "{" in program:
        return  # filled in per trial
    if "/" in program:
        target = workdir / program
        if not (target.is_file() and os.access(target, os.X_OK)):
            raise UserError(f"trial.command[0]: {excerpt(program)} is not an executable file "
                            f"(relative paths start at trial.workdir, {excerpt(str(workdir))})")
        return
    if shutil.which(program, path=path_env or os.environ.get("PATH")) is None:
        raise UserError(f"trial.command[0]: program {excerpt(program)} not found on PATH; "
                        "install it or give its path")


def _check_runs_dir(spec: CampaignSpec) -> None:
    root = spec.runs_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        usable = root.is_dir() and os.access(root, os.W_OK | os.X_OK)
    except OSError as exc:
        raise UserError(f"tracking.runs_dir: cannot create {excerpt(str(root))} "
                        f"({exc.strerror or exc}); choose a writable directory with --set "
                        "tracking.runs_dir=DIR (or $PARATUNE_RUNS_DIR, which takes precedence)") from None
    if not usable:
        raise UserError(f"tracking.runs_dir: {excerpt(str(root))} is not a writable directory; "
                        "choose another with --set tracking.runs_dir=DIR (or $PARATUNE_RUNS_DIR, "
                        "which takes precedence)")
    campaign = spec.campaign_dir()
    if campaign.exists() and not campaign.is_dir():
        raise UserError(f"name: {excerpt(str(campaign))} exists and is not a campaign "
                        "directory; choose another name")
