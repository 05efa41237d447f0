"""The audit log: one JSON line per state-changing request (run submit, cancel, resume, delete; data set upload and
delete) and per refused request (any 401 or 403), in <data dir>/audit.log, rotated by size. Standard library only:
`raysampler audit` reads it without importing the server."""

from __future__ import annotations

import hashlib
import json
import logging
import logging.handlers
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

#: Hex digits of an API key's SHA-256 kept as its id: enough to tell keys apart, far too few to recover one.
KEY_ID_HEX = 12
Outcome = Literal["ok", "refused", "error"]
_SINCE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def key_id(key: str) -> str:
    """The id under which the log names an API key: the first 12 hex digits of its SHA-256 (never the key)."""
    return hashlib.sha256(key.encode()).hexdigest()[:KEY_ID_HEX]


def outcome_of(status: int) -> Outcome:
    """The outcome of an HTTP status: "ok" (2xx, 3xx), "refused" (401, 403) or "error" (any other)."""
    if status in (401, 403):
        return "refused"
    return "ok" if status < 400 else "error"


@dataclass(frozen=True)
class AuditRecord:
    """One audited request: who (tenant, key id), what (action, run or data set id), how it ended (HTTP status and
    outcome), and where from (method, path, client address)."""

    time: str  # ISO 8601, UTC
    tenant: str | None  # None when the key was missing or refused
    key_id: str | None  # key_id() of the presented key; None when none was presented
    action: str  # submit, cancel, resume, delete_run, upload_dataset, delete_dataset, or request (a refused other)
    run_id: str | None
    dataset_id: str | None
    status: int
    outcome: Outcome
    method: str
    path: str
    client: str | None  # the client's address (the proxy's client's, with trusted proxy headers)

    @staticmethod
    def now() -> str:
        """The current time as the log writes it."""
        return datetime.now(UTC).isoformat(timespec="milliseconds")

    @property
    def when(self) -> datetime:
        return _aware(datetime.fromisoformat(self.time))

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> AuditRecord:
        """The record of one log line (KeyError/TypeError/ValueError if it is not one)."""
        data = json.loads(line)
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """RotatingFileHandler whose files are created 0600: the log names tenants, key ids and client addresses."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return open(fd, self.mode, encoding=self.encoding, errors=self.errors)


class AuditLog:
    """Appends AuditRecords to `path` as JSON lines; the file rotates at `max_bytes` into path.1 … path.<backups>
    (logging's RotatingFileHandler, which also serialises writes from several threads)."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = _PrivateRotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger = logging.Logger(f"raysampler.audit:{path}")  # not registered: one per log, never propagated
        self._logger.propagate = False
        self._logger.addHandler(handler)
        self._handler = handler

    def write(self, record: AuditRecord) -> None:
        self._logger.info(record.to_json())

    def close(self) -> None:
        self._handler.close()


@dataclass(frozen=True)
class AuditQuery:
    """Which records `raysampler audit` prints: all the given conditions hold."""

    tenant: str | None = None
    since: datetime | None = None
    action: str | None = None

    def matches(self, record: AuditRecord) -> bool:
        return (
            (self.tenant is None or record.tenant == self.tenant)
            and (self.action is None or record.action == self.action)
            and (self.since is None or record.when >= self.since)
        )


def log_files(path: Path) -> list[Path]:
    """The log and its rotated files, oldest first (path.N … path.1, path)."""
    rotated = [p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()]
    rotated.sort(key=lambda p: int(p.suffix[1:]), reverse=True)
    return rotated + ([path] if path.exists() else [])


def read_records(path: Path, query: AuditQuery | None = None) -> Iterator[AuditRecord]:
    """The records of the log at `path` (rotated files included), oldest first, that match `query`. Lines that are
    not records (e.g. cut short by a crash) are skipped."""
    query = query or AuditQuery()
    for file in log_files(path):
        with file.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    record = AuditRecord.from_json(line)
                except (ValueError, KeyError, TypeError):
                    continue
                if query.matches(record):
                    yield record


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """An instant from "30m", "1h", "2d", "1w", "45s" (that long before `now`) or an ISO 8601 time (UTC unless it
    says otherwise). ValueError names the accepted forms."""
    m = _SINCE.match(text.strip())
    if m:
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
    try:
        return _aware(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a duration (45s, 30m, 1h, 2d, 1w) or an ISO 8601 time (2025-01-31T12:00)"
        ) from None


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
