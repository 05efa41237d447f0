"""The model contract's checks of a fit, per built-in family: `log_likelihood` is the normalised log density of each
row (scipy's), and −Σ_j of it differs from `potential` by a constant; `predict_mean` is E[y]; `predict_draw` inverts
y's distribution function at the given uniforms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from raysampler.models import (
    BinomialRegression,
    Gaussian,
    LinearRegression,
    LogisticRegression,
    MLPClassifier,
    NegativeBinomialRegression,
    PoissonRegression,
    SoftmaxRegression,
)
from raysampler.models.contract import DataSpec, Model

N, P, K = 40, 3, 5
rng = np.random.default_rng(0)
X = np.column_stack([np.ones(N), rng.normal(size=(N, P - 1))])
COUNTS = rng.poisson(2.0, N).astype(float)
U = np.linspace(0.05, 0.95, K)


def _nb(x):
    mu, phi = np.exp(X @ x[:, :-1].T), np.exp(x[:, -1])
    return stats.nbinom(phi, phi / (phi + mu))


# family, y, DataSpec, scipy's predictive distribution at θ (K, d) (None: checked through probabilities)
CASES = {
    "logistic": (LogisticRegression(), COUNTS % 2, DataSpec(P), lambda x: stats.bernoulli(expit(X @ x.T))),
    "poisson": (PoissonRegression(), COUNTS, DataSpec(P), lambda x: stats.poisson(np.exp(X @ x.T))),
    "negbin": (NegativeBinomialRegression(), COUNTS, DataSpec(P), _nb),
    "binomial": (
        BinomialRegression(trials=6),
        np.minimum(COUNTS, 6),
        DataSpec(P),
        lambda x: stats.binom(6, expit(X @ x.T)),
    ),
    "linear": (
        LinearRegression(),
        rng.normal(size=N),
        DataSpec(P),
        lambda x: stats.norm(X @ x[:, :-1].T, np.exp(x[:, -1])),
    ),
    "linear_known_sd": (
        LinearRegression(noise_sd=0.5),
        rng.normal(size=N),
        DataSpec(P),
        lambda x: stats.norm(X @ x.T, 0.5),
    ),
}


def _bound(model: Model, spec: DataSpec) -> tuple[Model, np.ndarray]:
    m = model.bind(spec)
    return m, np.random.default_rng(1).normal(size=(K, m.dim)) * 0.3


@pytest.mark.parametrize("name", sorted(CASES))
def test_scalar_families_match_scipy(name):
    model, y, spec, dist = CASES[name]
    m, x = _bound(model, spec)
    ll = m.log_likelihood(X, y, x)
    law = dist(x)
    logpdf = law.logpmf if hasattr(law, "logpmf") else law.logpdf
    np.testing.assert_allclose(ll, logpdf(y[:, None]), rtol=1e-10)
    gap = -ll.sum(axis=0) - m.potential(X, y, x)
    assert np.ptp(gap) < 1e-8  # the potential drops only θ-free constants
    np.testing.assert_allclose(m.predict_mean(X, x), law.mean(), rtol=1e-10)
    np.testing.assert_allclose(m.predict_draw(X, x, U), law.ppf(U[None, :]), rtol=1e-10)


@pytest.mark.parametrize("model", [SoftmaxRegression(), MLPClassifier(hidden=4)], ids=["softmax", "mlp"])
def test_multiclass_families_give_probabilities_and_label_draws(model):
    y = (COUNTS % 3).astype(np.int64)
    m, x = _bound(model, DataSpec(P, n_classes=3))
    ll = m.log_likelihood(X, y, x)
    Pr = m.predict_mean(X, x)
    assert Pr.shape == (N, K, 3)
    np.testing.assert_allclose(Pr.sum(axis=-1), 1.0)
    np.testing.assert_allclose(ll, np.log(np.take_along_axis(Pr, y[:, None, None], axis=2)[..., 0]), rtol=1e-10)
    assert np.ptp(-ll.sum(axis=0) - m.potential(X, y, x)) < 1e-8
    cum = np.cumsum(Pr, axis=-1)
    np.testing.assert_array_equal(m.predict_draw(X, x, U), (cum < U[None, :, None]).sum(axis=-1))


def test_gaussian_log_likelihood_is_the_multivariate_normal():
    y = rng.normal(size=(N, 2))
    m, x = _bound(Gaussian(noise_scale=0.7), DataSpec(2))
    ll = m.log_likelihood(np.empty((N, 0)), y, x)
    ref = np.stack([stats.multivariate_normal(xk, 0.49 * np.eye(2)).logpdf(y) for xk in x], axis=1)
    np.testing.assert_allclose(ll, ref, rtol=1e-10)


def test_a_model_without_the_optional_methods_says_which_is_missing():
    from raysampler.models.foreign import ForeignModel

    class Bare:
        def __getattr__(self, name):
            if name in ("log_likelihood", "predict_mean", "predict_draw"):
                raise AttributeError(name)
            return lambda *a, **k: None

    with pytest.raises(NotImplementedError, match="log_likelihood"):
        ForeignModel(Bare()).log_likelihood(X, COUNTS, np.zeros((1, P)))
