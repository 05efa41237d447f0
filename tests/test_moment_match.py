"""Moment matching at the shards (`result.loo(moment_match=True)`, raysampler/evaluation/moment_match.py) against
exact leave-one-out predictive densities: a linear regression with known noise, where p(y_i | y_−i) is Gaussian in
closed form, and a small logistic regression whose posteriors without each row are integrated on a fine grid (a
refit without the row, without Monte-Carlo error). The draws are exact posterior draws (so that only the importance
sampling is tested), the tolerance two Monte-Carlo SEs of the matched elpd_i."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, logsumexp

import raysampler as rs
from raysampler.errors import ArgumentError
from raysampler.models.contract import DataSpec


def linear_problem():
    """40 rows, intercept and slope, σ = 0.5 known; row 7 is far out in x (x = 5) and 4σ·2 below its line."""
    rng = np.random.default_rng(1)
    n, sigma = 40, 0.5
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    X[7, 1] = 5.0
    y = X @ np.array([1.0, 2.0]) + sigma * rng.normal(size=n)
    y[7] -= 4.0
    model = rs.models.LinearRegression(noise_sd=sigma).bind(DataSpec(2, n_rows=n))
    mean, cov = model.posterior([(X, y)])
    draws = rng.multivariate_normal(mean, cov, size=(4, 1000))
    result = rs.Result(draws, model.param_names(), model=model, data=rs.shard(X, y, num_shards=2), executor="local")

    def exact(i: int) -> float:
        keep = np.arange(n) != i
        m, c = model.posterior([(X[keep], y[keep])])
        return float(stats.norm.logpdf(y[i], X[i] @ m, np.sqrt(sigma**2 + X[i] @ c @ X[i])))

    return result, exact


def logistic_problem():
    """30 rows, intercept and slope, prior N(0, 2.5²); row 3 lies far out (x = 3.5) on the wrong side. Posterior
    draws by independence Metropolis–Hastings from a Student-t fitted to the posterior on a grid (exact in law); the
    exact LOO predictive of a row is the grid integral of p(y_i | θ) under the posterior without it."""
    rng = np.random.default_rng(0)
    n, scale = 30, 2.5
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    y = (rng.uniform(size=n) < expit(X @ np.array([0.3, 1.5]))).astype(float)
    X[3, 1], y[3] = 3.5, 0.0
    model = rs.models.LogisticRegression(prior_scale=scale).bind(DataSpec(2, n_rows=n))

    def log_post(theta: np.ndarray, keep: np.ndarray) -> np.ndarray:
        eta = theta @ X[keep].T
        return (y[keep] * eta - np.logaddexp(0, eta)).sum(-1) - 0.5 * (theta**2).sum(-1) / scale**2

    grid = np.stack(np.meshgrid(np.linspace(-6, 6, 401), np.linspace(-4, 8, 401), indexing="ij"), -1).reshape(-1, 2)
    every = np.ones(n, dtype=bool)
    lp = log_post(grid, every)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    centre = w @ grid
    proposal = stats.multivariate_t(centre, 1.5 * ((grid - centre).T * w) @ (grid - centre), df=5, seed=7)
    draws = np.empty((4, 1000, 2))
    for c in range(4):
        cand = proposal.rvs(size=1200)
        log_r = log_post(cand, every) - proposal.logpdf(cand)
        u = np.log(rng.uniform(size=1200))
        cur, cur_r = cand[0], log_r[0]
        for t in range(1200):
            if u[t] < log_r[t] - cur_r:
                cur, cur_r = cand[t], log_r[t]
            if t >= 200:
                draws[c, t - 200] = cur
    result = rs.Result(draws, model.param_names(), model=model, data=rs.shard(X, y, num_shards=3), executor="local")

    def exact(i: int) -> float:
        keep = np.arange(n) != i
        lp_i = log_post(grid, keep)
        eta = grid @ X[i]
        return float(logsumexp(lp_i + y[i] * eta - np.logaddexp(0, eta)) - logsumexp(lp_i))

    return result, exact


@pytest.mark.parametrize("problem", [linear_problem, logistic_problem])
def test_moment_matching_lands_within_two_mcse_of_exact_loo(problem):
    result, exact = problem()
    plain = result.loo(pointwise=True, draws="all")
    lo = result.loo(pointwise=True, draws="all", moment_match=True)
    assert plain.k_high >= 1 and len(lo.moment_matched) == plain.k_high
    for m in lo.moment_matched:
        want = exact(m.ref.index)
        assert m.k_psis >= 0.7 and m.used and m.k_after < 0.7 and m.maps >= 1
        assert abs(m.elpd_after - want) < 2 * m.mcse_after, (m, want)
        assert abs(m.elpd_psis - want) > abs(m.elpd_after - want)  # matching helped
        j = m.ref.index
        assert lo.elpd_i.values[j] == m.elpd_after and lo.pareto_k.values[j] == m.k_after
    # the rows it did not touch keep their PSIS values; the sums are those of the pointwise values
    touched = [m.ref.index for m in lo.moment_matched]
    rest = np.setdiff1d(np.arange(plain.n_data_points), touched)
    np.testing.assert_array_equal(lo.elpd_i.values[rest], plain.elpd_i.values[rest])
    np.testing.assert_allclose(lo.elpd, lo.elpd_i.values.sum(), rtol=1e-12)
    assert lo.k_high == 0 and lo.high_k_rows == () and lo.k_ok == plain.k_ok + plain.k_high
    assert "Moment matching" in str(lo)


def test_without_high_k_rows_moment_matching_changes_nothing():
    result, _ = linear_problem()
    keep = [i for i in range(40) if i != 7]
    X = np.concatenate([s.X for s in result.data])[keep]
    y = np.concatenate([s.y for s in result.data])[keep]
    model = result.model.bind(DataSpec(2, n_rows=39))
    mean, cov = model.posterior([(X, y)])
    draws = np.random.default_rng(3).multivariate_normal(mean, cov, size=(2, 500))
    res = rs.Result(draws, model.param_names(), model=model, data=rs.shard(X, y, num_shards=2), executor="local")
    plain, mm = res.loo(), res.loo(moment_match=True)
    assert plain.k_high == 0 and mm.moment_matched == ()
    assert (mm.elpd, mm.se, mm.p) == (plain.elpd, plain.se, plain.p)


def test_models_that_cannot_be_moment_matched_are_refused_by_argument():
    result, _ = linear_problem()
    with pytest.raises(ArgumentError) as err:
        result.loo(moment_match="yes")
    assert err.value.path == ("moment_match",)
    grouped = rs.models.LogisticRegression(group_effects=rs.GroupEffects("g"))
    import dataclasses

    with pytest.raises(ArgumentError, match="group effects") as err:
        dataclasses.replace(result, model=grouped).loo(moment_match=True)
    assert err.value.path == ("moment_match",)
