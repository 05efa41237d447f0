"""Per-tenant limits (in-process app, executor "local"): active runs, one run's chains × dimension and stored bytes
each answer 429 naming the limit (with Retry-After where waiting helps); the queue serves tenants in turn."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from support.service_helpers import ALICE, BOB, hdr, inprocess_settings, spec, wait_until

from raysampler.service.queue import FairQueue

pytestmark = pytest.mark.service  # its own apps in-process (executor "local")

LONG = {"num_rounds": 10**6, "burn_in": 0, "chains": 2}


def _client(tmp_path_factory, **quotas):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from raysampler.api import create_app

    return TestClient(create_app(inprocess_settings(tmp_path_factory.mktemp("quota") / "data", **quotas)))


@pytest.fixture(scope="module")
def quota_client(tmp_path_factory):
    with _client(tmp_path_factory, quota_max_active_runs=2, quota_max_chains_x_dim=100) as client:
        yield client


@pytest.fixture(scope="module")
def bytes_client(tmp_path_factory):
    with _client(tmp_path_factory, quota_max_stored_bytes=250_000) as client:
        yield client


def test_active_runs_limit_is_429_with_retry_after_and_per_tenant(quota_client):
    c = quota_client
    ids = [c.post("/v1/runs", json=spec(**LONG, seed=s), headers=hdr(ALICE)).json()["id"] for s in (1, 2)]
    r = c.post("/v1/runs", json=spec(**LONG, seed=3), headers=hdr(ALICE))
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    assert "RAYSAMPLER_QUOTA_MAX_ACTIVE_RUNS" in r.json()["detail"]
    assert c.post("/v1/runs", json=spec(num_rounds=20, burn_in=5, chains=2), headers=hdr(BOB)).status_code == 202
    c.post(f"/v1/runs/{ids[0]}/cancel", headers=hdr(ALICE))
    wait_until(lambda: c.get(f"/v1/runs/{ids[0]}", headers=hdr(ALICE)).json()["status"] == "CANCELLED", what="cancel")
    assert (
        c.post("/v1/runs", json=spec(num_rounds=20, burn_in=5, chains=2, seed=4), headers=hdr(ALICE)).status_code == 202
    )
    for rid in ids[1:]:
        c.post(f"/v1/runs/{rid}/cancel", headers=hdr(ALICE))


def test_run_size_limit_names_chains_times_dimension(quota_client):
    r = quota_client.post("/v1/runs", json=spec(chains=4), headers=hdr(BOB))  # 4 × 31 = 124 > 100
    assert r.status_code == 429 and "Retry-After" not in r.headers
    assert "RAYSAMPLER_QUOTA_MAX_CHAINS_X_DIM" in r.json()["detail"] and "124" in r.json()["detail"]


def test_stored_bytes_limit_refuses_an_upload_that_would_pass_it_per_tenant(bytes_client):
    c = bytes_client
    X = np.random.default_rng(0).standard_normal((800, 20))
    buf = io.BytesIO()
    np.savez(buf, X=X, y=(X[:, 0] > 0).astype(float))
    up = lambda: c.post("/v1/datasets", files={"file": ("d.npz", buf.getvalue())}, headers=hdr("bob-key-0123456789"))
    assert up().status_code == 201  # 128 kB stored
    r = up()  # another 128 kB would pass 250 kB
    assert r.status_code == 429 and "RAYSAMPLER_QUOTA_MAX_STORED_BYTES" in r.json()["detail"]
    assert c.post("/v1/runs", json=spec(num_rounds=20, burn_in=5, chains=2), headers=hdr(BOB)).status_code == 202
    up()  # refused, stores nothing
    big = c.post("/v1/datasets", files={"file": ("e.npz", buf.getvalue())}, headers=hdr(ALICE))
    assert big.status_code == 201  # another tenant's space is its own


def test_fair_queue_serves_tenants_in_turn():
    q = FairQueue()
    for k in range(4):
        q.put("alice", f"a{k}")
    q.put("bob", "b0")
    q.put("carol", "c0")
    q.put("bob", "b1")
    order = [q.get() for _ in range(7)]
    assert [r for _, r in order] == ["a0", "b0", "c0", "a1", "b1", "a2", "a3"]
    q.stop_one()
    assert q.get() is None


# --- planned draws (issue 24) ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def draws_client(tmp_path_factory):
    with _client(tmp_path_factory, quota_max_draw_bytes=2_000_000, warn_draw_bytes=100_000) as client:
        yield client


def test_a_run_that_can_store_no_draw_is_refused_naming_thin_and_num_rounds(draws_client):
    r = draws_client.post("/v1/runs", json=spec(num_rounds=20, burn_in=5, thin=50, chains=2), headers=hdr(ALICE))
    assert r.status_code == 422
    [err] = r.json()["detail"]
    assert err["loc"] == ["body", "thin"]
    assert "thin = 50" in err["msg"] and "num_rounds = 20" in err["msg"] and "no draw" in err["msg"]
    r = draws_client.post(
        "/v1/runs", json=spec(num_rounds="auto", max_rounds=10, thin=20, chains=2), headers=hdr(ALICE)
    )
    assert r.status_code == 422 and "max_rounds = 10" in r.json()["detail"][0]["msg"]


def test_planned_draws_over_the_quota_are_429_naming_it(draws_client):
    r = draws_client.post("/v1/runs", json=spec(num_rounds=10**4, burn_in=0, chains=2), headers=hdr(ALICE))
    assert r.status_code == 429  # 2 × 10,000 × 31 × 8 = 4,960,000 bytes
    assert "RAYSAMPLER_QUOTA_MAX_DRAW_BYTES = 2000000" in r.json()["detail"] and "4960000" in r.json()["detail"]


def test_planned_draws_over_the_warning_size_are_warned_in_the_202_and_kept(draws_client):
    c = draws_client
    r = c.post("/v1/runs", json=spec(num_rounds=400, burn_in=0, chains=2), headers=hdr(ALICE))
    assert r.status_code == 202  # 2 × 400 × 31 × 8 = 198,400 bytes
    [note] = r.json()["warnings"]
    assert "198400 bytes" in note and "RAYSAMPLER_WARN_DRAW_BYTES = 100000" in note
    rid = r.json()["id"]
    info = wait_until(
        lambda: (i := c.get(f"/v1/runs/{rid}", headers=hdr(ALICE)).json())["status"] == "SUCCEEDED" and i,
        what="SUCCEEDED",
    )
    assert info["warnings"][0] == note
    small = c.post("/v1/runs", json=spec(num_rounds=20, burn_in=0, chains=2), headers=hdr(ALICE))
    assert small.status_code == 202 and small.json()["warnings"] == []


def test_chains_auto_chooses_no_more_chains_than_the_quotas_allow(tmp_path_factory):
    """A convergence-stopped run with chains "auto" takes 16 chains (the many-chain rule) unless the per-run quota
    of chains × dimension, its own max_chains or the planned draw bytes allow fewer; then it keeps the default 4."""
    from raysampler.service.settings import Settings

    assert Settings(quota_max_chains_x_dim=400).chains_cap(31, 1000) == 12
    assert Settings(quota_max_draw_bytes=31 * 8 * 1000 * 20).chains_cap(31, 1000) == 20
    assert Settings().chains_cap(31, 1000) is None
    auto = {"chains": "auto", "num_rounds": "auto", "max_rounds": 40, "burn_in": 5}
    with _client(tmp_path_factory, quota_max_chains_x_dim=400) as c:  # 16 × 31 = 496 > 400 ≥ 4 × 31
        ids = [
            c.post("/v1/runs", json=spec(**auto, **extra), headers=hdr(ALICE)).json()["id"]
            for extra in ({}, {"max_chains": 2})
        ]
        done = [_succeeded(c, rid) for rid in ids]
        assert [i["chains"] for i in done] == [4, 2]
        r = c.post("/v1/runs", json=spec(chains=4, max_chains=2), headers=hdr(ALICE))  # a cap on a count: refused
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "max_chains"], r.json()
    with _client(tmp_path_factory) as c:
        info = _succeeded(c, c.post("/v1/runs", json=spec(**auto), headers=hdr(ALICE)).json()["id"])
        assert info["chains"] == 16 and "stops on convergence" in info["plan"]["chains"]["reason"]


def _succeeded(c, rid):
    return wait_until(
        lambda: (i := c.get(f"/v1/runs/{rid}", headers=hdr(ALICE)).json())["status"] == "SUCCEEDED" and i,
        what="SUCCEEDED",
    )
