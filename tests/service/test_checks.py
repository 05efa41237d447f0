"""Checks of a fit over REST against a real server on Ray (fixture `service`), through the SDK: predict (JSON and
NDJSON), evaluate on an uploaded held-out set, LOO and compare give what the engine gives on the same stored draws
and rows; the NetCDF export carries log_likelihood and observed_data; bad input is a 4xx naming the field."""

from __future__ import annotations

import contextlib
import io
import json

import httpx
import numpy as np
import pytest
import xarray as xr
from support.service_helpers import ALICE, BOB, hdr, spec

import raysampler as rs
from raysampler import cli, evaluation
from raysampler.client import APIError, Client
from raysampler.models.contract import DataSpec
from raysampler.predictive import PpcHistogram, PpcStat

ROUNDS = dict(chains=2, num_rounds=300, burn_in=50, seed=4, num_shards=3)


COLUMNS = ["one", "x1", "x2", "x3", "x4"]


def _upload(client, tmp, name, X, y):
    """Rows with named columns, uploaded as parquet."""
    import pandas as pd

    path = tmp / f"{name}.parquet"
    pd.DataFrame(X, columns=COLUMNS[: X.shape[1]]).assign(y=y).to_parquet(path)
    return client.upload_file(str(path), name=name)["id"]


@pytest.fixture(scope="module")
def fits(alice, tmp_path_factory):
    """logistic_synthetic uploaded as 800 training rows (all features, and without the last, informative one) and
    200 held-out rows; a run on each training set."""
    X, y = rs.datasets.load("logistic_synthetic")
    tmp = tmp_path_factory.mktemp("uploads")
    ids = {
        "train": _upload(alice, tmp, "train", X[:800], y[:800]),
        "drop": _upload(alice, tmp, "drop", X[:800, :-1], y[:800]),
        "test": _upload(alice, tmp, "test", X[800:], y[800:]),
    }
    model = {"family": "logistic_regression"}
    full = alice.submit(spec(model=model, data={"dataset_id": ids["train"]}, **ROUNDS))
    drop = alice.submit(spec(model=model, data={"dataset_id": ids["drop"]}, **ROUNDS))
    assert full.wait()["status"] == "SUCCEEDED" and drop.wait()["status"] == "SUCCEEDED"
    return X, y, ids, full, drop


def local(handle, X, y):
    """The run's stored draws with its model and the same rows, in this process: what the engine computes."""
    draws = handle.draws()
    model = rs.models.LogisticRegression().bind(DataSpec(X.shape[1], n_rows=len(y)))
    return rs.Result(
        draws, handle.info()["param_names"], model=model, data=rs.shard(X, y, num_shards=3), executor="local"
    )


def test_loo_and_compare_over_rest_equal_the_engine_on_the_same_draws(alice, fits):
    X, y, _, full, drop = fits
    lo = full.loo()
    ref = local(full, X[:800], y[:800]).loo()
    assert lo["n_data_points"] == 800 and lo["n_samples"] == 600
    np.testing.assert_allclose([lo["elpd"], lo["se"], lo["p_loo"]], [ref.elpd, ref.se, ref.p], rtol=1e-10)
    assert (lo["k_flat"], lo["k_ok"], lo["k_high"]) == (ref.k_flat, ref.k_ok, ref.k_high)
    assert lo["moment_matched"] is None
    table = alice.compare([drop.id, full.id])
    assert list(table.index) == [full.id, drop.id]  # the run without an informative feature loses
    pair = evaluation.compare({full.id: local(full, X[:800], y[:800]), drop.id: local(drop, X[:800, :-1], y[:800])})
    assert table.loc[drop.id, "elpd_diff"] > 2 * table.loc[drop.id, "dse"] > 0
    np.testing.assert_allclose(
        table[["elpd", "se", "elpd_diff", "dse", "weight"]].to_numpy(float),
        [[r.elpd, r.se, r.elpd_diff, r.dse, r.weight] for r in pair.rows],
        rtol=1e-10,
    )
    assert full.loo(draws="all")["n_samples"] == 600
    assert [(w["row"], w["k"]) for w in lo["warning_rows"]] == [
        ({"shard": h.ref.shard, "row": h.ref.row, "index": h.ref.index}, pytest.approx(h.k)) for h in ref.warning_rows
    ]


def test_bayes_r2_over_rest_equals_the_engine_on_the_same_draws(service, alice, fits, capsys):
    X, y, _, full, _ = fits
    r2 = full.bayes_r2()
    ref = local(full, X[:800], y[:800]).bayes_r2(summary=False)
    assert r2["n_samples"] == ref.size == 600
    np.testing.assert_allclose(
        [r2["estimate"], r2["est_error"], r2["lower"], r2["upper"]],
        [ref.mean(), ref.std(ddof=1), *np.quantile(ref, [0.025, 0.975])],
        rtol=1e-10,
    )
    assert 0.0 < r2["lower"] < r2["estimate"] < r2["upper"] < 1.0
    assert full.bayes_r2(draws=100)["n_samples"] == 100
    with pytest.raises(APIError) as err:
        full.bayes_r2(draws="some")
    assert err.value.status_code == 422
    assert cli.main(["r2", full.id, "--url", service.url, "--api-key", ALICE]) == 0
    assert f"{full.id}  Bayesian R2 {r2['estimate']:.2f}" in capsys.readouterr().out


def test_predict_json_and_ndjson_and_evaluate_on_an_uploaded_set(service, alice, fits):
    X, y, ids, full, _ = fits
    here = local(full, X[:800], y[:800])
    np.testing.assert_allclose(full.predict(X[800:810]), here.predict(X[800:810]), rtol=1e-12)
    np.testing.assert_allclose(full.predict(dataset_id=ids["test"], kind="interval"), here.predict(X[800:], "interval"))
    r = httpx.post(
        f"{service.url}/v1/runs/{full.id}/predict",
        params={"format": "ndjson"},
        json={"rows": X[800:803].tolist(), "kind": "draws", "draws": 50},
        headers=hdr(ALICE),
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    head, *lines = [json.loads(s) for s in r.text.splitlines()]
    assert head["kind"] == "draws" and head["n_rows"] == 3 and [ln["row"] for ln in lines] == [0, 1, 2]
    np.testing.assert_array_equal(
        np.array([ln["value"] for ln in lines]).T, here.predict(X[800:803], "draws", draws=50)
    )
    m = full.evaluate({"dataset_id": ids["test"]}, bins=5)
    ref = rs.evaluate(here, [(X[800:], y[800:])], bins=5)
    assert m["kind"] == "classification" and m["n"] == 200
    np.testing.assert_allclose(
        [m["accuracy"], m["nll"], m["brier"], m["ece"]], [ref.accuracy, ref.nll, ref.brier, ref.ece], rtol=1e-10
    )
    assert [b["count"] for b in m["reliability"]] == [b.count for b in ref.reliability]


def test_netcdf_export_has_the_pointwise_groups_spec_and_seed(alice, fits):
    X, y, _, full, _ = fits
    tree = full.to_arviz()
    assert tree["log_likelihood"]["y"].shape == (2, 300, 800)
    np.testing.assert_array_equal(tree["observed_data"]["y"].values, y[:800])
    attrs = tree["posterior"].attrs
    assert attrs["seed"] == "4" and json.loads(attrs["spec"])["seed"] == 4
    ref = local(full, X[:800], y[:800])
    np.testing.assert_allclose(
        tree["log_likelihood"]["y"].values, ref.to_arviz(log_likelihood=True)["log_likelihood"]["y"].values, rtol=1e-12
    )
    assert isinstance(tree, xr.DataTree)


def _detail(err: pytest.ExceptionInfo) -> tuple[int, list | str]:
    """A 422's field path, or a 404's message up to its first colon (the field it names)."""
    detail = err.value.detail
    if isinstance(detail, list):
        return err.value.status_code, detail[0]["loc"]
    return err.value.status_code, str(detail).split(":")[0]


def test_bad_input_is_a_4xx_naming_the_field(service, alice, fits):
    X, y, ids, full, drop = fits
    with Client(service.url, BOB) as bob:
        bobs = bob.upload_dataset(X[800:], y[800:], name="bobs")["id"]
    cases = [
        (lambda: full.predict(X[:3, :-1]), 422, ["body", "rows"]),
        (lambda: full.predict(X[:3], columns=["a", "b", "c", "d", "e"]), 422, ["body", "columns"]),
        (lambda: full.predict(dataset_id=bobs), 404, "dataset_id"),  # another tenant's data set is never found
        (lambda: full.predict(dataset_id="ds-nobody"), 404, "dataset_id"),
        (lambda: full.predict(dataset_id=ids["drop"]), 422, ["body", "dataset_id"]),
        (lambda: full.evaluate({"dataset_id": bobs}), 404, "data.dataset_id"),
        (lambda: full.evaluate({"dataset_id": ids["drop"]}), 422, ["body", "data", "shards", 0]),
        (lambda: full.loo(draws="some"), 422, ["query", "draws"]),
        (lambda: alice.compare([full.id, drop.id], method="bma"), 422, ["body", "method"]),
        (lambda: alice.compare([full.id, "run-nobody"]), 404, "runs[1]"),  # as an unknown id in a path
    ]
    for call, status, loc in cases:
        with pytest.raises(APIError) as err:
            call()
        assert _detail(err) == (status, loc), err.value.detail
    # a run on other rows cannot be compared; a run with no draws yet has nothing to check
    few = ROUNDS | {"num_rounds": 20, "burn_in": 5}  # its draws are not compared: it only has to have some
    other = alice.submit(spec(model={"family": "logistic_regression"}, data={"dataset_id": ids["test"]}, **few))
    assert other.wait()["status"] == "SUCCEEDED"
    with pytest.raises(APIError) as err:
        alice.compare([full.id, other.id])
    assert err.value.status_code == 422 and err.value.detail[0]["loc"] == ["body", "runs", 1]
    waiting = alice.submit(
        spec(
            model={"family": "logistic_regression"},
            data={"dataset_id": ids["train"]},
            chains=2,
            num_rounds=100_000,
            burn_in=100_000,
        )
    )
    try:
        with pytest.raises(APIError) as err:
            waiting.loo()
        assert err.value.status_code == 409 and "no draws yet" in str(err.value.detail)
    finally:
        waiting.cancel()


def test_the_async_client_gives_the_same_checks(service, alice, fits):
    import asyncio

    from raysampler.client import AsyncClient

    X, _, ids, full, drop = fits

    async def checks():
        async with AsyncClient(service.url, ALICE) as c:
            run = await c.run(full.id)
            return await run.loo(), await run.predict(X[800:805]), await c.compare([full.id, drop.id])

    lo, pred, table = asyncio.run(checks())
    assert lo == full.loo()
    np.testing.assert_array_equal(pred, full.predict(X[800:805]))
    assert list(table.index) == list(alice.compare([full.id, drop.id]).index)


@pytest.fixture(scope="module")
def breast(alice):
    """The service's default run on builtin:breast_cancer (logistic regression, DG-LMC, num_rounds auto), and a
    shorter one with a prior far too tight (prior_scale 0.05) on the same rows."""
    default = alice.submit({"model": {"family": "logistic_regression"}, "data": {"dataset": "builtin:breast_cancer"}})
    tight = alice.submit(
        {
            "model": {"family": "logistic_regression", "prior_scale": 0.05},
            "data": {"dataset": "builtin:breast_cancer"},
            "num_rounds": 300,
            "seed": 1,
        }
    )
    assert default.wait()["status"] == "SUCCEEDED" and tight.wait()["status"] == "SUCCEEDED"
    return default, tight


def test_breast_cancer_default_run_loo_is_finite_and_equals_the_pooled_computation(service, alice, breast, capsys):
    """Rows the model classifies with near certainty have a log-likelihood constant across draws: arviz-stats' PSIS
    gives NaN there. Over REST, in the engine and in the CLI the elpd is finite and equals the pooled computation
    under the flat rule (arviz-stats' PSIS on the rows that vary, log mean exp(ll_i) on flat rows); the k bands count
    only rows whose weights vary; moment matching and compare work on it."""
    import math
    import warnings

    from arviz_stats.base import array_stats
    from scipy.special import logsumexp

    from raysampler.evaluation import FLAT_SPAN, thin_draws

    default, tight = breast
    X, y = rs.datasets.load("breast_cancer")
    lo = default.loo()
    assert lo["elpd"] is not None and math.isfinite(lo["elpd"]) and lo["n_data_points"] == 569
    assert lo["k_flat"] > 0 and lo["k_flat"] + lo["k_ok"] + lo["k_high"] == 569 and lo["flat_span"] == FLAT_SPAN
    draws = default.draws()
    model = rs.models.LogisticRegression().bind(DataSpec(X.shape[1], n_rows=len(y)))
    here = rs.Result(
        draws, default.info()["param_names"], model=model, data=rs.shard(X, y, num_shards=4), executor="local"
    )
    engine = here.loo()
    np.testing.assert_allclose([lo["elpd"], lo["se"], lo["p_loo"]], [engine.elpd, engine.se, engine.p], rtol=1e-10)
    assert (lo["k_flat"], lo["k_ok"], lo["k_high"]) == (engine.k_flat, engine.k_ok, engine.k_high)
    # the pooled computation: every row's log-likelihood under the thinned draws, in one matrix
    thinned = thin_draws(draws)
    ll = model.log_likelihood(X, y, thinned.reshape(-1, X.shape[1]))
    flat = np.ptp(ll, axis=1) < FLAT_SPAN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lw, k = array_stats.psislw(ll.reshape(569, thinned.shape[0], -1), r_eff=engine_r_eff(here), axis=(-2, -1))
    psis = logsumexp(lw.reshape(569, -1) + ll, axis=1)
    want = np.where(flat, logsumexp(ll, axis=1) - math.log(ll.shape[1]), psis)
    np.testing.assert_allclose(lo["elpd"], want.sum(), rtol=1e-10)
    assert lo["k_high"] == int(np.sum(~flat & (k >= 0.7))) and lo["k_flat"] == int(flat.sum())
    # `raysampler loo` through its entry point in this process (a Python start-up and the CLI's imports spared)
    assert cli.main(["loo", default.id, "--url", service.url, "--api-key", ALICE]) == 0
    out = capsys.readouterr().out
    assert f"elpd_loo {lo['elpd']:.2f}" in out and f"flat (log-lik span < {FLAT_SPAN:g}" in out
    mm = default.loo(moment_match=True)
    assert len(mm["moment_matched"]) == lo["k_high"] and mm["k_high"] <= lo["k_high"] and math.isfinite(mm["elpd"])
    used = [m for m in mm["moment_matched"] if m["used"]]
    assert all(m["k_after"] < m["k_psis"] for m in used)
    np.testing.assert_allclose(mm["elpd"], lo["elpd"] + sum(m["elpd_after"] - m["elpd_psis"] for m in used), rtol=1e-10)
    table = alice.compare([tight.id, default.id], method="stacking")
    assert list(table.index) == [default.id, tight.id] and np.isfinite(table["elpd"]).all()
    assert table.loc[tight.id, "elpd_diff"] > 2 * table.loc[tight.id, "dse"] > 0
    np.testing.assert_allclose(table["weight"].sum(), 1.0, rtol=1e-9)


def engine_r_eff(result: rs.Result) -> float:
    from raysampler.evaluation import r_eff, thin_draws

    return r_eff(thin_draws(result.draws), result.param_blocks)


def test_pp_check_over_rest_equals_the_engine_on_the_same_draws(alice, fits):
    """GET /v1/runs/{id}/ppc through the SDK (sync and async): the statistic, histograms and densities the shards
    computed on Ray equal the engine's in this process on the same stored draws and rows; bad query values are 422s
    naming them."""
    import asyncio

    from raysampler.client import AsyncClient

    X, y, _, full, _ = fits
    here = local(full, X[:800], y[:800])
    for kind in ("stat", "hist", "dens"):
        got, want = full.pp_check(kind, "sd", draws=20, seed=2), here.pp_check(kind, "sd", draws=20, seed=2)
        assert type(got) is type(want) and got.n == want.n == 800
        if isinstance(want, PpcStat):
            np.testing.assert_allclose([got.observed, *got.replicated], [want.observed, *want.replicated], rtol=1e-10)
            assert got.p_value == want.p_value
        elif isinstance(want, PpcHistogram):
            np.testing.assert_array_equal(got.edges, want.edges)
            np.testing.assert_array_equal(
                np.vstack([got.observed, got.replicated]), np.vstack([want.observed, want.replicated])
            )
        else:
            np.testing.assert_allclose(got.grid, want.grid, rtol=1e-12)
            np.testing.assert_allclose(
                np.vstack([got.observed, got.replicated]),
                np.vstack([want.observed, want.replicated]),
                rtol=1e-9,
                atol=1e-12,
            )

    async def stat():
        async with AsyncClient(full.client.url, ALICE) as c:
            return await (await c.run(full.id)).pp_check("stat", "mean", draws=20)

    np.testing.assert_array_equal(asyncio.run(stat()).replicated, full.pp_check("stat", "mean", draws=20).replicated)
    # grouped by a column of the data: the constant column "one" makes one group of every row, whose statistic is
    # the ungrouped one
    grouped = full.pp_check("stat", "sd", group="one", draws=20, seed=2)
    plain = here.pp_check("stat", "sd", draws=20, seed=2)
    assert grouped.kind == "stat_grouped" and grouped.labels == (1,) and list(grouped.n) == [800]
    np.testing.assert_allclose(
        [grouped.observed[0], *grouped.replicated[0]], [plain.observed, *plain.replicated], rtol=1e-10
    )
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["ppc", full.id, "--kind", "stat", "--stat", "sd", "--group", "one", "--draws", "20",
                         "--url", full.client.url, "--api-key", ALICE]) == 0  # fmt: skip
    assert "T = sd of y by one: 1 groups" in out.getvalue() and "p_value" in out.getvalue()
    for call, loc in [
        (lambda: full.pp_check("violin"), ["query", "kind"]),
        (lambda: full.pp_check("stat", "trimean"), ["query", "stat"]),
        (lambda: full.pp_check("hist", bins=0), ["query", "bins"]),
        (lambda: full.pp_check("stat", "sd", group="ward"), ["query", "group"]),
        (lambda: full.pp_check("stat", "median", group="one"), ["query", "stat"]),
    ]:
        with pytest.raises(APIError) as err:
            call()
        assert _detail(err) == (422, loc), err.value.detail
