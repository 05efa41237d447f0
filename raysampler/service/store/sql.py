"""The SQL both databases share (`SQLStore`), and the two stores: SQLite, the embedded default (`SQLiteStore`), and
PostgreSQL, shared by a service's replicas (`PostgresStore`)."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Unpack
from urllib.parse import urlsplit

from ...models.contract import DataSpec, ParamBlock
from ...wire import EventPayload, RunStatus, RunStopReason
from .. import migrations
from ..migrations import Dialect
from ..records import DatasetRecord, EventRecord, Lease, RunFields, RunRecord
from ..schemas import DiagnosticsInfo, FailureInfo, NetworkInfo, RunSpec, WorkerStats
from .base import ActiveLimit, Conflict, LeaseLost, RecordStore
from .urls import check_database_url, postgres_params

#: Columns a writer may change (`_encode` says how each is stored: JSON text for the structured ones).
RUN_FIELDS: frozenset[str] = frozenset(RunFields.__annotations__)
_DRIVABLE = (RunStatus.PENDING.value, RunStatus.RUNNING.value)


class _Tx:
    """One transaction's statements: `rows` (a query's rows, each indexable by column name) and `run` (a statement's
    row count). SQL is written with `?` placeholders."""

    def __init__(self, cursor: Any, placeholder: str) -> None:
        self._cur, self._ph = cursor, placeholder

    def _execute(self, sql: str, args: Sequence[Any]) -> Any:
        if self._ph != "?":
            sql = sql.replace("?", self._ph)
        return self._cur.execute(sql, tuple(args))

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        cur = self._execute(sql, args)
        return list(cur.fetchall()) if cur.description is not None else []

    def run(self, sql: str, args: Sequence[Any] = ()) -> int:
        return int(self._execute(sql, args).rowcount)


class SQLStore(RecordStore):
    """The store's SQL, for both databases; a subclass gives transactions (`_tx`) and its dialect's few differences:
    the database clock `NOW`, row locks, the per-tenant lock of `create_run` and the JSON lookup of a tag."""

    dialect: ClassVar[Dialect]
    NOW: ClassVar[str]  # the database's clock, Unix seconds
    FOR_UPDATE: ClassVar[str] = ""  # locks the selected run row until the transaction ends

    @contextmanager
    @abstractmethod
    def _tx(self) -> Iterator[_Tx]:
        """A transaction that writes (serialised with other writers where the database needs it)."""
        yield  # type: ignore[misc]

    def _lock_tenant(self, tx: _Tx, tenant: str) -> None:
        """Serialise `create_run`s of one tenant (its active-run count is checked, then a run inserted)."""

    @abstractmethod
    def _tag_filter(self, key: str, value: str) -> tuple[str, list[Any]]:
        """A WHERE condition matching runs whose tag `key` is `value`, with its arguments."""

    def _migrate(self) -> None:
        """Bring the schema to the newest version (`migrations`), one locked transaction per step."""
        while True:
            with self._tx() as tx:
                self._lock_migrations(tx)
                if migrations.step(tx.rows, self.dialect, migrations.LATEST, self._legacy_columns(tx)) is None:
                    return

    def _lock_migrations(self, tx: _Tx) -> None:
        """Keep other processes from migrating at the same time (until the transaction ends)."""

    def _legacy_columns(self, tx: _Tx) -> set[str] | None:
        """The run columns of a database from before versioned schemas (None: no such table)."""
        return None

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
        with self._tx() as tx:
            self._lock_tenant(tx, tenant)
            existing = tx.rows(
                "SELECT * FROM runs WHERE tenant = ? AND (id = ? OR idempotency_key = ?)",
                (tenant, run_id, idempotency_key),
            )
            if existing:
                raise Conflict(_run_record(existing[0]))
            if max_active is not None:
                active = self._count_active(tx, tenant)
                if active >= max_active:
                    raise ActiveLimit(active)
            tx.run(
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
                    spec.chain_count,
                    spec.name,
                    json.dumps(spec.tags),
                ),
            )
            created = tx.rows("SELECT * FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))
            return _run_record(created[0])

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
            cond, cond_args = self._tag_filter(key, value)
            sql += f" AND {cond}"
            args += cond_args
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

    def update_run(self, tenant: str, run_id: str, lease: Lease | None = None, **fields: Unpack[RunFields]) -> None:
        sets, values = _assignments(fields)
        fence, fence_args = _fence(lease)
        with self._tx() as tx:
            n = tx.run(
                f"UPDATE runs SET {sets} WHERE tenant = ? AND id = ?{fence}", (*values, tenant, run_id, *fence_args)
            )
            if lease is not None and n == 0:
                raise LeaseLost(lease)

    def transition(
        self,
        tenant: str,
        run_id: str,
        from_statuses: Iterable[RunStatus],
        event: EventPayload | None = None,
        lease: Lease | None = None,
        **fields: Unpack[RunFields],
    ) -> bool:
        sets, values = _assignments(fields)
        if "status" in fields and RunStatus(fields["status"]).is_terminal:
            sets += ", lease_owner = NULL, lease_expires = NULL"  # a finished run has no driver
        states = [s.value for s in from_statuses]
        marks = ",".join("?" * len(states))
        fence, fence_args = _fence(lease)
        with self._tx() as tx:
            done = (
                tx.run(
                    f"UPDATE runs SET {sets} WHERE tenant = ? AND id = ? AND status IN ({marks}){fence}",
                    (*values, tenant, run_id, *states, *fence_args),
                )
                == 1
            )
            if not done and lease is not None and not self._holds(tx, lease):
                raise LeaseLost(lease)
            if done and event is not None:
                key = tx.rows("SELECT key FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))[0]["key"]
                self._insert_event(tx, key, event)
            return done

    def delete_run(self, tenant: str, run_id: str) -> None:
        with self._tx() as tx:
            found = tx.rows("SELECT key FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))
            if not found:
                return
            key = found[0]["key"]
            tx.run("DELETE FROM events WHERE run_key = ?", (key,))
            tx.run("DELETE FROM runs WHERE key = ?", (key,))

    def count_runs_by_status(self) -> dict[RunStatus, int]:
        return {
            RunStatus(r["status"]): int(r["n"])
            for r in self._rows("SELECT status, COUNT(*) AS n FROM runs GROUP BY status", ())
        }

    def count_active(self, tenant: str) -> int:
        with self._tx() as tx:
            return self._count_active(tx, tenant)

    @staticmethod
    def _count_active(tx: _Tx, tenant: str) -> int:
        rows = tx.rows("SELECT COUNT(*) AS n FROM runs WHERE tenant = ? AND status IN (?, ?)", (tenant, *_DRIVABLE))
        return int(rows[0]["n"])

    # --- leases -----------------------------------------------------------------------------------------------

    def acquire_lease(self, tenant: str, run_id: str, owner: str, ttl_s: float) -> Lease | None:
        with self._tx() as tx:
            n = tx.run(
                f"UPDATE runs SET lease_owner = ?, lease_epoch = lease_epoch + 1, lease_expires = {self.NOW} + ? "
                "WHERE tenant = ? AND id = ? AND status IN (?, ?) AND (lease_owner IS NULL OR lease_expires IS NULL "
                f"OR lease_expires < {self.NOW} OR lease_owner = ?)",
                (owner, ttl_s, tenant, run_id, *_DRIVABLE, owner),
            )
            if n != 1:
                return None
            row = tx.rows("SELECT key, lease_epoch FROM runs WHERE tenant = ? AND id = ?", (tenant, run_id))[0]
            return Lease(int(row["key"]), tenant, run_id, owner, int(row["lease_epoch"]))

    def renew_lease(self, lease: Lease, ttl_s: float) -> bool:
        fence, fence_args = _fence(lease)
        with self._tx() as tx:
            return (
                tx.run(
                    f"UPDATE runs SET lease_expires = {self.NOW} + ? WHERE key = ?{fence}",
                    (ttl_s, lease.run_key, *fence_args),
                )
                == 1
            )

    def release_lease(self, lease: Lease) -> None:
        fence, fence_args = _fence(lease)
        with self._tx() as tx:
            tx.run(
                f"UPDATE runs SET lease_owner = NULL, lease_expires = NULL WHERE key = ?{fence}",
                (lease.run_key, *fence_args),
            )

    def runs_to_drive(self, owner: str) -> list[RunRecord]:
        return [
            _run_record(r)
            for r in self._rows(
                "SELECT * FROM runs WHERE status IN (?, ?) AND (lease_owner IS NULL OR lease_expires IS NULL OR "
                f"lease_expires < {self.NOW} OR lease_owner = ?) ORDER BY key",
                (*_DRIVABLE, owner),
            )
        ]

    def cancel_requested(self, keys: Sequence[int]) -> set[int]:
        if not keys:
            return set()
        marks = ",".join("?" * len(keys))
        rows = self._rows(f"SELECT key FROM runs WHERE cancel_requested = 1 AND key IN ({marks})", list(keys))
        return {int(r["key"]) for r in rows}

    def _holds(self, tx: _Tx, lease: Lease) -> bool:
        rows = tx.rows(f"SELECT lease_owner, lease_epoch FROM runs WHERE key = ?{self.FOR_UPDATE}", (lease.run_key,))
        return bool(rows) and rows[0]["lease_owner"] == lease.owner and int(rows[0]["lease_epoch"]) == lease.epoch

    # --- events -----------------------------------------------------------------------------------------------

    def add_event(self, run_key: int, event: EventPayload, lease: Lease | None = None) -> int:
        with self._tx() as tx:
            if lease is not None and not self._holds(tx, lease):
                raise LeaseLost(lease)
            return self._insert_event(tx, run_key, event)

    def _insert_event(self, tx: _Tx, run_key: int, event: EventPayload) -> int:
        tx.rows(f"SELECT key FROM runs WHERE key = ?{self.FOR_UPDATE}", (run_key,))  # one writer of a run's events
        last = tx.rows("SELECT MAX(seq) AS m FROM events WHERE run_key = ?", (run_key,))[0]["m"]
        seq = int(last or 0) + 1
        tx.run(
            "INSERT INTO events (run_key, seq, kind, data, ts) VALUES (?, ?, ?, ?, ?)",
            (run_key, seq, event.kind.value, json.dumps(event.to_json()), time.time()),
        )
        return seq

    def events_after(self, run_key: int, after: int, limit: int = 1000) -> list[EventRecord]:
        rows = self._rows(
            "SELECT seq, kind, data, ts FROM events WHERE run_key = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_key, after, limit),
        )
        return [EventRecord(int(r["seq"]), r["kind"], json.loads(r["data"]), float(r["ts"])) for r in rows]

    # --- datasets ---------------------------------------------------------------------------------------------

    def add_dataset(
        self, tenant: str, dataset_id: str, name: str, n: int, d: int, nbytes: int, path: str
    ) -> DatasetRecord:
        with self._tx() as tx:
            tx.run(
                "INSERT INTO datasets (tenant, id, name, n, d, bytes, path, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (tenant, dataset_id, name, n, d, nbytes, str(path), time.time()),
            )
            rows = tx.rows("SELECT * FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))
            return _dataset_record(rows[0])

    def get_dataset(self, tenant: str, dataset_id: str) -> DatasetRecord | None:
        rows = self._rows("SELECT * FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))
        return _dataset_record(rows[0]) if rows else None

    def list_datasets(self, tenant: str) -> list[DatasetRecord]:
        return [
            _dataset_record(r)
            for r in self._rows("SELECT * FROM datasets WHERE tenant = ? ORDER BY key DESC", (tenant,))
        ]

    def delete_dataset(self, tenant: str, dataset_id: str) -> None:
        with self._tx() as tx:
            tx.run("DELETE FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))

    # --- helpers ----------------------------------------------------------------------------------------------

    def _run(self, sql: str, args: Sequence[Any]) -> RunRecord | None:
        rows = self._rows(sql, args)
        return _run_record(rows[0]) if rows else None

    def _rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        with self._tx() as tx:
            return tx.rows(sql, args)


class SQLiteStore(SQLStore):
    """The embedded store: one SQLite file in WAL mode, one connection guarded by a lock (calls are short). Several
    processes on one machine may share the file (SQLite locks it); machines share a PostgreSQL instead."""

    dialect = "sqlite"
    NOW = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[_Tx]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # SQLite's write lock: one writer at a time, across processes too
            try:
                yield _Tx(self._db, "?")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _rows(self, sql: str, args: Sequence[Any]) -> list[Any]:
        with self._lock:  # a read needs no write lock
            return _Tx(self._db, "?").rows(sql, args)

    def _tag_filter(self, key: str, value: str) -> tuple[str, list[Any]]:
        return "json_extract(tags, ?) = ?", [f'$."{key}"', value]

    def _legacy_columns(self, tx: _Tx) -> set[str] | None:
        have = tx.rows("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'runs'")
        return {r["name"] for r in tx.rows("PRAGMA table_info(runs)")} if have else None


#: How long a PostgreSQL session may sit inside a transaction before the server ends it (ms).
IDLE_IN_TRANSACTION_MS = 5000


class PostgresStore(SQLStore):
    """PostgreSQL, shared by every replica of the service: a pool of connections, one transaction per call."""

    dialect = "postgresql"
    NOW = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"
    FOR_UPDATE = " FOR UPDATE"

    def __init__(self, url: str, max_connections: int = 8, timeout_s: float = 10.0) -> None:
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url
        params = postgres_params(url)
        # the URL's own connect_timeout and options are kept (a keyword argument would replace them); the options
        # gain idle_in_transaction_session_timeout: a replica frozen inside a transaction (it never idles there
        # otherwise) must not hold a run's row locked past its lease, so the server ends such a session and another
        # replica can take the run
        connect_timeout = int(params["connect_timeout"]) if params.get("connect_timeout") else max(1, int(timeout_s))
        options = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
        if params.get("options"):
            options = f"{params['options']} {options}"
        psycopg.connect(url, connect_timeout=connect_timeout).close()  # a refused connection fails at once
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_connections,
            kwargs={"row_factory": dict_row, "connect_timeout": connect_timeout, "options": options},
            timeout=timeout_s,
            check=ConnectionPool.check_connection,  # a connection the server ended (its restart) is replaced
            open=False,
            name="raysampler",
        )
        self._pool.open(wait=True, timeout=timeout_s)
        try:
            self._migrate()
        except BaseException:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _tx(self) -> Iterator[_Tx]:
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            yield _Tx(cur, "%s")

    def _lock_tenant(self, tx: _Tx, tenant: str) -> None:
        tx.rows("SELECT pg_advisory_xact_lock(hashtext(?))", (tenant,))

    def _lock_migrations(self, tx: _Tx) -> None:
        tx.rows("SELECT pg_advisory_xact_lock(?)", (migrations.PG_MIGRATION_LOCK,))

    def _tag_filter(self, key: str, value: str) -> tuple[str, list[Any]]:
        return "(tags::jsonb ->> ?) = ?", [key, value]


def open_store(url: str | None, default_sqlite: Path) -> RecordStore:
    """The store of RAYSAMPLER_DATABASE_URL (`url`, checked by `check_database_url`), migrated to the newest schema;
    SQLite at `default_sqlite` when there is none."""
    if url is None:
        return SQLiteStore(str(default_sqlite))
    check_database_url(url)
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return SQLiteStore(parts.path)
    return PostgresStore(url)


def _fence(lease: Lease | None) -> tuple[str, list[Any]]:
    """The condition that makes a write the lease holder's only (none without a lease)."""
    if lease is None:
        return "", []
    return " AND lease_owner = ? AND lease_epoch = ?", [lease.owner, lease.epoch]


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
    if name in ("failure", "diagnostics", "network"):
        return None if value is None else value.model_dump_json()
    if name == "stop_reason":
        return None if value is None else RunStopReason(value).value
    if name == "cancel_requested":
        return int(bool(value))
    return value


def _run_record(r: Any) -> RunRecord:
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
        network=None if r["network"] is None else NetworkInfo.model_validate_json(r["network"]),
        lease_owner=r["lease_owner"],
        lease_expires=None if r["lease_expires"] is None else float(r["lease_expires"]),
        lease_epoch=int(r["lease_epoch"]),
    )


def _dataset_record(r: Any) -> DatasetRecord:
    return DatasetRecord(
        key=r["key"],
        tenant=r["tenant"],
        id=r["id"],
        name=r["name"],
        n=r["n"],
        d=r["d"],
        nbytes=int(r["bytes"]),
        path=str(r["path"]),
        created_at=r["created_at"],
    )
