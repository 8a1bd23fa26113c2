"""Trial slots: how many trials a campaign may run at once when several campaigns share the
machines. A controller asks before it starts each trial and reports what it holds as trials
end; the campaign service answers for all its campaigns (`ServiceSlots`), a controller run by
hand has no limit but its own `max_concurrent` (`NoSlotLimit`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

import httpx

log = logging.getLogger(__name__)


class TrialSlots(ABC):
    @abstractmethod
    def acquire(self, holding: int) -> bool:
        """May one more trial start while `holding` trials run? True holds one more."""

    @abstractmethod
    def report(self, holding: int) -> None:
        """`holding` trials run now (trials ended, or the campaign stopped)."""


class NoSlotLimit(TrialSlots):
    def acquire(self, holding: int) -> bool:
        return True

    def report(self, holding: int) -> None:
        pass


class ServiceSlots(TrialSlots):
    """Slots granted by the campaign service at `url`, with the campaign's own `token`.

    A service that cannot be reached grants nothing: trials already running go on, none is
    started until it answers again. Each outage is logged once, when it begins, and its end."""

    def __init__(self, url: str, token: str, timeout_s: float = 2.0):
        self.url = url
        self._client = httpx.Client(timeout=timeout_s,
                                    headers={"Authorization": f"Bearer {token}"})
        self._down = False

    def acquire(self, holding: int) -> bool:
        return self._post(holding, want=True)

    def report(self, holding: int) -> None:
        self._post(holding, want=False)

    def _post(self, holding: int, want: bool) -> bool:
        try:
            response = self._client.post(self.url, json={"holding": holding, "want": want})
            response.raise_for_status()
            granted = response.json().get("granted") is True
        except Exception as exc:  # any failure: not granted, never a crash of the controller
            if not self._down:
                log.warning("slot service %s unreachable (%s: %s); no new trial starts until "
                            "it answers", self.url, type(exc).__name__, str(exc)[:200])
                self._down = True
            return False
        if self._down:
            log.warning("slot service %s answers again", self.url)
            self._down = False
        return granted
