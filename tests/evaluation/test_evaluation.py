"""Checks of a fit where the data are (raysampler.evaluation): predictions, PSIS-LOO, held-out metrics and model
comparison, computed per shard and summed, against the same quantities computed on the pooled draws and rows
(arviz-stats' own loo and compare, numpy by hand), in-process and on Ray."""

from __future__ import annotations

import dataclasses
import warnings

import arviz_stats as azs
import numpy as np
import pytest
from scipy.special import logsumexp

import raysampler as rs
import raysampler.result as result_module
from raysampler.errors import ArgumentError
from raysampler.evaluation import thin_draws, uniforms

#: 4 chains of 250 draws: the 1,000 draws the LOO and the metrics use by default (`thin_draws`), kept whole; every
#: check here compares the computation at the shards with the same computation on the pooled draws and rows
KW = dict(chains=4, num_rounds=250, seed=3, progress=False)


@pytest.fixture(scope="module")
def logistic():
    """logistic_synthetic: 800 training rows in 3 shards, 200 held out; a fit on all features and one without the
    last (informative) feature."""
    X, y = rs.datasets.load("logistic_synthetic")
    tr, te = slice(0, 800), slice(800, 1000)
    full = rs.sample(
        rs.models.LogisticRegression(), rs.shard(X[tr], y[tr], num_shards=3, seed=0), executor="local", **KW
    )
    drop = rs.sample(
        rs.models.LogisticRegression(), rs.shard(X[tr, :-1], y[tr], num_shards=3, seed=0), executor="local", **KW
    )
    return X, y, tr, te, full, drop


@pytest.fixture(scope="module")
def linear():
    """diabetes, σ unknown: 350 training rows in 3 shards, 92 held out; 2,000 draws, thinned to 1,000 by default."""
    X, y = rs.datasets.load("diabetes")
    res = rs.sample(
        rs.models.LinearRegression(),
        rs.shard(X[:350], y[:350], num_shards=3, seed=0),
        executor="local",
        **{**KW, "num_rounds": 500},  # 2,000 draws: draws="all" is more than the default 1,000
    )
    return X, y, res


def pooled_loo(result, draws=1000, pointwise=True):
    """arviz-stats' loo on the thinned draws and the pooled rows (the result's own export)."""
    thinned = dataclasses.replace(result, draws=thin_draws(result.draws, draws))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return azs.loo(thinned.to_arviz(log_likelihood=True), pointwise=pointwise)


@pytest.mark.parametrize("which", ["logistic", "linear"])
def test_loo_at_the_shards_equals_arviz_loo_on_the_pooled_draws_and_rows(which, request):
    result = request.getfixturevalue(which)[-1] if which == "linear" else request.getfixturevalue(which)[4]
    ours = result.loo(pointwise=True)
    ref = pooled_loo(result)
    assert ours.n_data_points == ref.n_data_points and ours.n_samples == ref.n_samples == 1000
    np.testing.assert_allclose([ours.elpd, ours.se, ours.p], [ref.elpd, ref.se, ref.p], rtol=1e-12)
    assert ours.k_flat == 0  # every row's log-likelihood varies here: arviz-stats' PSIS on every row
    np.testing.assert_allclose(ours.elpd_i.values, ref.elpd_i.values, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ours.pareto_k.values, ref.pareto_k.values, rtol=0, atol=1e-10)
    k = ref.pareto_k.values
    assert (ours.k_ok, ours.k_high) == (int(np.sum(k < 0.7)), int(np.sum(k >= 0.7)))
    assert ours.good_k == ref.good_k and ours.warning == ref.warning
    # only sums by default: no per-row values come back
    plain = result.loo()
    assert plain.elpd_i is None and plain.pareto_k is None
    np.testing.assert_allclose([plain.elpd, plain.se], [ref.elpd, ref.se], rtol=1e-12)


def test_loo_with_all_draws_uses_every_stored_draw(linear):
    res = linear[-1]
    ours = res.loo(draws="all")
    ref = pooled_loo(res, draws="all", pointwise=False)
    assert ours.n_samples == res.chains * res.num_draws
    np.testing.assert_allclose([ours.elpd, ours.se, ours.p], [ref.elpd, ref.se, ref.p], rtol=1e-12)


def test_high_pareto_k_rows_come_back_by_position_only():
    """A heavy outlier under a known-noise model has k ≥ 0.7: its shard and row (and original index) come back."""
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(60), rng.normal(size=60)])
    y = X @ np.array([1.0, 2.0]) + 0.3 * rng.normal(size=60)
    y[41] += 6.0
    res = rs.sample(rs.models.LinearRegression(noise_sd=0.3), rs.shard(X, y, num_shards=2), executor="local", **KW)
    lo = res.loo()
    ref = pooled_loo(res)
    high = np.flatnonzero(ref.pareto_k.values >= 0.7)
    assert 41 in high
    assert sorted(r.index for r in lo.high_k_rows) == high.tolist()
    assert all(res.data[r.shard].index[r.row] == r.index for r in lo.high_k_rows)
    assert lo.k_high == high.size and lo.k_ok + lo.k_high == 60
    # the warning names its rows: every row above arviz-stats' own bound good_k (not only those ≥ 0.7), largest first
    warned = np.flatnonzero(ref.pareto_k.values > ref.good_k)
    assert lo.warning and sorted(h.ref.index for h in lo.warning_rows) == warned.tolist()
    assert [h.k for h in lo.warning_rows] == sorted((h.k for h in lo.warning_rows), reverse=True)
    np.testing.assert_allclose(lo.warning_rows[0].k, ref.pareto_k.values.max(), atol=1e-10)
    first = lo.warning_rows[0].ref
    assert f"{warned.size} rows with k̂ > {ref.good_k:.2f}" in str(lo)
    assert f"shard {first.shard} row {first.row} (k̂ {lo.warning_rows[0].k:.2f})" in str(lo)


def test_loo_is_accepted_by_arviz_compare_and_matches_pooled(logistic):
    *_, full, drop = logistic
    ours = azs.compare({"full": full.loo(pointwise=True), "drop": drop.loo(pointwise=True)})
    ref = azs.compare({"full": pooled_loo(full), "drop": pooled_loo(drop)})
    cols = ["elpd", "se", "elpd_diff", "dse", "weight"]
    # atol: a stacking weight near 0 comes out of ArviZ's optimiser as 0 or as 1e-11 from equal-to-1e-8 inputs
    np.testing.assert_allclose(ours[cols], ref[cols], rtol=1e-8, atol=1e-9)


def test_a_model_without_an_informative_feature_loses_in_compare_with_the_pooled_se(logistic):
    *_, full, drop = logistic
    comp = rs.compare({"full": full, "drop": drop})
    assert [r.name for r in comp.rows] == ["full", "drop"]
    best, worse = comp.rows
    ref = azs.compare({"full": pooled_loo(full), "drop": pooled_loo(drop)}, method="pseudo-bma")
    assert worse.elpd_diff > 4 * worse.dse > 0  # clearly worse, by construction
    np.testing.assert_allclose(
        [best.elpd, worse.elpd, worse.se, worse.elpd_diff, worse.dse, worse.weight],
        [
            ref.loc["full", "elpd"],
            ref.loc["drop", "elpd"],
            ref.loc["drop", "se"],
            ref.loc["drop", "elpd_diff"],
            ref.loc["drop", "dse"],
            ref.loc["drop", "weight"],
        ],
        rtol=1e-9,
    )
    table = comp.table()
    assert list(table.index) == ["full", "drop"] and table.loc["drop", "rank"] == 1


def test_compare_refuses_runs_on_other_rows(logistic, linear):
    X, y, tr, _, full, _ = logistic
    other = rs.sample(
        rs.models.LogisticRegression(),
        rs.shard(X[tr], 1 - y[tr], num_shards=3, seed=0),
        executor="local",
        chains=2,
        num_rounds=20,
        burn_in=5,
        progress=False,
    )
    with pytest.raises(ArgumentError, match="same rows") as err:
        rs.compare({"full": full, "other": other})
    assert err.value.path == ("results", 1)
    with pytest.raises(ArgumentError) as err:
        rs.compare({"full": full})
    assert err.value.path == ("results",)


def test_classification_metrics_at_the_shards_equal_the_pooled_computation(logistic):
    X, y, _, te, full, _ = logistic
    Xt, yt = X[te], y[te]
    split = rs.evaluate(full, rs.shard(Xt, yt, num_shards=3, seed=1))
    # by hand on the pooled rows: the predicted class's posterior predictive probability, 10 equal-width bins
    theta = thin_draws(full.draws).reshape(-1, full.draws.shape[2])
    p1 = (1 / (1 + np.exp(-(Xt @ theta.T)))).mean(axis=1)
    pred = (p1 > 0.5).astype(int)
    conf = np.where(pred == 1, p1, 1 - p1)
    hit = (pred == yt).astype(float)
    b = np.minimum((conf * 10).astype(int), 9)
    ece = sum(
        np.sum(b == m) / len(yt) * abs(hit[b == m].mean() - conf[b == m].mean()) for m in range(10) if np.any(b == m)
    )
    ll = yt[:, None] * (Xt @ theta.T) - np.logaddexp(0, Xt @ theta.T)
    nll = -np.mean(logsumexp(ll, axis=1) - np.log(theta.shape[0]))
    assert split.n == 200
    np.testing.assert_allclose(
        [split.accuracy, split.brier, split.ece, split.nll],
        [hit.mean(), np.mean((conf - hit) ** 2), ece, nll],
        rtol=1e-10,
    )
    curve = [(c.count, c.accuracy) for c in split.reliability]
    assert curve == [(int(np.sum(b == m)), hit[b == m].mean() if np.any(b == m) else None) for m in range(10)]


def test_regression_metrics_do_not_depend_on_the_split(linear):
    X, y, res = linear
    Xt, yt = X[350:], y[350:]
    pooled = rs.evaluate(res, [(Xt, yt)], seed=5)
    split = rs.evaluate(res, rs.shard(Xt, yt, num_shards=4, seed=2), seed=5)
    assert pooled.n == split.n == 92
    np.testing.assert_allclose(dataclasses.astuple(split)[:6], dataclasses.astuple(pooled)[:6], rtol=1e-10)
    # CRPS from its definition E|Y − y| − ½E|Y − Y'| on the same predictive draws
    ydraw = res.predict(Xt, "draws", seed=5)
    crps = np.abs(ydraw - yt).mean(0) - 0.5 * np.abs(ydraw[:, None, :] - ydraw[None, :, :]).mean((0, 1))
    np.testing.assert_allclose(split.crps, crps.mean(), rtol=1e-10)
    lo, hi = np.quantile(ydraw, [0.05, 0.95], axis=0)
    assert split.coverage_90 == np.mean((yt >= lo) & (yt <= hi))
    assert 0.75 < split.coverage_90 <= 1.0 and 0.3 < split.coverage_50 < 0.7


def test_predict_mean_draws_and_interval(linear):
    X, _, res = linear
    Xt = X[350:360]
    theta = thin_draws(res.draws).reshape(-1, res.draws.shape[2])
    np.testing.assert_allclose(res.predict(Xt), (Xt @ theta[:, :-1].T).mean(axis=1), rtol=1e-12)
    draws = res.predict(Xt, "draws", seed=1)
    sd = np.exp(theta[:, -1])
    from scipy.special import ndtri

    np.testing.assert_allclose(draws, theta[:, :-1] @ Xt.T + (sd * ndtri(uniforms(len(theta), 1)))[:, None], rtol=1e-12)
    iv = res.predict(Xt, "interval", prob=0.5, seed=1)
    np.testing.assert_allclose(iv, np.quantile(draws, [0.25, 0.75], axis=0).T)
    assert res.predict(Xt, "draws", draws="all").shape == (res.chains * res.num_draws, 10)


def test_predict_multiclass_gives_class_probabilities():
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(300), rng.normal(size=(300, 2))])
    y = np.argmax(X @ rng.normal(size=(3, 3)) + rng.gumbel(size=(300, 3)), axis=1)
    res = rs.sample(
        rs.models.SoftmaxRegression(),
        rs.shard(X, y, num_shards=2),
        executor="local",
        chains=2,
        num_rounds=100,
        progress=False,
    )
    P = res.predict(X[:5])
    assert P.shape == (5, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert set(np.unique(res.predict(X[:5], "draws"))) <= {0.0, 1.0, 2.0}
    with pytest.raises(ArgumentError) as err:
        res.predict(X[:5], "interval")
    assert err.value.path == ("kind",)
    m = rs.evaluate(res, [(X, y)])
    assert m.kind == "classification" and 0 <= m.ece <= 1


def test_bad_input_names_the_argument(linear):
    X, y, res = linear
    for call, path in [
        (lambda: res.predict(X[:3, :-1]), ("X",)),
        (lambda: res.predict(X[:3], kind="median"), ("kind",)),
        (lambda: res.predict(X[:3], draws=0), ("draws",)),
        (lambda: res.loo(draws="some"), ("draws",)),
        (lambda: rs.evaluate(res, [(X[:5, :-1], y[:5])]), ("shards", 0)),
        (lambda: rs.evaluate(res, [(X[:5], y[:5])], bins=0), ("bins",)),
        (lambda: dataclasses.replace(res, model=None).loo(), ("result",)),
    ]:
        with pytest.raises(ArgumentError) as err:
            call()
        assert err.value.path == path


def test_export_has_log_likelihood_and_observed_data_unless_rows_live_on_sites(linear, tmp_path, monkeypatch):
    _, _, res = linear
    tree = res.to_arviz()
    assert tree["log_likelihood"]["y"].shape == (res.chains, res.num_draws, 350)
    np.testing.assert_array_equal(tree["observed_data"]["y"].values, np.concatenate([s.y for s in res.data]))
    assert tree["posterior"].attrs["seed"] == "3" and "LinearRegression" in tree["posterior"].attrs["model"]
    path = tmp_path / "sited.parquet"
    sited = dataclasses.replace(res, data=rs.ShardSet((rs.Shard(path=str(path), site="a"),), "files"))
    tree = sited.to_arviz()
    assert "log_likelihood" not in tree.children and "observed_data" not in tree.children
    assert "sites" in tree["posterior"].attrs["log_likelihood"]
    with pytest.raises(ValueError, match="log_likelihood"):
        sited.to_arviz(log_likelihood=True)
    # past LOG_LIK_MAX_VALUES it is left out unasked, and said aloud with the way to get it
    monkeypatch.setattr(result_module, "LOG_LIK_MAX_VALUES", 350 * res.chains * res.num_draws - 1)
    with pytest.warns(UserWarning, match=r"log_likelihood left out .*to_arviz\(log_likelihood=True\)"):
        tree = res.to_arviz()
    assert "log_likelihood" not in tree.children and "exceed" in tree["posterior"].attrs["log_likelihood"]
    assert "log_likelihood" in res.to_arviz(log_likelihood=True).children


def test_on_ray_the_shards_compute_the_same_sums(ray_session, logistic):
    X, y, tr, te, _, _ = logistic
    res = rs.sample(
        rs.models.LogisticRegression(),
        rs.shard(X[tr], y[tr], num_shards=3, seed=0),
        executor="ray",
        chains=2,
        num_rounds=30,
        burn_in=10,
        progress=False,
    )
    assert res.executor == "ray"
    on_ray, here = res.loo(), res.loo(executor="local")
    np.testing.assert_allclose([on_ray.elpd, on_ray.se, on_ray.p], [here.elpd, here.se, here.p], rtol=1e-12)
    held = rs.shard(X[te], y[te], num_shards=2)
    assert rs.evaluate(res, held) == rs.evaluate(res, held, executor="local")


def test_on_ray_a_shards_rows_are_cut_into_a_task_per_cpu(ray_session, linear):
    """On a local Ray (2 CPUs here) one shard's rows go to two tasks, four shards' to one each; the sums are the
    in-process ones."""
    from raysampler.evaluation import loo
    from raysampler.evaluation.shard_tasks import place

    X, y, res = linear
    one = rs.shard(X[:350], y[:350], num_shards=1)
    assert place([(s,) for s in one]).parts == (2,)
    assert place([(s,) for s in rs.shard(X[:350], y[:350], num_shards=4)]).parts == (1, 1, 1, 1)
    on_ray = loo(res, executor="ray", shards=one, pointwise=True)
    here = res.loo(executor="local", pointwise=True)
    np.testing.assert_allclose(on_ray.elpd_i.values, here.elpd_i.values, rtol=1e-12)


def test_on_ray_moment_matching_and_stacking_give_the_same(ray_session, logistic):
    """Moment matching and stacking take several rounds of the shards (`ShardSession`: Ray tasks for moment matching,
    actors on each shard's site keeping its pointwise elpd for stacking); the numbers are those computed
    in-process."""
    from support.loo_problems import linear_problem

    result, _ = linear_problem()
    on_ray, here = result.loo(moment_match=True, executor="ray"), result.loo(moment_match=True, executor="local")
    assert len(here.moment_matched) == 1 and here.moment_matched[0].used
    assert on_ray.moment_matched == here.moment_matched
    np.testing.assert_allclose([on_ray.elpd, on_ray.se, on_ray.p], [here.elpd, here.se, here.p], rtol=1e-12)
    *_, full, drop = logistic
    a = rs.compare({"full": full, "drop": drop}, method="stacking", executor="ray")
    b = rs.compare({"full": full, "drop": drop}, method="stacking", executor="local")
    np.testing.assert_allclose([r.weight for r in a.rows], [r.weight for r in b.rows], atol=1e-9)


def test_a_shard_split_into_ranges_of_rows_sums_to_the_same(logistic, linear):
    """Each shard's rows cut into several tasks (to use more CPUs than there are shards) give the same records."""
    from raysampler.evaluation import LooTask, MetricsTask, good_k, r_eff, run_at_shards

    X, y, _, te, full, _ = logistic
    thinned = thin_draws(full.draws)
    names = tuple(full.param_names)
    task = LooTask(full.model, thinned, r_eff(thinned, full.param_blocks), good_k(1000), names, pointwise=True)
    jobs = [(s,) for s in full.data]
    whole, cut = run_at_shards(task, jobs, "local"), run_at_shards(task, jobs, "local", parts=3)
    for a, b in zip(whole, cut):
        np.testing.assert_allclose(b.elpd_i, a.elpd_i, rtol=0, atol=0)
        assert (b.elpd.n, b.k_ok, b.high) == (a.elpd.n, a.k_ok, a.high)
        np.testing.assert_allclose([b.elpd.total, b.elpd.m2], [a.elpd.total, a.elpd.m2], rtol=1e-12)
    _, _, res = linear
    theta = thin_draws(res.draws).reshape(-1, res.draws.shape[2])
    metrics = MetricsTask(res.model, theta, uniforms(len(theta), 0), 10, tuple(res.param_names))
    held = [(s,) for s in rs.shard(linear[0][350:], linear[1][350:], num_shards=2)]
    one, three = run_at_shards(metrics, held, "local"), run_at_shards(metrics, held, "local", parts=3)
    for a, b in zip(one, three):
        assert (a.n, a.covered) == (b.n, b.covered)
        np.testing.assert_allclose([a.sq_err, a.nll, a.crps], [b.sq_err, b.nll, b.crps], rtol=1e-12)


@pytest.fixture(scope="module")
def grouped():
    """A logistic model with a group intercept (8 groups in 2 shards split by group), and 2 held-out groups."""
    rng = np.random.default_rng(2)
    g = np.repeat(np.arange(10), 30).astype(float)
    X = np.column_stack([np.ones(300), rng.normal(size=300), g])
    r = 0.8 * rng.normal(size=10)
    y = (X[:, 1] + r[g.astype(int)] + rng.logistic(size=300) > 0).astype(float)
    cols = ["(Intercept)", "x", "g"]
    train = g < 8
    shards = rs.shard(X[train], y[train], num_shards=2, columns=cols, by="g")
    model = rs.models.LogisticRegression(group_effects=rs.GroupEffects("g"))
    res = rs.sample(model, shards, chains=4, num_rounds=250, executor="local", seed=1, progress=False)
    return X, y, cols, train, res


def test_group_effects_loo_equals_arviz_loo_on_the_pooled_draws_and_rows(grouped):
    """Each shard's rows read their own groups' effects from the draws (by name): the same pointwise log-likelihood
    as the pooled export, so the same LOO."""
    res = grouped[-1]
    ours = res.loo(pointwise=True)
    ref = pooled_loo(res)
    np.testing.assert_allclose([ours.elpd, ours.se, ours.p], [ref.elpd, ref.se, ref.p], rtol=1e-12)
    np.testing.assert_allclose(ours.elpd_i.values, ref.elpd_i.values, rtol=1e-12, atol=1e-14)


def test_group_effects_predict_known_and_new_groups(grouped):
    """A known group's rows use its own r from each draw; a new group's get r = sd·z, z from a stream seeded by the
    label alone, so the rows' predictions do not depend on which other rows come with them."""
    from scipy.special import expit

    X, _, _, _, res = grouped
    theta = thin_draws(res.draws).reshape(-1, res.draws.shape[2])
    where = {n: j for j, n in enumerate(res.param_names)}
    known = X[:3].copy()  # group 0
    want = expit(known[:, :2] @ theta[:, :2].T + theta[:, where["r_g[0,(Intercept)]"]][None, :]).mean(axis=1)
    np.testing.assert_allclose(res.predict(known), want, rtol=1e-12)
    new = X[-3:].copy()  # group 9, never seen
    key = int(np.float64(9.0).view(np.uint64))
    z = np.random.default_rng([0, 0, key]).standard_normal((theta.shape[0], 1))[:, 0]
    r_new = np.exp(theta[:, 2]) * z
    np.testing.assert_allclose(res.predict(new), expit(new[:, :2] @ theta[:, :2].T + r_new).mean(axis=1), rtol=1e-12)
    both = res.predict(np.vstack([known, new]))
    np.testing.assert_allclose(both, np.concatenate([res.predict(known), res.predict(new)]), rtol=1e-12)
    assert res.predict(new, kind="draws").shape == (theta.shape[0], 3)
    with pytest.raises(ArgumentError) as err:
        res.predict(X[:3, :2])
    assert err.value.path == ("X",)


def test_group_effects_evaluate_on_held_out_groups_adds_up_exactly(grouped):
    """Held-out rows of known and new groups, split over shards two ways: the same metrics as in one piece."""
    X, y, cols, train, res = grouped
    held = ~train | (np.arange(X.shape[0]) % 10 == 0)
    one = rs.evaluate(res, rs.shard(X[held], y[held], num_shards=1, columns=cols))
    two = rs.evaluate(res, rs.shard(X[held], y[held], num_shards=3, columns=cols, by="g"))
    assert one.n == two.n == int(held.sum())
    np.testing.assert_allclose([one.accuracy, one.nll, one.brier, one.ece], [two.accuracy, two.nll, two.brier, two.ece])
