"""Every model family through rs.sample, real data with exact answers, and a model written by a user."""

from __future__ import annotations

import numpy as np
import pytest
from support.stats_helpers import assert_moments

import raysampler as rs
from raysampler.testing import exact


def _diabetes():
    X, y = rs.datasets.load("diabetes")
    return X, y, rs.shard(X, y, num_shards=4)


def test_linear_regression_on_diabetes_matches_exact_pi_rho():
    """Known noise sd: the posterior is exactly Gaussian, and so is the default run's target π_ρ (whitened)."""
    X, y, shards = _diabetes()
    model = rs.models.LinearRegression(prior_scale=1.0, noise_sd=0.7)
    # 3,000 rounds: a bulk ESS of ~9,000, so that the variance tolerance (Z·√(2/ESS) ≈ 6%) stays below the 7% by which
    # π_ρ's variances differ from the posterior's: a run that sampled the posterior instead would fail
    res = rs.sample(model, shards, chains=16, num_rounds=3000, burn_in=500, seed=4, executor="local", progress=False)
    bound = model.bind(rs.models.DataSpec(n_features=X.shape[1]))
    post_mean, post_cov = bound.posterior([(X, y)])
    P = [Xi.T @ Xi / 0.7**2 for Xi in np.array_split(X, 4)]
    m = [np.linalg.lstsq(Xi, yi, rcond=None)[0] for Xi, yi in zip(np.array_split(X, 4), np.array_split(y, 4))]
    mean, cov = exact.pi_rho(P, m, np.eye(X.shape[1]), np.zeros(X.shape[1]), res.run_stats.rho, metric=post_cov)
    assert_moments(res.draws, mean, cov)
    np.testing.assert_allclose(
        exact.gaussian_posterior(P, m, np.eye(X.shape[1]), np.zeros(X.shape[1]))[0], post_mean, atol=1e-8
    )  # the local factors are those of the model
    sd_ratio = np.sqrt(np.diag(cov) / np.diag(post_cov))
    assert sd_ratio.max() <= 1 + res.setup.plan.bias_budget + 1e-12


def test_meta_analysis_with_known_per_row_noise_matches_the_exact_posterior():
    """noise_sd="se" (each study's standard error, a column that is not a feature): draws of rs.sample match the
    closed-form Normal posterior and the run's exact target π_ρ (ESS-based tolerances)."""
    rng = np.random.default_rng(11)
    n = 120
    dose = rng.uniform(-1.0, 1.0, n)
    se = rng.uniform(0.1, 0.6, n)
    X = np.column_stack([np.ones(n), dose, se])
    y = 0.3 + 0.5 * dose + se * rng.standard_normal(n)
    cols = ("(Intercept)", "dose", "se")
    model = rs.models.LinearRegression(prior_scale=2.0, noise_sd="se")
    shards = rs.shard(X, y, num_shards=4, columns=cols)
    res = rs.sample(model, shards, chains=16, num_rounds=4000, burn_in=500, seed=3, executor="local", progress=False)
    assert res.param_names == ["beta[(Intercept)]", "beta[dose]"]
    bound = model.bind(rs.models.DataSpec(n_features=3, columns=cols))
    mean, cov = bound.posterior([(X, y)])
    Xc, w = X[:, :2], 1 / se**2
    Q = Xc.T @ (Xc * w[:, None]) + np.eye(2) / 4
    np.testing.assert_allclose(cov, np.linalg.inv(Q), rtol=1e-10)
    np.testing.assert_allclose(mean, np.linalg.solve(Q, Xc.T @ (w * y)), rtol=1e-10)
    # the run's target π_ρ is exactly Gaussian too: built from the shards' weighted local factors
    parts = np.array_split(np.arange(n), 4)
    P = [Xc[r].T @ (Xc[r] * w[r, None]) for r in parts]
    m = [np.linalg.solve(Pi, Xc[r].T @ (w[r] * y[r])) for Pi, r in zip(P, parts)]
    np.testing.assert_allclose(exact.gaussian_posterior(P, m, np.eye(2) / 4, np.zeros(2))[0], mean, atol=1e-8)
    target_mean, target_cov = exact.pi_rho(P, m, np.eye(2) / 4, np.zeros(2), res.run_stats.rho, metric=cov)
    assert_moments(res.draws, target_mean, target_cov)
    assert np.sqrt(np.diag(target_cov) / np.diag(cov)).max() <= 1.1  # π_ρ stays close to the posterior


class HandWrittenLinear:
    """A user's model that does not inherit from rs.models.Model: linear regression, noise sd 0.7, prior N(0, I)."""

    def __init__(self, d: int | None = None) -> None:
        self.d = d

    def bind(self, spec):
        return HandWrittenLinear(spec.n_features)

    @property
    def dim(self) -> int:
        return self.d

    def param_names(self):
        return [f"beta{j}" for j in range(self.d)]

    def prior(self):
        return rs.models.GaussianPrior(np.zeros(self.d), np.ones(self.d))

    def validate(self, X, y, argname="data"):
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"{argname}: rows differ")

    def potential(self, X, y, x):
        r = y[:, None] - X @ x.T
        return 0.5 * np.sum(r * r, axis=0) / 0.49

    def grad(self, X, y, x):
        return -((y[:, None] - X @ x.T).T @ X) / 0.49

    def potential_and_grad(self, X, y, x):
        return self.potential(X, y, x), self.grad(X, y, x)

    def hvp(self, X, y, x, v):
        return (X @ v.T).T @ X / 0.49

    def hessian(self, X, y, x):
        return X.T @ X / 0.49

    def hessian_diag(self, X, y, x):
        return np.sum(X * X, axis=0) / 0.49

    def smoothness(self, X, y):
        return float(np.linalg.eigvalsh(X.T @ X).max() / 0.49)


def test_a_users_own_model_plugs_in(ray_session):
    X, y, shards = _diabetes()
    kw = dict(chains=4, num_rounds=300, burn_in=50, seed=1, progress=False, balance=False)  # the same draws: no law
    mine = rs.sample(HandWrittenLinear(), shards, executor="local", **kw)
    builtin = rs.sample(rs.models.LinearRegression(noise_sd=0.7), shards, executor="local", **kw)
    np.testing.assert_allclose(mine.draws, builtin.draws, rtol=1e-6, atol=1e-8)  # same maths, same random numbers
    assert mine.summary().index[0] == "theta[beta0]"
    on_ray = rs.sample(HandWrittenLinear(), shards, executor="ray", **{**kw, "num_rounds": 20, "burn_in": 10})
    np.testing.assert_array_equal(
        on_ray.draws,
        rs.sample(HandWrittenLinear(), shards, executor="local", **{**kw, "num_rounds": 20, "burn_in": 10}).draws,
    )


@pytest.mark.parametrize(
    "family, data",
    [
        ("softmax_regression", "digits"),
        ("mlp_classifier", "digits"),
        ("poisson_regression", "poisson"),
        ("gaussian", "gaussian_toy"),
    ],
)
def test_every_family_samples(family, data):
    if data == "poisson":
        rng = np.random.default_rng(0)
        X = np.c_[np.ones(1000), rng.standard_normal((1000, 3))]
        y = rng.poisson(np.exp(X @ np.array([0.5, 0.3, -0.2, 0.1]))).astype(float)
    else:
        X, y = rs.datasets.load(data, **({"n": 2000} if data == "gaussian_toy" else {}))
    kw = {"hidden": 4} if family == "mlp_classifier" else {}
    if family == "gaussian":
        kw = {"noise_cov": rs.datasets.gaussian_toy_noise_cov(2).tolist()}
    model = rs.models.get_model(family, **kw)
    res = rs.sample(
        model, rs.shard(X, y, num_shards=3), chains=2, num_rounds=40, burn_in=40, executor="local", progress=False
    )
    assert res.draws.shape[:2] == (2, 40) and np.all(np.isfinite(res.draws))
    assert res.sample_stats["local_accept"].mean() > 0.2
