"""GET /v1/runs/{id}/diagnostics: the dashboard's rank, autocorrelation and ESS-evolution data of one parameter,
checked against arviz-stats on the draws the run streams; bounded size; bad input named."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from arviz_stats.base import array_stats as azs
from support.service_helpers import ALICE, BOB, final, hdr, spec


@pytest.fixture(scope="module")
def done(app_client) -> dict[str, Any]:
    r = app_client.post("/v1/runs", json=spec(num_rounds=60, burn_in=10, chains=3, seed=5), headers=hdr(ALICE))
    assert r.status_code == 202, r.text
    info = final(app_client, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    return info


def column(app_client, rid: str, param: int, chains: int) -> np.ndarray:
    lines = [json.loads(x) for x in app_client.get(f"/v1/runs/{rid}/draws", headers=hdr(ALICE)).text.splitlines()[1:]]
    return np.array([[ln["values"][param] for ln in lines if ln["chain"] == c] for c in range(chains)])


def test_diagnostics_match_arviz_stats_on_the_stored_draws(app_client, done):
    rid, n = done["id"], done["progress"]["draws_stored"]
    x = column(app_client, rid, 2, 3)
    r = app_client.get(f"/v1/runs/{rid}/diagnostics", params={"param": 2, "max_lag": 10}, headers=hdr(ALICE))
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["name"] == done["param_names"][2] and d["chains"] == 3 and d["step"] == 1 and d["draws_used"] == n
    counts = np.array(d["rank_counts"])
    assert counts.shape == (3, d["rank_bins"]) and (counts.sum(axis=1) == n).all()
    assert np.array(d["autocorr"]).shape == (3, 11)
    np.testing.assert_allclose(np.array(d["autocorr"]), azs.autocorr(x, axis=-1)[:, :11])
    assert d["ess_draws"][-1] == n and len(d["ess_draws"]) == len(d["ess_bulk"]) == len(d["ess_tail"])
    np.testing.assert_allclose(d["ess_bulk"][-1], azs.ess(x, method="bulk"))
    np.testing.assert_allclose(d["r_hat"], azs.rhat(x, method="rank"))


def test_diagnostics_stay_bounded_and_name_bad_input(app_client, done):
    rid = done["id"]
    d = app_client.get(
        f"/v1/runs/{rid}/diagnostics", params={"param": 0, "max_draws": 8, "ess_points": 3}, headers=hdr(ALICE)
    ).json()
    assert d["draws_used"] <= 8 and d["step"] > 1 and len(d["ess_draws"]) <= 3
    assert max(len(row) for row in d["autocorr"]) <= 8
    r = app_client.get(f"/v1/runs/{rid}/diagnostics", params={"param": 999}, headers=hdr(ALICE))
    assert r.status_code == 404 and "no parameter 999" in r.json()["detail"]
    r = app_client.get(f"/v1/runs/{rid}/diagnostics", params={"rank_bins": 1}, headers=hdr(ALICE))
    assert r.status_code == 422 and "rank_bins" in r.text
    assert app_client.get(f"/v1/runs/{rid}/diagnostics", headers=hdr(BOB)).status_code == 404
