"""What a campaign's journal says, for the API: trials, counts, GPU-hours, best so far.

Read through the campaign view, never the controller. Every poll of every client lands here,
so a campaign's answer is cached until its journal changes (size or mtime).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.common.errors import UserError, one_line
from orchestrator.record.campaign import CampaignView, unfinished_label
from orchestrator.campaign_spec import load_campaign_spec


@dataclass
class Progress:
    trials: int = 0  # run or running (of max_trials); pruned layouts are only in counts
    max_trials: int = 0
    running: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    gpu_hours: float = 0.0
    best: dict[str, Any] | None = None
    journal_state: str = "incomplete"  # finished | cancelled | incomplete (the view's word)
    mlflow_uri: str | None = None
    experiment: str | None = None
    problem: str | None = None  # why its journal cannot be read, if it cannot
    lines_skipped: int = 0  # journal lines no reader can use

    def as_ended(self, state: str) -> "Progress":
        """As a campaign in `state` shows it: once it is over (finished, failed, cancelled),
        trials its journal never saw end ran no more; they are counted as cancelled or
        unfinished, not running."""
        label = unfinished_label(state)
        if label == "running" or not self.running:
            return self
        counts = dict(self.counts)
        if left := counts.pop("running", 0):
            counts[label] = counts.get(label, 0) + left
        return dataclasses.replace(self, running=0, counts=counts)

    def to_dict(self) -> dict[str, Any]:
        return {"trials": self.trials, "max_trials": self.max_trials, "running": self.running,
                "counts": self.counts, "gpu_hours": self.gpu_hours, "best": self.best,
                "journal_problem": self.problem, "journal_lines_skipped": self.lines_skipped}


class ProgressCache:
    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir
        self._cache: dict[str, tuple[tuple[int, int], Progress]] = {}
        self._views: dict[str, CampaignView] = {}
        self._reading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def view(self, name: str) -> CampaignView | None:
        """The campaign's view once its controller has saved the spec; None before. A saved
        spec never changes, so its view is read once."""
        with self._lock:
            view = self._views.get(name)
        if view is None:
            try:
                view = CampaignView(load_campaign_spec(self.runs_dir, name))
            except UserError:
                return None
            with self._lock:
                self._views[name] = view
        return view

    def progress(self, name: str, max_trials: int = 0) -> Progress:
        view = self.view(name)
        if view is None:  # queued, or its controller has not written anything yet
            return Progress(max_trials=max_trials)
        stamp = _stamp(view.journal.path)
        with self._lock:
            cached = self._cache.get(name)
            reading = self._reading.setdefault(name, threading.Lock())
        if cached and cached[0] == stamp:
            return cached[1]
        with reading:  # one reader per campaign; the others wait and take its answer
            with self._lock:
                cached = self._cache.get(name)
            if cached and cached[0] == stamp:
                return cached[1]
            try:
                progress = _read(view)
            except UserError as exc:  # a journal that cannot be opened: this campaign only
                progress = Progress(max_trials=max_trials, problem=one_line(str(exc), 200))
            with self._lock:
                self._cache[name] = (stamp, progress)
        return progress


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)


def _read(view: CampaignView) -> Progress:
    summary = view.summary()
    records = summary.records
    metric = view.objective.metric
    best = summary.best
    budget = view.budget(records)  # trials as the budget counts them: pruned layouts never ran
    return Progress(
        trials=budget.trials, max_trials=view.spec.budget.max_trials,
        running=sum(1 for r in records if r.submitted_at is not None and not r.done),
        counts=summary.counts(), gpu_hours=budget.gpu_hours,
        best=None if best is None else {
            "trial_id": best.trial_id, "config": best.config.to_dict(), "metric": metric,
            "value": best.result.metric(metric)},
        journal_state=view.state(),
        mlflow_uri=view.spec.tracking_uri() if view.spec.tracking.enabled else None,
        experiment=f"paratune/{view.spec.name}",
        lines_skipped=len(view.journal.damage.lines),
    )
