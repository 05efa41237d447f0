"""Closed-form posteriors of linear regression with unknown noise, checked without a sampler: the model's potential
(likelihood over shards + prior with its log-Jacobian) equals the exact Normal–Inverse-Gamma log density up to a
constant, and the reference functions (means, sds, quantiles of the marginals) agree with exact draws of that law."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

from raysampler.models import DataSpec, LinearRegression
from raysampler.priors import Flat, HalfNormal, InverseGamma, Normal, StudentT
from raysampler.testing import exact


def _data(seed=0, n=35, p=3):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, p - 1))])
    y = X @ rng.standard_normal(p) + 0.8 * rng.standard_normal(n)
    return X, y


def _shards(X, y):
    return [(X[:10], y[:10]), (X[10:22], y[10:22]), (X[22:], y[22:])]


def _total_potential(model, shards, theta):
    return sum(model.potential(Xi, yi, theta) for Xi, yi in shards) + model.prior().potential(theta)


def _random_points(post, k=8, seed=1):
    """Points spread over the posterior's bulk and tails."""
    rng = np.random.default_rng(seed)
    sd = post.theta_sd()
    return post.theta_mean() + 2.5 * sd * rng.standard_normal((k, len(sd)))


def _assert_potential_is_minus_log_density(model, shards, post):
    theta = _random_points(post)
    U = _total_potential(model, shards, theta)
    logp = post.log_density(theta)
    np.testing.assert_allclose(U - U[0], -(logp - logp[0]), rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("sigma_prior", [InverseGamma(2.0, 1.5), Flat(log=True), Flat()])
def test_flat_coefficients_and_conjugate_or_flat_sigma_prior(sigma_prior):
    X, y = _data()
    model = LinearRegression(coef_prior=Normal(0.0, np.inf), sigma_prior=sigma_prior).bind(DataSpec(3))
    post = exact.linear_regression_posterior(model, _shards(X, y))
    _assert_potential_is_minus_log_density(model, _shards(X, y), post)
    # the classical form: OLS centre, (XᵀX)⁻¹ shape, ν = 2a0 + n − p degrees of freedom
    n, p = X.shape
    ols = np.linalg.lstsq(X, y, rcond=None)[0]
    sse = float(np.sum((y - X @ ols) ** 2))
    a0, b0 = sigma_prior.nig_shape()
    np.testing.assert_allclose(post.mean, ols, rtol=1e-10)
    np.testing.assert_allclose(post.V, np.linalg.inv(X.T @ X), rtol=1e-10)
    assert post.df == pytest.approx(2 * a0 + n - p) and post.b == pytest.approx(b0 + sse / 2)
    if isinstance(sigma_prior, Flat) and sigma_prior.log:  # the textbook case: t_{n−p}(OLS, s²(XᵀX)⁻¹_jj)
        np.testing.assert_allclose(post.beta_scale() ** 2, sse / (n - p) * np.diag(np.linalg.inv(X.T @ X)))


def test_conjugate_normal_inverse_gamma_prior_through_pseudo_rows():
    """β | σ² ~ N(m0, σ²Λ0⁻¹) is p pseudo-rows (X0, y0) with X0ᵀX0 = Λ0, X0ᵀy0 = Λ0 m0 under a flat β prior: the model
    on the augmented data must reproduce the conjugate posterior of the original data."""
    X, y = _data(seed=2)
    p = X.shape[1]
    Lam0 = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 0.5]])
    m0 = np.array([0.5, -1.0, 0.25])
    X0 = np.linalg.cholesky(Lam0).T
    y0 = X0 @ m0
    post = exact.nig_posterior(X.T @ X, X.T @ y, y @ y, len(y), a0=3.0, b0=2.0, prior_mean=m0, prior_precision=Lam0)
    model = LinearRegression(coef_prior=Normal(0.0, np.inf), sigma_prior=InverseGamma(3.0, 2.0)).bind(DataSpec(p))
    _assert_potential_is_minus_log_density(model, _shards(X, y) + [(X0, y0)], post)


def test_reference_functions_agree_with_exact_draws():
    """Means, sds and quantiles of θ = (β, log σ) and of σ against 400 000 direct draws of the NIG law."""
    X, y = _data(seed=3, n=12)  # few rows: heavy-tailed marginals
    post = exact.nig_posterior(X.T @ X, X.T @ y, y @ y, len(y), a0=2.0, b0=1.0)
    rng = np.random.default_rng(4)
    N = 400_000
    s2 = post.b / rng.gamma(post.a, size=N)
    beta = post.mean + np.sqrt(s2)[:, None] * (rng.standard_normal((N, 3)) @ np.linalg.cholesky(post.V).T)
    theta = np.column_stack([beta, 0.5 * np.log(s2)])
    se_mean = theta.std(0) / np.sqrt(N)
    assert np.all(np.abs(theta.mean(0) - post.theta_mean()) < 5 * se_mean)
    np.testing.assert_allclose(theta.std(0), post.theta_sd(), rtol=0.02)
    q = np.array([0.05, 0.25, 0.5, 0.75, 0.95])
    np.testing.assert_allclose(np.quantile(theta, q, axis=0), post.theta_quantile(q), rtol=0.02, atol=0.01)
    sigma = np.sqrt(s2)
    assert abs(sigma.mean() - post.sigma_mean()) < 5 * sigma.std() / np.sqrt(N)
    np.testing.assert_allclose(sigma.std(), post.sigma_sd(), rtol=0.02)
    for j in range(3):
        np.testing.assert_allclose(post.beta_marginal(j).ppf(q), post.theta_quantile(q)[:, j], rtol=1e-12)
    np.testing.assert_allclose(post.sigma2_marginal().mean(), post.b / (post.a - 1), rtol=1e-12)
    # the joint density is normalised: N(β; mean, σ²V) · InvGamma(σ²; a, b) · |dσ²/d log σ|
    t = theta[:5]
    ref = [
        st.multivariate_normal(post.mean, np.exp(2 * r[3]) * post.V).logpdf(r[:3])
        + st.invgamma(post.a, scale=post.b).logpdf(np.exp(2 * r[3]))
        + np.log(2 * np.exp(2 * r[3]))
        for r in t
    ]
    np.testing.assert_allclose(post.log_density(t), ref, rtol=1e-10)


def test_no_closed_form_for_other_priors():
    X, y = _data()
    with pytest.raises(ValueError, match="coef_prior"):
        exact.linear_regression_posterior(LinearRegression(sigma_prior=Flat()).bind(DataSpec(3)), [(X, y)])
    with pytest.raises(ValueError, match="sigma_prior"):
        exact.linear_regression_posterior(
            LinearRegression(coef_prior=Normal(0, np.inf), sigma_prior=HalfNormal(1.0)).bind(DataSpec(3)), [(X, y)]
        )
    with pytest.raises(ValueError, match="noise_sd"):
        exact.linear_regression_posterior(
            LinearRegression(noise_sd=1.0, coef_prior=StudentT(3.0)).bind(DataSpec(3)), [(X, y)]
        )
    with pytest.raises(ValueError, match="improper"):  # flat on σ needs n > p + 1
        exact.nig_posterior(X[:3].T @ X[:3], X[:3].T @ y[:3], y[:3] @ y[:3], 3, a0=-0.5, b0=0.0)
