"""Exceptions that carry what the run produced before it stopped."""
from __future__ import annotations

from typing import Any


class SamplingError(RuntimeError):
    """A run stopped on a numerical failure. `.worker` and `.round` say where; `.result` keeps the draws so far."""

    def __init__(self, message: str, *, worker: int | None, round: int, result: Any) -> None:
        super().__init__(message)
        self.worker = worker
        self.round = round
        self.result = result

    def __reduce__(self):
        return (_rebuild, (str(self), self.worker, self.round, self.result))


def _rebuild(message: str, worker: int | None, round: int, result: Any) -> SamplingError:
    return SamplingError(message, worker=worker, round=round, result=result)
