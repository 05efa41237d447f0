"""The service layer's errors; the API turns each into one HTTP status (api/errors.py)."""
from __future__ import annotations


class FieldError(ValueError):
    """A request field the service rejects (422); `loc` names the field as in pydantic's errors."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class NotFound(LookupError):
    """No such run or data set for this tenant (404); the message names it."""


class StateConflict(RuntimeError):
    """The request does not fit the run's state (409), e.g. DELETE of a RUNNING run."""


class TooLarge(ValueError):
    """A request body over the configured limit (413)."""
