"""Errors a user can fix. The CLI prints their message as one line and exits with code 2."""


class UserError(Exception):
    """Bad input: the message names where (file, key), what was wrong and how to fix it."""


class SpecError(UserError):
    """The campaign spec is malformed."""


class CampaignStateError(UserError):
    """The campaign's saved state does not allow the request (missing, already exists...)."""
