"""Durable run records, events and data-set records behind one small interface (`RecordStore`); SQLite is the embedded
default, and a server database can replace it by implementing the same methods.

Records are plain dicts; JSON columns (spec, timings, workers, warnings, param_names) are decoded on read. Runs are
keyed by (tenant, id): tenants never share ids, and every lookup takes the tenant, so isolation is structural.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Iterable

_JSON_FIELDS = ("spec", "timings", "workers", "warnings", "param_names")
RUN_FIELDS = ("status", "started_at", "finished_at", "rounds_done", "rounds_total", "draws_stored", "draws_total",
              "chains", "dim", "param_names", "timings", "workers", "error", "warnings", "cancel_requested")


class Conflict(Exception):
    """A record with this key already exists; `.existing` is it."""

    def __init__(self, existing: dict) -> None:
        super().__init__(existing.get("id"))
        self.existing = existing


class RecordStore(ABC):
    """What the service needs from its database."""

    @abstractmethod
    def create_run(self, tenant: str, run_id: str, spec: dict, spec_hash: str, idempotency_key: str | None,
                   rounds_total: int, draws_total: int, chains: int) -> dict:
        """Insert a PENDING run; raise Conflict(existing) if (tenant, id) or (tenant, idempotency key) exists."""

    @abstractmethod
    def get_run(self, tenant: str, run_id: str) -> dict | None: ...

    @abstractmethod
    def get_run_by_idempotency_key(self, tenant: str, key: str) -> dict | None: ...

    @abstractmethod
    def list_runs(self, tenant: str, status: str | None, after: int | None, limit: int) -> list[dict]:
        """Newest first; `after` is the `key` of the last run of the previous page."""

    @abstractmethod
    def runs_with_status(self, statuses: Iterable[str]) -> list[dict]:
        """All tenants' runs in these states, oldest first (for start-up recovery and the queue)."""

    @abstractmethod
    def update_run(self, tenant: str, run_id: str, **fields: Any) -> None: ...

    @abstractmethod
    def transition(self, tenant: str, run_id: str, from_statuses: Iterable[str],
                   event: tuple[str, dict] | None = None, **fields: Any) -> bool:
        """Atomically: if the run's status is in `from_statuses`, update `fields` and append `event` (kind, data);
        return whether it did (compare-and-set, so concurrent cancels and pick-ups cannot both win)."""

    @abstractmethod
    def delete_run(self, tenant: str, run_id: str) -> None: ...

    @abstractmethod
    def add_event(self, run_key: int, kind: str, data: dict) -> int:
        """Append an event to a run's log and return its sequence number (1, 2, ...)."""

    @abstractmethod
    def events_after(self, run_key: int, after: int, limit: int = 1000) -> list[dict]: ...

    @abstractmethod
    def add_dataset(self, tenant: str, dataset_id: str, name: str, n: int, d: int, nbytes: int, path: str) -> dict: ...

    @abstractmethod
    def get_dataset(self, tenant: str, dataset_id: str) -> dict | None: ...

    @abstractmethod
    def list_datasets(self, tenant: str) -> list[dict]: ...

    @abstractmethod
    def delete_dataset(self, tenant: str, dataset_id: str) -> None: ...

    @abstractmethod
    def count_runs_by_status(self) -> dict[str, int]: ...


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

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- runs -------------------------------------------------------------------------------------------------

    def create_run(self, tenant, run_id, spec, spec_hash, idempotency_key, rounds_total, draws_total, chains):
        with self._lock:
            existing = self._one("SELECT * FROM runs WHERE tenant = ? AND (id = ? OR idempotency_key = ?)",
                                 (tenant, run_id, idempotency_key))
            if existing is not None:
                raise Conflict(existing)
            self._db.execute(
                "INSERT INTO runs (tenant, id, status, created_at, spec, spec_hash, idempotency_key, rounds_total,"
                " draws_total, chains) VALUES (?, ?, 'PENDING', ?, ?, ?, ?, ?, ?, ?)",
                (tenant, run_id, time.time(), json.dumps(spec), spec_hash, idempotency_key, rounds_total,
                 draws_total, chains))
            return self._one("SELECT * FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))

    def get_run(self, tenant, run_id):
        return self._one("SELECT * FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))

    def get_run_by_idempotency_key(self, tenant, key):
        return self._one("SELECT * FROM runs WHERE tenant = ? AND idempotency_key = ?", (tenant, key))

    def list_runs(self, tenant, status, after, limit):
        sql, args = "SELECT * FROM runs WHERE tenant = ?", [tenant]
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        if after is not None:
            sql += " AND key < ?"
            args.append(after)
        sql += " ORDER BY key DESC LIMIT ?"
        args.append(limit)
        return self._all(sql, args)

    def runs_with_status(self, statuses):
        statuses = list(statuses)
        marks = ",".join("?" * len(statuses))
        return self._all(f"SELECT * FROM runs WHERE status IN ({marks}) ORDER BY key", statuses)

    def update_run(self, tenant, run_id, **fields):
        unknown = set(fields) - set(RUN_FIELDS)
        if unknown:
            raise KeyError(f"not run fields: {sorted(unknown)}")
        values = [json.dumps(v) if k in _JSON_FIELDS else v for k, v in fields.items()]
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._lock:
            self._db.execute(f"UPDATE runs SET {sets} WHERE tenant = ? AND id = ?", (*values, tenant, run_id))

    def transition(self, tenant, run_id, from_statuses, event=None, **fields):
        unknown = set(fields) - set(RUN_FIELDS)
        if unknown:
            raise KeyError(f"not run fields: {sorted(unknown)}")
        states = list(from_statuses)
        values = [json.dumps(v) if k in _JSON_FIELDS else v for k, v in fields.items()]
        sets = ", ".join(f"{k} = ?" for k in fields)
        marks = ",".join("?" * len(states))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cur = self._db.execute(f"UPDATE runs SET {sets} WHERE tenant = ? AND id = ? AND status IN ({marks})",
                                       (*values, tenant, run_id, *states))
                done = cur.rowcount == 1
                if done and event is not None:
                    key = self._db.execute("SELECT key FROM runs WHERE tenant = ? AND id = ?",
                                           (tenant, run_id)).fetchone()[0]
                    self._insert_event(key, *event)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return done

    def delete_run(self, tenant, run_id):
        with self._lock:
            row = self.get_run(tenant, run_id)
            if row is None:
                return
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM events WHERE run_key = ?", (row["key"],))
            self._db.execute("DELETE FROM runs WHERE key = ?", (row["key"],))
            self._db.execute("COMMIT")

    def count_runs_by_status(self):
        return {r["status"]: r["n"] for r in self._all("SELECT status, COUNT(*) AS n FROM runs GROUP BY status", ())}

    # --- events -----------------------------------------------------------------------------------------------

    def add_event(self, run_key, kind, data):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                seq = self._insert_event(run_key, kind, data)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return seq

    def _insert_event(self, run_key: int, kind: str, data: dict) -> int:
        last = self._db.execute("SELECT MAX(seq) FROM events WHERE run_key = ?", (run_key,)).fetchone()[0]
        seq = (last or 0) + 1
        self._db.execute("INSERT INTO events (run_key, seq, kind, data, ts) VALUES (?, ?, ?, ?, ?)",
                         (run_key, seq, kind, json.dumps(data), time.time()))
        return seq

    def events_after(self, run_key, after, limit=1000):
        rows = self._all("SELECT seq, kind, data, ts FROM events WHERE run_key = ? AND seq > ? ORDER BY seq LIMIT ?",
                         (run_key, after, limit), decode=False)
        return [{"seq": r["seq"], "kind": r["kind"], "data": json.loads(r["data"]), "ts": r["ts"]} for r in rows]

    # --- datasets ---------------------------------------------------------------------------------------------

    def add_dataset(self, tenant, dataset_id, name, n, d, nbytes, path):
        with self._lock:
            self._db.execute("INSERT INTO datasets (tenant, id, name, n, d, bytes, path, created_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (tenant, dataset_id, name, n, d, nbytes, path,
                                                                  time.time()))
            return self.get_dataset(tenant, dataset_id)

    def get_dataset(self, tenant, dataset_id):
        return self._one("SELECT * FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id), decode=False)

    def list_datasets(self, tenant):
        return self._all("SELECT * FROM datasets WHERE tenant = ? ORDER BY key DESC", (tenant,), decode=False)

    def delete_dataset(self, tenant, dataset_id):
        with self._lock:
            self._db.execute("DELETE FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))

    # --- helpers ----------------------------------------------------------------------------------------------

    def _one(self, sql: str, args: Iterable[Any], decode: bool = True) -> dict | None:
        rows = self._all(sql, args, decode)
        return rows[0] if rows else None

    def _all(self, sql: str, args: Iterable[Any], decode: bool = True) -> list[dict]:
        with self._lock:
            rows = [dict(r) for r in self._db.execute(sql, tuple(args)).fetchall()]
        if decode:
            for r in rows:
                for k in _JSON_FIELDS:
                    if r.get(k) is not None:
                        r[k] = json.loads(r[k])
        return rows
