"""How a controller leaves early: control flow, not errors. Both are BaseExceptions, so no
`except Exception` on the way out takes them for a failure."""


class Detached(BaseException):
    """SIGTERM: the controller leaves at once and its trials run on, to be re-attached by
    `paratune resume`. A BaseException, so that nothing on the way out mistakes it for a
    failure (and cancels the trials, as an interrupt does)."""

    def __init__(self, campaign: str = ""):
        super().__init__(campaign)
        self.campaign = campaign


class DetachRequest:
    """A SIGTERM the controller has received, kept where the scheduling loop can see it.

    The signal handler raises `Detached` at once, but Python runs a handler wherever the main
    thread happens to be, a garbage collector's finalizer included, and an exception raised
    there is printed ("Exception ignored in ...") and dropped. The loop asks `requested` on
    every turn, so a controller whose first `Detached` was dropped still leaves at its next
    turn instead of running on, asking a service that is gone for its slots."""

    def __init__(self) -> None:
        self.requested = False


class Interrupted(BaseException):
    """Ctrl-C in a campaign's controller, after its trials were stopped: `campaign` names it
    when it was saved (resumable), else None (nothing was written)."""

    def __init__(self, campaign: str | None):
        super().__init__(campaign)
        self.campaign = campaign
