"""Named choices shared across layers (service settings, run, runtime). String enums, so each value serialises (JSON,
REST, logs) as the plain string users pass; `parse` turns a user's input into one with an error naming the argument."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

E = TypeVar("E", bound=StrEnum)


def parse(kind: type[E], value: object, name: str) -> E:
    """`value` as a member of `kind`, or ValueError naming the argument `name` and the accepted values."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    choices = ", ".join(repr(m.value) for m in kind)
    raise ValueError(f"{name} must be one of {choices}, got {value!r}")


class Executor(StrEnum):
    """Where a run's coordinator lives: in this process, or as a Ray actor that starts worker actors."""

    LOCAL = "local"
    RAY = "ray"


class TransportKind(StrEnum):
    """How a round's messages reach Ray worker actors: direct channels (shared memory / TCP), or Ray actor calls."""

    SOCKET = "socket"
    ACTOR = "actor"


class StopReason(StrEnum):
    """Why a run stopped (`Run.stop_reason`, `result.outcome.stop_reason`)."""

    COMPLETED = "completed"
    CONVERGED = "converged"
    MAX_ROUNDS = "max_rounds"
    TIME_BUDGET = "time_budget"
    #: the DP mode: the next round's release would have taken a site's ε(δ) above the budget (`rs.DP`)
    PRIVACY_BUDGET = "privacy_budget"
    FAILURE = "failure"
    STOPPED = "stopped"


class Balance(StrEnum):
    """Step-count balancing policy (users pass "auto", True or False; `Balance.of`); REPLAY is internal: follow a
    recorded schedule."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"
    REPLAY = "replay"

    @classmethod
    def of(cls, value: object, name: str = "balance") -> Balance:
        """A user's `balance` ("auto", True, False, or a member) as a policy; anything else is a ValueError."""
        if isinstance(value, Balance):
            return value
        if isinstance(value, bool):
            return cls.ALWAYS if value else cls.NEVER
        if value == "auto":
            return cls.AUTO
        raise ValueError(f"{name} must be 'auto', True or False, got {value!r}")
