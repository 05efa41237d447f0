"""Run statuses and the service's two streams, written by the server (`raysampler.service.streaming`) and read by
the SDK (`raysampler.sdk`).

Run statuses. PENDING → RUNNING → SUCCEEDED | FAILED | CANCELLED (PENDING may also go straight to CANCELLED).

NDJSON draw stream (`GET /v1/runs/{id}/draws`). Line 0 is a header {"type": "header", ...} (`DrawsHeader`); then one
line per stored draw vector, in the order (index, chain): {"offset": o, "chain": c, "index": i, "values": [...]} with
o = i·chains + c. A client that has received m draw lines resumes with start = m and gets exactly the missing lines.
JSON has no NaN: non-finite values are the strings "NaN", "Infinity", "-Infinity".

Server-Sent Events (`GET /v1/runs/{id}/events`). Each event is "id: <seq>\\nevent: <kind>\\ndata: <json>\\n\\n" with
seq = 1, 2, ... per run; kinds and their data are the `*Event` classes below (the server adds "ts", a Unix time).
Lines starting with ":" are keep-alive comments.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol, TypedDict

import numpy as np
import orjson

NDJSON_MEDIA_TYPE = "application/x-ndjson"
EVENT_STREAM_MEDIA_TYPE = "text/event-stream"


class RunStatus(StrEnum):
    """A run's status; the value is what the API shows."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        """True once the run can no longer change (no more draws or events)."""
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class RunStopReason(StrEnum):
    """Why a finished run stopped; the value is what the API shows. The engine's `StopReason` maps onto it
    (completed → num_rounds, failure → failed), and the service adds cancelled."""

    CONVERGED = "converged"
    NUM_ROUNDS = "num_rounds"
    TIME_BUDGET = "time_budget"
    CANCELLED = "cancelled"
    MAX_ROUNDS = "max_rounds"
    FAILED = "failed"
    PRIVACY_BUDGET = "privacy_budget"


# --- non-finite numbers --------------------------------------------------------------------------------------------

NONFINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_ENCODE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def encode_values(row: np.ndarray) -> str:
    """A JSON array of floats (shortest round-trip repr, via orjson) with NaN/±inf as strings."""
    if np.all(np.isfinite(row)):
        return orjson.dumps(np.ascontiguousarray(row, dtype=np.float64), option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return json.dumps([v if math.isfinite(v) else _ENCODE[repr(v)] for v in np.asarray(row, dtype=float).tolist()])


def decode_values(values: list[Any]) -> list[float]:
    """The inverse of `encode_values` on a parsed array."""
    return [NONFINITE[v] if isinstance(v, str) else v for v in values]


# --- NDJSON draw stream --------------------------------------------------------------------------------------------

DRAW_ORDER = "offset = index * chains + chain"


@dataclass(frozen=True)
class ChainSeed:
    """How chain `chain` was seeded: numpy SeedSequence(seed) spawned along `spawn_key_prefix`."""

    chain: int
    seed: int
    spawn_key_prefix: tuple[int, ...]


@dataclass(frozen=True)
class DrawsHeader:
    """Line 0 of a draw stream: what the following lines hold."""

    run_id: str
    param_names: tuple[str, ...] | None
    chains: int
    dim: int | None
    draws_total: int
    draws_stored: int
    status: RunStatus
    start: int
    chain_seeds: tuple[ChainSeed, ...]

    @property
    def shape(self) -> tuple[int, int, int | None]:
        """(chains, draws per chain if the run goes to its end, d)."""
        return (self.chains, self.draws_total, self.dim)

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "header",
            "run_id": self.run_id,
            "param_names": None if self.param_names is None else list(self.param_names),
            "chains": self.chains,
            "dim": self.dim,
            "shape": list(self.shape),
            "draws_stored": self.draws_stored,
            "status": self.status.value,
            "start": self.start,
            "chain_seeds": [
                {"chain": s.chain, "seed": s.seed, "spawn_key_prefix": list(s.spawn_key_prefix)}
                for s in self.chain_seeds
            ],
            "order": DRAW_ORDER,
            "nonfinite": list(NONFINITE),
        }

    def to_line(self) -> str:
        return json.dumps(self.to_json()) + "\n"

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DrawsHeader:
        names = obj.get("param_names")
        return cls(
            run_id=obj["run_id"],
            param_names=None if names is None else tuple(names),
            chains=obj["chains"],
            dim=obj["dim"],
            draws_total=obj["shape"][1],
            draws_stored=obj["draws_stored"],
            status=RunStatus(obj["status"]),
            start=obj["start"],
            chain_seeds=tuple(
                ChainSeed(s["chain"], s["seed"], tuple(s["spawn_key_prefix"])) for s in obj.get("chain_seeds", ())
            ),
        )


@dataclass(frozen=True, slots=True)
class DrawLine:
    """One draw vector of one chain."""

    offset: int
    chain: int
    index: int
    values: list[float]


def draw_line(offset: int, chain: int, index: int, values: np.ndarray) -> str:
    """The NDJSON line of one draw vector (with its newline)."""
    return f'{{"offset":{offset},"chain":{chain},"index":{index},"values":{encode_values(values)}}}\n'


def draw_lines(block: np.ndarray, first_index: int) -> str:
    """NDJSON lines for draws [first_index, first_index + len(block)) of every chain (block: (m, chains, d))."""
    chains = block.shape[1]
    out = []
    for a, per_chain in enumerate(block):
        i = first_index + a
        for c, row in enumerate(per_chain):
            out.append(draw_line(i * chains + c, c, i, row))
    return "".join(out)


def parse_draw_stream_line(text: str) -> DrawsHeader | DrawLine:
    """One line of a draw stream, parsed (non-finite strings decoded)."""
    obj = orjson.loads(text)
    if obj.get("type") == "header":
        return DrawsHeader.from_json(obj)
    return DrawLine(obj["offset"], obj["chain"], obj["index"], decode_values(obj["values"]))


class LineSplitter:
    """Split streamed text into complete non-empty lines, keeping an unfinished tail for the next chunk."""

    def __init__(self) -> None:
        self.rest = ""

    def feed(self, text: str) -> list[str]:
        self.rest += text
        *done, self.rest = self.rest.split("\n")
        return [line for line in done if line]


# --- Server-Sent Events --------------------------------------------------------------------------------------------


class EventKind(StrEnum):
    """The `event:` field of a run's events."""

    STATUS = "status"
    SETUP = "setup"
    PROGRESS = "progress"
    WARNING = "warning"
    WORKER_LOST = "worker_lost"
    RESUMED = "resumed"


class EventPayload(Protocol):
    """An event's kind and the JSON object of its `data:` field."""

    kind: ClassVar[EventKind]

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class StatusEvent:
    """The run moved to `status` (with the error when it FAILED, and why it stopped once it has finished)."""

    kind: ClassVar[EventKind] = EventKind.STATUS
    status: RunStatus
    error: str | None = None
    stop_reason: RunStopReason | None = None

    def to_json(self) -> dict[str, Any]:
        return (
            {"status": self.status.value}
            | ({"error": self.error} if self.error else {})
            | ({"stop_reason": self.stop_reason.value} if self.stop_reason else {})
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StatusEvent:
        reason = data.get("stop_reason")
        return cls(RunStatus(data["status"]), data.get("error"), None if reason is None else RunStopReason(reason))


@dataclass(frozen=True)
class SetupEvent:
    """Workers are up: the parameter dimension and the set-up time."""

    kind: ClassVar[EventKind] = EventKind.SETUP
    dim: int
    setup_time_s: float

    def to_json(self) -> dict[str, Any]:
        return {"dim": self.dim, "setup_time_s": self.setup_time_s}


@dataclass(frozen=True)
class ProgressEvent:
    """Rounds done so far (of `rounds_total`) and draws per chain stored durably; how far the run is (`fraction`,
    0 to 1, on `basis` "rounds" or, for num_rounds="auto", "convergence"), and for an "auto" run the last
    convergence check's min bulk ESS and max R-hat."""

    kind: ClassVar[EventKind] = EventKind.PROGRESS
    rounds_done: int
    rounds_total: int
    draws_stored: int
    fraction: float | None = None
    basis: str | None = None
    min_ess_bulk: float | None = None
    max_rhat: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rounds_done": self.rounds_done,
            "rounds_total": self.rounds_total,
            "draws_stored": self.draws_stored,
        }
        for name in ("fraction", "basis", "min_ess_bulk", "max_rhat"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, float) and not math.isfinite(value)):
                out[name] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgressEvent:
        return cls(
            data["rounds_done"],
            data["rounds_total"],
            data["draws_stored"],
            data.get("fraction"),
            data.get("basis"),
            data.get("min_ess_bulk"),
            data.get("max_rhat"),
        )


@dataclass(frozen=True)
class WarningEvent:
    """Something the caller should know that did not fail the run (e.g. the time budget ran out)."""

    kind: ClassVar[EventKind] = EventKind.WARNING
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message}


@dataclass(frozen=True)
class WorkerLostEvent:
    """A worker process, its node or the coordinator was lost in round `round` (the run rolls back and goes on)."""

    kind: ClassVar[EventKind] = EventKind.WORKER_LOST
    round: int
    failure: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "failure": self.failure}


@dataclass(frozen=True)
class ResumedEvent:
    """The run continues from its checkpoint at round `round` (after a lost process, a service restart or a
    resume request); `restarts` counts resumes so far."""

    kind: ClassVar[EventKind] = EventKind.RESUMED
    round: int
    restarts: int

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "restarts": self.restarts}


SSE_KEEPALIVE = ": keep-alive\n\n"


def sse_frame(seq: int, kind: str, data: dict[str, Any]) -> str:
    """One SSE event."""
    return f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"


def sse_retry(ms: int) -> str:
    """The reconnection delay a client should use, in milliseconds."""
    return f"retry: {ms}\n\n"


class ServerEvent(TypedDict):
    """An event as the SDK yields it: id (the sequence number, as sent), event (the kind) and its data."""

    id: str
    event: str
    data: dict[str, Any]


class SSEParser:
    """Turns an SSE stream, line by line (without newlines), into events; comments and `retry:` are skipped."""

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}
        self.last_id = ""

    def feed(self, line: str) -> ServerEvent | None:
        """The event that `line` completes (an empty line ends one), else None."""
        if not line:
            fields, self._fields = self._fields, {}
            if "id" in fields:
                self.last_id = fields["id"]
            if "data" not in fields:
                return None
            return ServerEvent(id=self.last_id, event=fields.get("event", "message"), data=json.loads(fields["data"]))
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name in ("id", "event", "data"):
            self._fields[name] = value[1:] if value.startswith(" ") else value
        return None
