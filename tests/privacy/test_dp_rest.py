"""The DP mode over REST (in-process app, executor "local"): the run body's `privacy` is validated naming its field
(422), and a run with a budget stops with stop reason privacy_budget, its workers showing ε spent and clip rates."""

from __future__ import annotations

import pytest
from support.service_helpers import ALICE, final, hdr, spec

DP_RUN = {"num_rounds": 100_000, "burn_in": 2, "chains": 2}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (spec(privacy={"epsilon": 0}), "privacy.epsilon"),
        (spec(privacy={"epsilon": "one"}), "privacy.epsilon"),
        (spec(privacy={"delta": 1.5}), "privacy.delta"),
        (spec(privacy={"clip": -1.0}), "privacy.clip"),
        (spec(privacy={"sigma": 1.0}), "privacy.sigma"),
        (spec(privacy={"clip_rule": "rows"}), "privacy.clip_rule"),
        (spec(privacy={"epsilon": 1.0}, algorithm={"name": "qlsd"}), "privacy"),
        (spec(privacy={"epsilon": 1.0}, algorithm={"name": "dglmc", "params": {"local_kernel": "mala"}}), "privacy"),
    ],
)
def test_bad_privacy_gets_422_naming_the_field(app_client, body, field):
    r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
    assert r.status_code == 422, r.text
    locs = [".".join(str(p) for p in e["loc"] if p != "body") for e in r.json()["detail"]]
    assert any(loc == field or loc.startswith(field + ".") for loc in locs), (field, r.json())


def test_dp_run_stops_at_its_budget_and_shows_what_each_site_spent(app_client):
    body = spec(**DP_RUN, privacy={"epsilon": 0.5, "delta": 1e-5, "clip": 1.0})
    r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
    assert r.status_code == 202, r.text
    info = final(app_client, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    assert info["stop_reason"] == "privacy_budget"
    assert info["spec"]["privacy"] == {"epsilon": 0.5, "delta": 1e-5, "clip": 1.0, "clip_rule": "gradient"}
    rounds = info["progress"]["rounds_done"]
    assert 2 < rounds < 100_002 and info["progress"]["draws_stored"] == rounds - 2  # the draws so far are kept
    workers = info["workers"]
    assert len(workers) == 2
    for w in workers:
        assert 0.45 < w["epsilon_spent"] <= 0.5
        assert 0.0 <= w["clip_rate"] <= 1.0


@pytest.fixture
def cli_on_app(app_client, monkeypatch):
    """`raysampler.cli.main` talking to the in-process app (the SDK client over the TestClient's transport)."""
    import httpx

    from raysampler import cli
    from raysampler.client import Client

    def client(args):
        c = Client("http://testserver", ALICE)
        c._http = httpx.Client(transport=app_client._transport, base_url="http://testserver", headers=hdr(ALICE))
        return c

    from raysampler.cli import checks, runs

    for module in (runs, checks):  # the commands' client, from --url / --api-key
        monkeypatch.setattr(module, "connect", client)
    return cli.main


def test_cli_dp_flags_submit_the_privacy_body_and_a_bad_one_is_refused(cli_on_app, tmp_path, capsys):
    import json

    path = tmp_path / "run.json"
    path.write_text(json.dumps(spec(**DP_RUN)))
    assert cli_on_app(["submit", str(path), "--dp-epsilon", "0", "--format", "json"]) == 2
    assert "privacy.epsilon" in capsys.readouterr().err
    argv = ["submit", str(path), "--wait", "--dp-epsilon", "0.5", "--dp-clip", "2", "--dp-clip-rule", "features"]
    code = cli_on_app([*argv, "--format", "json"])
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and info["stop_reason"] == "privacy_budget"
    assert info["spec"]["privacy"] == {"epsilon": 0.5, "delta": 1e-5, "clip": 2.0, "clip_rule": "features"}
    assert cli_on_app(["status", info["id"]]) == 0
    table = capsys.readouterr().out
    assert "stopped: privacy_budget" in table and "privacy ε ≤ 0.5, δ 1e-05, clip 2" in table


def test_sdk_submit_carries_privacy_from_a_dp_or_a_mapping():
    import raysampler as rs
    from raysampler.sdk import requests as rq

    body = rq.submit(spec(), None, None, privacy=rs.DP(epsilon=2.0, clip=0.5)).json
    assert body["privacy"] == {"epsilon": 2.0, "delta": 1e-5, "clip": 0.5}
    body = rq.submit(spec(), None, None, privacy=rs.DP(clip=3.0, clip_rule="features")).json
    assert body["privacy"] == {"epsilon": 1.0, "delta": 1e-5, "clip": 3.0, "clip_rule": "features"}
    assert rq.submit(spec(), None, None, privacy={"epsilon": 4}).json["privacy"] == {"epsilon": 4}
    assert "privacy" not in rq.submit(spec(), None, None).json
