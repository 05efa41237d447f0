"""The record store: typed records in and out, compare-and-set transitions, per-tenant keys, events in order."""

from __future__ import annotations

import pytest
from service_helpers import spec

from raysampler.service.records import RunRecord
from raysampler.service.schemas import RunSpec, WorkerStats
from raysampler.service.store import Conflict, SQLiteStore
from raysampler.wire import ProgressEvent, RunStatus, StatusEvent


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(str(tmp_path / "s.sqlite3"))
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
