"""pipeline over REST (in-process app, executor "local"): a run's plan says whether its rounds ran as two chain groups
in flight and why ("auto" by default: off on one machine), pipeline=true runs them so with the same draws as an
unpipelined run, and a value the field does not take, or pipeline=true for an algorithm without batched chains, is a
422 at pipeline."""

from __future__ import annotations

import json

import pytest
from support.service_helpers import ALICE, final, hdr, spec

SMALL = {"num_rounds": 20, "burn_in": 10, "chains": 6, "num_shards": 3, "seed": 3}


def _draws(app_client, run_id: str) -> list:
    r = app_client.get(f"/v1/runs/{run_id}/draws", headers=hdr(ALICE))
    assert r.status_code == 200, r.text
    return [json.loads(x) for x in r.text.splitlines()[1:]]  # after the header line


def test_the_plan_says_why_and_pipeline_true_draws_the_same(app_client):
    runs = {}
    for value in ("auto", True, False):
        body = spec(**SMALL) | ({} if value == "auto" else {"pipeline": value})
        r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
        assert r.status_code == 202, r.text
        info = final(app_client, r.json()["id"])
        assert info["status"] == "SUCCEEDED", info
        runs[value] = info
    auto = runs["auto"]
    assert auto["spec"]["pipeline"] == "auto"
    assert auto["plan"]["pipeline"]["auto"] is True and auto["plan"]["pipeline"]["on"] is False
    assert "no far link" in auto["plan"]["pipeline"]["reason"]
    assert auto["network"]["pipeline"]["on"] is False and auto["network"]["pipeline"]["pending"] is False
    on = runs[True]["plan"]["pipeline"]
    assert on["on"] is True and on["groups"] == [[0, 4], [4, 6]] and on["reason"] == "as asked"
    assert runs[True]["network"]["pipeline"]["on"] is True
    assert _draws(app_client, runs[True]["id"]) == _draws(app_client, runs[False]["id"])


@pytest.mark.parametrize(
    "extra, words",
    [({"pipeline": "sometimes"}, "auto"), ({"pipeline": True, "algorithm": {"name": "fald"}}, "'fald'")],
)
def test_a_pipeline_it_cannot_run_is_a_422_at_the_field(app_client, extra, words):
    r = app_client.post("/v1/runs", json=spec(**SMALL) | extra, headers=hdr(ALICE))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert "pipeline" in detail["loc"] and words in detail["msg"], detail
