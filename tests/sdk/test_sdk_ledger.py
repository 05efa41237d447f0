"""The SDK's secure_sums submit argument and its ledger call, on the sync and the async client (the shared
operation), against scripted answers: what goes out and what comes back."""

from __future__ import annotations

import json

import httpx
import pytest
from sdk_twins import KINDS, connect

from raysampler.client import APIError

URL, KEY = "http://svc", "k" * 16
RUN = {"id": "r1", "status": "RUNNING", "workers": []}
LEDGER = {
    "run_id": "r1",
    "site": "a",
    "shards": [
        {
            "shard": 0,
            "site": "a",
            "messages": 3,
            "bytes": 2000,
            "masked_bytes": 1984,
            "sealed_bytes": 0,
            "plain_bytes": 16,
            "releases": [{"quantity": "z/rho", "shape": [4, 31], "messages": 2, "bytes": 1984, "mode": "masked"}],
        }
    ],
}


@pytest.mark.parametrize("kind", KINDS)
def test_submit_sends_secure_sums_and_ledger_asks_for_one_site(kind: str) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "POST":
            return httpx.Response(202, json=RUN)
        if request.url.params.get("site") == "b":
            return httpx.Response(404, json={"detail": "site: run r1 has no shard on site 'b'; its sites: 'a'"})
        return httpx.Response(200, json=LEDGER)

    with connect(kind, URL, KEY, handler) as c:
        run = c.submit({"model": {"family": "logistic_regression"}}, secure_sums=True)
        assert run.ledger(site="a") == LEDGER
        with pytest.raises(APIError) as err:
            run.ledger(site="b")
        plain = c.submit({"model": {"family": "logistic_regression"}})
    assert json.loads(seen[0].content)["secure_sums"] is True
    assert "secure_sums" not in json.loads(seen[-1].content)  # not given: the spec's own stands
    assert (seen[1].url.path, seen[1].url.params["site"]) == ("/v1/runs/r1/ledger", "a")
    assert err.value.status_code == 404 and "no shard on site 'b'" in str(err.value)
    assert plain.id == "r1"
