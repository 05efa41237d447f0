"""Durable run records, events and data-set records behind one small interface (`RecordStore`); SQLite is the embedded
default, and a server database can replace it by implementing the same methods.

Records are typed values (`RunRecord`, `EventRecord`, `DatasetRecord`). Runs are keyed by (tenant, id): tenants never
share ids, and every lookup takes the tenant, so isolation is structural.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Unpack

from ..models.base import DataSpec, ParamBlock
from ..wire import EventPayload, RunStatus, RunStopReason
from .records import DatasetRecord, EventRecord, RunFields, RunRecord
from .schemas import DiagnosticsInfo, FailureInfo, RunSpec, WorkerStats

#: Columns a writer may change (`_encode` says how each is stored: JSON text for the structured ones).
RUN_FIELDS: frozenset[str] = frozenset(RunFields.__annotations__)


class Conflict(Exception):
    """A record with this key already exists; `.existing` is it."""

    def __init__(self, existing: RunRecord) -> None:
        super().__init__(existing.id)
        self.existing = existing


class ActiveLimit(Exception):
    """The tenant already has `active` PENDING or RUNNING runs, the most `create_run` was allowed to reach."""

    def __init__(self, active: int) -> None:
        super().__init__(active)
        self.active = active


class RecordStore(ABC):
    """What the service needs from its database."""

    @abstractmethod
    def create_run(
        self,
        tenant: str,
        run_id: str,
        spec: RunSpec,
        spec_hash: str,
        idempotency_key: str | None,
        rounds_total: int,
        draws_total: int,
        max_active: int | None = None,
    ) -> RunRecord:
        """Insert a PENDING run; raise Conflict(existing) if (tenant, id) or (tenant, idempotency key) exists, and
        ActiveLimit if the tenant already has `max_active` PENDING or RUNNING runs (checked atomically)."""

    @abstractmethod
    def get_run(self, tenant: str, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    def get_run_by_idempotency_key(self, tenant: str, key: str) -> RunRecord | None: ...

    @abstractmethod
    def list_runs(
        self,
        tenant: str,
        status: RunStatus | None,
        after: int | None,
        limit: int,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        """Newest first; `after` is the `key` of the last run of the previous page; only runs with this `name` and
        all these `tags` (key → value) when given."""

    @abstractmethod
    def runs_with_status(self, statuses: Iterable[RunStatus]) -> list[RunRecord]:
        """All tenants' runs in these states, oldest first (for start-up recovery and the queue)."""

    @abstractmethod
    def update_run(self, tenant: str, run_id: str, **fields: Unpack[RunFields]) -> None: ...

    @abstractmethod
    def transition(
        self,
        tenant: str,
        run_id: str,
        from_statuses: Iterable[RunStatus],
        event: EventPayload | None = None,
        **fields: Unpack[RunFields],
    ) -> bool:
        """Atomically: if the run's status is in `from_statuses`, update `fields` and append `event`; return whether
        it did (compare-and-set, so concurrent cancels and pick-ups cannot both win)."""

    @abstractmethod
    def delete_run(self, tenant: str, run_id: str) -> None: ...

    @abstractmethod
    def add_event(self, run_key: int, event: EventPayload) -> int:
        """Append an event to a run's log and return its sequence number (1, 2, ...)."""

    @abstractmethod
    def events_after(self, run_key: int, after: int, limit: int = 1000) -> list[EventRecord]: ...

    @abstractmethod
    def add_dataset(
        self, tenant: str, dataset_id: str, name: str, n: int, d: int, nbytes: int, path: Path
    ) -> DatasetRecord: ...

    @abstractmethod
    def get_dataset(self, tenant: str, dataset_id: str) -> DatasetRecord | None: ...

    @abstractmethod
    def list_datasets(self, tenant: str) -> list[DatasetRecord]: ...

    @abstractmethod
    def delete_dataset(self, tenant: str, dataset_id: str) -> None: ...

    @abstractmethod
    def count_runs_by_status(self) -> dict[RunStatus, int]: ...

    @abstractmethod
    def count_active(self, tenant: str) -> int:
        """The tenant's PENDING and RUNNING runs."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL,
    created_at REAL NOT NULL, started_at REAL, finished_at REAL,
    spec TEXT NOT NULL, spec_hash TEXT NOT NULL, idempotency_key TEXT,
    rounds_done INTEGER NOT NULL DEFAULT 0, rounds_total INTEGER NOT NULL DEFAULT 0,
    draws_stored INTEGER NOT NULL DEFAULT 0, draws_total INTEGER NOT NULL DEFAULT 0,
    chains INTEGER NOT NULL, dim INTEGER, param_names TEXT,
    timings TEXT NOT NULL DEFAULT '{}', workers TEXT NOT NULL DEFAULT '[]',
    error TEXT, warnings TEXT NOT NULL DEFAULT '[]', cancel_requested INTEGER NOT NULL DEFAULT 0,
    plan TEXT, failure TEXT, diagnostics TEXT, restarts INTEGER NOT NULL DEFAULT 0, checkpoint_round INTEGER,
    param_blocks TEXT, stop_reason TEXT, name TEXT, tags TEXT, data_spec TEXT,
    UNIQUE (tenant, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS runs_idem ON runs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);
CREATE TABLE IF NOT EXISTS events (
    run_key INTEGER NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL, ts REAL NOT NULL,
    PRIMARY KEY (run_key, seq)
);
CREATE TABLE IF NOT EXISTS datasets (
    key INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, n INTEGER NOT NULL, d INTEGER NOT NULL,
    bytes INTEGER NOT NULL, path TEXT NOT NULL, created_at REAL NOT NULL,
    UNIQUE (tenant, id)
);
"""


#: Run columns added after the first schema: (name, declaration), added to older databases on open.
_ADDED_COLUMNS = (
    ("plan", "TEXT"),
    ("failure", "TEXT"),
    ("diagnostics", "TEXT"),
    ("restarts", "INTEGER NOT NULL DEFAULT 0"),
    ("checkpoint_round", "INTEGER"),
    ("param_blocks", "TEXT"),
    ("stop_reason", "TEXT"),
    ("name", "TEXT"),
    ("tags", "TEXT"),
    ("data_spec", "TEXT"),
)


class SQLiteStore(RecordStore):
    """The embedded store: one SQLite file in WAL mode, one connection guarded by a lock (calls are short)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(runs)").fetchall()}
            for column, decl in _ADDED_COLUMNS:  # databases written by earlier versions gain the new columns
                if column not in have:
                    self._db.execute(f"ALTER TABLE runs ADD COLUMN {column} {decl}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- runs -------------------------------------------------------------------------------------------------

    def create_run(
        self,
        tenant: str,
        run_id: str,
        spec: RunSpec,
        spec_hash: str,
        idempotency_key: str | None,
        rounds_total: int,
        draws_total: int,
        max_active: int | None = None,
    ) -> RunRecord:
        with self._lock:
            existing = self._run(
                "SELECT * FROM runs WHERE tenant = ? AND (id = ? OR idempotency_key = ?)",
                (tenant, run_id, idempotency_key),
            )
            if existing is not None:
                raise Conflict(existing)
            if max_active is not None:
                active = self.count_active(tenant)
                if active >= max_active:
                    raise ActiveLimit(active)
            self._db.execute(
                "INSERT INTO runs (tenant, id, status, created_at, spec, spec_hash, idempotency_key, rounds_total,"
                " draws_total, chains, name, tags) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    run_id,
                    RunStatus.PENDING.value,
                    time.time(),
                    spec.model_dump_json(),
                    spec_hash,
                    idempotency_key,
                    rounds_total,
                    draws_total,
                    spec.chains,
                    spec.name,
                    json.dumps(spec.tags),
                ),
            )
            created = self.get_run(tenant, run_id)
            assert created is not None
            return created

    def get_run(self, tenant: str, run_id: str) -> RunRecord | None:
        return self._run("SELECT * FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))

    def get_run_by_idempotency_key(self, tenant: str, key: str) -> RunRecord | None:
        return self._run("SELECT * FROM runs WHERE tenant = ? AND idempotency_key = ?", (tenant, key))

    def list_runs(
        self,
        tenant: str,
        status: RunStatus | None,
        after: int | None,
        limit: int,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        sql, args = "SELECT * FROM runs WHERE tenant = ?", [tenant]  # type: tuple[str, list[Any]]
        if status is not None:
            sql += " AND status = ?"
            args.append(status.value)
        if name is not None:
            sql += " AND name = ?"
            args.append(name)
        for key, value in (tags or {}).items():  # keys match TAG_KEY_PATTERN: no quote can end the JSON path
            sql += " AND json_extract(tags, ?) = ?"
            args += [f'$."{key}"', value]
        if after is not None:
            sql += " AND key < ?"
            args.append(after)
        sql += " ORDER BY key DESC LIMIT ?"
        args.append(limit)
        return [_run_record(r) for r in self._rows(sql, args)]

    def runs_with_status(self, statuses: Iterable[RunStatus]) -> list[RunRecord]:
        values = [s.value for s in statuses]
        marks = ",".join("?" * len(values))
        return [
            _run_record(r) for r in self._rows(f"SELECT * FROM runs WHERE status IN ({marks}) ORDER BY key", values)
        ]

    def update_run(self, tenant: str, run_id: str, **fields: Unpack[RunFields]) -> None:
        sets, values = _assignments(fields)
        with self._lock:
            self._db.execute(f"UPDATE runs SET {sets} WHERE tenant = ? AND id = ?", (*values, tenant, run_id))

    def transition(
        self,
        tenant: str,
        run_id: str,
        from_statuses: Iterable[RunStatus],
        event: EventPayload | None = None,
        **fields: Unpack[RunFields],
    ) -> bool:
        sets, values = _assignments(fields)
        states = [s.value for s in from_statuses]
        marks = ",".join("?" * len(states))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(
                    f"UPDATE runs SET {sets} WHERE tenant = ? AND id = ? AND status IN ({marks})",
                    (*values, tenant, run_id, *states),
                )
                done = cur.rowcount == 1
                if done and event is not None:
                    key = self._db.execute(
                        "SELECT key FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id)
                    ).fetchone()[0]
                    self._insert_event(key, event)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return done

    def delete_run(self, tenant: str, run_id: str) -> None:
        with self._lock:
            rec = self.get_run(tenant, run_id)
            if rec is None:
                return
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM events WHERE run_key = ?", (rec.key,))
            self._db.execute("DELETE FROM runs WHERE key = ?", (rec.key,))
            self._db.execute("COMMIT")

    def count_runs_by_status(self) -> dict[RunStatus, int]:
        return {
            RunStatus(r["status"]): r["n"]
            for r in self._rows("SELECT status, COUNT(*) AS n FROM runs GROUP BY status", ())
        }

    def count_active(self, tenant: str) -> int:
        rows = self._rows(
            "SELECT COUNT(*) AS n FROM runs WHERE tenant = ? AND status IN (?, ?)",
            (tenant, RunStatus.PENDING.value, RunStatus.RUNNING.value),
        )
        return int(rows[0]["n"])

    # --- events -----------------------------------------------------------------------------------------------

    def add_event(self, run_key: int, event: EventPayload) -> int:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seq = self._insert_event(run_key, event)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return seq

    def _insert_event(self, run_key: int, event: EventPayload) -> int:
        last = self._db.execute("SELECT MAX(seq) FROM events WHERE run_key = ?", (run_key,)).fetchone()[0]
        seq = (last or 0) + 1
        self._db.execute(
            "INSERT INTO events (run_key, seq, kind, data, ts) VALUES (?, ?, ?, ?, ?)",
            (run_key, seq, event.kind.value, json.dumps(event.to_json()), time.time()),
        )
        return seq

    def events_after(self, run_key: int, after: int, limit: int = 1000) -> list[EventRecord]:
        rows = self._rows(
            "SELECT seq, kind, data, ts FROM events WHERE run_key = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_key, after, limit),
        )
        return [EventRecord(r["seq"], r["kind"], json.loads(r["data"]), r["ts"]) for r in rows]

    # --- datasets ---------------------------------------------------------------------------------------------

    def add_dataset(
        self, tenant: str, dataset_id: str, name: str, n: int, d: int, nbytes: int, path: Path
    ) -> DatasetRecord:
        with self._lock:
            self._db.execute(
                "INSERT INTO datasets (tenant, id, name, n, d, bytes, path, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (tenant, dataset_id, name, n, d, nbytes, str(path), time.time()),
            )
            created = self.get_dataset(tenant, dataset_id)
            assert created is not None
            return created

    def get_dataset(self, tenant: str, dataset_id: str) -> DatasetRecord | None:
        rows = self._rows("SELECT * FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))
        return _dataset_record(rows[0]) if rows else None

    def list_datasets(self, tenant: str) -> list[DatasetRecord]:
        return [
            _dataset_record(r)
            for r in self._rows("SELECT * FROM datasets WHERE tenant = ? ORDER BY key DESC", (tenant,))
        ]

    def delete_dataset(self, tenant: str, dataset_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))

    # --- helpers ----------------------------------------------------------------------------------------------

    def _run(self, sql: str, args: Iterable[Any]) -> RunRecord | None:
        rows = self._rows(sql, args)
        return _run_record(rows[0]) if rows else None

    def _rows(self, sql: str, args: Iterable[Any]) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()


def _assignments(fields: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """(SET clause, values) for changed run fields, each in its column's encoding."""
    unknown = set(fields) - RUN_FIELDS
    if unknown:
        raise KeyError(f"not run fields: {sorted(unknown)}")
    return ", ".join(f"{k} = ?" for k in fields), [_encode(k, v) for k, v in fields.items()]


def _encode(name: str, value: Any) -> Any:
    if name == "status":
        return RunStatus(value).value
    if name == "workers":
        return json.dumps([w.model_dump() for w in value])
    if name == "param_blocks":
        return None if value is None else json.dumps([b.as_dict() for b in value])
    if name == "data_spec":
        return None if value is None else json.dumps(value.as_dict())
    if name in ("timings", "param_names", "warnings", "plan"):
        return None if value is None else json.dumps(list(value) if name in ("param_names", "warnings") else value)
    if name in ("failure", "diagnostics"):
        return None if value is None else value.model_dump_json()
    if name == "stop_reason":
        return None if value is None else RunStopReason(value).value
    if name == "cancel_requested":
        return int(bool(value))
    return value


def _run_record(r: sqlite3.Row) -> RunRecord:
    names = r["param_names"]
    return RunRecord(
        key=r["key"],
        tenant=r["tenant"],
        id=r["id"],
        status=RunStatus(r["status"]),
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        spec=RunSpec.model_validate_json(r["spec"]),
        spec_hash=r["spec_hash"],
        idempotency_key=r["idempotency_key"],
        rounds_done=r["rounds_done"],
        rounds_total=r["rounds_total"],
        draws_stored=r["draws_stored"],
        draws_total=r["draws_total"],
        chains=r["chains"],
        dim=r["dim"],
        param_names=None if names is None else tuple(json.loads(names)),
        timings=json.loads(r["timings"]),
        workers=tuple(WorkerStats(**w) for w in json.loads(r["workers"])),
        error=r["error"],
        warnings=tuple(json.loads(r["warnings"])),
        cancel_requested=bool(r["cancel_requested"]),
        plan=None if r["plan"] is None else json.loads(r["plan"]),
        failure=None if r["failure"] is None else FailureInfo.model_validate_json(r["failure"]),
        diagnostics=None if r["diagnostics"] is None else DiagnosticsInfo.model_validate_json(r["diagnostics"]),
        restarts=r["restarts"],
        checkpoint_round=r["checkpoint_round"],
        param_blocks=None
        if r["param_blocks"] is None
        else tuple(ParamBlock.from_dict(b) for b in json.loads(r["param_blocks"])),
        stop_reason=None if r["stop_reason"] is None else RunStopReason(r["stop_reason"]),
        data_spec=None if r["data_spec"] is None else DataSpec.from_dict(json.loads(r["data_spec"])),
    )


def _dataset_record(r: sqlite3.Row) -> DatasetRecord:
    return DatasetRecord(
        key=r["key"],
        tenant=r["tenant"],
        id=r["id"],
        name=r["name"],
        n=r["n"],
        d=r["d"],
        nbytes=r["bytes"],
        path=Path(r["path"]),
        created_at=r["created_at"],
    )
