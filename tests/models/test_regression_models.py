"""The regression models with the new priors and inputs: derivatives of U_i and of the whole posterior potential
(prior and log-Jacobian included) against finite differences, values against scipy.stats, curvature, per-row inputs
(offset, trials) as columns or arrays, validation and improper-posterior errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.stats as st
from scipy.special import expit

from raysampler.errors import ArgumentError
from raysampler.models import (
    BetaRegression,
    BinomialRegression,
    CumulativeProbitRegression,
    CumulativeRegression,
    DataSpec,
    ExponentialRegression,
    GammaRegression,
    GaussianPrior,
    HurdleNegativeBinomialRegression,
    HurdlePoissonRegression,
    LinearRegression,
    LogisticRegression,
    LogNormalRegression,
    MLPClassifier,
    Model,
    NegativeBinomialRegression,
    PoissonRegression,
    RowValues,
    SoftmaxRegression,
    StudentTRegression,
    WeibullRegression,
    ZeroInflatedNegativeBinomialRegression,
    ZeroInflatedPoissonRegression,
    get_model,
    linear_posterior,
)
from raysampler.priors import (
    BetaPrior,
    Exponential,
    Flat,
    Gamma,
    HalfCauchy,
    HalfNormal,
    HalfStudentT,
    InverseGamma,
    Normal,
    Prior,
    StudentT,
)
from raysampler.reparam import Preconditioner, WhitenedModel, WithPriorShare

K = 3
COLS = ("(Intercept)", "x1", "x2", "x3")


def _design(rng, n, p=4):
    return np.column_stack([np.ones(n), 0.5 * rng.standard_normal((n, p - 1))])


def _linear(coef_prior=None, **kw):
    rng = np.random.default_rng(1)
    X = _design(rng, 40)
    y = X @ np.array([1.0, -0.5, 0.3, 0.8]) + 0.6 * rng.standard_normal(40)
    model = LinearRegression(coef_prior=coef_prior, **kw).bind(DataSpec(4, n_rows=40, columns=COLS))
    return model, X, y


def _linear_row_sd(kind="column"):
    """Known per-row noise sds (a meta-analysis): the column "se" between the features, or an array over the rows."""
    rng = np.random.default_rng(9)
    n = 40
    X = _design(rng, n)
    se = rng.uniform(0.2, 1.5, n)
    y = X @ np.array([1.0, -0.5, 0.3, 0.8]) + se * rng.standard_normal(n)
    if kind == "column":
        cols = COLS[:1] + ("se",) + COLS[1:]
        model = LinearRegression(coef_prior=Normal(0, [5.0, 1.0, 1.0, 2.0]), noise_sd="se")
        return model.bind(DataSpec(5, n_rows=n, columns=cols)), np.column_stack([X[:, :1], se, X[:, 1:]]), y
    model = LinearRegression(coef_prior=StudentT(3.0, 0.0, 2.0), noise_sd=se).bind(DataSpec(4, n_rows=n, columns=COLS))
    return (model, *model.shard_data(X, y, np.arange(n)))


def _poisson_offset(kind="column"):
    rng = np.random.default_rng(3)
    n = 50
    X = _design(rng, n)
    expo = np.log(rng.uniform(0.5, 3.0, n))
    y = rng.poisson(np.exp(X @ np.array([0.5, 0.4, -0.3, 0.2]) + expo)).astype(float)
    if kind == "column":  # the offset is a column of X, between features
        Xo = np.column_stack([X[:, :2], expo, X[:, 2:]])
        cols = COLS[:2] + ("log_exposure",) + COLS[2:]
        model = PoissonRegression(coef_prior=Normal(0, [5.0, 1.0, 1.0, 2.0]), offset="log_exposure")
        return model.bind(DataSpec(5, n_rows=n, columns=cols)), Xo, y
    model = PoissonRegression(coef_prior=StudentT(3.0, 0.0, 2.0), offset=expo).bind(DataSpec(4, n_rows=n, columns=COLS))
    Xs, ys = model.shard_data(X, y, np.arange(n))
    return model, Xs, ys


def _binomial(kind="column"):
    rng = np.random.default_rng(4)
    n = 45
    X = _design(rng, n)
    m = rng.integers(1, 12, n).astype(float)
    y = rng.binomial(m.astype(int), expit(X @ np.array([0.2, 0.8, -0.6, 0.3]))).astype(float)
    if kind == "column":
        cols = ("trials",) + COLS
        model = BinomialRegression(coef_prior=Normal(0, 2.0), trials="trials")
        return model.bind(DataSpec(5, n_rows=n, columns=cols)), np.column_stack([m, X]), y
    if kind == "int":
        y = np.minimum(y, 3)
        return BinomialRegression(trials=3).bind(DataSpec(4, n_rows=n, columns=COLS)), X, y
    model = BinomialRegression(coef_prior=StudentT(5.0), trials=m).bind(DataSpec(4, n_rows=n))
    return (model, *model.shard_data(X, y, np.arange(n)))


def _negbin(phi_prior=None):
    rng = np.random.default_rng(5)
    n = 60
    X = _design(rng, n)
    expo = np.log(rng.uniform(0.5, 2.0, n))
    mu = np.exp(X @ np.array([1.0, 0.5, -0.4, 0.3]) + expo)
    phi = 3.0
    y = rng.negative_binomial(phi, phi / (phi + mu)).astype(float)
    model = NegativeBinomialRegression(coef_prior=Normal(0, 5.0), offset="expo", phi_prior=phi_prior)
    return model.bind(DataSpec(5, n_rows=n, columns=COLS + ("expo",))), np.column_stack([X, expo]), y


def _lognormal(**kw):
    rng = np.random.default_rng(10)
    X = _design(rng, 40)
    y = np.exp(X @ np.array([1.0, -0.5, 0.3, 0.8]) + 0.6 * rng.standard_normal(40))
    return LogNormalRegression(**kw).bind(DataSpec(4, n_rows=40, columns=COLS)), X, y


def _student(**kw):
    rng = np.random.default_rng(11)
    X = _design(rng, 40)
    y = X @ np.array([1.0, -0.5, 0.3, 0.8]) + 0.6 * rng.standard_t(3.0, 40)
    y[3] += 6.0  # an outlier: a row whose curvature in η is negative
    return StudentTRegression(**kw).bind(DataSpec(4, n_rows=40, columns=COLS)), X, y


def _gamma(**kw):
    rng = np.random.default_rng(12)
    X = _design(rng, 40)
    y = rng.gamma(2.5, np.exp(X @ np.array([0.5, -0.5, 0.3, 0.8])) / 2.5)
    return GammaRegression(**kw).bind(DataSpec(4, n_rows=40, columns=COLS)), X, y


def _beta(**kw):
    rng = np.random.default_rng(13)
    X = _design(rng, 40)
    mu = expit(X @ np.array([0.2, -0.5, 0.3, 0.8]))
    return BetaRegression(**kw).bind(DataSpec(4, n_rows=40, columns=COLS)), X, rng.beta(6.0 * mu, 6.0 * (1 - mu))


def _survival(cls, kind="column", **kw):
    """Weibull or exponential times, every third row right-censored; the indicator as a column or an array."""
    rng = np.random.default_rng(14)
    X = _design(rng, 42)
    y = np.exp(X @ np.array([0.5, -0.5, 0.3, 0.8])) * rng.weibull(1.5, 42)
    cens = (np.arange(42) % 3 == 0).astype(float)
    if kind == "array":
        model = cls(censored=cens, **kw).bind(DataSpec(4, n_rows=42, columns=COLS))
        return model, model.shard_data(X, y, np.arange(42))[0], y
    model = cls(censored="cens", **kw).bind(DataSpec(5, n_rows=42, columns=COLS + ("cens",)))
    return model, np.column_stack([X, cens]), y


def _zip(cls=ZeroInflatedPoissonRegression, **kw):
    """Zero-inflated counts (a third structural zeros) with an offset column."""
    rng = np.random.default_rng(15)
    X = _design(rng, 40)
    expo = np.log(rng.uniform(0.5, 2.0, 40))
    y = np.where(rng.random(40) < 0.3, 0, rng.poisson(np.exp(X @ np.array([0.5, -0.5, 0.3, 0.8]) + expo)))
    model = cls(offset="expo", **kw).bind(DataSpec(5, n_rows=40, columns=COLS + ("expo",)))
    return model, np.column_stack([X, expo]), y.astype(float)


def _cumulative(K=4, cls=CumulativeRegression, **kw):
    """Ordered categories 1..K of a logistic latent variable (no intercept column)."""
    rng = np.random.default_rng(16)
    X = 0.8 * rng.standard_normal((50, 3))
    z = X @ np.array([1.0, -0.5, 0.3]) + rng.logistic(size=50)
    y = 1.0 + np.digitize(z, np.linspace(-1.0, 1.0, K - 1))
    return cls(n_categories=K, **kw).bind(DataSpec(3, n_rows=50, columns=COLS[1:])), X, y


def _softmax():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((30, 3))
    y = rng.integers(0, 3, 30)
    return SoftmaxRegression(coef_prior=StudentT(4.0, 0.0, 2.0)).bind(DataSpec(3, n_classes=3)), X, y


def _mlp():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((20, 2))
    y = rng.integers(0, 3, 20)
    d = 2 * 3 + 3 + 3 * 3 + 3
    spec = DataSpec(2, n_classes=3, columns=("u", "v"))
    return MLPClassifier(hidden=3, coef_prior=StudentT(3.0, scale=np.linspace(0.5, 2.0, d))).bind(spec), X, y


CASES = {
    "linear_known_per_coef": lambda: _linear(Normal([0.0, 1.0, 0.0, 0.0], [10.0, 1.0, 2.0, 0.5]), noise_sd=0.7),
    "linear_known_student_t": lambda: _linear(StudentT(3.0, 0.0, 2.5), noise_sd=0.7),
    "linear_halfnormal": lambda: _linear(Normal(0.0, [100.0, 10.0, 10.0, 10.0])),
    "linear_student_t_halfcauchy": lambda: _linear(StudentT(4.0), sigma_prior=HalfCauchy(2.5)),
    "linear_flat_invgamma": lambda: _linear(Normal(0.0, np.inf), sigma_prior=InverseGamma(2.0, 1.0)),
    "linear_flat_flat": lambda: _linear(Normal(0.0, np.inf), sigma_prior=Flat()),
    "linear_half_t": lambda: _linear(sigma_prior=HalfStudentT(3.0, 1.0)),
    "linear_exponential": lambda: _linear(sigma_prior=Exponential(1.0)),
    "linear_row_sd_column": lambda: _linear_row_sd("column"),
    "linear_row_sd_array": lambda: _linear_row_sd("array"),
    "logistic_student_t": lambda: (
        LogisticRegression(coef_prior=StudentT(3.0, 0.0, [5.0, 2.5, 2.5, 2.5])).bind(DataSpec(4)),
        *_binomial("column")[1:2],
        None,
    ),
    "poisson_offset_column": lambda: _poisson_offset("column"),
    "poisson_offset_array": lambda: _poisson_offset("array"),
    "binomial_trials_column": lambda: _binomial("column"),
    "binomial_trials_array": lambda: _binomial("array"),
    "binomial_trials_int": lambda: _binomial("int"),
    "negbin_halfcauchy": lambda: _negbin(),
    "negbin_exponential": lambda: _negbin(Exponential(0.5)),
    "lognormal_halfcauchy": lambda: _lognormal(sigma_prior=HalfCauchy(2.5)),
    "lognormal_known": lambda: _lognormal(noise_sd=0.6, coef_prior=StudentT(3.0)),
    "student_defaults": _student,
    "student_student_t_priors": lambda: _student(
        coef_prior=StudentT(3.0), sigma_prior=HalfCauchy(2.5), nu_prior=Gamma(3.0, 0.2)
    ),
    "gamma_defaults": _gamma,
    "gamma_halfnormal_shape": lambda: _gamma(shape_prior=HalfNormal(5.0), coef_prior=Normal(0.0, 2.5)),
    "beta_defaults": _beta,
    "beta_exponential_phi": lambda: _beta(phi_prior=Exponential(0.1)),
    "weibull_censored_column": lambda: _survival(WeibullRegression),
    "weibull_censored_array": lambda: _survival(WeibullRegression, "array", shape_prior=HalfNormal(2.0)),
    "exponential_censored_column": lambda: _survival(ExponentialRegression),
    "zip_offset_defaults": _zip,
    "zip_beta_prior": lambda: _zip(zi_prior=BetaPrior(2.0, 5.0), coef_prior=StudentT(3.0)),
    "cumulative_four": _cumulative,
    "cumulative_two_priors": lambda: _cumulative(2, threshold_prior=Normal(0.0, 3.0), coef_prior=StudentT(3.0)),
    "cumulative_five_gap_prior": lambda: _cumulative(5, gap_prior=Exponential(1.0)),
    "cumulative_probit_four": lambda: _cumulative(4, CumulativeProbitRegression),
    "zinb_offset_defaults": lambda: _zip(ZeroInflatedNegativeBinomialRegression),
    "zinb_priors": lambda: _zip(
        ZeroInflatedNegativeBinomialRegression, phi_prior=Exponential(0.5), zi_prior=BetaPrior(2, 2)
    ),
    "hurdle_poisson_offset_defaults": lambda: _zip(HurdlePoissonRegression),
    "hurdle_poisson_beta_prior": lambda: _zip(HurdlePoissonRegression, hu_prior=BetaPrior(2.0, 5.0)),
    "hurdle_nb_offset_defaults": lambda: _zip(HurdleNegativeBinomialRegression),
    "hurdle_nb_priors": lambda: _zip(
        HurdleNegativeBinomialRegression, phi_prior=Exponential(0.5), hu_prior=BetaPrior(2, 2)
    ),
    "softmax_student_t": _softmax,
    "mlp_student_t": _mlp,
}


def _case(name):
    model, X, y = CASES[name]()
    if name == "logistic_student_t":  # logistic labels from the binomial data: success in the first trial
        rng = np.random.default_rng(8)
        X = _design(rng, 40)
        y = (rng.random(40) < expit(X @ np.array([0.3, 1.0, -1.0, 0.5]))).astype(float)
    return model, X, y


@pytest.fixture(params=list(CASES))
def case(request):
    model, X, y = _case(request.param)
    model.validate(X, y)
    rng = np.random.default_rng(100)
    x = 0.4 * rng.standard_normal((K, model.dim))
    return request.param, model, X, y, x


def _fd_grad(f, x, h=1e-6):
    d = x.shape[1]
    E = np.eye(d)
    return np.stack([(f(x + h * E[j]) - f(x - h * E[j])) / (2 * h) for j in range(d)], axis=1)


def test_derivatives_of_u_and_of_the_posterior_potential(case):
    """∇U_i, ∇²U_i v, and the same for U_i + prior (log-Jacobian of log σ / log φ included), by central differences."""
    _, model, X, y, x = case
    prior = model.prior()
    total = (lambda z: model.potential(X, y, z)), (lambda z: model.potential(X, y, z) + prior.potential(z))
    grads = (lambda z: model.grad(X, y, z)), (lambda z: model.grad(X, y, z) + prior.grad(z))
    hvps = (lambda z, v: model.hvp(X, y, z, v)), (lambda z, v: model.hvp(X, y, z, v) + prior.hvp(z, v))
    v = np.random.default_rng(7).standard_normal(x.shape)
    h = 1e-6
    for f, g, hv in zip(total, grads, hvps):
        G = g(x)
        assert G.shape == x.shape
        np.testing.assert_allclose(G, _fd_grad(f, x), rtol=1e-5, atol=1e-6 * max(1.0, np.abs(G).max()))
        Hv = hv(x, v)
        fd = (g(x + h * v) - g(x - h * v)) / (2 * h)
        np.testing.assert_allclose(Hv, fd, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(Hv).max()))


def test_hessian_hessian_diag_and_potential_and_grad_agree(case):
    name, model, X, y, x = case
    U, g = model.potential_and_grad(X, y, x)
    np.testing.assert_allclose(U, model.potential(X, y, x), rtol=1e-12)
    np.testing.assert_allclose(g, model.grad(X, y, x), rtol=1e-12, atol=1e-14 * np.abs(g).max())
    v = np.random.default_rng(8).standard_normal(x.shape)
    Hv = model.hvp(X, y, x, v)
    for k in range(K):
        H = model.hessian(X, y, x[k])
        np.testing.assert_allclose(H, H.T, atol=1e-12 * np.abs(H).max())
        np.testing.assert_allclose(H @ v[k], Hv[k], rtol=1e-9, atol=1e-9 * np.abs(Hv).max())
        diag = model.hessian_diag(X, y, x[k])
        assert diag.shape == (model.dim,) and np.all(diag >= 0)
        if not name.startswith("mlp"):  # the MLP's is the Gauss-Newton diagonal
            np.testing.assert_allclose(diag, np.clip(np.diag(H), 0, None), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.hessian_diag(X, y, x)[1], model.hessian_diag(X, y, x[1]), rtol=1e-12)


#: the families whose `hessians` is a vectorised closed form of their own (the rest use the contract's loop)
BATCHED_HESSIANS = (
    BetaRegression,
    BinomialRegression,
    CumulativeRegression,
    ExponentialRegression,
    GammaRegression,
    LinearRegression,
    LogisticRegression,
    LogNormalRegression,
    NegativeBinomialRegression,
    PoissonRegression,
    StudentTRegression,
    WeibullRegression,
    ZeroInflatedNegativeBinomialRegression,
    ZeroInflatedPoissonRegression,
)


def _per_chain(model, X, y, x):
    return np.stack([model.hessian(X, y, xk) for xk in x])


def _same_hessians(batched, per_chain):
    assert batched.shape == per_chain.shape
    np.testing.assert_allclose(batched, per_chain, rtol=1e-12, atol=1e-12 * np.abs(per_chain).max())


def test_batched_hessians_equal_the_per_chain_hessian(case):
    """`hessians` at K points is `hessian` at each (to 1e-12 relative): the families' vectorised forms, the contract's
    loop, and both seen through the wrappers every sampler runs on (whitening, a dense and a diagonal L; the prior's
    non-Gaussian term shared out)."""
    name, model, X, y, x = case
    if isinstance(model, BATCHED_HESSIANS):
        assert type(model).hessians is not Model.hessians, f"{name}: no vectorised hessians"
    _same_hessians(model.hessians(X, y, x), _per_chain(model, X, y, x))
    d = model.dim
    A = np.random.default_rng(9).standard_normal((d, d))
    for scale in (np.tril(A) + 3.0 * np.eye(d), np.linspace(0.5, 2.0, d)):
        wm = WhitenedModel(model, Preconditioner(np.full(d, 0.1), scale, "laplace"))
        _same_hessians(wm.hessians(X, y, x), _per_chain(wm, X, y, x))
        if wm.prior().residual is not None:
            shared = WithPriorShare(wm, 0.25)
            _same_hessians(shared.hessians(X, y, x), _per_chain(shared, X, y, x))


def test_batched_hessians_follow_a_subclass_own_hessian():
    """A subclass that redefines `hessian` gets it chain by chain, not its parent's closed form."""

    @dataclasses.dataclass(frozen=True)
    class Damped(LogisticRegression):
        def hessian(self, X, y, x):
            return 0.5 * super().hessian(X, y, x)

    X, y = _design(np.random.default_rng(2), 30), np.random.default_rng(3).integers(0, 2, 30).astype(float)
    model = Damped().bind(DataSpec(4))
    x = 0.3 * np.random.default_rng(4).standard_normal((3, 4))
    _same_hessians(model.hessians(X, y, x), 0.5 * LogisticRegression().bind(DataSpec(4)).hessians(X, y, x))


# ----------------------------------------------------------------------------- values against scipy.stats


def _differences_match(U, loglik):
    """U_i equals −log p(y | θ) up to a constant independent of θ."""
    np.testing.assert_allclose(U - U[0], -(loglik - loglik[0]), rtol=1e-9, atol=1e-9)


def test_potentials_match_scipy_likelihoods():
    rng = np.random.default_rng(0)
    model, X, y = _linear()
    x = np.column_stack([rng.standard_normal((4, 4)), rng.uniform(-1, 1, 4)])
    ll = [st.norm(X @ t[:4], np.exp(t[4])).logpdf(y).sum() for t in x]
    np.testing.assert_allclose(model.potential(X, y, x), -np.array(ll) - 0.5 * len(y) * np.log(2 * np.pi))

    model, Xo, y = _poisson_offset("column")
    x = 0.3 * rng.standard_normal((4, 4))
    ll = [st.poisson(np.exp(np.delete(Xo, 2, 1) @ t + Xo[:, 2])).logpmf(y).sum() for t in x]
    _differences_match(model.potential(Xo, y, x), np.array(ll))

    model, Xs, y = _binomial("array")
    ll = [st.binom(Xs[:, -1].astype(int), expit(Xs[:, :-1] @ t)).logpmf(y).sum() for t in x]
    _differences_match(model.potential(Xs, y, x), np.array(ll))

    model, Xo, y = _negbin()
    x = np.column_stack([0.3 * rng.standard_normal((4, 4)), rng.uniform(-1, 2, 4)])
    ll = []
    for t in x:
        mu, phi = np.exp(Xo[:, :4] @ t[:4] + Xo[:, 4]), np.exp(t[4])
        ll.append(st.nbinom(phi, phi / (phi + mu)).logpmf(y).sum())
    _differences_match(model.potential(Xo, y, x), np.array(ll))


# ----------------------------------------------------------------------------- curvature scales


def test_smoothness_scales_are_sensible():
    # linear, unknown σ: at the least-squares fit the Hessian is below the curvature scale
    model, X, y = _linear()
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    s = np.sqrt(np.sum((y - X @ coef) ** 2) / (len(y) - 4))
    H = model.hessian(X, y, np.append(coef, np.log(s)))
    assert np.linalg.eigvalsh(H)[-1] <= model.smoothness(X, y) <= 10 * np.linalg.eigvalsh(H)[-1]
    # binomial: a global bound, attained at β = 0
    model, Xb, yb = _binomial("column")
    lam0 = np.linalg.eigvalsh(model.hessian(Xb, yb, np.zeros(model.dim)))[-1]
    np.testing.assert_allclose(model.smoothness(Xb, yb), lam0, rtol=1e-10)
    for t in np.random.default_rng(1).standard_normal((3, model.dim)):
        assert np.linalg.eigvalsh(model.hessian(Xb, yb, t))[-1] <= lam0 * (1 + 1e-10)
    # Poisson with offset and negative binomial: at the data-generating values
    model, Xo, yo = _poisson_offset("column")
    H = model.hessian(Xo, yo, np.array([0.5, 0.4, -0.3, 0.2]))
    assert np.linalg.eigvalsh(H)[-1] <= model.smoothness(Xo, yo)
    model, Xn, yn = _negbin()
    H = model.hessian(Xn, yn, np.array([1.0, 0.5, -0.4, 0.3, np.log(3.0)]))
    assert np.linalg.eigvalsh(H)[-1] <= model.smoothness(Xn, yn)
    # known σ stays exact
    model, X, y = _linear(noise_sd=0.7)
    np.testing.assert_allclose(model.smoothness(X, y), np.linalg.eigvalsh(X.T @ X)[-1] / 0.49, rtol=1e-10)


# ----------------------------------------------------------------------------- priors of the models, defaults


def test_model_priors_split_and_defaults():
    spec = DataSpec(4, columns=COLS)
    assert isinstance(LogisticRegression().bind(spec).prior(), GaussianPrior)
    np.testing.assert_allclose(LogisticRegression().bind(spec).prior().precision, 1.0)  # today's N(0, 1)
    known = LinearRegression(noise_sd=1.0).bind(spec)
    assert known.dim == 4 and known.coef_prior == Normal(0.0, 1.0) and isinstance(known.prior(), GaussianPrior)
    unknown = LinearRegression().bind(spec)
    assert unknown.dim == 5 and unknown.coef_prior == Normal(0.0, 10.0) and unknown.sigma_prior == HalfNormal(10.0)
    prior = unknown.prior()
    assert isinstance(prior, Prior)
    np.testing.assert_allclose(prior.gaussian.precision, [0.01] * 4 + [0.0])  # log σ is in the residual
    assert [list(p.index) for p in prior.residual.pieces] == [[4]]
    # flat on log σ and Normal coefficients: all Gaussian, nothing on log σ
    jeffreys = LinearRegression(sigma_prior=Flat(log=True)).bind(spec)
    assert isinstance(jeffreys.prior(), GaussianPrior) and jeffreys.prior().precision[4] == 0
    student = LogisticRegression(coef_prior=StudentT(3.0)).bind(spec).prior()
    assert np.all(student.gaussian.precision == 0) and student.residual is not None
    nb = NegativeBinomialRegression().bind(spec)
    assert nb.dim == 5 and nb.phi_prior == HalfCauchy(10.0)
    # prior_scale is shorthand; binding keeps everything consistent and hashable
    m = PoissonRegression(prior_scale=2.0)
    assert m.coef_prior == Normal(0.0, 2.0) and m.bind(spec) == m.bind(spec) and hash(m.bind(spec))
    assert PoissonRegression(coef_prior=Normal(0.0, 3.0)).prior_scale == 3.0
    assert PoissonRegression(coef_prior=Normal(0.0, [1.0, 2.0, 3.0, 4.0])).prior_scale is None
    assert (
        get_model("linear_regression", coef_prior=Normal(0, [100, 10, 10, 10]), sigma_prior=HalfCauchy(2.5))
        .bind(spec)
        .dim
        == 5
    )
    rowed = PoissonRegression(offset=np.zeros(10))  # an array input is held by content: still equal and hashable
    assert rowed == PoissonRegression(offset=RowValues(np.zeros(10))) != PoissonRegression(offset=np.ones(10))
    assert hash(rowed) == hash(PoissonRegression(offset=[0.0] * 10)) and repr(rowed.offset) == "RowValues(n=10)"


def test_known_noise_posterior_with_per_coefficient_and_flat_prior():
    model, X, y = _linear(Normal([0.0, 1.0, 0.0, 0.0], [np.inf, 1.0, 2.0, 0.5]), noise_sd=0.7)
    mean, cov = model.posterior([(X[:20], y[:20]), (X[20:], y[20:])])
    P0 = np.diag([0.0, 1.0, 0.25, 4.0])
    Q = X.T @ X / 0.49 + P0
    np.testing.assert_allclose(cov, np.linalg.inv(Q), rtol=1e-10)
    np.testing.assert_allclose(mean, np.linalg.solve(Q, X.T @ y / 0.49 + P0 @ [0.0, 1.0, 0.0, 0.0]), rtol=1e-10)
    with pytest.raises(ValueError, match="noise_sd=None"):
        _linear()[0].posterior([(X, y)])


# ----------------------------------------------------------------------------- per-row inputs


def test_offset_column_and_array_give_the_same_model():
    model_c, Xo, y = _poisson_offset("column")
    expo = Xo[:, 2]
    X = np.delete(Xo, 2, axis=1)
    model_a = PoissonRegression(coef_prior=model_c.coef_prior, offset=expo).bind(DataSpec(4, n_rows=len(y)))
    assert model_c.dim == model_a.dim == 4
    assert model_c.param_names() == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "beta[x3]"]
    x = 0.3 * np.random.default_rng(2).standard_normal((K, 4))
    # two shards of the array-offset model, rows chosen at random: shard_data picks each shard's offsets
    rows = np.random.default_rng(3).permutation(len(y))
    parts = [np.sort(rows[:20]), np.sort(rows[20:])]
    total = sum(model_a.potential(*model_a.shard_data(X[r], y[r], r), x) for r in parts)
    np.testing.assert_allclose(total, model_c.potential(Xo, y, x), rtol=1e-12)
    g = sum(model_a.grad(*model_a.shard_data(X[r], y[r], r), x) for r in parts)
    np.testing.assert_allclose(g, model_c.grad(Xo, y, x), rtol=1e-10)
    # a shard that does not record its rows: accepted only if it is the whole data set
    np.testing.assert_array_equal(model_a.shard_data(X, y, None)[0][:, -1], expo)
    with pytest.raises(ValueError, match="Shard.index"):
        model_a.shard_data(X[:10], y[:10], None)
    with pytest.raises(ValueError, match="offset"):
        model_a.shard_data(X[:3], y[:3], np.array([0, 1, 1000]))
    assert model_c.shard_data(Xo, y, None)[0] is Xo  # column-named inputs need nothing


def test_known_per_row_noise_posterior_is_the_weighted_least_squares_one():
    """noise_sd="se": β | y ~ N(Q⁻¹(P0 m0 + XᵀWy), Q⁻¹), Q = XᵀWX + P0, W = diag(1/se²); the array form agrees."""
    model, Xs, y = _linear_row_sd("column")
    se, X = Xs[:, 1], np.delete(Xs, 1, axis=1)
    mean, cov = model.posterior([(Xs[:15], y[:15]), (Xs[15:], y[15:])])
    W, P0 = np.diag(1 / se**2), np.diag([1 / 25, 1.0, 1.0, 0.25])
    Q = X.T @ W @ X + P0
    np.testing.assert_allclose(cov, np.linalg.inv(Q), rtol=1e-10)
    np.testing.assert_allclose(mean, np.linalg.solve(Q, X.T @ W @ y), rtol=1e-10)
    arr = LinearRegression(coef_prior=model.coef_prior, noise_sd=se).bind(DataSpec(4, n_rows=len(y), columns=COLS))
    m2, c2 = linear_posterior(arr, X, y)  # the whole data set without the column: shard_data appends it
    np.testing.assert_allclose(m2, mean, rtol=1e-10)
    np.testing.assert_allclose(c2, cov, rtol=1e-10)
    assert model.param_names() == arr.param_names() == ["beta[(Intercept)]", "beta[x1]", "beta[x2]", "beta[x3]"]
    assert model.smoothness(Xs, y) == pytest.approx(np.linalg.eigvalsh(X.T @ W @ X)[-1], rel=1e-10)


def test_known_per_row_noise_errors_name_the_column_and_the_row():
    with pytest.raises(ArgumentError, match=r"'se' is not a column of X; the columns are \['a', 'b'\]") as e:
        LinearRegression(noise_sd="se").bind(DataSpec(2, columns=("a", "b")))
    assert e.value.path == ("model", "noise_sd")
    with pytest.raises(ArgumentError, match="row 2 has") as e:
        LinearRegression(noise_sd=np.array([1.0, 0.5, 0.0, -1.0]))
    assert e.value.path == ("model", "noise_sd")
    with pytest.raises(ArgumentError, match="row 1 has"):
        LinearRegression(noise_sd=[1.0, np.nan])
    with pytest.raises(ValueError, match="sigma_prior"):
        LinearRegression(noise_sd="se", sigma_prior=HalfCauchy(1.0))
    model = LinearRegression(noise_sd="se").bind(DataSpec(2, columns=("a", "se")))
    with pytest.raises(ValueError, match=r"shard 3: noise_sd must be finite and > 0 in every row; row 1 has"):
        model.validate(np.array([[1.0, 0.5], [1.0, 0.0]]), np.zeros(2), "shard 3")
    assert LinearRegression(noise_sd=2).noise_sd == 2.0 and not LinearRegression(noise_sd=2).per_row_noise


@pytest.mark.parametrize(
    "make, spec, argname",
    [
        (lambda: PoissonRegression(offset="expo"), DataSpec(3), "offset"),  # no column names
        (lambda: PoissonRegression(offset="expo"), DataSpec(3, columns=("a", "b", "c")), "offset"),  # no such column
        (lambda: PoissonRegression(offset=np.zeros(5)), DataSpec(3, n_rows=6), "offset"),  # wrong length
        (lambda: NegativeBinomialRegression(offset="a"), DataSpec(1, columns=("a",)), "offset"),  # nothing left
        (lambda: BinomialRegression(), DataSpec(3), "trials"),
        (lambda: LogisticRegression(coef_prior=Normal(0, [1.0, 2.0])), DataSpec(3), "coef_prior"),
        (lambda: SoftmaxRegression(coef_prior=StudentT(3.0, scale=[1.0] * 5)), DataSpec(3, n_classes=2), "coef_prior"),
        (lambda: MLPClassifier(hidden=2, coef_prior=Normal(0, [1.0] * 3)), DataSpec(3, n_classes=2), "coef_prior"),
        (lambda: LogisticRegression(), DataSpec(3, columns=("a", "b")), "columns"),
    ],
)
def test_bind_errors_name_the_argument(make, spec, argname):
    with pytest.raises(ValueError, match=argname):
        make().bind(spec)


@pytest.mark.parametrize(
    "make, argname",
    [
        (lambda: LinearRegression(noise_sd=1.0, sigma_prior=HalfNormal(1.0)), "sigma_prior"),
        (lambda: LinearRegression(sigma_prior=Normal()), "sigma_prior"),
        (lambda: LinearRegression(sigma_prior=2.0), "sigma_prior"),
        (lambda: LinearRegression(coef_prior=HalfNormal(1.0)), "coef_prior"),
        (lambda: LogisticRegression(prior_scale=2.0, coef_prior=Normal(0, 3.0)), "prior_scale or coef_prior"),
        (lambda: SoftmaxRegression(coef_prior=Normal(0, np.inf)), "coef_prior"),
        (lambda: MLPClassifier(coef_prior=Normal(0, [1.0, np.inf])), "coef_prior"),
        (lambda: NegativeBinomialRegression(phi_prior=StudentT(3.0)), "phi_prior"),
        (lambda: PoissonRegression(offset=np.array([0.0, np.nan])), "offset"),
        (lambda: PoissonRegression(offset=np.zeros((2, 2))), "offset"),
        (lambda: BinomialRegression(trials=0), "trials"),
        (lambda: BinomialRegression(trials=np.array([1.0, 2.5])), "trials"),
        (lambda: BinomialRegression(trials=np.array([1.0, -1.0])), "trials"),
        (lambda: LinearRegression(smoothness_safety=0.0), "smoothness_safety"),
    ],
)
def test_constructor_errors_name_the_argument(make, argname):
    with pytest.raises(ValueError, match=argname):
        make()


def test_validate_errors_name_the_shard():
    model, Xb, yb = _binomial("column")
    bad_y = yb.copy()
    bad_y[0] = Xb[0, 0] + 1  # more successes than trials
    bad_m = Xb.copy()
    bad_m[0, 0] = 2.5
    model_n, Xn, yn = _negbin()
    for m, X, y in ((model, Xb, bad_y), (model, bad_m, yb), (model_n, Xn, -yn), (model_n, Xn, yn + 0.5)):
        with pytest.raises(ValueError, match=r"shards\[1\]"):
            m.validate(X, y, argname="shards[1]")


# ----------------------------------------------------------------------------- improper posteriors


def test_flat_prior_with_rank_deficient_pooled_x_is_an_error():
    rng = np.random.default_rng(9)
    X = _design(rng, 30)
    X[:, 3] = X[:, 1] - 2 * X[:, 0]  # collinear with the intercept and x1
    y = rng.standard_normal(30)
    flat = LinearRegression(coef_prior=Normal(0.0, [np.inf, np.inf, 1.0, np.inf])).bind(DataSpec(4, columns=COLS))
    gram = sum(flat.gram(Xi, yi) for Xi, yi in ((X[:15], y[:15]), (X[15:], y[15:])))
    assert gram.shape == (3, 3)  # only the flat coefficients' columns
    with pytest.raises(ValueError, match=r"coef_prior.*beta\[\(Intercept\)\], beta\[x1\], beta\[x3\].*improper"):
        flat.check_proper(gram, 30)
    # a proper prior on one of the collinear columns makes it proper again
    ok = LinearRegression(coef_prior=Normal(0.0, [np.inf, np.inf, np.inf, 1.0])).bind(DataSpec(4))
    ok.check_proper(ok.gram(X, y), 30)
    # shards that are rank deficient on their own (fewer rows than columns) but not pooled: fine
    Xf = _design(rng, 6)
    pooled = LinearRegression(coef_prior=Normal(0.0, np.inf)).bind(DataSpec(4))
    pooled.check_proper(sum(pooled.gram(Xf[i : i + 2], None) for i in (0, 2, 4)), 6)
    assert LinearRegression().bind(DataSpec(4)).gram(X, y) is None  # nothing to check for proper priors
    with pytest.raises(ValueError, match="sigma_prior"):
        LinearRegression(coef_prior=Normal(0.0, np.inf), sigma_prior=Flat()).bind(DataSpec(4)).check_proper(
            pooled.gram(Xf[:5], None), 5
        )
    logistic = LogisticRegression(coef_prior=Normal(0.0, np.inf)).bind(DataSpec(4))
    with pytest.raises(ValueError, match="coef_prior"):
        logistic.check_proper(logistic.gram(X, y), 30)


def test_replace_keeps_models_consistent():
    m = LinearRegression(coef_prior=StudentT(3.0), sigma_prior=InverseGamma(2.0, 1.0))
    b = m.bind(DataSpec(4))
    assert dataclasses.replace(b, n_features=4) == b and b.prior_scale is None
    g = get_model("gaussian", prior_scale=2.0, prior_mean=[1.0, 2.0])
    assert g.coef_prior == Normal((1.0, 2.0), 2.0) and g.bind(DataSpec(2)) == g


def test_priors_are_named_by_kind_and_the_old_names_still_work() -> None:
    """One argument name per kind of prior (brms' classes: sigma_prior, phi_prior beside coef_prior, sd_prior and
    cor_prior): the old names set the same model with a DeprecationWarning naming the new one (reading them too);
    both names at once is an error naming the old one; the repr shows each prior once, by its name."""
    with pytest.warns(DeprecationWarning, match="sigma_prior"):
        old = LinearRegression(noise_prior=HalfCauchy(2.5))
    assert old == LinearRegression(sigma_prior=HalfCauchy(2.5))
    with pytest.warns(DeprecationWarning, match=r"\.sigma_prior"):
        assert old.noise_prior == HalfCauchy(2.5)
    with pytest.warns(DeprecationWarning, match="phi_prior"):
        nb = get_model("negative_binomial_regression", dispersion_prior=HalfCauchy(3.0))
    assert nb.phi_prior == HalfCauchy(3.0)
    with pytest.raises(ArgumentError, match="give sigma_prior only") as err:
        LinearRegression(noise_prior=HalfCauchy(1.0), sigma_prior=HalfCauchy(2.0))
    assert err.value.path == ("noise_prior",)
    text = repr(LinearRegression(prior_scale=10.0))
    assert "coef_prior=Normal(mean=0.0, scale=10.0)" in text and "prior_scale" not in text
    assert "sigma_prior=HalfNormal(scale=10.0)" in text and "noise_prior" not in text
