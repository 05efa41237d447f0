"""Model library: derivatives against finite differences, exact curvature, bounds, posteriors, binding, validation."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_softmax

from raysampler.models import (
    FAMILIES,
    DataSpec,
    ForeignModel,
    Gaussian,
    GaussianPrior,
    LinearRegression,
    LogisticRegression,
    MLPClassifier,
    Model,
    PoissonRegression,
    SoftmaxRegression,
    as_model,
    gaussian_posterior,
    get_model,
    linear_posterior,
)

K = 3


# ----------------------------------------------------------------------------- small problems


def _gaussian(seed=0, full=True):
    rng = np.random.default_rng(seed)
    n, p = 20, 3
    A = rng.standard_normal((p, p))
    cov = A @ A.T + p * np.eye(p)
    model = (Gaussian(prior_scale=2.0, noise_cov=cov, prior_mean=0.5) if full else Gaussian(noise_scale=1.5)).bind(
        DataSpec(n_features=p)
    )
    y = rng.standard_normal((n, p)) + 1.0
    return model, np.empty((n, 0)), y


def _linear(seed=1):
    rng = np.random.default_rng(seed)
    n, p = 30, 4
    X = rng.standard_normal((n, p))
    y = X @ rng.standard_normal(p) + 0.5 * rng.standard_normal(n)
    return LinearRegression(prior_scale=2.0, noise_sd=0.7).bind(DataSpec(n_features=p)), X, y


def _logistic(seed=2):
    rng = np.random.default_rng(seed)
    n, p = 40, 4
    X = np.column_stack([np.ones(n), rng.standard_normal((n, p - 1))])
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ rng.standard_normal(p)))).astype(float)
    return LogisticRegression(prior_scale=1.5).bind(DataSpec(n_features=p)), X, y


def _poisson(seed=3):
    rng = np.random.default_rng(seed)
    n, p = 30, 3
    X = np.column_stack([np.ones(n), 0.5 * rng.standard_normal((n, p - 1))])
    y = rng.poisson(np.exp(X @ np.array([1.0, 0.5, -0.3]))).astype(np.int64)
    return PoissonRegression().bind(DataSpec(n_features=p)), X, y


def _softmax(seed=4):
    rng = np.random.default_rng(seed)
    n, p, C = 30, 3, 4
    X = rng.standard_normal((n, p))
    y = rng.integers(0, C, n)
    return SoftmaxRegression().bind(DataSpec(n_features=p, n_classes=C)), X, y


def _mlp(seed=5, activation="tanh"):
    rng = np.random.default_rng(seed)
    n, p, C = 25, 3, 3
    X = rng.standard_normal((n, p))
    y = rng.integers(0, C, n)
    return MLPClassifier(hidden=4, activation=activation).bind(DataSpec(n_features=p, n_classes=C)), X, y


CASES = {
    "gaussian_full": _gaussian,
    "gaussian_iso": lambda: _gaussian(full=False),
    "linear": _linear,
    "logistic": _logistic,
    "poisson": _poisson,
    "softmax": _softmax,
    "mlp_tanh": _mlp,
    "mlp_sigmoid": lambda: _mlp(activation="sigmoid"),
}
GLMS = ["gaussian_full", "gaussian_iso", "linear", "logistic", "poisson", "softmax"]


@pytest.fixture(params=list(CASES))
def case(request):
    model, X, y = CASES[request.param]()
    rng = np.random.default_rng(100)
    x = 0.5 * rng.standard_normal((K, model.dim))
    return request.param, model, X, y, x


def _fd_step(x):
    return 1e-5 * np.maximum(1.0, np.abs(x))


# ----------------------------------------------------------------------------- derivatives


def test_grad_matches_central_differences(case):
    _, model, X, y, x = case
    d = model.dim
    h = _fd_step(x)  # (K, d)
    E = np.eye(d)[None, :, :] * h[:, :, None]  # (K, d, d): step along each coordinate
    up = model.potential(X, y, (x[:, None, :] + E).reshape(-1, d)).reshape(K, d)
    down = model.potential(X, y, (x[:, None, :] - E).reshape(-1, d)).reshape(K, d)
    fd = (up - down) / (2 * h)
    g = model.grad(X, y, x)
    assert g.shape == (K, d)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(g).max())


def test_hvp_matches_differences_of_grad(case):
    _, model, X, y, x = case
    v = np.random.default_rng(7).standard_normal(x.shape)
    h = 1e-5 * max(1.0, np.abs(x).max())
    fd = (model.grad(X, y, x + h * v) - model.grad(X, y, x - h * v)) / (2 * h)
    Hv = model.hvp(X, y, x, v)
    assert Hv.shape == x.shape
    np.testing.assert_allclose(Hv, fd, rtol=1e-5, atol=1e-6 * np.abs(Hv).max())


def test_hessian_symmetric_and_matches_hvp(case):
    _, model, X, y, x = case
    v = np.random.default_rng(8).standard_normal(x.shape)
    Hv = model.hvp(X, y, x, v)
    for k in range(K):
        H = model.hessian(X, y, x[k])
        assert H.shape == (model.dim, model.dim)
        np.testing.assert_array_equal(H, H.T)
        np.testing.assert_allclose(H @ v[k], Hv[k], rtol=1e-10, atol=1e-10 * np.abs(Hv).max())


def test_potential_and_grad_equals_separate_calls(case):
    _, model, X, y, x = case
    U, g = model.potential_and_grad(X, y, x)
    assert U.shape == (K,) and g.shape == x.shape
    np.testing.assert_allclose(U, model.potential(X, y, x), rtol=1e-12)
    np.testing.assert_allclose(g, model.grad(X, y, x), rtol=1e-12, atol=1e-14 * np.abs(g).max())


class _NoBatchedHessians:
    """A user's model object (not a `Model` subclass) with the contract's methods but no `hessians` of its own."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name == "hessians":
            raise AttributeError(name)
        return getattr(self._model, name)


def test_hessians_at_k_points_equal_hessian_at_each(case):
    """`hessians` (K, d, d) is `hessian` at each point to 1e-12 relative, the model's own and through `as_model`:
    an object without `hessians` gets the contract's loop, one with it keeps its own."""
    _, model, X, y, x = case
    ref = np.stack([model.hessian(X, y, xk) for xk in x])
    for m in (model, as_model(_NoBatchedHessians(model)), ForeignModel(model)):
        H = m.hessians(X, y, x)
        assert H.shape == (K, model.dim, model.dim)
        np.testing.assert_allclose(H, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    assert isinstance(as_model(_NoBatchedHessians(model)), ForeignModel)


def test_hessian_diag_nonnegative(case):
    name, model, X, y, x = case
    diag = model.hessian_diag(X, y, x[0])
    assert diag.shape == (model.dim,)
    assert np.all(diag >= 0)
    np.testing.assert_allclose(model.hessian_diag(X, y, x)[1], model.hessian_diag(X, y, x[1]), rtol=1e-12)
    if name in GLMS:
        np.testing.assert_allclose(diag, np.diag(model.hessian(X, y, x[0])), rtol=1e-10)


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_mlp_hessian_diag_is_gauss_newton_diagonal(activation):
    model, X, y = _mlp(activation=activation)
    x = np.random.default_rng(9).standard_normal(model.dim)
    d = model.dim
    G = model.ggn_vp(X, y, np.broadcast_to(x, (d, d)).copy(), np.eye(d))
    np.testing.assert_allclose(G, G.T, rtol=1e-10, atol=1e-12 * np.abs(G).max())
    assert np.linalg.eigvalsh(0.5 * (G + G.T)).min() > -1e-10 * np.abs(G).max()
    np.testing.assert_allclose(model.hessian_diag(X, y, x), np.diag(G), rtol=1e-10, atol=1e-14)
    # Direct check of the Gauss-Newton matrix: Jacobian of the logits by central differences.
    h = 1e-6
    P = _mlp_probs(model, X, x)
    J = np.stack(
        [(_mlp_logits(model, X, x + h * e) - _mlp_logits(model, X, x - h * e)) / (2 * h) for e in np.eye(d)], -1
    )
    G_direct = sum(J[j].T @ (np.diag(P[j]) - np.outer(P[j], P[j])) @ J[j] for j in range(X.shape[0]))
    np.testing.assert_allclose(G, G_direct, rtol=1e-6, atol=1e-7 * np.abs(G).max())


# ----------------------------------------------------------------------------- values against direct formulas


def _mlp_logits(model, X, theta):
    p, H, C = model.n_features, model.hidden, model.n_classes
    W1 = theta[: p * H].reshape(p, H)
    b1 = theta[p * H : p * H + H]
    W2 = theta[p * H + H : p * H + H + H * C].reshape(H, C)
    b2 = theta[p * H + H + H * C :]
    act = np.tanh if model.activation == "tanh" else (lambda a: 1 / (1 + np.exp(-a)))
    return act(X @ W1 + b1) @ W2 + b2


def _mlp_probs(model, X, theta):
    return np.exp(log_softmax(_mlp_logits(model, X, theta), axis=1))


def test_potentials_match_direct_formulas():
    model, X, y = _gaussian()
    x = np.random.default_rng(0).standard_normal((K, model.dim))
    P = np.linalg.inv(np.array(model.noise_cov))
    direct = [0.5 * sum((yj - t) @ P @ (yj - t) for yj in y) for t in x]
    np.testing.assert_allclose(model.potential(X, y, x), direct, rtol=1e-12)

    model, X, y = _linear()
    x = np.random.default_rng(0).standard_normal((K, model.dim))
    direct = [np.sum((y - X @ t) ** 2) / (2 * model.noise_sd**2) for t in x]
    np.testing.assert_allclose(model.potential(X, y, x), direct, rtol=1e-12)

    model, X, y = _logistic()
    x = np.random.default_rng(0).standard_normal((K, model.dim))
    direct = [-np.sum(y * np.log(1 / (1 + np.exp(-X @ t))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-X @ t)))) for t in x]
    np.testing.assert_allclose(model.potential(X, y, x), direct, rtol=1e-10)

    model, X, y = _poisson()
    x = np.random.default_rng(0).standard_normal((K, model.dim))
    direct = [np.sum(np.exp(X @ t) - y * (X @ t)) for t in x]
    np.testing.assert_allclose(model.potential(X, y, x), direct, rtol=1e-12)

    model, X, y = _softmax()
    x = np.random.default_rng(0).standard_normal((K, model.dim))
    direct = [
        -log_softmax(X @ t.reshape(model.n_features, model.n_classes), axis=1)[np.arange(len(y)), y].sum() for t in x
    ]
    np.testing.assert_allclose(model.potential(X, y, x), direct, rtol=1e-12)

    for act in ("tanh", "sigmoid"):
        model, X, y = _mlp(activation=act)
        x = np.random.default_rng(0).standard_normal((K, model.dim))
        direct = [-log_softmax(_mlp_logits(model, X, t), axis=1)[np.arange(len(y)), y].sum() for t in x]
        np.testing.assert_allclose(model.potential(X, y, x), direct, rtol=1e-12)


def test_logistic_is_stable_for_huge_margins():
    model = LogisticRegression().bind(DataSpec(n_features=1))
    X = np.array([[1.0], [-1.0]])
    y = np.array([1.0, 1.0])
    x = np.array([[800.0], [-800.0]])
    U, g = model.potential_and_grad(X, y, x)
    np.testing.assert_allclose(U, [800.0, 800.0])
    np.testing.assert_allclose(g, [[1.0], [-1.0]])
    np.testing.assert_allclose(model.potential(X, y, x), U)
    np.testing.assert_allclose(model.grad(X, y, x), g)
    assert np.all(np.isfinite(model.hvp(X, y, x, np.ones_like(x))))


def test_softmax_and_mlp_stable_for_huge_logits():
    model, X, y = _softmax()
    x = 1e3 * np.random.default_rng(1).standard_normal((K, model.dim))
    U, g = model.potential_and_grad(X, y, x)
    assert np.all(np.isfinite(U)) and np.all(np.isfinite(g))
    model, X, y = _mlp()
    x = 1e3 * np.random.default_rng(1).standard_normal((K, model.dim))
    U, g = model.potential_and_grad(X, y, x)
    assert np.all(np.isfinite(U)) and np.all(np.isfinite(g))


def test_softmax_packing_is_row_major():
    model, X, y = _softmax()
    W = np.random.default_rng(2).standard_normal((model.n_features, model.n_classes))
    Z = model._logits(X, W.ravel()[None, :])[:, 0, :]
    np.testing.assert_allclose(Z, X @ W)
    names = model.param_names()
    assert len(names) == model.dim and names[0] == "w[0,0]" and names[1] == "w[0,1]"
    assert names[model.n_classes] == "w[1,0]"


def test_mlp_param_names_follow_packing():
    model, _, _ = _mlp()
    names = model.param_names()
    p, H, C = model.n_features, model.hidden, model.n_classes
    assert len(names) == model.dim == p * H + H + H * C + C
    assert names[0] == "W1[0,0]" and names[1] == "W1[0,1]" and names[p * H] == "b1[0]"
    assert names[p * H + H] == "W2[0,0]" and names[p * H + H + 1] == "W2[0,1]" and names[-1] == f"b2[{C - 1}]"


# ----------------------------------------------------------------------------- smoothness


@pytest.mark.parametrize("name", ["linear", "logistic", "softmax", "gaussian_full", "gaussian_iso"])
def test_smoothness_bounds_the_hessian(name):
    model, X, y = CASES[name]()
    M = model.smoothness(X, y)
    rng = np.random.default_rng(11)
    points = [np.zeros(model.dim)] + [s * rng.standard_normal(model.dim) for s in (0.3, 1.0, 3.0)]
    lams = [np.linalg.eigvalsh(model.hessian(X, y, t))[-1] for t in points]
    assert max(lams) <= M * (1 + 1e-10)
    if name in ("linear", "gaussian_full", "gaussian_iso"):  # constant Hessian: the bound is exact
        np.testing.assert_allclose(M, lams[0], rtol=1e-10)
    else:  # σ'(0) = 1/4 and, for two classes at θ = 0, ‖diag(p) − ppᵀ‖ = 1/2: attained at θ = 0 in these cases
        assert lams[0] <= M


def test_softmax_bound_attained_for_two_classes():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((20, 3))
    y = rng.integers(0, 2, 20)
    model = SoftmaxRegression().bind(DataSpec(n_features=3, n_classes=2))
    lam0 = np.linalg.eigvalsh(model.hessian(X, y, np.zeros(model.dim)))[-1]
    np.testing.assert_allclose(model.smoothness(X, y), lam0, rtol=1e-10)


def test_poisson_smoothness_dominates_reference_curvature():
    model, X, y = _poisson()
    M = model.smoothness(X, y)
    H0 = np.linalg.eigvalsh(model.hessian(X, y, np.zeros(model.dim)))[-1]
    H_true = np.linalg.eigvalsh(model.hessian(X, y, np.array([1.0, 0.5, -0.3])))[-1]
    assert model.smoothness_safety * H0 * (1 - 1e-12) <= M
    assert H_true <= M


def test_mlp_smoothness_is_positive_and_deterministic():
    model, X, y = _mlp()
    M = model.smoothness(X, y)
    assert np.isfinite(M) and M > 0
    assert model.smoothness(X, y) == M
    # at least the safety factor times the Gauss-Newton curvature at θ = 0
    d = model.dim
    G0 = model.ggn_vp(X, y, np.zeros((d, d)), np.eye(d))
    assert model.smoothness_safety * np.linalg.eigvalsh(0.5 * (G0 + G0.T))[-1] * (1 - 1e-6) <= M


# ----------------------------------------------------------------------------- exact posteriors


def _check_posterior(model, shards, mean, cov):
    """The mode solves ∇(ΣU_i + prior) = 0 and the precision is ΣH_i + diag(prior precision)."""
    prior = model.prior()
    grad = sum(model.grad(X, y, mean[None, :])[0] for X, y in shards) + prior.grad(mean)
    scale = sum(np.abs(model.grad(X, y, np.zeros((1, model.dim)))).max() for X, y in shards) + 1.0
    assert np.abs(grad).max() <= 1e-10 * scale
    Q = sum(model.hessian(X, y, mean) for X, y in shards) + np.diag(prior.precision)
    np.testing.assert_allclose(cov @ Q, np.eye(model.dim), atol=1e-10)


def test_linear_posterior():
    model, X, y = _linear()
    mean, cov = linear_posterior(model, X, y)
    _check_posterior(model, [(X, y)], mean, cov)
    s2, tau2 = model.noise_sd**2, model.prior_scale**2
    cov_direct = np.linalg.inv(X.T @ X / s2 + np.eye(model.dim) / tau2)
    np.testing.assert_allclose(cov, cov_direct, rtol=1e-10)
    np.testing.assert_allclose(mean, cov_direct @ (X.T @ y / s2), rtol=1e-10)
    shards = [(X[:10], y[:10]), (X[10:], y[10:])]
    m2, c2 = model.posterior(shards)
    np.testing.assert_allclose(m2, mean, rtol=1e-12)
    np.testing.assert_allclose(c2, cov, rtol=1e-12)


@pytest.mark.parametrize("full", [True, False])
def test_gaussian_posterior(full):
    model, X, y = _gaussian(full=full)
    shards = [(X[:7], y[:7]), (X[7:], y[7:])]
    mean, cov = model.posterior(shards)
    _check_posterior(model, shards, mean, cov)
    S1 = np.array(model.noise_cov) if full else model.noise_scale**2 * np.eye(model.dim)
    S0 = model.prior_scale**2 * np.eye(model.dim)
    m0 = model.prior().mean
    n = len(y)
    cov_direct = np.linalg.inv(np.linalg.inv(S0) + n * np.linalg.inv(S1))
    mean_direct = cov_direct @ (np.linalg.inv(S0) @ m0 + np.linalg.inv(S1) @ y.sum(axis=0))
    np.testing.assert_allclose(cov, cov_direct, rtol=1e-10)
    np.testing.assert_allclose(mean, mean_direct, rtol=1e-10)
    m2, c2 = gaussian_posterior(model, y)
    np.testing.assert_allclose(m2, mean, rtol=1e-12)
    np.testing.assert_allclose(c2, cov, rtol=1e-12)


# ----------------------------------------------------------------------------- binding, prior, registry


def test_unbound_dim_raises_and_bind_sets_dim():
    for cls in (Gaussian, LinearRegression, LogisticRegression, PoissonRegression, SoftmaxRegression, MLPClassifier):
        with pytest.raises(ValueError, match="bind"):
            cls().dim  # noqa: B018
    assert LogisticRegression(prior_scale=1.0).bind(DataSpec(n_features=5)).dim == 5
    assert SoftmaxRegression().bind(DataSpec(n_features=5, n_classes=3)).dim == 15
    assert MLPClassifier().bind(DataSpec(n_features=64, n_classes=10)).dim == 64 * 16 + 16 + 16 * 10 + 10
    assert Gaussian(noise_cov=np.eye(2)).dim == 2  # noise_cov fixes d
    with pytest.raises(ValueError, match="n_classes"):
        SoftmaxRegression().bind(DataSpec(n_features=5))
    with pytest.raises(ValueError, match="n_classes"):
        MLPClassifier().bind(DataSpec(n_features=5))
    with pytest.raises(ValueError, match="noise_cov"):
        Gaussian(noise_cov=np.eye(2)).bind(DataSpec(n_features=3))
    m = LogisticRegression(prior_scale=2.0)
    assert m.bind(DataSpec(n_features=3)) == m.bind(DataSpec(n_features=3))
    assert hash(Gaussian(noise_cov=np.eye(2))) == hash(Gaussian(noise_cov=[[1, 0], [0, 1]]))


def test_prior(case):
    _, model, _, _, _ = case
    prior = model.prior()
    assert isinstance(prior, GaussianPrior)
    assert prior.precision.shape == (model.dim,)
    np.testing.assert_allclose(prior.precision, 1.0 / model.prior_scale**2)
    expected_mean = getattr(model, "prior_mean", 0.0)
    np.testing.assert_allclose(prior.mean, expected_mean)
    assert len(model.param_names()) == model.dim


def test_registry():
    assert set(FAMILIES) == {
        "gaussian",
        "linear_regression",
        "logistic_regression",
        "poisson_regression",
        "softmax_regression",
        "mlp_classifier",
        "binomial_regression",
        "negative_binomial_regression",
        "lognormal_regression",
        "student_t_regression",
        "gamma_regression",
        "beta_regression",
        "weibull_regression",
        "exponential_regression",
        "zero_inflated_poisson_regression",
        "zero_inflated_negative_binomial_regression",
        "cumulative_regression",
        "cumulative_probit_regression",
        "hurdle_poisson_regression",
        "hurdle_negative_binomial_regression",
    }
    for family, cls in FAMILIES.items():
        model = get_model(family, prior_scale=2.0)
        assert isinstance(model, cls) and isinstance(model, Model) and model.prior_scale == 2.0
        assert cls.name == family
    assert get_model("mlp_classifier", hidden=8).hidden == 8
    with pytest.raises(ValueError, match="'nope'.*logistic_regression"):
        get_model("nope")
    with pytest.raises(ValueError, match="hiden"):
        get_model("mlp_classifier", hiden=8)


def test_models_are_frozen():
    m = LogisticRegression()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.prior_scale = 3.0


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs_cls", "argname"),
    [
        ((LogisticRegression, {"prior_scale": 0.0}), "prior_scale"),
        ((LogisticRegression, {"prior_scale": -1.0}), "prior_scale"),
        ((LogisticRegression, {"prior_scale": float("nan")}), "prior_scale"),
        ((LinearRegression, {"noise_sd": 0.0}), "noise_sd"),
        ((Gaussian, {"noise_scale": -2.0}), "noise_scale"),
        ((Gaussian, {"noise_cov": [[1.0, 2.0], [2.0, 1.0]]}), "noise_cov"),  # not positive definite
        ((Gaussian, {"noise_cov": [[1.0, 0.1], [0.0, 1.0]]}), "noise_cov"),  # not symmetric
        ((Gaussian, {"noise_cov": np.eye(2), "noise_scale": 2.0}), "noise_cov"),
        ((Gaussian, {"prior_mean": [[0.0]]}), "prior_mean"),
        ((PoissonRegression, {"smoothness_safety": 0.0}), "smoothness_safety"),
        ((MLPClassifier, {"hidden": 0}), "hidden"),
        ((MLPClassifier, {"hidden": 2.5}), "hidden"),
        ((MLPClassifier, {"activation": "relu6"}), "activation"),
        ((MLPClassifier, {"prior_scale": 0}), "prior_scale"),
        ((SoftmaxRegression, {"n_classes": 1}), "n_classes"),
        ((LogisticRegression, {"n_features": 0}), "n_features"),
    ],
)
def test_constructor_errors_name_the_argument(kwargs_cls, argname):
    cls, kwargs = kwargs_cls
    with pytest.raises(ValueError, match=argname):
        cls(**kwargs)


def _bad_data(name):
    model, X, y = CASES[name]()
    Xn = X.copy()
    if Xn.size:
        Xn[0, 0] = np.nan
    bad = {
        "X not 2-D": (X.ravel(), y),
        "rows mismatch": (X[:-1], y),
        "y wrong ndim": (X, y[:, None] if y.ndim == 1 else y.ravel()),
        "y has inf": (X, np.where(np.arange(len(y)).reshape((-1,) + (1,) * (y.ndim - 1)) == 0, np.inf, y)),
    }
    if Xn.size:
        bad["X has NaN"] = (Xn, y)
    if name not in ("gaussian_full", "gaussian_iso"):
        bad["wrong features"] = (np.hstack([X, X[:, :1]]), y)
    else:
        bad["wrong features"] = (X, np.hstack([y, y[:, :1]]))
    yl = y.astype(float).copy()
    if name == "logistic":
        yl[0] = 2.0
        bad["label not 0/1"] = (X, yl)
    elif name == "poisson":
        yl[0] = -1.0
        bad["negative count"] = (X, yl)
        y2 = y.astype(float).copy()
        y2[0] = 1.5
        bad["non-integer count"] = (X, y2)
    elif name in ("softmax", "mlp_tanh"):
        yl[0] = model.n_classes
        bad["label out of range"] = (X, yl)
        y2 = y.astype(float).copy()
        y2[0] = -1
        bad["negative label"] = (X, y2)
        y3 = y.astype(float).copy()
        y3[0] = 0.5
        bad["non-integer label"] = (X, y3)
    return model, X, y, bad


@pytest.mark.parametrize("name", list(CASES))
def test_validate_errors_name_the_argument(name):
    model, X, y, bad = _bad_data(name)
    model.validate(X, y, argname="shards[2]")  # good data passes
    for what, (Xb, yb) in bad.items():
        with pytest.raises(ValueError, match=r"shards\[2\]"):
            model.validate(Xb, yb, argname="shards[2]")
            pytest.fail(f"{name}: {what} not rejected")


def test_gaussian_vector_prior_mean():
    model = Gaussian(prior_mean=[1.0, -2.0], noise_scale=0.5)
    assert model.dim == 2 and model.prior_mean == (1.0, -2.0)
    np.testing.assert_allclose(model.prior().mean, [1.0, -2.0])
    y = np.random.default_rng(6).standard_normal((5, 2))
    _check_posterior(model, [(None, y)], *model.posterior([(None, y)]))
    with pytest.raises(ValueError, match="prior_mean"):
        Gaussian(prior_mean=[1.0, 2.0]).bind(DataSpec(n_features=3))


def test_gaussian_accepts_missing_or_any_X():
    model, X, y = _gaussian()
    model.validate(None, y)
    model.validate(np.asarray(None), y)
    model.validate(np.zeros((len(y), 5)), y)
    x = np.zeros((K, model.dim))
    np.testing.assert_allclose(model.potential(None, y, x), model.potential(X, y, x))


class _OnlyTheContract:
    """A user's model object (not a `Model` subclass) with exactly the members of MODEL_METHODS and nothing else."""

    def __init__(self, model):
        self._model = model

    @property
    def dim(self):
        return self._model.dim

    def prior(self):
        return self._model.prior()

    def potential(self, X, y, x):
        return self._model.potential(X, y, x)

    def grad(self, X, y, x):
        return self._model.grad(X, y, x)

    def hvp(self, X, y, x, v):
        return self._model.hvp(X, y, x, v)

    def smoothness(self, X, y):
        return self._model.smoothness(X, y)


def test_the_minimal_contract_is_one_list_and_an_object_with_it_is_a_model():
    """MODEL_METHODS is what a subclass must define (Model's abstract members) and all a foreign object needs: the
    rest (bind, names, validation, potential_and_grad, hessian, its diagonal) are Model's defaults."""
    from raysampler.models.contract import MODEL_METHODS

    assert set(MODEL_METHODS) == Model.__abstractmethods__
    table = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    assert set(re.findall(r"^\| `(\w+)[`(].*?\| yes \|", table, re.M)) == set(MODEL_METHODS), "models.md's table"
    model, X, y = _logistic()
    wrapped = as_model(_OnlyTheContract(model))
    assert isinstance(wrapped, ForeignModel) and wrapped.bind(DataSpec(n_features=4)) is wrapped
    x = np.random.default_rng(4).standard_normal((K, model.dim))
    U, g = wrapped.potential_and_grad(X, y, x)
    np.testing.assert_allclose(U, model.potential(X, y, x), rtol=1e-12)
    np.testing.assert_allclose(g, model.grad(X, y, x), rtol=1e-12)
    H = model.hessian(X, y, x[0])
    np.testing.assert_allclose(wrapped.hessian(X, y, x[0]), H, rtol=1e-10, atol=1e-12 * np.abs(H).max())
    np.testing.assert_allclose(wrapped.hessian_diag(X, y, x[0]), np.clip(np.diag(H), 0, None), rtol=1e-10)
    assert wrapped.param_names() == [f"theta[{j}]" for j in range(model.dim)]
    wrapped.validate(X, y)  # the default accepts any shard
    with pytest.raises(TypeError, match=r"missing \['hvp'\]"):
        as_model(type("NoHvp", (), {"dim": 2, **{k: print for k in MODEL_METHODS if k not in ("dim", "hvp")}})())
