"""Runs the admitted campaigns' controllers: starts them in queue order, restarts the ones
that die (resume, with back-off), cancels on request, and on its own start resumes or adopts
every campaign that was running. It reads the database and the campaign views; it never
schedules a trial.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from sqlalchemy import func, select

from orchestrator.server.admission import start_refusal
from orchestrator.server.auth import new_token
from orchestrator.server.campaign_summary import ProgressCache
from orchestrator.server.config import ServiceConfig
from orchestrator.server.controller_process import (
    CANCEL,
    CONTROL,
    GONE,
    ControllerProcess,
    controller_argv,
    how_it_ended,
    last_line,
)
from orchestrator.server.isolation import RunAs, write_service_file
from orchestrator.server.db import (
    CANCELLED,
    FAILED,
    FINISHED,
    QUEUED,
    RUNNING,
    Campaign,
    Database,
)
from orchestrator.server.slot_pool import SlotPool
from orchestrator.campaign_spec import SPEC_FILE

log = logging.getLogger("paratune.server")
EXIT_USAGE, EXIT_CANCELLED, EXIT_DETACHED = 2, 130, 143
DETACH_WAIT_S = 30.0
LOCK_CHECK_S = 5.0  # how often the supervisor checks that it still holds the database's lock
# A client's settings (orchestrator/cli/service_client.py): with them, a controller's own
# `paratune cancel` would ask this service instead of acting, and the user's token would leak
# into every controller and trial.
CLIENT_ENV = ("PARATUNE_SERVER", "PARATUNE_TOKEN")
# The server's own: its database URL (a PostgreSQL password) is no controller's business.
SERVER_ENV = ("PARATUNE_DATABASE_URL",)


class Supervisor:
    def __init__(self, db: Database, config: ServiceConfig, slots: SlotPool,
                 progress: ProgressCache, slots_url: str,
                 lock_held: Callable[[], bool] = lambda: True, run_as: RunAs | None = None):
        self.db = db
        self.run_as = run_as  # the OS user controllers run as (isolation.py); None: ours
        self.lock_held = lock_held  # the database's lock (database_lock.py), checked now and then
        self.config = config
        self.slots = slots
        self.progress = progress
        self.slots_url = slots_url  # the API's base URL, for the controllers' slot requests
        self.processes: dict[str, ControllerProcess] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Detach every controller (SIGTERM): trials keep running, campaigns stay `running`
        in the database and are resumed by the next service."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for process in self.processes.values():
            process.signal(signal.SIGTERM)
        for name, process in self.processes.items():
            if not process.wait(DETACH_WAIT_S):
                log.warning("controller of %s (PID %d) did not detach in %.0f s",
                            name, process.pid, DETACH_WAIT_S)

    def _run(self) -> None:
        checked = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - checked >= LOCK_CHECK_S:
                checked = time.monotonic()
                if not self.lock_held():
                    self._leave()
                    return
            try:
                self.tick()
            except Exception:  # the database may be away for a moment; the next tick retries
                log.exception("supervisor tick failed")
            self._stop.wait(self.config.tick_s)

    def _leave(self) -> None:
        """Another service took the database's lock while ours was lost (its PostgreSQL
        restarted): its campaigns are that one's now, so this service stops the graceful way
        (its controllers detach) rather than run them a second time."""
        log.error("another paratune server took the database's lock while this one's session "
                  "was lost; stopping, and leaving the campaigns to it")
        os.kill(os.getpid(), signal.SIGTERM)

    def tick(self) -> None:
        with self.db.session() as s:
            for row in s.scalars(select(Campaign).where(Campaign.state == RUNNING)).all():
                self._watch(row)
            self._admit(s)

    # ------------------------------------------------------------------ running campaigns

    def _watch(self, row: Campaign) -> None:
        process = self.processes.get(row.name)
        if process is None and row.cancel_requested and not row.controller_pid:
            self._ended(row, GONE)  # cancelled while no controller ran (in back-off)
            return
        if process is None:
            process = ControllerProcess.adopt(row.controller_pid, row.controller_start)
            if process is not None:
                self.processes[row.name] = process
            elif time.time() >= row.next_start_at:
                self._launch(row)
            return
        code = process.poll()
        if code is None:
            if row.cancel_requested and process.purpose == CONTROL and not process.interrupted:
                process.interrupt()
            return
        del self.processes[row.name]
        row.controller_pid = row.controller_start = None
        if process.purpose == CANCEL:  # a campaign that finished first stays finished
            finished = self.progress.progress(row.name).journal_state == "finished"
            self._final(row, FINISHED if finished else CANCELLED, None if finished else "cancelled")
        else:
            self._ended(row, code, time.monotonic() - process.since)

    def _ended(self, row: Campaign, code: int | object, ran_s: float = 0.0) -> None:
        journal_state = self.progress.progress(row.name).journal_state
        if row.cancel_requested or code == EXIT_CANCELLED or journal_state == "cancelled":
            if journal_state != "cancelled" and self._cancel_leftovers(row):
                return  # cancelled once `paratune cancel` has ended the trials
            self._final(row, CANCELLED, "cancelled" if row.cancel_requested
                        else "the controller was interrupted; its trials were cancelled")
        elif code == 0 or journal_state == "finished":
            self._final(row, FINISHED, None)
        elif code == EXIT_USAGE:
            line, earlier = last_line(self.config.log_path(row.name))
            self._final(row, FAILED, line if line and not earlier
                        else "the controller refused the spec")
        elif code is GONE or code in (EXIT_DETACHED, -signal.SIGTERM):
            row.next_start_at = 0.0  # detached (a service stopped): resume now, no back-off
        else:
            if ran_s >= self.config.healthy_run_s:
                row.restarts = 0  # it ran well: only deaths in quick succession fail a campaign
            row.restarts += 1
            how = f"{how_it_ended(code)}; {self._last_words(row.name)}"
            if row.restarts > self.config.max_restarts:
                self._final(row, FAILED, f"the controller died {row.restarts} times in a row; "
                                         f"the last time it {how}")
                return
            delay = min(60.0, self.config.backoff_s * 2 ** (row.restarts - 1))
            row.next_start_at = time.time() + delay
            row.reason = f"the controller {how}; restart {row.restarts} in {delay:.0f} s"
            log.warning("%s: %s", row.name, row.reason)

    def _final(self, row: Campaign, state: str, reason: str | None) -> None:
        row.state, row.reason, row.ended_at = state, reason, time.time()
        row.held_slots, row.waiting_since, row.slot_digest = 0, None, None

    def _cancel_leftovers(self, row: Campaign) -> bool:
        """Start `paratune cancel`: it ends the trials a dead or detached controller left
        running, and journals the campaign as cancelled (a controller interrupted with SIGINT
        stops its trials but leaves its campaign resumable). False when nothing was started."""
        if not (self.config.runs_dir / row.name / SPEC_FILE).exists():
            return False
        process = ControllerProcess.launch(controller_argv("cancel", row.name),
                                           self.controller_env(), self.config.log_path(row.name),
                                           self.controller_cwd(), purpose=CANCEL,
                                           run_as=self.run_as)
        self.processes[row.name] = process
        row.controller_pid, row.controller_start = process.pid, process.started
        return True

    def _launch(self, row: Campaign) -> None:
        resume = (self.config.runs_dir / row.name / SPEC_FILE).exists()
        spec_file = self.config.spec_path(row.name)
        if not resume:
            spec_file.parent.mkdir(parents=True, exist_ok=True)
            write_service_file(spec_file, row.spec_yaml)
        argv = controller_argv("resume", row.name) if resume else controller_argv("run", str(spec_file))
        token, row.slot_digest = new_token()
        env = self.controller_env({"PARATUNE_SLOTS_URL": f"{self.slots_url}/api/slots/{row.name}",
                                   "PARATUNE_SLOTS_TOKEN": token})
        process = ControllerProcess.launch(argv, env, self.config.log_path(row.name),
                                           self.controller_cwd(), run_as=self.run_as)
        self.processes[row.name] = process
        row.controller_pid, row.controller_start = process.pid, process.started
        row.started_at = row.started_at or time.time()
        row.reason = None  # a restart's back-off note no longer applies
        log.info("%s: controller PID %d (%s)", row.name, process.pid, argv[3])

    def controller_cwd(self) -> str:
        """Where controllers start: the service's folder, or for a user of their own the
        trials' empty working folder, which that user may enter and not change (`python -m`
        imports from the folder it starts in: from the runs directory, a module one campaign's
        trial planted there would run in every other campaign's controller)."""
        return str(self.config.trial_workdir) if self.run_as else os.getcwd()

    def controller_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PARATUNE_SLOTS_") and k not in CLIENT_ENV + SERVER_ENV}
        env["PARATUNE_RUNS_DIR"] = str(self.config.runs_dir)
        if self.run_as:  # its own home and caches: the service's are out of its reach
            env = self.run_as.environment(env, self.config.runs_dir)
        return {**env, **(extra or {})}

    def _last_words(self, name: str) -> str:
        line, earlier = last_line(self.config.log_path(name))
        if not line:
            return "it wrote nothing"
        return f"its last line{' (from an earlier start)' if earlier else ''}: {line}"

    # ------------------------------------------------------------------ the queue

    def _admit(self, s) -> None:
        running = s.scalar(select(func.count()).select_from(Campaign)
                           .where(Campaign.state == RUNNING))
        queued = s.scalars(select(Campaign).where(Campaign.state == QUEUED)
                           .order_by(Campaign.priority.desc(), Campaign.submitted_at)).all()
        for row in queued:
            if running >= self.config.max_running:
                row.reason = (f"waiting: {running} of {self.config.max_running} campaigns "
                              "running (server --max-running)")
                continue
            refused = start_refusal(s, self.db, self.config, row)
            if refused:  # a token, grant or quota taken back while it waited
                self._final(row, FAILED, refused)
                log.warning("%s: %s", row.name, refused)
                continue
            row.state, row.reason = RUNNING, None
            running += 1
            self._launch(row)
