"""What happens to a running run besides its draws: a worker lost, the run resumed from its last capture. The
engine reports these to `on_event` (`ExecutionOptions`), the result keeps them, and the service stores them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .errors import Failure


class EventKind(StrEnum):
    """What happened to a running run (`RunEvent.kind`)."""

    WORKER_LOST = "worker_lost"
    RESUMED = "resumed"


@dataclass(frozen=True)
class RunEvent:
    """Something that happened to a running run: WORKER_LOST (with the failure) or RESUMED (from `round`)."""

    kind: EventKind
    round: int
    failure: Failure | None = None
