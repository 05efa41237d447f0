"""The REST service against a real uvicorn server on 127.0.0.1 with a real local Ray (fixture `service`), through the
SDK and raw HTTP: streaming while running, offsets, cancel, auth and tenants, validation, uploads, idempotency,
pagination, delete, metrics, and a hard restart that keeps every run and draw."""
from __future__ import annotations

import asyncio
import io
import json
import math
import tempfile
import threading
import time

import httpx
import numpy as np
import pytest

from conftest import SERVICE_KEYS, service_env
from raysampler.client import APIError, AsyncClient, Client
from raysampler.service.streaming import decode_values, encode_values

ALICE, BOB = SERVICE_KEYS["alice"], SERVICE_KEYS["bob"]


def spec(**over):
    base = {"model": {"family": "logistic_regression", "prior_scale": 1.0},
            "data": {"dataset": "builtin:breast_cancer"}, "num_shards": 2, "chains": 4, "num_rounds": 300,
            "burn_in": 50, "seed": 3}
    return base | over


def hdr(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def wait_until(fn, timeout: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def alice(service):
    with Client(service.url, ALICE) as c:
        yield c


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
    assert info["progress"] == {"rounds_done": 350, "rounds_total": 350, "draws_stored": 300, "draws_total": 300}
    assert len(info["workers"]) == 2 and all(w["local_steps"] >= 1 and w["tau_s"] > 0 for w in info["workers"])
    assert info["timings"]["sampling_s"] > 0 and info["started_at"] >= info["created_at"]
    draws = finished.draws()
    assert draws.shape == (4, 300, 31) and np.all(np.isfinite(draws))
    lines = _ndjson(service, finished.id)
    head = lines[0]
    assert head["type"] == "header" and head["chains"] == 4 and head["dim"] == 31 and len(head["param_names"]) == 31
    assert [l["offset"] for l in lines[1:]] == list(range(1200))
    assert all(l["index"] * 4 + l["chain"] == l["offset"] for l in lines[1:])
    table = finished.summary()
    assert {"mean", "sd", "ess_bulk", "ess_tail", "r_hat", "mcse_mean"} <= set(table.columns)
    np.testing.assert_allclose(table["mean"].to_numpy(), draws.mean(axis=(0, 1)), rtol=1e-10, atol=1e-12)
    tree = finished.to_arviz()
    np.testing.assert_array_equal(tree.posterior["theta"].values, draws)
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
    assert 0 < kept < 10**6
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
        evs = [dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
               for block in r.text.strip().split("\n\n") if "data: " in block]
        return evs
    evs = read({})
    ids = [int(e["id"]) for e in evs]
    assert ids == list(range(1, len(ids) + 1))
    kinds = [e["event"] for e in evs]
    assert kinds[0] == "status" and kinds.count("progress") >= 1 and "setup" in kinds
    assert [json.loads(e["data"])["status"] for e in evs if e["event"] == "status"] == ["PENDING", "RUNNING",
                                                                                         "SUCCEEDED"]
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
    assert queued.cancel()["status"] == "CANCELLED"
    assert queued.draws().shape[1] == 0
    blocker.cancel()
    wait_until(lambda: blocker.status() == "CANCELLED", what="blocker CANCELLED")


# --- auth and tenants -----------------------------------------------------------------------------------------------

def test_auth_required_and_tenants_isolated(service, finished):
    url = service.url
    assert httpx.get(f"{url}/v1/runs").status_code == 401
    assert httpx.get(f"{url}/v1/runs", headers=hdr("not-a-key-at-all")).status_code == 401
    assert httpx.get(f"{url}/v1/runs", headers={"Authorization": "Basic abc"}).status_code == 401
    assert httpx.get(f"{url}/v1/health").status_code == 200  # health needs no key
    rid = finished.id
    for method, path in [("GET", ""), ("GET", "/draws"), ("GET", "/events"), ("GET", "/summary"),
                         ("GET", "/arviz"), ("POST", "/cancel"), ("DELETE", "")]:
        r = httpx.request(method, f"{url}/v1/runs/{rid}{path}", headers=hdr(BOB), timeout=60)
        assert r.status_code == 404, (method, path, r.status_code)
    bob_runs = httpx.get(f"{url}/v1/runs", headers=hdr(BOB)).json()["runs"]
    assert rid not in {r["id"] for r in bob_runs}
    assert httpx.get(f"{url}/v1/runs/{rid}", headers=hdr(ALICE)).status_code == 200  # untouched


# --- validation -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body,field", [
    (spec(model={"family": "no_such_family"}), "model.family"),
    (spec(algorithm={"name": "no_such_algorithm"}), "algorithm.name"),
    (spec(algorithm={"name": "dglmc", "params": {"n_local": -2}}), "algorithm.params"),
    (spec(algorithm={"name": "dglmc", "params": {"bogus": 1}}), "algorithm.params"),
    (spec(chains="four"), "chains"),
    (spec(num_rounds=-5), "num_rounds"),
    (spec(burn_in=-1), "burn_in"),
    (spec(num_shards=0), "num_shards"),
    (spec(num_shards=10**3), "num_shards"),
    (spec(time_budget_s=0), "time_budget_s"),
    (spec(data={"dataset": "builtin:diabetes"}), "data"),  # real-valued y for a logistic model
    (spec(data={"dataset": "builtin:nope"}), "data.dataset"),
    (spec(data={"dataset_id": "ds-missing"}), "data.dataset_id"),
    (spec(data={}), "data"),
    (spec(unknown_field=1), "unknown_field"),
    (spec(model={"family": "logistic_regression", "prior_scale": "abc"}), "model.prior_scale"),
    (spec(algorithm={"name": "dglmc", "params": {"rho": [1.0, 2.0, 3.0]}}), "algorithm.params"),  # 2 shards
    (spec(algorithm={"name": "dglmc", "params": {"init": [0.0, 1.0]}}), "algorithm.params"),      # d = 31
    (spec(algorithm={"name": "dsgld", "params": {"init": "somewhere"}}), "algorithm.params"),
    (spec(data={"dataset": "builtin:gaussian_toy", "options": {"n": 10**13}}), "data.options.n"),
])
def test_bad_specs_get_422_naming_the_field(service, body, field):
    r = httpx.post(f"{service.url}/v1/runs", json=body, headers=hdr(ALICE), timeout=60)
    assert r.status_code == 422, r.text
    locs = [".".join(str(p) for p in e["loc"] if p != "body") for e in r.json()["detail"]]
    assert any(l == field or l.startswith(field + ".") for l in locs), (field, r.json())


def test_bad_query_values_get_422_not_500(service, finished):
    url, h = service.url, hdr(ALICE)
    assert httpx.get(f"{url}/v1/runs", params={"cursor": "9" * 25}, headers=h).status_code == 422
    assert httpx.get(f"{url}/v1/runs/{finished.id}/events", headers=h | {"Last-Event-ID": "9" * 25}).status_code == 422
    assert httpx.get(f"{url}/v1/runs/{finished.id}/draws", params={"start": 10**19}, headers=h).status_code == 422
    assert httpx.get(f"{url}/v1/runs/{finished.id}/draws", params={"start": -1}, headers=h).status_code == 422
    assert httpx.get(f"{url}/v1/runs/{finished.id}/summary", params={"ci_prob": 2}, headers=h).status_code == 422
    assert httpx.post(f"{url}/v1/runs", content=b"not json", headers=h).status_code == 422


def test_upload_limit_413_and_bad_files_422(service):
    big = io.BytesIO(b"x" * 300_000)
    r = httpx.post(f"{service.url}/v1/datasets", files={"file": ("big.csv", big)}, headers=hdr(ALICE), timeout=60)
    assert r.status_code == 413 and "Content Too Large" in r.text
    req = httpx.Request("POST", "http://x", files={"file": ("big.csv", b"y,a\n" + b"1,2\n" * 100_000)})
    body, ctype = req.read(), req.headers["content-type"]
    r = httpx.post(f"{service.url}/v1/datasets", timeout=60, headers=hdr(ALICE) | {"content-type": ctype},
                   content=(body[k:k + 65536] for k in range(0, len(body), 65536)))  # chunked: no Content-Length
    assert r.status_code == 413 and "Content Too Large" in r.text
    r = httpx.post(f"{service.url}/v1/datasets", files={"file": ("d.csv", b"y,a\n1,2\n0,3\n")},
                   data={"x_columns": "y,a"}, headers=hdr(ALICE))
    assert r.status_code == 422 and "target column" in r.json()["detail"][0]["msg"]
    r = httpx.post(f"{service.url}/v1/datasets", files={"file": ("d.txt", b"1,2")}, headers=hdr(ALICE))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "file"]
    r = httpx.post(f"{service.url}/v1/datasets", files={"file": ("d.csv", b"a,b\n1,2\n")}, headers=hdr(ALICE))
    assert r.status_code == 422 and "'y'" in r.json()["detail"][0]["msg"]


def test_upload_csv_parquet_npz_then_sample_on_it(service, alice, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=200) > 0).astype(float)
    csv = tmp_path / "d.csv"
    csv.write_text("label,a,b,c,ignored\n" + "\n".join(f"{t},{r[0]},{r[1]},{r[2]},7" for t, r in zip(y, X)))
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
    assert info["id"] not in {d["id"] for d in httpx.get(f"{service.url}/v1/datasets", headers=hdr(BOB)).json()["datasets"]}
    run = alice.submit(spec(data={"dataset_id": info["id"]}, num_rounds=100, burn_in=20, chains=2))
    assert run.wait()["status"] == "SUCCEEDED"
    assert run.draws().shape == (2, 100, 3)  # one coefficient per feature column
    r = httpx.post(f"{service.url}/v1/runs", json=spec(data={"dataset_id": info["id"]}), headers=hdr(BOB))
    assert r.status_code == 422  # bob cannot use alice's data set
    assert httpx.delete(f"{service.url}/v1/datasets/{info['id']}", headers=hdr(BOB)).status_code == 404
    alice.delete_dataset(info["id"])
    assert info["id"] not in {d["id"] for d in alice.datasets()}


# --- idempotency, listing, delete -----------------------------------------------------------------------------------

def test_idempotent_submit(service, alice):
    body = spec(num_rounds=60, burn_in=10, chains=2, seed=11)
    h = hdr(ALICE) | {"Idempotency-Key": "same-key-1"}
    r1 = httpx.post(f"{service.url}/v1/runs", json=body, headers=h, timeout=60)
    r2 = httpx.post(f"{service.url}/v1/runs", json=body, headers=h, timeout=60)
    assert r1.status_code == r2.status_code == 202
    assert r1.json()["id"] == r2.json()["id"] and r2.headers.get("Idempotent-Replayed") == "true"
    assert r1.headers["Location"] == f"/v1/runs/{r1.json()['id']}"
    r3 = httpx.post(f"{service.url}/v1/runs", json=body | {"seed": 12}, headers=h, timeout=60)
    assert r3.status_code == 409
    r4 = httpx.post(f"{service.url}/v1/runs", json=body | {"run_id": "other-id"}, headers=h, timeout=60)
    assert r4.status_code == 409 and "other-id" in r4.json()["detail"]
    mine = alice.submit(body | {"seed": 13}, run_id="my-run-13")
    again = alice.submit(body | {"seed": 13}, run_id="my-run-13")
    assert mine.id == again.id == "my-run-13"
    # another tenant may use the same key and run id: they name different runs
    rb = httpx.post(f"{service.url}/v1/runs", json=body | {"seed": 13, "run_id": "my-run-13"},
                    headers=hdr(BOB) | {"Idempotency-Key": "same-key-1"}, timeout=60)
    assert rb.status_code == 202 and "Idempotent-Replayed" not in rb.headers
    for key, rid in ((ALICE, r1.json()["id"]), (ALICE, "my-run-13"), (BOB, "my-run-13")):
        with Client(service.url, key) as c:
            assert c.run(rid).wait()["status"] == "SUCCEEDED"


def test_list_filter_paginate_and_delete(service, alice, finished):
    ids = [r["id"] for r in alice.runs(page_size=2)]
    assert len(ids) == len(set(ids)) >= 3 and finished.id in ids
    page = httpx.get(f"{service.url}/v1/runs", params={"limit": 1}, headers=hdr(ALICE)).json()
    assert len(page["runs"]) == 1 and page["next_cursor"]
    ok = [r["id"] for r in alice.runs(status="SUCCEEDED")]
    assert finished.id in ok and all(alice.run(i).info()["status"] == "SUCCEEDED" for i in ok[:3])
    assert httpx.get(f"{service.url}/v1/runs", params={"status": "DONE"}, headers=hdr(ALICE)).status_code == 422
    assert httpx.get(f"{service.url}/v1/runs", params={"cursor": "x"}, headers=hdr(ALICE)).status_code == 422
    tmp = alice.submit(spec(num_rounds=40, burn_in=5, chains=2, seed=21))
    assert tmp.wait()["status"] == "SUCCEEDED"
    tmp.delete()
    assert httpx.get(f"{service.url}/v1/runs/{tmp.id}", headers=hdr(ALICE)).status_code == 404
    running = alice.submit(spec(num_rounds=10**6, burn_in=0, seed=22))
    wait_until(lambda: running.status() == "RUNNING", what="RUNNING")
    assert httpx.delete(f"{service.url}/v1/runs/{running.id}", headers=hdr(ALICE)).status_code == 409
    running.cancel()
    wait_until(lambda: running.status() == "CANCELLED", what="CANCELLED")


def test_health_version_metrics(service, finished):
    health = httpx.get(f"{service.url}/v1/health").json()
    assert health["ray_connected"] is True and "runs" not in health  # no key: nothing about anyone's runs
    v = httpx.get(f"{service.url}/v1/version").json()
    assert {"dglmc", "fald", "qlsd", "dsgld"} <= set(v["algorithms"]) and "logistic_regression" in v["model_families"]
    text = httpx.get(f"{service.url}/metrics").text
    assert "raysampler_runs_submitted_total" in text and 'raysampler_runs{status="SUCCEEDED"}' in text
    assert "raysampler_http_request_duration_seconds_bucket" in text
    assert httpx.get(f"{service.url}/docs").status_code == 200
    assert "/v1/runs/{run_id}/draws" in httpx.get(f"{service.url}/openapi.json").json()["paths"]


def test_nonfinite_values_are_encoded_explicitly():
    row = np.array([1.5, math.nan, math.inf, -math.inf, -0.25])
    text = encode_values(row)
    assert text == '[1.5, "NaN", "Infinity", "-Infinity", -0.25]'
    back = decode_values(json.loads(text))
    np.testing.assert_array_equal(np.array(back), row)


def test_async_client(service, finished):
    async def go():
        async with AsyncClient(service.url, ALICE) as c:
            run = await c.run(finished.id)
            assert await run.status() == "SUCCEEDED"
            draws = await run.draws()
            table = await run.summary()
            fresh = await c.submit(spec(num_rounds=50, burn_in=5, chains=2, seed=31))
            final = await fresh.wait(timeout=120)
            return draws, table, final
    draws, table, final = asyncio.run(go())
    assert draws.shape == (4, 300, 31) and len(table) == 31 and final["status"] == "SUCCEEDED"


# --- durability -----------------------------------------------------------------------------------------------------

def test_hard_restart_keeps_runs_and_draws(tmp_path):
    from raysampler.service.local import LocalService

    ray_tmp = tempfile.mkdtemp(prefix="rs-rst-")
    svc = LocalService(tmp_path / "data", keys={"alice": ALICE}, env=service_env(ray_tmp), log=tmp_path / "a.log")
    svc.start()
    try:
        with Client(svc.url, ALICE) as c:
            done = c.submit(spec(num_rounds=80, burn_in=10, chains=2))
            assert done.wait()["status"] == "SUCCEEDED"
            before_done = done.draws()
            live = c.submit(spec(num_rounds=10**6, burn_in=0, chains=2))
            wait_until(lambda: live.info()["progress"]["draws_stored"] >= 50, what="stored draws")
            svc.kill()  # SIGKILL, server and its Ray: a crash
            svc.start()
            info = c.run(live.id).info()
            assert info["status"] == "FAILED" and "stopped while this run was RUNNING" in info["error"]
            kept = info["progress"]["draws_stored"]
            assert kept >= 50
            after = c.run(live.id).draws()
            assert after.shape == (2, kept, 31) and np.all(np.isfinite(after))
            np.testing.assert_array_equal(c.run(done.id).draws(), before_done)
            assert c.run(done.id).info()["status"] == "SUCCEEDED"
            statuses = [json.loads(l.split("data: ", 1)[1])["status"] for l in httpx.get(
                f"{svc.url}/v1/runs/{live.id}/events", headers=hdr(ALICE), timeout=60).text.splitlines()
                if l.startswith("data: ") and '"status"' in l]
            assert statuses[-1] == "FAILED"
            # graceful stop (SIGINT) while a client follows a running run: the server still stops promptly
            live2 = c.submit(spec(num_rounds=10**6, burn_in=0, chains=2, seed=8))
            wait_until(lambda: live2.info()["progress"]["draws_stored"] >= 20, what="stored draws")
            got = []
            reader = threading.Thread(target=lambda: got.extend(
                b for b in _ignore_disconnect(live2.stream_draws(follow=True))), daemon=True)
            reader.start()
            time.sleep(1.0)
            t0 = time.monotonic()
            svc.stop(timeout_s=60)
            assert svc.proc.returncode == 0 and time.monotonic() - t0 < 30
            svc.start()
            info2 = c.run(live2.id).info()
            assert info2["status"] == "FAILED" and "shut down" in info2["error"]
            assert c.run(live2.id).draws().shape[1] == info2["progress"]["draws_stored"] >= 20
    finally:
        svc.kill()


def _ignore_disconnect(it):
    try:
        yield from it
    except (httpx.TransportError, APIError):
        return


def test_store_transitions_are_compare_and_set(tmp_path):
    from raysampler.service.store import SQLiteStore

    store = SQLiteStore(str(tmp_path / "s.sqlite3"))
    rec = store.create_run("t", "r1", {"x": 1}, "h", None, 10, 5, 2)
    assert store.transition("t", "r1", ["PENDING"], event=("status", {"status": "CANCELLED"}), status="CANCELLED")
    # the executor picking the run up afterwards loses: no RUNNING after CANCELLED, no extra event
    assert not store.transition("t", "r1", ["PENDING"], event=("status", {"status": "RUNNING"}), status="RUNNING")
    assert store.get_run("t", "r1")["status"] == "CANCELLED"
    assert [e["data"]["status"] for e in store.events_after(rec["key"], 0)] == ["CANCELLED"]
    assert not store.transition("other-tenant", "r1", ["CANCELLED"], status="FAILED")
