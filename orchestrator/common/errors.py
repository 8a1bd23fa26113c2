"""Errors a user can fix, and how their messages quote values: the CLI prints the message as one
line and exits with code 2."""


class UserError(Exception):
    """Bad input: the message names where (file, key), what was wrong and how to fix it."""


class SpecError(UserError):
    """The campaign spec is malformed."""


class CampaignStateError(UserError):
    """The campaign's saved state does not allow the request (missing, already exists...)."""


def excerpt(value: object, limit: int = 80, quote: bool = True) -> str:
    """A value as an error may quote it: repr'd (or plain), on one line, at most `limit` chars."""
    if isinstance(value, int) and value.bit_length() > 200:  # too long to print in full
        return f"<a {value.bit_length()}-bit integer>"
    text = repr(value) if quote else "".join(c if c.isprintable() else " " for c in str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(message: str, limit: int = 480) -> str:
    """A message printed as one line of at most `limit` chars, whatever went into it."""
    text = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
