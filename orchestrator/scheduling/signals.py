"""How a controller leaves early: control flow, not errors. Both are BaseExceptions, so no
`except Exception` on the way out takes them for a failure."""


class Detached(BaseException):
    """SIGTERM: the controller leaves at once and its trials run on, to be re-attached by
    `paratune resume`. A BaseException, so that nothing on the way out mistakes it for a
    failure (and cancels the trials, as an interrupt does)."""

    def __init__(self, campaign: str = ""):
        super().__init__(campaign)
        self.campaign = campaign


class Interrupted(BaseException):
    """Ctrl-C in a campaign's controller, after its trials were stopped: `campaign` names it
    when it was saved (resumable), else None (nothing was written)."""

    def __init__(self, campaign: str | None):
        super().__init__(campaign)
        self.campaign = campaign
