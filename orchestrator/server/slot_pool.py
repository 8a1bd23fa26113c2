"""The cluster-wide limit on concurrent trials, shared fairly across running campaigns.

A controller asks for a slot before it starts a trial, saying how many it holds; every ask and
report carries that number, so the count here heals itself after any crash (it is what the
controller last said, and stays so while no controller runs, since its trials may still run).
A slot goes to the campaign holding the fewest among those asking; ties go to the one that has
waited longest. Decisions are serialised and committed before they are answered, so a server
killed at any point never lets more than the limit run.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import select

from orchestrator.server.db import RUNNING, Campaign, Database

ASKING_WINDOW_S = 3.0  # a refused campaign still counts as asking for this long


class SlotPool:
    def __init__(self, db: Database, limit: int | None):
        self.db = db
        self.limit = limit
        self._lock = threading.Lock()

    def ask(self, name: str, holding: int, want: bool) -> bool:
        """Record that `name` holds `holding` trials; grant one more when `want` and fair."""
        now = time.time()
        with self._lock, self.db.session() as s:
            rows = {c.name: c for c in s.scalars(
                select(Campaign).where(Campaign.state == RUNNING).with_for_update())}
            me = rows.pop(name, None)
            if me is None:
                return False
            me.held_slots = max(0, holding)
            if not want:
                me.waiting_since = None
                return False
            if self._grant(me, rows.values(), now):
                me.held_slots += 1
                me.waiting_since = None
                return True
            me.waiting_since = me.waiting_since or now
            me.asked_at = now
            return False

    def _grant(self, me: Campaign, others, now: float) -> bool:
        if self.limit is None:
            return True
        if me.held_slots + sum(c.held_slots for c in others) >= self.limit:
            return False
        mine = (me.held_slots, me.waiting_since or now)
        return not any((c.held_slots, c.waiting_since) < mine for c in others
                       if c.waiting_since is not None and c.asked_at is not None
                       and now - c.asked_at < ASKING_WINDOW_S)

    def release_all(self, name: str) -> None:
        """A campaign that has ended holds nothing."""
        with self._lock, self.db.session() as s:
            row = s.get(Campaign, name)
            if row is not None:
                row.held_slots, row.waiting_since = 0, None
