"""The routers in-process (FastAPI TestClient with the app's lifespan; runs sample with executor "local"): auth and
tenant isolation, validation naming the field, uploads told apart by content, idempotent submits, paging, delete,
version, metrics, and the OpenAPI document's error responses and enumerations."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest
from support.service_helpers import ALICE, BOB, final, hdr, spec, wait_until

from raysampler.algorithms import ALGORITHMS
from raysampler.models import FAMILIES

SMALL = {"num_rounds": 40, "burn_in": 10, "chains": 2}


@pytest.fixture(scope="module")
def finished(app_client) -> dict[str, Any]:
    r = app_client.post("/v1/runs", json=spec(**SMALL, seed=1), headers=hdr(ALICE))
    assert r.status_code == 202, r.text
    info = final(app_client, r.json()["id"])
    assert info["status"] == "SUCCEEDED", info
    return info


# --- auth and tenants -----------------------------------------------------------------------------------------------


def test_auth_required_and_tenants_isolated(app_client, finished):
    c = app_client
    for headers in ({}, hdr("not-a-key-at-all"), {"Authorization": "Basic abc"}):
        r = c.get("/v1/runs", headers=headers)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert c.get("/v1/health").status_code == 200  # health needs no key
    rid = finished["id"]
    for method, path in [
        ("GET", ""),
        ("GET", "/draws"),
        ("GET", "/events"),
        ("GET", "/summary"),
        ("GET", "/arviz"),
        ("POST", "/cancel"),
        ("DELETE", ""),
    ]:
        r = c.request(method, f"/v1/runs/{rid}{path}", headers=hdr(BOB))
        assert r.status_code == 404 and r.json() == {"detail": f"no run {rid!r}"}, (method, path, r.status_code)
    assert rid not in {r["id"] for r in c.get("/v1/runs", headers=hdr(BOB)).json()["runs"]}
    assert c.get(f"/v1/runs/{rid}", headers=hdr(ALICE)).status_code == 200  # untouched


# --- validation -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,field",
    [
        (spec(model={"family": "no_such_family"}), "model.family"),
        (spec(algorithm={"name": "no_such_algorithm"}), "algorithm.name"),
        (spec(algorithm={"name": "dglmc", "params": {"n_local": -2}}), "algorithm.params"),
        (spec(algorithm={"name": "dglmc", "params": {"bogus": 1}}), "algorithm.params"),
        (spec(algorithm={"name": "dglmc", "params": {"recentre": "sometimes"}}), "algorithm.params"),
        (spec(algorithm={"name": "dglmc", "params": {"recentre": True, "local_kernel": "mala"}}), "algorithm.params"),
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
        (spec(data={"dataset": "builtin:breast_cancer", "dataset_id": "ds-x"}), "data"),
        (spec(data={"dataset_id": "ds-x", "options": {"n": 5}}), "data"),
        (spec(unknown_field=1), "unknown_field"),
        (spec(model={"family": "logistic_regression", "prior_scale": "abc"}), "model.prior_scale"),
        (spec(algorithm={"name": "dglmc", "params": {"rho": [1.0, 2.0, 3.0]}}), "algorithm.params"),  # 2 shards
        (spec(algorithm={"name": "dglmc", "params": {"init": [0.0, 1.0]}}), "algorithm.params"),  # d = 31
        (spec(algorithm={"name": "dsgld", "params": {"init": "somewhere"}}), "algorithm.params"),
        (spec(data={"dataset": "builtin:gaussian_toy", "options": {"n": 10**13}}), "data.options.n"),
    ],
)
def test_bad_specs_get_422_naming_the_field(app_client, body, field):
    r = app_client.post("/v1/runs", json=body, headers=hdr(ALICE))
    assert r.status_code == 422, r.text
    locs = [".".join(str(p) for p in e["loc"] if p != "body") for e in r.json()["detail"]]
    assert any(loc == field or loc.startswith(field + ".") for loc in locs), (field, r.json())


def test_bad_query_values_get_422_not_500(app_client, finished):
    c, h, rid = app_client, hdr(ALICE), finished["id"]
    assert c.get("/v1/runs", params={"cursor": "9" * 25}, headers=h).status_code == 422
    assert c.get(f"/v1/runs/{rid}/events", headers=h | {"Last-Event-ID": "9" * 25}).status_code == 422
    assert c.get(f"/v1/runs/{rid}/events", headers=h | {"Last-Event-ID": "null"}).status_code == 422
    assert c.get(f"/v1/runs/{rid}/draws", params={"start": 10**19}, headers=h).status_code == 422
    assert c.get(f"/v1/runs/{rid}/draws", params={"start": -1}, headers=h).status_code == 422
    assert c.get(f"/v1/runs/{rid}/summary", params={"ci_prob": 2}, headers=h).status_code == 422
    assert c.post("/v1/runs", content=b"not json", headers=h).status_code == 422


def test_summary_and_events_of_a_finished_run(app_client, finished):
    c, h, rid = app_client, hdr(ALICE), finished["id"]
    body = c.get(f"/v1/runs/{rid}/summary", headers=h).json()
    assert body["draws_per_chain"] == 40 and len(body["rows"]) == 31 and "ess_bulk" in body["columns"]
    text = c.get(f"/v1/runs/{rid}/events", params={"follow": "false"}, headers=h).text
    assert text.startswith("retry: ") and "event: setup" in text and '"status": "SUCCEEDED"' in text


# --- uploads --------------------------------------------------------------------------------------------------------


def test_upload_format_is_read_from_the_content_not_the_name(app_client):
    c, h = app_client, hdr(ALICE)
    buf = io.BytesIO()
    np.savez(buf, X=np.arange(12.0).reshape(6, 2), y=np.array([0, 1, 0, 1, 1, 0.0]))
    for filename, content in [("file", buf.getvalue()), ("data.csv", buf.getvalue()), ("file", b"y,a\n1,2\n0,3\n")]:
        r = c.post("/v1/datasets", files={"file": (filename, content)}, headers=h)
        assert r.status_code == 201, (filename, r.text)
    r = c.post("/v1/datasets", files={"file": ("d.csv", b"y,a\n1,2\n0,3\n")}, data={"x_columns": "y,a"}, headers=h)
    assert r.status_code == 422 and "target column" in r.json()["detail"][0]["msg"]
    r = c.post("/v1/datasets", files={"file": ("d.txt", b"1,2")}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "file"]
    r = c.post("/v1/datasets", files={"file": ("d.csv", b"a,b\n1,2\n")}, data={"y_column": "label"}, headers=h)
    msg = r.json()["detail"][0]["msg"]
    assert r.status_code == 422 and "'label'" in msg and "d.csv" in msg
    # no column 'y' and no y_column: the table is kept whole, for a formula, which names its response; a model
    # without a formula needs a target, so a run of one on it is a 422 naming the data set
    r = c.post("/v1/datasets", files={"file": ("d.csv", b"a,b\n1,2\n0,3\n")}, headers=h)
    assert r.status_code == 201 and (r.json()["n"], r.json()["d"]) == (2, 2), r.text
    run = c.post("/v1/runs", json=spec(data={"dataset_id": r.json()["id"]}), headers=h)
    assert run.status_code == 422 and run.json()["detail"][0]["loc"][-2:] == ["data", "dataset_id"], run.text
    assert "has no target column" in run.json()["detail"][0]["msg"]
    r = c.post("/v1/datasets", files={"file": ("big.csv", b"x" * 300_000)}, headers=h)
    assert r.status_code == 413


def test_datasets_are_per_tenant_and_deletable(app_client):
    c = app_client
    r = c.post(
        "/v1/datasets",
        files={"file": ("d.csv", b"y,a,b\n1,2,3\n0,3,1\n1,0,0\n")},
        data={"name": "mine"},
        headers=hdr(ALICE),
    )
    info = r.json()
    assert (info["n"], info["d"], info["name"]) == (3, 2, "mine")
    assert c.get(f"/v1/datasets/{info['id']}", headers=hdr(ALICE)).json() == info
    assert c.get(f"/v1/datasets/{info['id']}", headers=hdr(BOB)).status_code == 404
    assert info["id"] not in {d["id"] for d in c.get("/v1/datasets", headers=hdr(BOB)).json()["datasets"]}
    assert c.delete(f"/v1/datasets/{info['id']}", headers=hdr(BOB)).status_code == 404
    assert c.delete(f"/v1/datasets/{info['id']}", headers=hdr(ALICE)).status_code == 204
    assert c.get(f"/v1/datasets/{info['id']}", headers=hdr(ALICE)).status_code == 404


# --- idempotency, listing, delete -----------------------------------------------------------------------------------


def test_idempotent_submit(app_client):
    c = app_client
    body = spec(**SMALL, seed=11)
    h = hdr(ALICE) | {"Idempotency-Key": "same-key-1"}
    r1 = c.post("/v1/runs", json=body, headers=h)
    r2 = c.post("/v1/runs", json=body, headers=h)
    assert r1.status_code == r2.status_code == 202
    assert r1.json()["id"] == r2.json()["id"] and r2.headers.get("Idempotent-Replayed") == "true"
    assert r1.headers["Location"] == f"/v1/runs/{r1.json()['id']}"
    r3 = c.post("/v1/runs", json=body | {"seed": 12}, headers=h)
    assert r3.status_code == 409
    r4 = c.post("/v1/runs", json=body | {"run_id": "other-id"}, headers=h)
    assert r4.status_code == 409 and "other-id" in r4.json()["detail"]
    mine = c.post("/v1/runs", json=body | {"seed": 13, "run_id": "my-run-13"}, headers=hdr(ALICE))
    again = c.post("/v1/runs", json=body | {"seed": 13, "run_id": "my-run-13"}, headers=hdr(ALICE))
    assert mine.json()["id"] == again.json()["id"] == "my-run-13" and again.headers["Idempotent-Replayed"] == "true"
    # another tenant may use the same key and run id: they name different runs
    rb = c.post(
        "/v1/runs",
        json=body | {"seed": 13, "run_id": "my-run-13"},
        headers=hdr(BOB) | {"Idempotency-Key": "same-key-1"},
    )
    assert rb.status_code == 202 and "Idempotent-Replayed" not in rb.headers
    for key, rid in ((ALICE, r1.json()["id"]), (ALICE, "my-run-13"), (BOB, "my-run-13")):
        assert final(c, rid, key)["status"] == "SUCCEEDED"


def test_list_filter_paginate_and_delete(app_client, finished):
    c, h = app_client, hdr(ALICE)
    for seed in (21, 22):
        c.post("/v1/runs", json=spec(**SMALL, seed=seed), headers=h)
    ids, cursor = [], None
    while True:
        page = c.get("/v1/runs", params={"limit": 2} | ({"cursor": cursor} if cursor else {}), headers=h).json()
        ids += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(ids) == len(set(ids)) >= 3 and finished["id"] in ids
    ok = [r["id"] for r in c.get("/v1/runs", params={"status": "SUCCEEDED", "limit": 200}, headers=h).json()["runs"]]
    assert finished["id"] in ok and all(c.get(f"/v1/runs/{i}", headers=h).json()["status"] == "SUCCEEDED" for i in ok)
    assert c.get("/v1/runs", params={"status": "DONE"}, headers=h).status_code == 422
    assert c.get("/v1/runs", params={"cursor": "x"}, headers=h).status_code == 422
    tmp = c.post("/v1/runs", json=spec(**SMALL, seed=23), headers=h).json()["id"]
    assert final(c, tmp)["status"] == "SUCCEEDED"
    assert c.delete(f"/v1/runs/{tmp}", headers=h).status_code == 204
    assert c.get(f"/v1/runs/{tmp}", headers=h).status_code == 404
    running = c.post("/v1/runs", json=spec(num_rounds=10**6, burn_in=0, chains=2, seed=24), headers=h).json()["id"]
    wait_until(
        lambda: c.get(f"/v1/runs/{running}", headers=h).json()["progress"]["draws_stored"] > 0,
        what="RUNNING with draws stored",
    )
    r = c.delete(f"/v1/runs/{running}", headers=h)
    assert r.status_code == 409 and "cancel it" in r.json()["detail"]
    assert c.post(f"/v1/runs/{running}/cancel", headers=h).status_code == 202
    info = final(c, running)
    assert info["status"] == "CANCELLED" and info["progress"]["draws_stored"] > 0
    assert c.post(f"/v1/runs/{running}/cancel", headers=h).status_code == 409


# --- system routes and the OpenAPI document -------------------------------------------------------------------------


def test_version_and_metrics(app_client, finished):
    v = app_client.get("/v1/version").json()
    assert v["algorithms"] == sorted(ALGORITHMS) and v["model_families"] == sorted(FAMILIES)
    assert "builtin:breast_cancer" in v["builtin_datasets"]
    text = app_client.get("/metrics").text
    assert "raysampler_runs_submitted_total" in text and 'raysampler_runs{status="SUCCEEDED"}' in text
    assert "raysampler_http_request_duration_seconds_bucket" in text


def test_openapi_documents_errors_and_enumerates_names(app_client):
    doc = app_client.get("/openapi.json").json()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            codes = set(op["responses"])
            if path.startswith(("/v1/runs", "/v1/datasets")):
                assert "401" in codes and op.get("security"), (method, path)
            if "{" in path:
                assert "404" in codes, (method, path)
    assert {"409", "413", "422"} <= set(doc["paths"]["/v1/runs"]["post"]["responses"])
    assert {"400", "413", "422"} <= set(doc["paths"]["/v1/datasets"]["post"]["responses"])
    schemas = doc["components"]["schemas"]
    assert schemas["ModelSpec"]["properties"]["family"]["enum"] == sorted(FAMILIES)
    assert schemas["AlgorithmSpec"]["properties"]["name"]["enum"] == sorted(ALGORITHMS)
    params = {p["name"]: p["schema"] for p in doc["paths"]["/v1/runs/{run_id}/events"]["get"]["parameters"]}
    assert params["last-event-id"] == {
        "type": "string",
        "pattern": r"^\d{1,18}$",
        "title": "Last-Event-Id",
        "description": "resume after this event id",
    }  # no null: absent or digits


# --- what the engine reports: tuned plan, placement, failure record, diagnostics ---------------------------------


def test_run_reports_tuned_plan_placement_and_diagnostics(finished):
    plan = finished["plan"]
    assert plan["preconditioner"] == "laplace" and plan["local_kernel"] == "laplace_mh"
    assert 0 < plan["predicted_mean_shift_sd"] <= plan["bias_budget"] + 1e-12 and len(plan["rho"]) == len(
        finished["workers"]
    )
    assert [w["shard"] for w in finished["workers"]] == list(range(finished["spec"]["num_shards"]))
    assert all(w["hostname"] and w["pid"] for w in finished["workers"])
    diag = finished["diagnostics"]
    assert diag["draws"] == SMALL["num_rounds"] and diag["chains"] == 2 and diag["max_rhat"] > 1.0
    assert any("bulk ESS" in w for w in finished["warnings"])  # 40 draws per chain: too few, and it says so


def test_failure_record_arrives_over_rest_with_shard_and_round(app_client):
    """A chain that diverges (the paper's LMC rule with a far too large step) ends the run FAILED with the engine's
    failure record: its kind, shard and round as fields, and the draws before it kept."""
    params = {"preconditioner": None, "local_kernel": "lmc", "rho": 1.0, "gamma": 50.0, "n_local": 3, "init": "zeros"}
    r = app_client.post(
        "/v1/runs",
        json=spec(num_rounds=500, burn_in=0, chains=2, algorithm={"name": "dglmc", "params": params}),
        headers=hdr(ALICE),
    )
    info = final(app_client, r.json()["id"])
    assert info["status"] == "FAILED"
    f = info["failure"]
    assert f["kind"] == "non_finite" and f["shard"] in range(info["spec"]["num_shards"]) and f["round"] >= 0
    assert f"worker {f['shard']} failed in round {f['round']}" in info["error"]
    assert info["progress"]["draws_stored"] <= f["round"]


def test_trace_is_one_parameter_evenly_thinned_and_refuses_a_missing_param(app_client, finished):
    c, h, rid = app_client, hdr(ALICE), finished["id"]
    lines = [json.loads(x) for x in c.get(f"/v1/runs/{rid}/draws", headers=h).text.splitlines()[1:]]
    full = np.array([[line["values"][3] for line in lines if line["chain"] == k] for k in range(2)])  # (chains, 40)
    t = c.get(f"/v1/runs/{rid}/trace", params={"param": 3, "max_points": 7}, headers=h).json()
    assert t["name"] == finished["param_names"][3] and t["draws_stored"] == 40 and t["step"] == 6
    assert t["index"] == list(range(0, 40, 6))
    np.testing.assert_allclose(np.array(t["values"]), full[:, ::6])
    tail = c.get(f"/v1/runs/{rid}/trace", params={"param": 3, "last": 10}, headers=h).json()
    assert tail["index"] == list(range(30, 40)) and tail["step"] == 1
    np.testing.assert_allclose(np.array(tail["values"]), full[:, 30:])
    r = c.get(f"/v1/runs/{rid}/trace", params={"param": 31}, headers=h)
    assert r.status_code == 404 and "no parameter 31" in r.json()["detail"]
    assert c.get(f"/v1/runs/{rid}/trace", params={"param": -1}, headers=h).status_code == 422


def test_models_lists_every_builtin_family_with_its_parameter_schema(app_client):
    assert app_client.get("/v1/models").status_code == 401
    r = app_client.get("/v1/models", headers=hdr(ALICE))
    assert r.status_code == 200, r.text
    fams = {f["name"]: f for f in r.json()["families"]}
    assert set(fams) >= {
        "gaussian", "linear_regression", "logistic_regression", "poisson_regression", "binomial_regression",
        "negative_binomial_regression", "softmax_regression", "mlp_classifier",
    }  # fmt: skip
    for f in fams.values():
        assert f["builtin"] and f["distribution"] is None and f["description"] and f["parameters"]["type"] == "object"
    props = fams["poisson_regression"]["parameters"]["properties"]
    assert props["offset_column"]["anyOf"][0]["type"] == "string" and "coef_prior" in props
    assert "n_features" not in props and "sigma_prior" not in props
    assert fams["linear_regression"]["parameters"]["properties"]["sigma_prior"]["anyOf"][0] == {
        "$ref": "#/$defs/PositivePriorSpec"
    }
    assert fams["mlp_classifier"]["parameters"]["properties"]["hidden"] == {"type": "integer", "default": 16}
    weibull = fams["weibull_regression"]["parameters"]["properties"]  # the families brms users fit (issue 48)
    assert weibull["censored_column"]["anyOf"][0]["type"] == "string" and "censored" not in weibull
    assert weibull["shape_prior"]["anyOf"][0] == {"$ref": "#/$defs/PositivePriorSpec"}
    assert {"sigma_prior", "nu_prior"} <= set(fams["student_t_regression"]["parameters"]["properties"])
    assert "phi_prior" in fams["beta_regression"]["parameters"]["properties"]


# --- error messages (issue 24) --------------------------------------------------------------------------------------


def test_validation_errors_have_no_pydantic_prefixes_or_union_branch_names(app_client):
    c, h = app_client, hdr(ALICE)
    r = c.post("/v1/runs", json=spec(num_rounds=0), headers=h)
    assert r.status_code == 422
    [err] = r.json()["detail"]  # the int and 'auto' branches' errors, merged
    assert err["loc"] == ["body", "num_rounds"]
    assert err["msg"] == "Input should be greater than or equal to 1 or 'auto'"
    r = c.post("/v1/runs", json=spec(data={"dataset": "builtin:breast_cancer", "dataset_id": "ds-x"}), headers=h)
    assert r.status_code == 422
    msgs = [e["msg"] for e in r.json()["detail"]]
    assert msgs and not any(m.startswith(("Value error", "Assertion failed")) for m in msgs), msgs
    assert any("exactly one of" in m for m in msgs), msgs


def test_upload_errors_say_what_the_file_was_read_as(app_client):
    c, h = app_client, hdr(ALICE)
    r = c.post("/v1/datasets", files={"file": ("data.bin", bytes(range(256)) * 4)}, headers=h)
    assert r.status_code == 422
    [err] = r.json()["detail"]
    assert err["loc"] == ["body", "file"]
    assert err["msg"].startswith("the file was read as CSV (it is not .npz or parquet) but is not UTF-8 text: ")
    r = c.post("/v1/datasets", files={"file": ("d.csv", b"a,b\n1,2\n")}, data={"y_column": "label"}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["msg"].startswith("the file was read as CSV")


# --- runs people can find (issue 24) --------------------------------------------------------------------------------


def test_runs_are_found_by_name_and_tags(app_client):
    c, h = app_client, hdr(BOB)
    body = spec(num_rounds=10**6, burn_in=0, chains=2)
    a = c.post("/v1/runs", json=body | {"name": "sweep", "tags": {"lr": "0.1", "team": "x"}}, headers=h).json()
    b = c.post("/v1/runs", json=body | {"name": "sweep", "tags": {"lr": "0.2"}, "seed": 2}, headers=h).json()
    other = c.post("/v1/runs", json=body | {"seed": 3}, headers=h).json()
    assert (a["name"], a["tags"]) == ("sweep", {"lr": "0.1", "team": "x"}) and other["name"] is None

    def ids(**params: Any) -> set[str]:
        r = c.get("/v1/runs", params=params, headers=h)
        assert r.status_code == 200, r.text
        return {run["id"] for run in r.json()["runs"]}

    assert ids(name="sweep") == {a["id"], b["id"]}
    assert ids(tag="lr:0.1") == {a["id"]}
    assert ids(tag=["lr:0.1", "team:x"]) == {a["id"]} and ids(tag=["lr:0.2", "team:x"]) == set()
    assert ids(name="nope") == set() and other["id"] in ids()
    assert c.get("/v1/runs", params={"tag": "no-colon"}, headers=h).status_code == 422
    r = c.post("/v1/runs", json=body | {"tags": {"bad key!": "v"}}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "tags"]
    for run in (a, b, other):
        c.post(f"/v1/runs/{run['id']}/cancel", headers=h)
