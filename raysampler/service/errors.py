"""The service layer's errors; the API turns each into one HTTP status (api/errors.py)."""

from __future__ import annotations


class FieldError(ValueError):
    """A request field the service rejects (422); `loc` names the field as in pydantic's errors: within the body,
    unless it starts with "query", "path" or "header"."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class AccessDenied(FieldError):
    """A request field naming data the tenant may not use (403): a site shard's path outside its data grants.
    The message names the field and the rule, never anything about the file."""


class NotFound(LookupError):
    """No such run or data set for this tenant (404); the message names it."""


class StateConflict(RuntimeError):
    """The request does not fit the run's state (409), e.g. DELETE of a RUNNING run."""


class TooLarge(ValueError):
    """A request body over the configured limit (413)."""


class QuotaExceeded(RuntimeError):
    """A tenant limit is reached (429); the message names the limit. `retry_after_s` is set when waiting helps
    (e.g. once an active run ends), None when only freeing space or a smaller run does."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
