"""secure_sums over REST and the release ledger's route (in-process app, executor "local"): a secure run's workers
carry their ledgers, GET /v1/runs/{id}/ledger gives them (one site's with ?site=), an unknown site is a 404 naming
the sites there are, secure_sums with an algorithm that routes per-site values is a 422 at secure_sums, and FALD,
QLSD and ULA runs send their terms masked."""

from __future__ import annotations

import pytest
from support.service_helpers import ALICE, final, hdr, spec

SMALL = {"num_rounds": 30, "burn_in": 10, "chains": 2, "num_shards": 3}


@pytest.fixture(scope="module")
def secure_run(app_client):
    r = app_client.post("/v1/runs", json=spec(**SMALL, seed=4, secure_sums=True), headers=hdr(ALICE))
    assert r.status_code == 202, r.text
    info = final(app_client, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    return info


def test_a_secure_runs_ledger_shows_masked_terms_per_site(app_client, secure_run):
    assert secure_run["spec"]["secure_sums"] is True
    workers = secure_run["workers"]
    assert [w["ledger"]["shard"] for w in workers] == [0, 1, 2]
    r = app_client.get(f"/v1/runs/{secure_run['id']}/ledger", headers=hdr(ALICE))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["site"] is None and [s["shard"] for s in body["shards"]] == [0, 1, 2]
    for entry in body["shards"]:
        kinds = {rel["quantity"]: rel for rel in entry["releases"]}
        assert kinds["z/rho"]["mode"] == "masked" and kinds["z/rho"]["messages"] == 40
        assert kinds["z/rho"]["shape"] == [2, 31] and kinds["z/rho"]["bytes"] == 40 * 2 * 31 * 8
        assert kinds["local_accept"]["mode"] == "plain" and kinds["step_time"]["mode"] == "plain"
        assert entry["masked_bytes"] == kinds["z/rho"]["bytes"]
        assert entry["bytes"] == entry["masked_bytes"] + entry["sealed_bytes"] + entry["plain_bytes"]
        assert entry["sealed_bytes"] > 0  # the checkpoints' worker states
    one = app_client.get(f"/v1/runs/{secure_run['id']}/ledger", params={"site": "shard-1"}, headers=hdr(ALICE))
    assert one.status_code == 200 and [s["shard"] for s in one.json()["shards"]] == [1]


def test_an_unknown_site_is_a_404_naming_the_sites(app_client, secure_run):
    r = app_client.get(f"/v1/runs/{secure_run['id']}/ledger", params={"site": "b"}, headers=hdr(ALICE))
    assert r.status_code == 404 and "no shard on site 'b'" in r.text
    assert app_client.get("/v1/runs/nosuchrun/ledger", headers=hdr(ALICE)).status_code == 404


@pytest.mark.parametrize("name", ["dadmms", "dmala"])
def test_secure_sums_with_an_algorithm_routing_site_values_is_a_422_at_the_field(app_client, name):
    body = spec(**SMALL, secure_sums=True) | {"algorithm": {"name": name}}
    r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"][-1] == "secure_sums" and repr(name) in detail["msg"]


@pytest.mark.parametrize(("name", "quantity"), [("fald", "x,grad"), ("qlsd", "q"), ("ula", "grad")])
def test_secure_sums_with_fald_qlsd_and_ula_run_and_their_terms_go_masked(app_client, name, quantity):
    body = spec(**SMALL, seed=5, secure_sums=True) | {"algorithm": {"name": name}}
    r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
    assert r.status_code == 202, r.text
    info = final(app_client, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    for entry in app_client.get(f"/v1/runs/{info['id']}/ledger", headers=hdr(ALICE)).json()["shards"]:
        kinds = {rel["quantity"]: rel["mode"] for rel in entry["releases"]}
        assert kinds[quantity] == "masked" and entry["masked_bytes"] > 0
