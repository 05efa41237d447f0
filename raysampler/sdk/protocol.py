"""The SDK's operations without I/O: each is a generator that yields commands (send this request, open this stream,
read from it, sleep, hand this item to the caller) and receives their results, so that one definition of each
operation serves the sync client and the asyncio one. A driver (`Client`'s, `AsyncClient`'s) performs the commands
with httpx; an error of a command (a dropped connection, an error status) is thrown into the generator at its
`yield`, where the operation decides: retry, reconnect or let it go up to the caller.

This is httpx's own design idea, one definition behind `Client` and `AsyncClient`, taken to the operations: the
retries, reconnects, deadlines and stream parsing are written once and the drivers only move bytes.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .requests import Request

T = TypeVar("T")


@dataclass(frozen=True)
class Stream:
    """An open streamed answer, by number: what `Open` gives back and `Read` names."""

    number: int


@dataclass(frozen=True)
class Send:
    """Send `request`; the reply is its httpx.Response, body read, whatever its status (the operation checks it)."""

    request: Request


@dataclass(frozen=True)
class Open:
    """Open `request` as a stream, read as `lines` (SSE) or as text chunks (NDJSON); the reply is its `Stream`. An
    error status is thrown in as APIError. `read_timeout` (seconds) bounds each read, None: the client's (none)."""

    request: Request
    lines: bool = False
    read_timeout: float | None = None


@dataclass(frozen=True)
class Read:
    """The next line or text chunk of `stream`; None once it has ended (the driver has closed it then, and on an
    error, which it throws in)."""

    stream: Stream


@dataclass(frozen=True)
class Sleep:
    """Wait `seconds` (a back-off before a retry or a reconnect)."""

    seconds: float


@dataclass(frozen=True)
class Emit:
    """Hand `item` to the caller of an iterating operation (runs, events, stream_draws); the reply is None."""

    item: Any


Command = Send | Open | Read | Sleep | Emit
#: An operation: yields commands, receives their replies, returns its value (None for one that emits items).
Op = Generator[Command, Any, T]


class Stepper(Generic[T]):
    """Moves an operation on for a driver: `next()` gives its next command (None once it has returned, its value
    then in `value`) after handing it the last command's reply (`reply`) or error (`fail`)."""

    def __init__(self, op: Op[T]) -> None:
        self.op = op
        self.value: T | None = None
        self._reply: Any = None
        self._error: BaseException | None = None

    def next(self) -> Command | None:
        try:
            if self._error is not None:
                error, self._error = self._error, None
                return self.op.throw(error)
            reply, self._reply = self._reply, None
            return self.op.send(reply)
        except StopIteration as stop:
            self.value = stop.value
            return None

    def reply(self, value: Any) -> None:
        self._reply = value

    def fail(self, error: BaseException) -> None:
        self._error = error

    def result(self) -> T:
        """The operation's value, once `next()` has said it returned."""
        return self.value  # type: ignore[return-value]  # T, set by the StopIteration that ended it


def next_item(op: Op[None]) -> Generator[Command, Any, tuple[bool, Any]]:
    """Inside another operation: run the iterating operation `op` until it emits an item, (True, item), or ends,
    (False, None); its commands pass through to the driver and their errors back to `op`."""
    stepper: Stepper[None] = Stepper(op)
    while (command := stepper.next()) is not None:
        if isinstance(command, Emit):
            return True, command.item
        try:
            stepper.reply((yield command))
        except Exception as exc:  # the driver throws a command's error in: it is op's to handle
            stepper.fail(exc)
    return False, None


def collect(op: Op[None]) -> Generator[Command, Any, list[Any]]:
    """Inside another operation: every item the iterating operation `op` emits, in order."""
    items: list[Any] = []
    while True:
        found, item = yield from next_item(op)
        if not found:
            return items
        items.append(item)
