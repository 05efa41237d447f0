"""The REST service against a real uvicorn server on 127.0.0.1 with a real local Ray (fixture `service`), through the
SDK and raw HTTP, where a real server is the point: sampling on Ray, streaming while running over a socket, offsets
and reconnects, SSE keep-alives, the body limit on chunked uploads, the async client (restarts and resumes are in
test_resume.py). Router behaviour (auth, validation, idempotency, paging) is tested in-process in test_routes.py."""

from __future__ import annotations

import asyncio
import io
import json
import time

import httpx
import numpy as np
import pytest
from support.service_helpers import ALICE, BOB, hdr, spec, wait_until

from raysampler.client import APIError, AsyncClient


@pytest.fixture(scope="module")
def finished(alice):
    """One completed run shared by the read-only tests."""
    run = alice.submit(spec())
    info = run.wait()
    assert info["status"] == "SUCCEEDED", info
    return run


def _ndjson(service, run_id, key=ALICE, **params):
    r = httpx.get(f"{service.url}/v1/runs/{run_id}/draws", params=params, headers=hdr(key), timeout=60)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in r.text.splitlines() if line]


# --- the main path --------------------------------------------------------------------------------------------------


def test_completed_run_draws_summary_arviz(service, alice, finished):
    info = finished.info()
    assert info["progress"] == {
        "rounds_done": 350,
        "rounds_total": 350,
        "draws_stored": 300,
        "draws_total": 300,
        "fraction": 1.0,
        "basis": "rounds",
    }
    assert info["stop_reason"] == "num_rounds"
    last = list(finished.events(follow=False))[-1]
    assert last["event"] == "status" and last["data"]["stop_reason"] == "num_rounds"
    assert len(info["workers"]) == 2 and all(w["local_steps"] >= 1 and w["tau_s"] > 0 for w in info["workers"])
    assert info["timings"]["sampling_s"] > 0 and info["started_at"] >= info["created_at"]
    draws = finished.draws()
    assert draws.shape == (4, 300, 31) and np.all(np.isfinite(draws))
    lines = _ndjson(service, finished.id)
    head = lines[0]
    assert head["type"] == "header" and head["chains"] == 4 and head["dim"] == 31 and len(head["param_names"]) == 31
    assert [line["offset"] for line in lines[1:]] == list(range(1200))
    assert all(line["index"] * 4 + line["chain"] == line["offset"] for line in lines[1:])
    table = finished.summary()
    assert {"mean", "sd", "ess_bulk", "ess_tail", "r_hat", "mcse_mean"} <= set(table.columns)
    np.testing.assert_allclose(table["mean"].to_numpy(), draws.mean(axis=(0, 1)), rtol=1e-10, atol=1e-12)
    tree = finished.to_arviz()
    np.testing.assert_array_equal(tree.posterior["beta"].values, draws)
    assert "sample_stats" in tree.children


def test_stream_while_running_then_cancel_keeps_draws(service, alice):
    run = alice.submit(spec(num_rounds=10**6, burn_in=0))
    streamed, statuses = [], []
    for batch in run.stream_draws(follow=True):
        streamed.append(batch)
        if len(statuses) == 0 and sum(len(b) for b in streamed) >= 40:
            statuses.append(run.status())  # still sampling: we are reading draws mid-run
            run.cancel()
    assert statuses == ["RUNNING"]
    info = wait_until(lambda: (i := run.info())["status"] in ("CANCELLED",) and i, what="CANCELLED")
    kept = info["progress"]["draws_stored"]
    assert 0 < kept < 10**6 and info["stop_reason"] == "cancelled"
    values = np.concatenate([b.values for b in streamed])
    offsets = np.concatenate([np.arange(b.offset, b.offset + len(b)) for b in streamed])
    np.testing.assert_array_equal(offsets, np.arange(len(values)))  # no gap, no duplicate
    stored = run.draws()
    assert stored.shape == (4, kept, 31) and len(values) == 4 * kept
    np.testing.assert_array_equal(values.reshape(kept, 4, 31).transpose(1, 0, 2), stored)
    with pytest.raises(APIError) as err:
        run.cancel()
    assert err.value.status_code == 409


def test_reconnect_with_offset_gets_exactly_the_missing_draws(service, finished):
    full = _ndjson(service, finished.id)[1:]
    for start in (0, 7, 401, 1199, 1200):
        part = _ndjson(service, finished.id, start=start)
        assert part[0]["start"] == start
        assert part[1:] == full[start:]
    sdk = list(finished.stream_draws(start=7, follow=False))
    assert sdk[0].offset == 7 and sum(len(b) for b in sdk) == 1193
    np.testing.assert_array_equal(sdk[0].values[0], full[7]["values"])


def test_events_are_numbered_and_resumable(service, finished):
    def read(headers):
        r = httpx.get(f"{service.url}/v1/runs/{finished.id}/events", headers=hdr(ALICE) | headers, timeout=60)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        evs = [
            dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
            for block in r.text.strip().split("\n\n")
            if "data: " in block
        ]
        return evs

    evs = read({})
    ids = [int(e["id"]) for e in evs]
    assert ids == list(range(1, len(ids) + 1))
    kinds = [e["event"] for e in evs]
    assert kinds[0] == "status" and kinds.count("progress") >= 1 and "setup" in kinds
    assert [json.loads(e["data"])["status"] for e in evs if e["event"] == "status"] == [
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
    ]
    again = read({"Last-Event-ID": "3"})
    assert [int(e["id"]) for e in again] == ids[3:]


def test_queued_run_gets_keepalives_and_cancels_while_pending(service, alice):
    blocker = alice.submit(spec(num_rounds=10**6, burn_in=0))
    wait_until(lambda: blocker.status() == "RUNNING", what="RUNNING")
    queued = alice.submit(spec(seed=9))
    assert queued.status() == "PENDING"  # one run at a time on this 2-CPU service
    seen = ""
    with httpx.stream("GET", f"{service.url}/v1/runs/{queued.id}/events", headers=hdr(ALICE), timeout=60) as r:
        t0 = time.monotonic()
        for text in r.iter_text():
            seen += text
            if ": keep-alive" in seen or time.monotonic() - t0 > 10:
                break
    assert ": keep-alive" in seen
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        queued.wait(timeout=1.0)  # no events come for a queued run: the deadline still holds
    assert time.monotonic() - t0 < 8
    cancelled = queued.cancel()
    assert cancelled["status"] == "CANCELLED" and cancelled["stop_reason"] == "cancelled"
    assert queued.draws().shape[1] == 0
    blocker.cancel()
    wait_until(lambda: blocker.status() == "CANCELLED", what="blocker CANCELLED")


# --- uploads --------------------------------------------------------------------------------------------------------


def test_upload_limit_413(service):
    big = io.BytesIO(b"x" * 300_000)
    r = httpx.post(f"{service.url}/v1/datasets", files={"file": ("big.csv", big)}, headers=hdr(ALICE), timeout=60)
    assert r.status_code == 413 and "Content Too Large" in r.text
    req = httpx.Request("POST", "http://x", files={"file": ("big.csv", b"y,a\n" + b"1,2\n" * 100_000)})
    body, ctype = req.read(), req.headers["content-type"]
    r = httpx.post(
        f"{service.url}/v1/datasets",
        timeout=60,
        headers=hdr(ALICE) | {"content-type": ctype},
        content=(body[k : k + 65536] for k in range(0, len(body), 65536)),
    )  # chunked: no Content-Length
    assert r.status_code == 413 and "Content Too Large" in r.text


def test_upload_csv_parquet_npz_then_sample_on_it(service, alice, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=200) > 0).astype(float)
    csv = tmp_path / "d.csv"
    rows = (f"{t},{r[0]},{r[1]},{r[2]},7" for t, r in zip(y, X, strict=True))
    csv.write_text("label,a,b,c,ignored\n" + "\n".join(rows))
    info = alice.upload_file(str(csv), y_column="label", x_columns=["a", "b", "c"], name="mine")
    assert (info["n"], info["d"], info["name"]) == (200, 3, "mine")
    pqf = tmp_path / "d.parquet"
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "target": y}), pqf)
    assert alice.upload_file(str(pqf), y_column="target")["d"] == 2
    npz = alice.upload_dataset(X, y, name="arrays")
    assert (npz["n"], npz["d"]) == (200, 3)
    ids = {d["id"] for d in alice.datasets()}
    assert {info["id"], npz["id"]} <= ids
    assert httpx.get(f"{service.url}/v1/datasets/{info['id']}", headers=hdr(BOB)).status_code == 404
    bobs = httpx.get(f"{service.url}/v1/datasets", headers=hdr(BOB)).json()["datasets"]
    assert info["id"] not in {d["id"] for d in bobs}
    run = alice.submit(spec(data={"dataset_id": info["id"]}, num_rounds=100, burn_in=20, chains=2))
    assert run.wait()["status"] == "SUCCEEDED"
    assert run.draws().shape == (2, 100, 3)  # one coefficient per feature column
    r = httpx.post(f"{service.url}/v1/runs", json=spec(data={"dataset_id": info["id"]}), headers=hdr(BOB))
    assert r.status_code == 422  # bob cannot use alice's data set
    assert httpx.delete(f"{service.url}/v1/datasets/{info['id']}", headers=hdr(BOB)).status_code == 404
    alice.delete_dataset(info["id"])
    assert info["id"] not in {d["id"] for d in alice.datasets()}


def test_health_on_ray(service, finished):
    health = httpx.get(f"{service.url}/v1/health").json()
    assert health == {"status": "ok", "executor": "ray", "ray_connected": True}  # no key: nothing about any run
    assert httpx.get(f"{service.url}/docs").status_code == 200


def test_async_client(service, finished):
    async def go():
        async with AsyncClient(service.url, ALICE) as c:
            run = await c.run(finished.id)
            assert await run.status() == "SUCCEEDED"
            draws = await run.draws()
            table = await run.summary()
            fresh = await c.submit(spec(num_rounds=50, burn_in=5, chains=2, seed=31))
            final = await fresh.wait(timeout=300)
            return draws, table, final

    draws, table, final = asyncio.run(go())
    assert draws.shape == (4, 300, 31) and len(table) == 31 and final["status"] == "SUCCEEDED"


def _ignore_disconnect(it):
    try:
        yield from it
    except (httpx.TransportError, APIError):
        return


def test_summary_is_stored_once_for_a_finished_run_and_dropped_on_delete(service, alice):
    run = alice.submit(spec(num_rounds=60, burn_in=10))
    assert run.wait()["status"] == "SUCCEEDED"
    first = httpx.get(f"{service.url}/v1/runs/{run.id}/summary", headers=hdr(ALICE), timeout=60).json()
    run_dir = service.data_dir / "runs" / "alice" / run.id
    stored = sorted(p.name for p in run_dir.glob("summary-*.json"))
    assert stored == [f"summary-{first['draws_per_chain']}-0.94.json"]
    again = httpx.get(f"{service.url}/v1/runs/{run.id}/summary", headers=hdr(ALICE), timeout=60).json()
    assert again == first
    other = httpx.get(
        f"{service.url}/v1/runs/{run.id}/summary", params={"ci_prob": 0.5}, headers=hdr(ALICE), timeout=60
    ).json()
    assert other["columns"][2] == "hdi50_lb" and len(list(run_dir.glob("summary-*.json"))) == 2
    run.delete()
    assert not run_dir.exists()


def test_auto_run_progress_is_on_convergence(service, alice, capsys):
    run = alice.submit(spec(num_rounds="auto", max_rounds=3000, target_ess=40, burn_in=50))
    info = run.wait(progress=True)
    bar = capsys.readouterr().err.split("\r")[-1]  # the bar as last drawn
    if info["stop_reason"] == "converged":
        assert "100%" in bar, bar
    assert info["status"] == "SUCCEEDED" and info["stop_reason"] in ("converged", "max_rounds")
    assert info["progress"]["basis"] == "convergence" and info["progress"]["fraction"] == 1.0
    steps = [e["data"] for e in run.events(follow=False) if e["event"] == "progress"]
    assert all(s["basis"] == "convergence" and 0.0 <= s["fraction"] <= 1.0 for s in steps)
    checked = [s for s in steps if "min_ess_bulk" in s]
    assert checked and all(s["max_rhat"] > 0 for s in checked)  # the engine's convergence checks, surfaced
    if info["stop_reason"] == "converged":
        assert checked[-1]["min_ess_bulk"] >= 40


def test_fixed_run_progress_is_on_rounds(finished):
    p = finished.info()["progress"]
    assert (p["basis"], p["fraction"]) == ("rounds", 1.0)
