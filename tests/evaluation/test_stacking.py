"""Stacking weights at the shards (`rs.compare(..., method="stacking")`, raysampler/evaluation/stacking.py) equal
arviz-stats' stacking on the pooled pointwise values; the shards keep their pointwise elpd between the optimiser's
calls and send back only their share of the objective and its gradient."""

from __future__ import annotations

import warnings

import arviz_stats as azs
import numpy as np
import pytest

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.evaluation import ShardSession, StackingShare
from raysampler.evaluation.stacking import KEPT
from raysampler.models.contract import DataSpec


@pytest.fixture(scope="module")
def fits():
    """diabetes under a known-noise linear model on three sets of covariates (all but bmi, all but s5, the intercept
    with bmi and bp: each predicts some patients best, so stacking mixes them), each with exact posterior draws
    (4 × 150), on the same rows in three shards."""
    X, y = rs.datasets.load("diabetes")
    cols = rs.datasets.columns("diabetes")
    sets = {
        "no_bmi": [j for j, c in enumerate(cols) if c != "bmi"],
        "no_s5": [j for j, c in enumerate(cols) if c != "s5"],
        "bmi_bp": [0, cols.index("bmi"), cols.index("bp")],
    }
    out = {}
    for k, (name, keep) in enumerate(sets.items()):
        model = rs.models.LinearRegression(noise_sd=0.75).bind(DataSpec(len(keep), n_rows=len(y)))
        mean, cov = model.posterior([(X[:, keep], y)])
        draws = np.random.default_rng(k).multivariate_normal(mean, cov, size=(4, 150))
        shards = rs.shard(X[:, keep], y, num_shards=3)
        out[name] = rs.Result(draws, model.param_names(), model=model, data=shards, executor="local")
    return out


def pooled(result):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return azs.loo(result.to_arviz(log_likelihood=True), pointwise=True)


def test_stacking_weights_equal_arviz_stacking_on_the_pooled_pointwise_values(fits):
    comp = rs.compare(fits, method="stacking")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = azs.compare({n: pooled(r) for n, r in fits.items()}, method="stacking")
    ours = {r.name: r.weight for r in comp.rows}
    assert comp.method == "stacking" and [r.name for r in comp.rows] == list(ref.index)
    np.testing.assert_allclose([ours[n] for n in ref.index], ref["weight"].to_numpy(float), atol=1e-6)
    assert sum(w > 0.05 for w in ours.values()) >= 2  # a mixture, not a pick
    np.testing.assert_allclose(sum(ours.values()), 1.0, rtol=1e-9)
    for r in comp.rows:  # the rest of the table is compare's own, whatever the weights
        np.testing.assert_allclose(
            [r.elpd, r.elpd_diff, r.dse], ref.loc[r.name, ["elpd", "elpd_diff", "dse"]], rtol=1e-9
        )
    pseudo = rs.compare(fits)
    assert pseudo.method == "pseudo-bma" and [r.elpd for r in pseudo.rows] == [r.elpd for r in comp.rows]


def test_a_shards_share_of_the_objective_and_gradient_add_up_to_the_pooled_ones(fits):
    """What each shard sends for weights w: its rows' Σ log Σ_k w_k exp(elpd_k,i) and gradient, summing to the
    pooled values; the pointwise elpd (each model's `loo(pointwise=True)`) stays with the shard."""
    from raysampler.evaluation import PairTask, good_k, r_eff, thin_draws
    from raysampler.evaluation.stacking import StackingStart

    res = list(fits.values())
    thinned = tuple(thin_draws(r.draws) for r in res)
    task = PairTask(
        tuple(r.model for r in res),
        thinned,
        tuple(r_eff(t, r.param_blocks) for t, r in zip(thinned, res)),
        tuple(good_k(600) for _ in res),
        tuple(tuple(r.param_names) for r in res),
    )
    w = np.array([0.5, 0.3, 0.2])
    with ShardSession(task.models, [tuple(r.data[i] for r in res) for i in range(3)], "local") as session:
        session.run(StackingStart(task))
        shares = session.run(StackingShare(w))
        kept = [h.kept[KEPT] for holders in session.local for h in holders]
    E = np.column_stack([r.loo(pointwise=True).elpd_i.values for r in res])
    np.testing.assert_allclose(np.concatenate(kept), E, rtol=1e-12)
    P = np.exp(E)
    np.testing.assert_allclose(sum(s.value for s in shares), np.sum(np.log(P @ w)), rtol=1e-12)
    np.testing.assert_allclose(sum(s.grad for s in shares), np.sum(P / (P @ w)[:, None], axis=0), rtol=1e-12)


def test_an_unknown_weight_method_names_the_argument(fits):
    with pytest.raises(ArgumentError) as err:
        rs.compare(fits, method="bma")
    assert err.value.path == ("method",)
