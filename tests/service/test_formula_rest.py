"""A formula model over REST against a real server (fixture `service`, uvicorn on Ray), issue 48: a parquet upload
with no column 'y' and no y_column is kept whole and the formula reads its response from it; the run records that
response; a misspelt response is a 422 naming it at submit; `POST /predict` reads inline rows by column name (any
order, no response, text labels, a new county) and gives what `evaluation.predict` gives on the same draws; bad rows
are a 4xx naming the field."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pandas as pd
import pytest
from support.service_helpers import ALICE, hdr, spec

import raysampler as rs
from raysampler.client import APIError, Client
from raysampler.models.contract import DataSpec

FORMULA = "high ~ floor + basement + (1 | county)"
MODEL = {
    "formula": FORMULA,
    "family": "bernoulli",
    "coef_prior": {"normal": {"scale": 2.5}},
    "sd_prior": {"half_normal": {"scale": 1.0}},
}
COUNTIES = ["Aitkin", "Anoka", "Becker", "Beltrami", "Benton", "Big Stone"]


def homes(n: int = 240, seed: int = 0) -> pd.DataFrame:
    """Homes in counties named by text, a text category `basement` and a 0/1 response `high` (no column 'y')."""
    rng = np.random.default_rng(seed)
    county = rng.integers(0, len(COUNTIES), n)
    df = pd.DataFrame(
        {
            "floor": rng.normal(size=n),
            "basement": rng.choice(["no", "yes", "partial"], n),
            "county": np.array(COUNTIES)[county],
        }
    )
    logit = -0.2 + 0.7 * df.floor + 0.5 * (df.basement == "yes") + rng.normal(0, 0.6, len(COUNTIES))[county]
    df["high"] = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(float)
    return df


@pytest.fixture(scope="module")
def formula_run(service, tmp_path_factory):
    df = homes()
    path = tmp_path_factory.mktemp("formula") / "homes.parquet"
    df.to_parquet(path, index=False)
    with Client(service.url, ALICE) as alice:
        upload = alice.upload_file(str(path), name="homes")  # no y_column, and no column 'y'
        assert (upload["n"], upload["d"]) == (len(df), 4)
        body = spec(model=MODEL, data={"dataset_id": upload["id"]}, chains=2, num_rounds=30, burn_in=10, num_shards=2)
        handle = alice.submit(body)
        info = handle.wait()
        assert info["status"] == "SUCCEEDED", info
        with pytest.raises(APIError) as err:  # a misspelt response: refused at submit, naming it
            alice.submit(spec(model=MODEL | {"formula": "hgh ~ floor + (1 | county)"}, data=body["data"]))
        assert err.value.status_code == 422
        assert err.value.detail[0]["loc"][-2:] == ["model", "formula"] and "'hgh'" in err.value.detail[0]["msg"]
        yield df, upload["id"], info, handle.draws()


def engine_result(df: pd.DataFrame, info: dict, draws: np.ndarray) -> rs.Result:
    """The run's stored draws with its formula model bound as the service binds it (the upload's columns, its text
    columns' labels), in this process. The draws come on the natural scale (sd, not log sd, as /draws streams them):
    the sampler's coordinates are the log of the sd's."""
    levels = {c: tuple(sorted(df[c].unique())) for c in ("basement", "county")}
    model = rs.models.from_formula(FORMULA, family="bernoulli").bind(
        DataSpec(df.shape[1], None, len(df), tuple(df.columns), None, levels)
    )
    theta = draws.copy()
    sd = [j for j, name in enumerate(info["param_names"]) if name.startswith("sd_")]
    theta[..., sd] = np.log(theta[..., sd])
    return rs.Result(theta, info["param_names"], model=model)


def post(service, run_id: str, body: dict) -> httpx.Response:
    return httpx.post(f"{service.url}/v1/runs/{run_id}/predict", json=body, headers=hdr(ALICE), timeout=60)


def test_the_run_reads_its_response_from_the_upload_and_records_it(formula_run) -> None:
    _, _, info, _ = formula_run
    assert info["response"] == "high"
    assert info["param_names"][:4] == [
        "beta[(Intercept)]",
        "beta[floor]",
        "beta[basement[partial]]",
        "beta[basement[yes]]",
    ]
    assert sorted(n for n in info["param_names"] if n.startswith("r_")) == [
        f"r_county[{c},(Intercept)]" for c in COUNTIES
    ]


def test_rest_predictions_by_name_equal_the_engines(service, formula_run) -> None:
    df, _, info, draws = formula_run
    res = engine_result(df, info, draws)
    new = pd.DataFrame(
        {"floor": [0.5, -1.0, 0.0], "basement": ["yes", "no", "partial"], "county": ["Anoka", "Big Stone", "Nowhere"]}
    )
    order = ["county", "basement", "floor"]  # not the data's order, and no response
    rows = new[order].to_numpy().tolist()
    for kind, extra in [("mean", {}), ("epred", {}), ("linpred", {"re_formula": "NA"}), ("predict", {"seed": 5})]:
        r = post(service, info["id"], {"rows": rows, "columns": order, "kind": kind, "draws": "all"} | extra)
        assert r.status_code == 200, r.text
        want = res.predict(new, kind, draws="all", **extra)
        np.testing.assert_allclose(np.array(r.json()["values"]), want, rtol=1e-10, atol=1e-12)
        assert r.json()["kind"] == kind and r.json()["n_rows"] == 3
    # without columns: the data's column order, the response left out
    bare = post(service, info["id"], {"rows": new[["floor", "basement", "county"]].to_numpy().tolist(), "draws": "all"})
    np.testing.assert_allclose(bare.json()["values"], res.predict(new, draws="all"), rtol=1e-10)
    # NDJSON: one line per row, each with the row's draws
    r = httpx.post(
        f"{service.url}/v1/runs/{info['id']}/predict",
        params={"format": "ndjson"},
        json={"rows": rows, "columns": order, "kind": "epred", "draws": "all"},
        headers=hdr(ALICE),
        timeout=60,
    )
    lines = [ln for ln in r.text.splitlines() if ln][1:]
    np.testing.assert_allclose(
        np.array([json.loads(ln)["value"] for ln in lines]).T, res.predict(new, "epred", draws="all"), rtol=1e-10
    )


def test_bad_rows_are_a_4xx_naming_the_field(service, formula_run) -> None:
    _, _, info, _ = formula_run
    rows, order = [["Anoka", "yes", 0.5], ["Nowhere", "no", 0.1]], ["county", "basement", "floor"]
    cases = [
        ({"rows": [r[1:] for r in rows], "columns": order[1:]}, ["body", "columns"], "'county'"),
        ({"rows": rows, "columns": ["county", "basement", "flor"]}, ["body", "columns"], "'floor'"),
        ({"rows": rows, "columns": order[:2]}, ["body", "columns"], "names 2 columns but each row has 3"),
        ({"rows": rows, "columns": order, "allow_new_levels": False}, ["body", "rows"], "county='Nowhere'"),
        ({"rows": [["Anoka", "attic", 0.5]], "columns": order}, ["body", "rows"], "'attic'"),
        ({"rows": rows, "columns": order, "re_formula": "~(1|county)"}, ["body", "re_formula"], ""),
        ({"rows": rows, "columns": order, "kind": "posterior"}, ["body", "kind"], ""),
    ]
    for body, loc, msg in cases:
        r = post(service, info["id"], body)
        assert r.status_code == 422, (body, r.text)
        detail = r.json()["detail"][0]
        assert detail["loc"][: len(loc)] == loc and msg in detail["msg"], (body, detail)


def test_a_formula_run_stored_before_the_target_joined_the_columns_binds_as_it_was_fitted() -> None:
    """A formula run on a built-in data set stored its data's columns without the target (it read its response
    from the shards' y): its checks bind the model with the target as the last column, where the shards rebuilt
    from its spec now hold it, and read the same rows as a run submitted now."""
    from types import SimpleNamespace

    from raysampler.service.checks import bound_model
    from raysampler.service.schemas import RunSpec
    from raysampler.service.specs import build

    body = spec(model=MODEL | {"formula": "y ~ age + severity + (1 | hospital)"}, data={"dataset": "builtin:hospitals"})
    run_spec = RunSpec.model_validate(body)
    built = build(run_spec, "alice", None, executor="local")  # a built-in data set: no store
    now = built.shards[0]
    assert now.columns[-1] == "y"
    old = DataSpec(len(now.columns) - 1, None, built.n, now.columns[:-1])
    rec = SimpleNamespace(id="run-old", draws_stored=1, data_spec=old, spec=run_spec, status=None)
    model = bound_model(rec)
    X, y = model.shard_data(now.X, now.y, now.index)
    current = run_spec.model.engine_model().bind(DataSpec(len(now.columns), None, built.n, now.columns))
    Xc, yc = current.shard_data(now.X, now.y, now.index)
    np.testing.assert_array_equal(X, Xc)
    np.testing.assert_array_equal(y, yc)


def test_site_files_for_a_formula_are_checked_against_their_header_at_submit() -> None:
    """Site files: the response and every column the formula reads must be in the files' header (a 422 at
    model.formula naming it, before any sampling); data.y_column may name the response or be left out, and
    x_columns do not go with a formula, whose files are read whole."""
    from raysampler.service.schemas import RunSpec
    from raysampler.service.specs import SpecError, check_formula_columns

    header = ("floor", "basement", "county", "high")
    shards = [{"path": "/data/a/homes.parquet", "site": "a"}]
    for data, formula, loc, msg in [
        ({}, "hgh ~ floor + (1 | county)", ("model", "formula"), "the response 'hgh' is not a column"),
        ({}, "high ~ flor + (1 | county)", ("model", "formula"), "'flor' is not a column"),
        ({"y_column": "floor"}, FORMULA, ("data", "y_column"), "is not the formula's response 'high'"),
        ({"x_columns": ["floor"]}, FORMULA, ("data", "x_columns"), "leave x_columns out"),
    ]:
        body = spec(model=MODEL | {"formula": formula}, data={"shards": shards} | data)
        run_spec = RunSpec.model_validate({k: v for k, v in body.items() if k != "num_shards"})
        with pytest.raises(SpecError, match=msg) as err:
            check_formula_columns(run_spec, run_spec.model.engine_model(), header)
        assert err.value.loc == loc
    for data in ({}, {"y_column": "high"}):  # the default, or the response itself
        body = spec(model=MODEL, data={"shards": shards} | data)
        run_spec = RunSpec.model_validate({k: v for k, v in body.items() if k != "num_shards"})
        check_formula_columns(run_spec, run_spec.model.engine_model(), header)
        assert run_spec.response_column() == "high"


def test_the_sdk_predicts_from_a_frame_by_name_on_both_clients(service, formula_run) -> None:
    """RunHandle.predict and its async twin send a DataFrame's (or a mapping's) columns by name, text labels as
    text, and the brms options; the answers equal the engine's."""
    import asyncio

    from raysampler.client import AsyncClient

    df, _, info, draws = formula_run
    res = engine_result(df, info, draws)
    new = pd.DataFrame({"county": ["Anoka", "Nowhere"], "floor": [1.0, 0.0], "basement": ["no", "yes"]})
    with Client(service.url, ALICE) as c:
        run = c.run(info["id"])
        np.testing.assert_allclose(
            run.predict(new, kind="epred", draws="all"), res.predict(new, "epred", draws="all"), rtol=1e-10
        )
        as_mapping = {k: list(v) for k, v in new.items()}
        np.testing.assert_allclose(
            run.predict(as_mapping, kind="linpred", draws="all", re_formula="NA"),
            res.predict(new, "linpred", draws="all", re_formula="NA"),
            rtol=1e-10,
        )
        with pytest.raises(APIError) as err:
            run.predict(new, allow_new_levels=False)
        assert err.value.status_code == 422 and "Nowhere" in str(err.value)

    async def on_async() -> np.ndarray:
        async with AsyncClient(service.url, ALICE) as c:
            handle = await c.run(info["id"])
            return await handle.predict(new, kind="epred", draws="all")

    np.testing.assert_allclose(asyncio.run(on_async()), res.predict(new, "epred", draws="all"), rtol=1e-10)
