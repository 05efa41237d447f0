"""GET /v1/cluster: the queue with each tenant's own positions (round-robin order), quota use, and nodes; another
tenant's runs appear only as counts."""

from __future__ import annotations

from support.service_helpers import ALICE, BOB, final, hdr, spec, wait_until


def test_queue_positions_follow_the_round_robin_and_stay_per_tenant(app_client):
    c = app_client
    assert c.get("/v1/cluster").status_code == 401
    long = c.post("/v1/runs", json=spec(num_rounds=10_000_000, chains=2), headers=hdr(ALICE)).json()["id"]
    wait_until(  # running and past its first stored chunk: the quota's stored bytes count it
        lambda: c.get(f"/v1/runs/{long}", headers=hdr(ALICE)).json()["progress"]["draws_stored"] > 0,
        what="the long run's first stored draws",
    )
    a1 = c.post("/v1/runs", json=spec(name="a1"), headers=hdr(ALICE)).json()["id"]
    b1 = c.post("/v1/runs", json=spec(), headers=hdr(BOB)).json()["id"]
    a2 = c.post("/v1/runs", json=spec(), headers=hdr(ALICE)).json()["id"]
    try:
        alice = c.get("/v1/cluster", headers=hdr(ALICE)).json()
        bob = c.get("/v1/cluster", headers=hdr(BOB)).json()
        mine = {q["run_id"]: q["position"] for q in alice["queue"]}
        theirs = {q["run_id"]: q["position"] for q in bob["queue"]}
        assert set(mine) == {a1, a2} and set(theirs) == {b1}
        assert mine[a1] + 1 == theirs[b1] == mine[a2] - 1  # alice, bob, alice: round-robin over tenants
        assert [q["name"] for q in alice["queue"]] == ["a1", None]
        assert alice["queued_total"] == bob["queued_total"] >= 3 and alice["running_runs"] >= 1
        assert alice["quota"]["active_runs"] >= 3 and alice["quota"]["stored_bytes"] > 0
        assert alice["executor"] == "local" and alice["max_concurrent_runs"] == 1
        assert alice["ray_dashboard_url"] is None
    finally:
        for rid, key in ((a1, ALICE), (b1, BOB), (a2, ALICE), (long, ALICE)):
            c.post(f"/v1/runs/{rid}/cancel", headers=hdr(key))
        for rid, key in ((a1, ALICE), (b1, BOB), (a2, ALICE), (long, ALICE)):
            final(c, rid, key)
