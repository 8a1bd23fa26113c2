"""Which campaign a results command means when its name is left out (the latest started under
the runs directory) or cut short (`quickstart` for `make demo`'s `quickstart-<date-time>`: the
latest started of the campaigns whose names begin with it), and the line that says which."""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.common.errors import CampaignStateError
from orchestrator.record.campaign import JOURNAL_FILE
from orchestrator.record.journal import Journal
from orchestrator.campaign_spec.campaign_folders import SPEC_FILE, saved_campaigns, starting_with
from orchestrator.campaign_spec.strings import check_campaign_name


def started_at(runs_dir: Path, name: str) -> float:
    """When the campaign started, as its journal says; its saved spec's time for a journal
    that does not say (or cannot be read: the command that opens it says why)."""
    folder = Path(runs_dir) / name
    try:
        started = Journal(folder / JOURNAL_FILE, name=name).campaign_info().get("started_at")
    except CampaignStateError:
        started = None
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        return float(started)
    try:
        return (folder / SPEC_FILE).stat().st_mtime
    except OSError:
        return 0.0


def choose_campaign(runs_dir: Path, name: str | None) -> tuple[str, str | None]:
    """The campaign `name` means, and a line saying which when that is not `name` itself. A
    name that is neither a campaign nor the start of one is returned as it is: opening it
    gives the one-line error with its "did you mean"."""
    runs_dir = Path(runs_dir)
    if name is not None:
        check_campaign_name(name)
        if (runs_dir / name / SPEC_FILE).is_file():
            return name, None
        candidates = starting_with(name, saved_campaigns(runs_dir))
        if not candidates:
            return name, None
    else:
        candidates = saved_campaigns(runs_dir)
        if not candidates:
            raise CampaignStateError(
                f"no campaigns under {runs_dir}/; start one with `paratune run SPEC.yaml`, "
                "or pass --runs-dir (or set $PARATUNE_RUNS_DIR)")
    times = {n: started_at(runs_dir, n) for n in candidates}
    latest = max(times.values())
    newest = [n for n, t in times.items() if t == latest]
    if len(newest) > 1:
        raise CampaignStateError(
            f"{', '.join(newest)} started at the same time; name the campaign you mean")
    chosen = newest[0]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(latest))
    if name is None:
        return chosen, f"campaign: {chosen}, the latest started under {runs_dir}/ ({when})"
    if len(candidates) == 1:
        return chosen, f"campaign: {chosen}, the only one whose name begins with {name!r}"
    return chosen, (f"campaign: {chosen}, the latest started ({when}) of the "
                    f"{len(candidates)} whose names begin with {name!r}")
