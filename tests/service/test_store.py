"""The record store, on both databases (SQLite and a real PostgreSQL): typed records in and out, compare-and-set
transitions, per-tenant keys, events in order, leases that fence a replica that lost its run, and schema migrations
from an empty database and from the previous version."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from support.service_helpers import spec

from raysampler.service import migrations
from raysampler.service.records import RunRecord
from raysampler.service.schemas import RunSpec, WorkerStats
from raysampler.service.store import (
    Conflict,
    LeaseLost,
    PostgresStore,
    RecordStore,
    SQLiteStore,
    check_database_url,
    open_store,
)
from raysampler.wire import ProgressEvent, RunStatus, StatusEvent

DATABASES = ["sqlite", "postgresql"]


def _open(database: str, request, tmp_path) -> RecordStore:
    if database == "sqlite":
        return SQLiteStore(str(tmp_path / "s.sqlite3"))
    return PostgresStore(request.getfixturevalue("postgres").new_database())


@pytest.fixture(params=DATABASES)
def database(request) -> str:
    return request.param


@pytest.fixture
def store(database, request, tmp_path):
    s = _open(database, request, tmp_path)
    yield s
    s.close()


def test_run_status_terminal_states():
    assert [s.value for s in RunStatus if s.is_terminal] == ["SUCCEEDED", "FAILED", "CANCELLED"]
    assert RunStatus("RUNNING") == "RUNNING" and not RunStatus.PENDING.is_terminal


def test_records_round_trip_typed(store):
    run_spec = RunSpec.model_validate(spec(chains=3))
    rec = store.create_run("t", "r1", run_spec, "h", "key-1", 350, 300)
    assert isinstance(rec, RunRecord) and rec.status is RunStatus.PENDING and rec.spec == run_spec
    assert (rec.chains, rec.dim, rec.param_names, rec.workers, rec.cancel_requested) == (3, None, None, (), False)
    store.update_run(
        "t",
        "r1",
        dim=2,
        param_names=["a", "b"],
        timings={"setup_s": 0.5},
        cancel_requested=True,
        workers=[WorkerStats(shard=0, tau_s=1e-3, local_steps=5, idle_fraction=None)],
    )
    got = store.get_run("t", "r1")
    assert got is not None and got.param_names == ("a", "b") and got.timings == {"setup_s": 0.5}
    assert got.workers == (WorkerStats(shard=0, tau_s=1e-3, local_steps=5, idle_fraction=None),)
    assert got.cancel_requested is True and store.get_run_by_idempotency_key("t", "key-1") == got
    with pytest.raises(Conflict) as err:
        store.create_run("t", "r2", run_spec, "h", "key-1", 350, 300)
    assert err.value.existing == got
    with pytest.raises(KeyError, match="not run fields"):
        store.update_run("t", "r1", spec_hash="x")  # type: ignore[call-arg]
    assert store.get_run("other", "r1") is None and store.list_runs("other", None, None, 10) == []


def test_store_transitions_are_compare_and_set(store):
    rec = store.create_run("t", "r1", RunSpec.model_validate(spec()), "h", None, 10, 5)
    assert store.transition(
        "t", "r1", [RunStatus.PENDING], event=StatusEvent(RunStatus.CANCELLED), status=RunStatus.CANCELLED
    )
    # the executor picking the run up afterwards loses: no RUNNING after CANCELLED, no extra event
    assert not store.transition(
        "t", "r1", [RunStatus.PENDING], event=StatusEvent(RunStatus.RUNNING), status=RunStatus.RUNNING
    )
    got = store.get_run("t", "r1")
    assert got is not None and got.status is RunStatus.CANCELLED
    assert [e.data["status"] for e in store.events_after(rec.key, 0)] == ["CANCELLED"]
    assert not store.transition("other-tenant", "r1", [RunStatus.CANCELLED], status=RunStatus.FAILED)
    assert store.count_runs_by_status() == {RunStatus.CANCELLED: 1}


def test_events_are_numbered_per_run(store):
    a = store.create_run("t", "a", RunSpec.model_validate(spec()), "h", None, 10, 5)
    b = store.create_run("t", "b", RunSpec.model_validate(spec()), "h", None, 10, 5)
    assert [store.add_event(a.key, ProgressEvent(k, 10, k)) for k in (1, 2, 3)] == [1, 2, 3]
    assert store.add_event(b.key, StatusEvent(RunStatus.FAILED, "boom")) == 1
    after = store.events_after(a.key, 1)
    assert [(e.seq, e.kind, e.data) for e in after] == [
        (2, "progress", {"rounds_done": 2, "rounds_total": 10, "draws_stored": 2}),
        (3, "progress", {"rounds_done": 3, "rounds_total": 10, "draws_stored": 3}),
    ]
    assert store.events_after(b.key, 0)[0].data == {"status": "FAILED", "error": "boom"}


def test_stop_reason_is_stored_and_an_older_database_gains_its_column(tmp_path):
    import sqlite3

    from raysampler.wire import RunStopReason

    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)  # a database written before stop_reason existed
    old.execute(
        "CREATE TABLE runs (key INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, id TEXT NOT NULL, "
        "status TEXT NOT NULL, created_at REAL NOT NULL, started_at REAL, finished_at REAL, spec TEXT NOT NULL, "
        "spec_hash TEXT NOT NULL, idempotency_key TEXT, rounds_done INTEGER NOT NULL DEFAULT 0, "
        "rounds_total INTEGER NOT NULL DEFAULT 0, draws_stored INTEGER NOT NULL DEFAULT 0, "
        "draws_total INTEGER NOT NULL DEFAULT 0, chains INTEGER NOT NULL, dim INTEGER, param_names TEXT, "
        "timings TEXT NOT NULL DEFAULT '{}', workers TEXT NOT NULL DEFAULT '[]', error TEXT, "
        "warnings TEXT NOT NULL DEFAULT '[]', cancel_requested INTEGER NOT NULL DEFAULT 0, UNIQUE (tenant, id))"
    )
    old.execute(
        "INSERT INTO runs (tenant, id, status, created_at, spec, spec_hash, chains) VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("t", "old", "SUCCEEDED", 1.0, RunSpec.model_validate(spec()).model_dump_json(), "h", 4),
    )
    old.commit()
    old.close()
    s = SQLiteStore(str(path))
    try:
        rec = s.get_run("t", "old")
        assert rec is not None and rec.stop_reason is None
        s.create_run("t", "new", RunSpec.model_validate(spec()), "h", None, 10, 10)
        assert s.transition(
            "t",
            "new",
            (RunStatus.PENDING,),
            event=StatusEvent(RunStatus.SUCCEEDED, stop_reason=RunStopReason.CONVERGED),
            status=RunStatus.SUCCEEDED,
            stop_reason=RunStopReason.CONVERGED,
        )
        new = s.get_run("t", "new")
        assert new is not None and new.stop_reason is RunStopReason.CONVERGED
        ev = s.events_after(new.key, 0)[-1]
        assert ev.data == {"status": "SUCCEEDED", "stop_reason": "converged"}
        assert StatusEvent.from_json(ev.data).stop_reason is RunStopReason.CONVERGED
    finally:
        s.close()


# --------------------------------------------------------------------------------------------------------- leases


def _run(store: RecordStore, run_id: str = "r1") -> RunRecord:
    return store.create_run("t", run_id, RunSpec.model_validate(spec()), "h", None, 10, 5)


def test_a_lease_is_held_by_one_replica_and_fences_the_one_that_lost_it(store):
    rec = _run(store)
    a = store.acquire_lease("t", "r1", "replica-a", ttl_s=30)
    assert a is not None and a.epoch == 1 and a.run_key == rec.key
    assert store.acquire_lease("t", "r1", "replica-b", ttl_s=30) is None  # held, not expired
    assert [r.id for r in store.runs_to_drive("replica-b")] == [] and store.renew_lease(a, 30)
    store.update_run("t", "r1", lease=a, rounds_done=3)
    assert store.transition("t", "r1", [RunStatus.PENDING], lease=a, status=RunStatus.RUNNING)
    assert store.add_event(rec.key, ProgressEvent(3, 10, 3), lease=a) == 1
    held = store.get_run("t", "r1")
    assert held is not None and (held.lease_owner, held.lease_epoch) == ("replica-a", 1)

    assert store.renew_lease(a, ttl_s=-1)  # as if replica-a had stopped renewing: its lease has expired
    assert [r.id for r in store.runs_to_drive("replica-b")] == ["r1"]
    b = store.acquire_lease("t", "r1", "replica-b", ttl_s=30)
    assert b is not None and b.epoch == 2
    # replica-a can no longer write: every write of its epoch is refused and changes nothing
    assert not store.renew_lease(a, 30)
    with pytest.raises(LeaseLost):
        store.update_run("t", "r1", lease=a, rounds_done=9)
    with pytest.raises(LeaseLost):
        store.add_event(rec.key, ProgressEvent(9, 10, 9), lease=a)
    with pytest.raises(LeaseLost):
        store.transition("t", "r1", [RunStatus.RUNNING], lease=a, status=RunStatus.FAILED)
    got = store.get_run("t", "r1")
    assert got is not None and got.rounds_done == 3 and got.status is RunStatus.RUNNING
    assert [e.seq for e in store.events_after(rec.key, 0)] == [1]
    store.update_run("t", "r1", lease=b, rounds_done=4)
    assert not store.transition("t", "r1", [RunStatus.PENDING], lease=b, status=RunStatus.FAILED)  # CAS, not lost
    # a restarted replica-b (same name) takes its own run back at once, with a new epoch; a release frees it
    b2 = store.acquire_lease("t", "r1", "replica-b", ttl_s=30)
    assert b2 is not None and b2.epoch == 3
    store.release_lease(b2)
    a2 = store.acquire_lease("t", "r1", "replica-a", ttl_s=30)
    assert a2 is not None and a2.epoch == 4
    store.transition("t", "r1", [RunStatus.RUNNING], lease=a2, status=RunStatus.SUCCEEDED)
    store.release_lease(a2)
    assert store.acquire_lease("t", "r1", "replica-b", ttl_s=30) is None  # a finished run is driven by nobody


def test_concurrent_replicas_acquire_a_lease_exactly_once(store):
    for k in range(3):
        _run(store, f"r{k}")
    won: list[tuple[str, str]] = []
    lock = threading.Lock()

    def race(name: str) -> None:
        for k in range(3):
            lease = store.acquire_lease("t", f"r{k}", name, ttl_s=30)
            if lease is not None:
                with lock:
                    won.append((f"r{k}", name))

    threads = [threading.Thread(target=race, args=(f"replica-{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r for r, _ in won) == ["r0", "r1", "r2"], won


def test_a_cancel_request_is_seen_by_the_driving_replica(store):
    a, b = _run(store, "a"), _run(store, "b")
    store.update_run("t", "b", cancel_requested=True)
    assert store.cancel_requested([a.key, b.key]) == {b.key} and store.cancel_requested([]) == set()


# ----------------------------------------------------------------------------------------------------- migrations


def _version(store: RecordStore) -> int:
    return migrations.current_version(lambda sql, args: store._rows(sql, args))  # type: ignore[attr-defined]


def test_an_empty_database_is_migrated_to_the_newest_schema(store):
    assert _version(store) == migrations.LATEST == 3
    rec = _run(store)
    assert (rec.lease_owner, rec.lease_expires, rec.lease_epoch) == (None, None, 0)


def _previous_version(database: str, request, tmp_path) -> str:
    """A database at schema version LATEST - 1 holding one run and one event, as the previous release wrote it;
    returns its URL. (`test_a_sqlite_database_from_before_versions_is_migrated` covers SQLite files from before
    `schema_version` existed.)"""
    body = RunSpec.model_validate(spec()).model_dump_json()
    insert_run = (
        "INSERT INTO runs (tenant, id, status, created_at, spec, spec_hash, chains, rounds_done) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )
    run_args = ("t", "old", "RUNNING", 1.0, body, "h", 4, 7)
    event = (
        "INSERT INTO events (run_key, seq, kind, data, ts) VALUES (1, 1, 'status', '{\"status\": \"RUNNING\"}', 1.0)"
    )
    if database == "sqlite":
        path = tmp_path / "old.sqlite3"
        conn = sqlite3.connect(path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        execute = lambda sql, args: conn.execute(sql, args).fetchall()
        while migrations.step(execute, "sqlite", migrations.LATEST - 1, None) is not None:
            pass
        assert migrations.current_version(execute) == migrations.LATEST - 1
        conn.execute(insert_run, run_args)
        conn.execute(event)
        conn.close()
        return f"sqlite:///{path}"
    import psycopg
    from psycopg.rows import dict_row

    url = request.getfixturevalue("postgres").new_database()
    with psycopg.connect(url, row_factory=dict_row) as conn, conn.cursor() as cur:
        run = lambda sql, args: (
            cur.execute(sql.replace("?", "%s"), args),
            cur.fetchall() if cur.description is not None else [],
        )[1]
        while migrations.step(run, "postgresql", migrations.LATEST - 1, None) is not None:
            pass
        run(insert_run, run_args)
        run(event, ())
    return url


def test_a_database_of_the_previous_version_is_migrated_and_keeps_its_runs(database, request, tmp_path):
    url = _previous_version(database, request, tmp_path)
    s = open_store(url, tmp_path / "unused.sqlite3")
    try:
        assert _version(s) == migrations.LATEST
        old = s.get_run("t", "old")
        assert old is not None and old.status is RunStatus.RUNNING and old.rounds_done == 7
        assert old.lease_owner is None and old.lease_epoch == 0
        assert [e.data for e in s.events_after(old.key, 0)] == [{"status": "RUNNING"}]
        lease = s.acquire_lease("t", "old", "replica-a", 30)  # the new version's columns work on the old rows
        assert lease is not None and lease.epoch == 1
        assert _run(s, "new").key > old.key
    finally:
        s.close()
    again = open_store(url, tmp_path / "unused.sqlite3")  # opening a migrated database changes nothing
    try:
        assert _version(again) == migrations.LATEST and again.get_run("t", "new") is not None
    finally:
        again.close()


def test_a_sqlite_database_from_before_versions_is_migrated(tmp_path):
    """A SQLite file written before `schema_version` existed (version 1's tables, no version) gains what it lacks."""
    path = tmp_path / "legacy.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    execute = lambda sql, args: conn.execute(sql, args).fetchall()
    migrations.step(execute, "sqlite", 1, None)
    conn.execute(
        "INSERT INTO runs (tenant, id, status, created_at, spec, spec_hash, chains, rounds_done) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        ("t", "old", "RUNNING", 1.0, RunSpec.model_validate(spec()).model_dump_json(), "h", 4, 7),
    )
    conn.execute("DROP TABLE schema_version")
    conn.close()
    s = open_store(f"sqlite:///{path}", tmp_path / "unused.sqlite3")
    try:
        assert _version(s) == migrations.LATEST
        old = s.get_run("t", "old")
        assert old is not None and old.rounds_done == 7 and old.network is None
    finally:
        s.close()


def test_a_database_of_a_newer_version_is_refused(database, request, tmp_path):
    url = _previous_version(database, request, tmp_path)
    open_store(url, tmp_path / "unused.sqlite3").close()
    s = open_store(url, tmp_path / "unused.sqlite3")
    with s._tx() as tx:  # type: ignore[attr-defined]  # a newer raysampler migrated it further
        tx.run("UPDATE schema_version SET version = ?", (migrations.LATEST + 1,))
    s.close()
    with pytest.raises(migrations.SchemaTooNew, match=f"version {migrations.LATEST + 1}.*up to {migrations.LATEST}"):
        open_store(url, tmp_path / "unused.sqlite3")


@pytest.mark.parametrize(
    "url,why",
    [
        ("mysql://u:secret@db/x", "scheme is 'mysql'"),
        ("postgresql://u:secret@db:54x2/x", "port must be a number"),
        ("postgresql://u:secret@db/x?port=99999", "port must be a number"),
        ("postgresql://u:secret@db/x?sslmode=always", "sslmode is 'always'"),
        ("postgresql://u:secret@db/x?colour=blue", 'invalid URI query parameter: "colour"'),
        ("postgresql://u@db/x?password=secret&sslmode=on", "sslmode is 'on'"),
        ("sqlite://relative.db", "three slashes"),
        ("db.sqlite3", "scheme is 'missing'"),
    ],
)
def test_a_malformed_database_url_is_refused_saying_why_and_never_the_password(url, why):
    with pytest.raises(ValueError) as err:
        check_database_url(url)
    assert why in str(err.value) and "secret" not in str(err.value)


@pytest.mark.parametrize(
    "url,shown",
    [
        ("postgresql://u:secret@db.internal:6432/runs", "postgresql://u@db.internal:6432/runs"),
        ("postgresql://postgres:@/postgres?host=/tmp/pg", "postgresql://postgres@/postgres?host=/tmp/pg"),
        (
            "postgresql:///runs?host=/cloudsql/proj:eu:inst&user=svc",
            "postgresql://svc@/runs?host=/cloudsql/proj:eu:inst",
        ),
        (
            "postgres://u:p%40secret@[::1]:5432/runs?sslmode=verify-full",
            "postgres://u@[::1]:5432/runs?sslmode=verify-full",
        ),
        (
            "postgresql://u:secret@a:5432,b:5433/runs?target_session_attrs=read-write",
            "postgresql://u@a:5432,b:5433/runs",
        ),
        ("postgresql://u@db/runs?password=secret&connect_timeout=5&application_name=rs", "postgresql://u@db/runs"),
        ("postgresql://u:secret@/runs", "postgresql://u@/runs"),  # libpq's own socket
        ("postgresql://u:secret@db", "postgresql://u@db/"),  # libpq's default database: the user's name
    ],
)
def test_database_urls_are_taken_as_libpq_takes_them_and_shown_without_the_password(url, shown):
    from raysampler.service.backends import describe_database

    assert check_database_url(url) == url
    assert describe_database(url) == shown and "secret" not in describe_database(url)


def test_a_unix_socket_url_from_pgserver_opens_the_store(tmp_path):
    """The libpq form with the socket directory in `host=` (what pgserver.get_uri() and Cloud SQL's connector
    give): the service's settings take it and the store opens, migrates and keeps its own `options` beside the URL's."""
    import warnings

    from raysampler.service.settings import Settings

    with warnings.catch_warnings():  # pgserver's import asks platformdirs for a runtime dir it never uses here
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    try:
        uri = server.get_uri()
        assert "host=/" in uri and "@/" in uri  # the socket form, no TCP host
        url = Settings(database_url=uri + "&options=-c%20statement_timeout%3D60000").database_url
        assert url is not None
        store = open_store(url, tmp_path / "unused.sqlite3")
        try:
            assert isinstance(store, PostgresStore)
            with store._pool.connection() as conn:
                rows = conn.execute(
                    "SELECT name, setting FROM pg_settings"
                    " WHERE name IN ('statement_timeout', 'idle_in_transaction_session_timeout')"
                ).fetchall()
            settings = {r["name"]: r["setting"] for r in rows}
            assert settings["statement_timeout"] == "60000" and int(settings["idle_in_transaction_session_timeout"]) > 0
            run_spec = RunSpec.model_validate(spec(chains=2))
            assert store.create_run("t", "r1", run_spec, "h", "k", 350, 300).status is RunStatus.PENDING
        finally:
            store.close()
    finally:
        server.cleanup()


def test_an_unreachable_database_fails_fast():
    import psycopg

    t0 = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        PostgresStore("postgresql://nobody@127.0.0.1:9/none", timeout_s=2)
    assert time.monotonic() - t0 < 15
