"""Posterior predictive checks at the shards (raysampler.evaluation.ppc): the replicated statistics, histogram counts
and densities equal the computation by hand on the pooled rows, and do not depend on how the rows are split (the
same seed on one shard, several, or a shard cut into ranges), for plain fits and a hierarchical one (a formula with
group effects); bad arguments are errors naming them; each kind draws its plot."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.evaluation import pp_check, run_at_shards, spread_draws
from raysampler.evaluation.ppc import ReplicateTask, row_uniforms
from raysampler.evaluation.shard_tasks import merge
from raysampler.models.contract import DataSpec
from raysampler.predictive import PPC_STATS, stat_quantile
from raysampler.shards import ShardSet


@dataclasses.dataclass
class Fit:
    """A result, the pooled table it was fitted on (as loaded, before `Model.shard_data`) and the same rows split
    into k shards."""

    result: rs.Result
    X: np.ndarray
    y: np.ndarray
    split: Callable[[int], ShardSet]


def _fake_fit(model: rs.Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> Fit:
    """A result with draws `theta` (chains, draws, d) near the posterior: pp_check reads only the draws, the model
    and the shards, so no sampling is needed."""
    cols = ("(Intercept)", "x")
    bound = model.bind(DataSpec(X.shape[1], n_rows=len(y), columns=cols))
    res = rs.Result(
        theta,
        bound.param_names(),
        layout=bound.param_blocks(),
        model=bound,
        data=rs.shard(X, y, num_shards=1, columns=cols),
        executor="local",
    )
    return Fit(res, X, y, lambda k: rs.shard(X, y, num_shards=k, columns=cols, seed=1))


@pytest.fixture(scope="module")
def linear() -> Fit:
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(240), rng.standard_normal(240)])
    y = X @ [1.0, 2.0] + 0.7 * rng.standard_normal(240)
    theta = np.array([1.0, 2.0, np.log(0.7)]) + 0.05 * rng.standard_normal((2, 60, 3))
    return _fake_fit(rs.models.LinearRegression(), X, y, theta)


@pytest.fixture(scope="module")
def poisson() -> Fit:
    rng = np.random.default_rng(1)
    X = np.column_stack([np.ones(200), rng.standard_normal(200)])
    y = rng.poisson(np.exp(X @ [0.2, 0.6])).astype(float)
    theta = np.array([0.2, 0.6]) + 0.05 * rng.standard_normal((2, 60, 2))
    return _fake_fit(rs.models.PoissonRegression(), X, y, theta)


@pytest.fixture(scope="module")
def hierarchical() -> Fit:
    """visits ~ age + (1 | hospital), Poisson, sampled briefly: the draws must name the hospitals' effects as a run
    names them, and the design is built from each shard's own rows."""
    rng = np.random.default_rng(2)
    n = 300
    df = pd.DataFrame({"age": rng.normal(size=n), "hospital": rng.integers(1, 9, n).astype(float)})
    effect = rng.normal(0.0, 0.5, 9)[df.hospital.astype(int)]
    df["visits"] = rng.poisson(np.exp(0.3 + 0.5 * df.age + effect)).astype(float)
    model = rs.models.from_formula("visits ~ age + (1 | hospital)", family="poisson")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run: its ESS warning
        res = rs.sample(
            model, rs.shard(df, num_shards=1, by="hospital"), chains=2, num_rounds=30, burn_in=5, seed=0,
            executor="local", progress=False,
        )  # fmt: skip
    return Fit(res, df.to_numpy(dtype=np.float64), np.zeros(n), lambda k: rs.shard(df, num_shards=k, by="hospital"))


FITS = ["linear", "poisson", "hierarchical"]


def pooled_curves(fit: Fit, draws: int, seed: int) -> np.ndarray:
    """By hand on the pooled rows: (n, 1 + S), y then one replicated value per draw, each row drawn on its own by
    `predict_draw` with one uniform per draw (the contract's (K,) form), keyed by its row of the original data."""
    res = fit.result
    model = res.model
    X, y = model.shard_data(fit.X, fit.y, np.arange(len(fit.y)))
    theta = spread_draws(res.draws, draws)
    S = theta.shape[0]
    rep = np.empty((len(y), S))
    for j in range(len(y)):
        x = model.evaluation_x(X[j : j + 1], y[j : j + 1], theta, tuple(res.param_names), seed)
        rep[j] = model.predict_draw(X[j : j + 1], x, row_uniforms(seed, np.array([j]), S)[0])[0]
    return np.column_stack([y, rep])


def by_hand_stat(curves: np.ndarray, stat: str) -> np.ndarray:
    q = stat_quantile(stat)
    if q is not None:  # type 7, numpy's default (R's too)
        return np.quantile(curves, q, axis=0)
    return {
        "mean": lambda c: c.mean(axis=0),
        "sd": lambda c: c.std(axis=0, ddof=1),
        "var": lambda c: c.var(axis=0, ddof=1),
        "min": lambda c: c.min(axis=0),
        "max": lambda c: c.max(axis=0),
        "prop_zero": lambda c: (c == 0).mean(axis=0),
    }[stat](curves)


@pytest.mark.parametrize("which", FITS)
def test_every_kind_equals_the_pooled_computation_by_hand(which, request):
    fit: Fit = request.getfixturevalue(which)
    res = fit.result
    curves = pooled_curves(fit, 12, seed=7)
    for stat in PPC_STATS:
        check = res.pp_check("stat", stat, draws=12, seed=7)
        want = by_hand_stat(curves, stat)
        assert check.n == len(fit.y) and check.replicated.shape == (12,)
        # a quantile from refined bins: within range · 256**-4 of the sample's (exact for whole numbers)
        tol = 1e-12 if stat_quantile(stat) is None else 1e-9 * (curves.max() - curves.min())
        np.testing.assert_allclose([check.observed, *check.replicated], want, rtol=1e-12, atol=tol)
        if stat_quantile(stat) is None or which != "linear":
            assert check.p_value == np.mean(want[1:] >= want[0])
    # histograms: the pooled range, 30 bins (counts: bins of whole width centred on the integers); numpy's counts
    hist = res.pp_check("hist", draws=12, seed=7)
    lo, hi = curves.min(), curves.max()
    if which == "linear":
        np.testing.assert_array_equal(hist.edges, np.linspace(lo, hi, 31))
    else:
        width = int(np.ceil((hi - lo + 1) / 30))
        assert np.all(np.diff(hist.edges) == width) and hist.edges[0] == lo - 0.5 and hist.edges[-1] >= hi + 0.5
    want = np.array([np.histogram(c, bins=hist.edges)[0] for c in curves.T])
    np.testing.assert_array_equal(np.vstack([hist.observed, hist.replicated]), want)
    # densities: each curve's Gaussian kernel density with Scott's bandwidth, evaluated directly at the grid points
    dens = res.pp_check("dens", draws=12, seed=7)
    h = 1.06 * curves.std(axis=0) * len(fit.y) ** -0.2
    np.testing.assert_allclose(dens.bandwidth, h, rtol=1e-12)
    assert dens.grid[0] < np.min(curves.min(axis=0) - 2.9 * h) and dens.grid[-1] > np.max(curves.max(axis=0) + 2.9 * h)
    for k, (c, got) in enumerate(zip(curves.T, np.vstack([dens.observed, dens.replicated]))):
        exact = stats.norm.pdf((dens.grid[:, None] - c[None, :]) / h[k]).mean(axis=1) / h[k]
        # linear binning on 512 points: an error of the order of the spacing squared
        np.testing.assert_allclose(got, exact, atol=2e-3 * exact.max())
        assert abs(got.sum() * (dens.grid[1] - dens.grid[0]) - 1.0) < 1e-3


@pytest.mark.parametrize("which", ["linear", "hierarchical"])
def test_the_same_seed_gives_the_same_checks_on_one_shard_or_several(which, request):
    fit: Fit = request.getfixturevalue(which)
    one = fit.result
    several = dataclasses.replace(one, data=fit.split(3))
    assert len(several.data) == 3
    for kind in ("stat", "hist", "dens"):
        a, b = one.pp_check(kind, "sd", seed=3), several.pp_check(kind, "sd", seed=3)
        if kind == "hist":
            np.testing.assert_array_equal(a.edges, b.edges)
            np.testing.assert_array_equal(a.replicated, b.replicated)
        else:  # sums in another order: equal to rounding
            np.testing.assert_allclose(a.replicated, b.replicated, rtol=1e-12, atol=1e-15)
    # a shard cut into ranges of rows (as Ray does to use every CPU of a site) adds up to the same sums
    theta = spread_draws(one.draws, 10)
    task = ReplicateTask(one.model, theta, tuple(one.param_names), 3)
    whole = merge(run_at_shards(task, [(s,) for s in several.data], "local"))
    ranges = merge(run_at_shards(task, [(s,) for s in several.data], "local", parts=4))
    np.testing.assert_array_equal([whole.lo, whole.hi, whole.zeros], [ranges.lo, ranges.hi, ranges.zeros])
    np.testing.assert_allclose([whole.total, whole.m2], [ranges.total, ranges.m2], rtol=1e-12)
    # another seed draws other replicated data
    assert not np.allclose(one.pp_check("stat", "sd", seed=4).replicated, one.pp_check("stat", "sd", seed=3).replicated)


def test_row_uniforms_are_uniform_and_keyed_by_row_alone():
    ids = np.arange(5000)
    u = row_uniforms(11, ids, 8)
    assert u.shape == (5000, 8) and u.min() > 0.0 and u.max() < 1.0
    assert stats.kstest(u.ravel(), "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.05 and abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.05
    pick = np.array([4999, 3, 1200])
    np.testing.assert_array_equal(row_uniforms(11, ids[pick], 8), u[pick])
    assert not np.array_equal(row_uniforms(12, ids[:10], 8), u[:10])


def test_bad_arguments_are_errors_naming_them(linear):
    res = linear.result
    for kwargs, field in [
        ({"kind": "violin"}, "kind"),
        ({"kind": "stat", "stat": "q100"}, "stat"),
        ({"kind": "stat", "stat": "mode"}, "stat"),
        ({"kind": "hist", "bins": 0}, "bins"),
        ({"seed": -1}, "seed"),
        ({"draws": 0}, "draws"),
    ]:
        with pytest.raises(ArgumentError) as err:
            pp_check(res, **kwargs)
        assert err.value.path[0] == field, (kwargs, err.value)
    with pytest.raises(ArgumentError, match="does not carry its model"):
        pp_check(dataclasses.replace(res, model=None))
    with pytest.raises(ArgumentError, match="does not carry its shards"):
        pp_check(dataclasses.replace(res, data=None))


def test_each_kind_draws_its_plot(linear):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = linear.result
    try:
        ax = res.pp_check("dens").plot()
        assert len(ax.lines) == 11 and ax.get_ylabel() == "density"  # 10 replicated curves and y's
        ax = res.pp_check("hist", bins=12).plot()
        assert len(ax.patches) == 11 and ax.get_ylabel() == "rows"
        check = res.pp_check("stat", "max", draws=50)
        ax = check.plot()
        assert ax.get_xlabel() == "max(y)" and ax.lines[0].get_xdata()[0] == check.observed
        assert f"p = {check.p_value:.3f}" in ax.get_title()
    finally:
        plt.close("all")


def test_grouped_statistics_equal_the_pooled_rows_of_each_group_by_hand(hierarchical, linear):
    """pp_check(group=...): per label of a column of the data, T(y) and T(y_rep) equal the by-hand computation on
    that group's pooled rows, on one shard or several (each shard sums its own groups), numbers as numbers; a column
    outside the group terms groups too; bad arguments name themselves."""
    fit = hierarchical
    hospital = fit.X[:, 1]  # the table as loaded: age, hospital, visits
    curves = pooled_curves(fit, 40, 3)
    for k in (1, 3):
        res = dataclasses.replace(fit.result, data=fit.split(k))
        check = res.pp_check("stat", "sd", group="hospital", draws=40, seed=3)
        labels = sorted(np.unique(hospital))
        assert check.labels == tuple(int(v) for v in labels) and check.group == "hospital"
        assert check.response == "visits" and check.replicated.shape == (len(labels), 40)
        for g, label in enumerate(labels):
            want = by_hand_stat(curves[hospital == label], "sd")
            np.testing.assert_allclose([check.observed[g], *check.replicated[g]], want, rtol=1e-10)
        assert list(check.n) == [int(np.sum(hospital == v)) for v in labels]
    table = check.table()
    assert list(table.index) == list(check.labels) and table.index.name == "hospital"
    np.testing.assert_allclose(table["p_value"], np.mean(check.replicated >= check.observed[:, None], axis=1))
    assert "PpcStatGrouped" in repr(check) and len(check.plot(max_groups=4)) == 4
    # a column that is not a grouping factor: the sign of x in the linear fit, by a column of its own
    by_x = linear.result.pp_check("stat", "mean", group="x", draws=5)
    assert len(by_x.labels) == len(np.unique(linear.X[:, 1]))
    for call, path in [
        (lambda: fit.result.pp_check("stat", "median", group="hospital"), ("stat",)),
        (lambda: fit.result.pp_check("hist", group="hospital"), ("group",)),
        (lambda: fit.result.pp_check("stat", group="ward"), ("group",)),
    ]:
        with pytest.raises(ArgumentError) as err:
            call()
        assert err.value.path == path
