"""Problems whose leave-one-out predictive densities are known exactly, with exact posterior draws: for the tests of
moment matching (tests/evaluation/test_moment_match.py) and of its run on Ray (tests/evaluation/test_evaluation.py)."""

from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.special import expit, logsumexp

import raysampler as rs
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
