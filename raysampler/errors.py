"""What went wrong in a run, as one record (`Failure`) that travels unchanged from a worker to the caller.

A worker that raises wraps the cause in `WorkerFailed(Failure(...))`; the runtime moves that record (over a
channel, through Ray, or in-process), the coordinator adds what it knows (round, site, node), and the run ends
with `SamplingError`, whose `.failure` is the same record. The service stores it with the run and shows it
over REST, so no layer ever parses a message to find the shard or the round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any


class FailureKind(str, Enum):
    """Why a run stopped."""

    WORKER_ERROR = "worker_error"  # a worker's local step raised (a bug or bad data on its shard)
    WORKER_LOST = "worker_lost"  # a worker process or its node died, or its connection broke
    NON_FINITE = "non_finite"  # a worker's reply holds NaN or inf (a chain diverged on its shard)
    COORDINATOR_NON_FINITE = "coordinator_non_finite"  # the coordinator's draw became NaN or inf
    COORDINATOR_LOST = "coordinator_lost"  # the coordinator process died
    SITE_UNAVAILABLE = "site_unavailable"  # no live node carries the shard's site label
    CHECKPOINT = "checkpoint"  # a checkpoint could not be read or does not fit this run
    ACCESS = "access"  # a site shard's file lies outside the data granted to the run's tenant on its site


@dataclass(frozen=True)
class Failure:
    """One failure: its kind, a human message, and where it happened when known (shard, site, node, round).

    `message` says what happened in words (without the location, which the fields carry); `traceback` is the
    failing side's traceback text, if any.
    """

    kind: FailureKind
    message: str
    round: int | None = None
    shard: int | None = None
    site: str | None = None
    node_id: str | None = None
    traceback: str | None = None

    def at(self, **where: Any) -> Failure:
        """The same failure with location fields filled in where they are still unknown."""
        fill = {k: v for k, v in where.items() if v is not None and getattr(self, k) is None}
        return dataclasses.replace(self, **fill) if fill else self

    def describe(self) -> str:
        """One line: what failed, where and when."""
        place = [f"site {self.site!r}"] if self.site is not None else []
        place += [f"node {self.node_id[:12]}"] if self.node_id is not None else []
        subject = f"worker {self.shard}" if self.shard is not None else "the run"
        when = f" in round {self.round}" if self.round is not None else ""
        where = f" ({', '.join(place)})" if place else ""
        return f"{subject} failed{when}{where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (kind as its string value)."""
        out = dataclasses.asdict(self)
        out["kind"] = self.kind.value
        return out


#: One step of an argument path: an argument's name, or an index into a sequence argument.
PathPart = str | int


class ArgumentError(ValueError):
    """A caller-facing argument was rejected. `.path` names it (e.g. ("model", "coef_prior", "scale"), ("num_rounds",),
    ("algorithm", "step_size")), so callers map it without parsing `.message`; a ValueError for existing handlers."""

    def __init__(self, path: tuple[PathPart, ...], message: str) -> None:
        super().__init__(message)
        self.path = tuple(path)
        self.message = message

    def within(self, *prefix: PathPart) -> ArgumentError:
        """The same error with its path under `prefix` (a prior's ("scale",) inside ("model", "coef_prior"))."""
        return ArgumentError((*prefix, *self.path), self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ArgumentError, (self.path, self.message))


class WorkerFailed(RuntimeError):
    """Raised inside the runtime when a worker fails; carries the `Failure` record (picklable across processes)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.describe())
        self.failure = failure

    def __reduce__(self) -> tuple[Any, ...]:
        return (WorkerFailed, (self.failure,))


def failure_of(exc: BaseException) -> Failure | None:
    """The `Failure` an exception carries (a WorkerFailed, also when re-raised through Ray), else None."""
    failure = getattr(exc, "failure", None)
    if failure is None:
        failure = getattr(getattr(exc, "cause", None), "failure", None)
    return failure if isinstance(failure, Failure) else None


class RunCancelled(RuntimeError):
    """A run was cancelled before its set-up finished (`ExecutionOptions.cancel` set): its processes are stopped."""


class SamplingError(RuntimeError):
    """A run stopped on a failure. `.failure` says what and where; `.result` keeps every draw made before it.

    `.worker` (the failing shard, or None) and `.round` are shortcuts into `.failure`.
    """

    def __init__(self, failure: Failure, result: Any) -> None:
        super().__init__(failure.describe())
        self.failure = failure
        self.result = result

    @property
    def worker(self) -> int | None:
        return self.failure.shard

    @property
    def round(self) -> int | None:
        return self.failure.round

    def __reduce__(self) -> tuple[Any, ...]:
        return (SamplingError, (self.failure, self.result))
