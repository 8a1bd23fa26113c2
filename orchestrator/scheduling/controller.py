"""The controller: runs one campaign from its spec to recorded results.

It owns the campaign's lifetime: the lock, the backend, the searcher (with its warm start),
the MLflow session and resume. The work itself is the scheduling loop's (loop.py), fed by
proposal sources: the searcher, successive-halving promotions and the scaling study. Reading a
campaign needs none of this: see campaign.py.

How a run ends decides what happens to running trials: completion journals `campaign_end`;
an exception or interrupt cancels them (the campaign stays resumable); `Detached` (SIGTERM,
raised by the CLI's handler) leaves them running for the next controller to re-attach.
`cancel()` ends the trials a dead controller left behind and journals the campaign cancelled.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from orchestrator.backends import Backend, make_backend
from orchestrator.common.errors import CampaignStateError
from orchestrator.common.locks import CampaignLock
from orchestrator.costmodel import CostModel
from orchestrator.record.best import finish_order
from orchestrator.record.budget import Tally
from orchestrator.record.campaign import CampaignSummary, CampaignView
from orchestrator.record.journal import FINISHED, REPEAT, SCREEN, SEARCH, TrialRecord, spec_digest
from orchestrator.record.slice_summary import slice_summary
from orchestrator.scheduling.halving import HalvingPromotions
from orchestrator.scheduling.loop import EventHook, SchedulingLoop, teaches_searcher
from orchestrator.scheduling.proposals import ProposalSource, RepeatProposals, SearchProposals
from orchestrator.scheduling.requests import trial_request
from orchestrator.scheduling.scaling import ScalingStudy
from orchestrator.scheduling.signals import Detached, DetachRequest
from orchestrator.scheduling.slots import NoSlotLimit, TrialSlots
from orchestrator.scheduling.target_confirmation import TargetConfirmation
from orchestrator.scheduling.warm_start import warm_start
from orchestrator.search import Searcher, make_searcher
from orchestrator.space import Layout
from orchestrator.campaign_spec import SPEC_FILE, CampaignSpec
from orchestrator.campaign_spec.planning import cost_model_for, fitted_candidates
from orchestrator.campaign_spec.preflight import preflight
from orchestrator.campaign_spec.slice_scale import slice_spec
from orchestrator.tracking.session import TrackingSession
from orchestrator.trainers import base_config_notes
from orchestrator.trial.folder import TrialFolder

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, spec: CampaignSpec, *, backend: Backend | None = None,
                 on_event: EventHook | None = None, slots: TrialSlots | None = None,
                 detach: DetachRequest | None = None):
        self.spec = spec
        self.view = CampaignView(spec)
        self.backend = backend
        self._own_backend = backend is None  # made here, so shut down here
        self.on_event = on_event
        self.slots = slots or NoSlotLimit()
        self.detach = detach  # a SIGTERM's request to leave, seen by the loop (signals.py)
        self.loop: SchedulingLoop | None = None

    @property
    def dir(self):
        return self.view.dir

    def run(self, *, resume: bool = False) -> CampaignSummary:
        preflight(self.spec)  # before anything is written
        cost_model, searcher = self._prepare()  # what can fail from the spec, before any write
        fresh = not self.dir.exists()
        with CampaignLock(self.dir, self.spec.name):
            try:
                with self._backend():
                    return self._run(resume, cost_model, searcher)
            except BaseException as exc:
                kept = isinstance(exc, Detached) and (self.dir / SPEC_FILE).exists()
                if fresh and not kept and not self.view.journal.trials():
                    shutil.rmtree(self.dir, ignore_errors=True)  # a failed start leaves nothing
                raise

    def cancel(self) -> int:
        """Stop every trial the campaign's last controller left running (re-attached, or its
        leftovers cleaned up) and journal the campaign as cancelled; how many were running.
        While a controller runs the campaign, its lock refuses this with a one-line error."""
        if self.view.state() == FINISHED:
            raise CampaignStateError(f"campaign {self.spec.name!r} has finished; nothing to cancel")
        with CampaignLock(self.dir, self.spec.name), self._backend():
            workdir = self.spec.trial.workdir or os.getcwd()
            cost_model, stopped = cost_model_for(self.spec), 0
            for record in self.view.records():
                if record.done:
                    continue
                request = trial_request(self.spec, record, self.dir, workdir, cost_model)
                handle = self.backend.reattach(record.handle, request)
                if handle is not None:
                    handle.cancel()
                    stopped += 1
                else:
                    self.backend.cleanup(record.handle, request.folder)
            self.view.journal.record_cancelled(stopped)
        return stopped

    @contextmanager
    def _backend(self) -> Iterator[Backend]:
        """The backend trials run on; one made here is shut down here (a Ray runtime it
        started goes with it, and its trials are run again on resume)."""
        if self.backend is None:
            self.backend = make_backend(
                self.spec.backend, cost_model=cost_model_for(self.spec),
                gpus_per_node=self.spec.gpus_per_node, use_gpus=self.spec.cluster.device != "cpu")
        try:
            yield self.backend
        finally:
            if self._own_backend:
                self.backend.shutdown()

    def _run(self, resume: bool, cost_model: CostModel, searcher: Searcher) -> CampaignSummary:
        records = self.view.journal.trials()
        if records and not resume:
            raise CampaignStateError(
                f"campaign {self.spec.name!r} already has trials in {self.dir}; run "
                f"`paratune resume {self.spec.name}` or choose another name"
            )
        self._save_spec(replace=not records and not resume)
        tracking = self._tracking(list(records.values()))
        self.loop = loop = SchedulingLoop(
            self.spec, campaign_dir=self.dir, journal=self.view.journal, backend=self.backend,
            searcher=searcher, cost_model=cost_model,
            tally=Tally.of(list(records.values()), self.view.objective), records=records,
            started_at=self.view.started_at(), tracking=tracking, on_event=self.on_event,
            workdir=self.spec.trial.workdir or os.getcwd(), slots=self.slots,
            detach=self.detach,
        )
        sources = self._sources(searcher)
        try:
            self._replay(loop, searcher)
            loop.run(sources)
        except Detached:
            raise  # the trials run on; the next controller re-attaches them
        except BaseException:
            loop.cancel_running()
            raise
        summary = self.view.summary()
        summary.complete = True
        held_back = next((s.held_back for s in sources if s.held_back), None)
        summary.stop_reason = loop.stop_reason or held_back or "search space exhausted"
        for outcome in filter(None, (s.outcome(summary.records) for s in sources)):
            summary.stop_reason += "; " + outcome
        # One end per ending: resuming an ended campaign that runs nothing more adds none.
        if self.view.journal.ending() != (FINISHED, summary.stop_reason):
            self.view.journal.record_end(summary.stop_reason)
        if tracking is not None:
            tracking.finish(self._summary_metrics(summary, loop), summary.records,
                            self.view.objective.metric)
        return summary

    # ------------------------------------------------------------------ setup

    def _prepare(self) -> tuple[CostModel, Searcher]:
        """The searcher and its cost model, and the first trial's request rendered once, so a
        spec that cannot run (a bad layout, a missing warm-start source, an unreadable base
        config) fails here, before the campaign directory is written."""
        # An empty space is an error that says why; a slice campaign searches its slice's.
        candidates = fitted_candidates(slice_spec(self.spec))
        cost_model, searcher = self._searcher(candidates)
        for line in base_config_notes(self.spec, candidates):
            log.warning(line)
        if candidates:
            trial_request(self.spec, TrialRecord("t0001", candidates[0]), self.dir,
                          self.spec.trial.workdir or os.getcwd(), cost_model)
        return cost_model, searcher

    def _save_spec(self, replace: bool) -> None:
        """The campaign's directory gets its resolved spec (its trials' working folder made
        absolute) and the journal's first event; a campaign with no trial yet is started
        afresh from this spec, so the saved spec is always the one its trials ran with."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if replace or not (self.dir / SPEC_FILE).exists():
            saved = self.spec.model_dump(mode="json")
            # Trials run where the campaign started, whatever folder `resume` is run from.
            saved["trial"]["workdir"] = os.path.abspath(self.spec.trial.workdir or os.getcwd())
            (self.dir / SPEC_FILE).write_text(yaml.safe_dump(saved))
            self.view.journal.append("campaign", name=self.spec.name, started_at=time.time(),
                                     spec_digest=spec_digest(self.spec))

    def _searcher(self, candidates: list[Layout]) -> tuple[CostModel, Searcher]:
        """The starting cost model (seeded by a warm start) and the searcher it guides."""
        s = self.spec
        cost_model, prior = cost_model_for(s), []
        if s.search.warm_start:
            cost_model, prior = warm_start(s, s.search.warm_start, cost_model)
        searcher = make_searcher(
            s.search.algorithm, candidates, self.view.objective,
            seed=s.search.seed, cost_model=cost_model, stop_margin=s.search.stop_margin,
            max_repeats=s.search.max_repeats,
        )
        if prior:
            searcher.add_prior(prior)
        return cost_model, searcher

    def _tracking(self, records: list[TrialRecord]) -> TrackingSession | None:
        if not self.spec.tracking.enabled:
            return None
        tracking = TrackingSession(
            self.spec.tracking_uri(), self.spec.name, self.view.journal, self.dir,
            self.spec.runs_dir() / "mlartifacts", self._campaign_params(),
            retry_s=self.spec.tracking.retry_s, objective=self.view.objective)
        tracking.sync(records)
        return tracking

    def _sources(self, searcher: Searcher) -> list[ProposalSource]:
        """Promotions first (they confirm what the search found), then repeats of close
        contenders (without halving, which confirms instead), then the search, then the
        scaling study, or a slice campaign's confirmation at its target, once the search is
        over."""
        fidelity = self.spec.search.fidelity
        search = SearchProposals(searcher, SCREEN if fidelity else SEARCH)
        sources: list[ProposalSource] = []
        if fidelity:
            sources.append(HalvingPromotions(fidelity, self.view.objective))
        else:
            sources.append(RepeatProposals(searcher))
        sources.append(search)
        if self.spec.scale.study:
            sources.append(ScalingStudy(self.spec.scale, self.view.objective, after=search))
        if self.spec.scale.slice_nodes:
            sources.append(TargetConfirmation(self.spec, self.view.objective, after=search))
        return sources

    def _replay(self, loop: SchedulingLoop, searcher: Searcher) -> None:
        """Tell the searcher what finished, in the order it finished (as the last controller
        told it), and what it proposed that still runs; re-attach to trials whose cluster job
        still runs, and queue the others that were running when the last controller died."""
        for record in finish_order(list(loop.records.values())):
            if teaches_searcher(record):
                searcher.tell(record.config, record.result)
        for record in sorted(loop.records.values(), key=lambda r: r.trial_id):
            if record.done:
                continue
            if teaches_searcher(record):
                searcher.running(record.config, repeat=record.phase == REPEAT)
            handle = self.backend.reattach(record.handle, loop.request(record))
            if handle is not None:
                record.handle = handle.info() or record.handle
                self.view.journal.record_reattached(record)
                loop.running[record.trial_id] = (record, handle)
                loop.on_event("reattached", record)  # a front end says which, then shows it run
            else:
                self.backend.cleanup(record.handle, TrialFolder.of(self.dir, record.trial_id))
                loop.queue.append(record)

    # ------------------------------------------------------------------ MLflow summary

    def _campaign_params(self) -> dict[str, Any]:
        s = self.spec
        return {
            "model": s.model.name, "model_params": s.model.num_params, "cluster": s.cluster.name,
            "world_size": s.world_size, "nodes": s.scale.nodes,
            "global_batch_size": s.scale.global_batch_size, "search": s.search.algorithm,
            "objective": f"{s.objective.mode} {s.objective.metric}",
            "max_trials": s.budget.max_trials, "backend": s.backend.kind,
        }

    def _summary_metrics(self, summary: CampaignSummary, loop: SchedulingLoop) -> dict[str, Any]:
        out: dict[str, Any] = {f"trials_{k}": v for k, v in summary.counts().items()}
        calibration = loop.model.calibration
        if calibration is not None:
            out["calibration_median_abs_error"] = calibration.median_abs_error
            out["calibration_spearman"] = calibration.spearman
        if summary.best is not None:
            metric = self.view.objective.metric
            out[f"best_{metric}"] = summary.best.result.metric(metric)
            out["best_trial"] = summary.best.trial_id
            out["best_config"] = summary.best.config.key()
        if summary.stop_reason:
            out["stop_reason"] = summary.stop_reason
        sliced = slice_summary(self.spec, summary.records, self.view.objective) or {}
        out.update({f"slice_{k}": v for k, v in sliced.items()  # both scales, apart
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
        return out
