"""The error every layout check raises."""


class InvalidConfig(ValueError):
    """A layout that cannot run; the message names every factor involved."""
