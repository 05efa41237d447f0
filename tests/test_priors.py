"""Prior specs: validation, densities against scipy.stats (with the log-Jacobian of sampling log σ), derivatives
against finite differences, and how a model's prior splits into its Gaussian factor and the residual term."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import scipy.stats as st

from raysampler import priors
from raysampler.models import GaussianPrior
from raysampler.priors import (
    Exponential,
    Flat,
    HalfCauchy,
    HalfNormal,
    HalfStudentT,
    InverseGamma,
    Normal,
    Prior,
    PriorTerm,
    StudentT,
    as_prior,
    build_prior,
)

POSITIVE = {
    "half_normal": (HalfNormal(2.5), lambda s: st.halfnorm(scale=2.5).logpdf(s)),
    "half_cauchy": (HalfCauchy(1.5), lambda s: st.halfcauchy(scale=1.5).logpdf(s)),
    "half_t": (HalfStudentT(3.0, 2.0), lambda s: np.log(2.0) + st.t(3.0, scale=2.0).logpdf(s)),
    "exponential": (Exponential(0.7), lambda s: st.expon(scale=1 / 0.7).logpdf(s)),
    # a prior on σ²: p_σ(σ) = p_{σ²}(σ²)·2σ
    "inverse_gamma": (InverseGamma(3.0, 2.0), lambda s: st.invgamma(3.0, scale=2.0).logpdf(s * s) + np.log(2 * s)),
    "flat": (Flat(), lambda s: np.zeros_like(s)),
    "flat_log": (Flat(log=True), lambda s: -np.log(s)),
}


def _term(spec, m=1):
    return PriorTerm(m, (priors.TermPiece(np.arange(m), spec),))


@pytest.mark.parametrize("name", list(POSITIVE))
def test_positive_prior_on_log_scale_matches_scipy_with_jacobian(name):
    """U(t) = −log p_σ(eᵗ) − t up to a constant: differences between points match scipy exactly."""
    spec, logpdf = POSITIVE[name]
    t = np.linspace(-3.0, 3.0, 13)
    U = _term(spec).potential(t[:, None])
    target = -(logpdf(np.exp(t)) + t)
    np.testing.assert_allclose(U - U[6], target - target[6], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "spec, logpdf",
    [
        (StudentT(4.0, 0.5, 2.0), lambda b: st.t(4.0, loc=0.5, scale=2.0).logpdf(b)),
        (StudentT(1.0), lambda b: st.cauchy().logpdf(b)),
    ],
)
def test_student_t_matches_scipy(spec, logpdf):
    b = np.linspace(-20.0, 20.0, 17)
    U = _term(spec).potential(b[:, None])
    np.testing.assert_allclose(U - U[0], -(logpdf(b) - logpdf(b[0])), rtol=1e-10, atol=1e-10)


def test_normal_prior_matches_scipy_per_coefficient():
    spec = Normal([1.0, -2.0, 0.0], [0.5, 3.0, np.inf])
    prior = build_prior(3, [(np.arange(3), spec)])
    assert isinstance(prior, GaussianPrior)  # all Gaussian: the GaussianPrior itself, precision 0 where flat
    np.testing.assert_allclose(prior.precision, [4.0, 1 / 9.0, 0.0])
    x = np.random.default_rng(0).standard_normal((5, 3)) * 4
    ref = -(st.norm(1.0, 0.5).logpdf(x[:, 0]) + st.norm(-2.0, 3.0).logpdf(x[:, 1]))
    U = prior.potential(x)
    np.testing.assert_allclose(U - U[0], ref - ref[0], rtol=1e-12)


ALL_TERMS = {
    **{k: v[0] for k, v in POSITIVE.items()},
    "student_t": StudentT(3.0, [0.0, 1.0, -1.0], [1.0, 2.0, 0.5]),
    "student_t_vector_nu": StudentT([1.0, 5.0, 30.0]),
}


@pytest.mark.parametrize("name", list(ALL_TERMS))
def test_term_derivatives_match_finite_differences(name):
    spec = ALL_TERMS[name]
    term = _term(spec, 3)
    x = np.random.default_rng(1).uniform(-2.5, 2.5, (4, 3))
    h = 1e-6
    E = np.eye(3)
    fd_grad = np.stack([(term.potential(x + h * e) - term.potential(x - h * e)) / (2 * h) for e in E], axis=1)
    np.testing.assert_allclose(term.grad(x), fd_grad, rtol=1e-6, atol=1e-7)
    fd_diag = np.stack([((term.grad(x + h * e) - term.grad(x - h * e)) / (2 * h))[:, j] for j, e in enumerate(E)], 1)
    np.testing.assert_allclose(term.hessian_diag(x), fd_diag, rtol=1e-6, atol=1e-6)
    v = np.random.default_rng(2).standard_normal(x.shape)
    fd_hvp = (term.grad(x + h * v) - term.grad(x - h * v)) / (2 * h)
    np.testing.assert_allclose(term.hvp(x, v), fd_hvp, rtol=1e-5, atol=1e-6)
    assert term.potential(x[0]).shape == () and term.grad(x[0]).shape == (3,)  # a single point works too


def test_half_priors_are_overflow_free_far_out():
    t = np.array([[-300.0], [300.0]])
    for spec in (HalfCauchy(1.0), HalfStudentT(3.0, 1.0)):
        term = _term(spec)
        assert np.all(np.isfinite(term.potential(t))) and np.all(np.isfinite(term.grad(t)))
        np.testing.assert_allclose(term.grad(t)[:, 0], [-1.0, spec.nu if hasattr(spec, "nu") else 1.0], rtol=1e-12)


def test_mixed_prior_splits_into_gaussian_and_residual():
    parts = [
        (np.array([0, 1]), Normal(0.0, [2.0, np.inf])),
        (np.array([2, 3]), StudentT(3.0)),
        (np.array([4]), HalfCauchy(2.0)),
        (np.array([5]), Flat(log=True)),
    ]
    prior = build_prior(6, parts)
    assert isinstance(prior, Prior) and prior.dim == 6
    np.testing.assert_allclose(prior.gaussian.precision, [0.25, 0, 0, 0, 0, 0])
    assert [list(p.index) for p in prior.residual.pieces] == [[2, 3], [4]]  # flat on log σ: no term at all
    x = np.random.default_rng(3).standard_normal((3, 6))
    v = np.random.default_rng(4).standard_normal((3, 6))
    np.testing.assert_allclose(prior.potential(x), prior.gaussian.potential(x) + prior.residual.potential(x))
    np.testing.assert_allclose(prior.grad(x), prior.gaussian.grad(x) + prior.residual.grad(x))
    np.testing.assert_allclose(prior.hvp(x, v), prior.gaussian.hvp(x, v) + prior.residual.hvp(x, v))
    np.testing.assert_allclose(prior.hessian_diag(x), prior.gaussian.hessian_diag(x) + prior.residual.hessian_diag(x))
    np.testing.assert_allclose(prior.grad(x)[:, [1, 5]], 0.0)  # flat coordinates
    clone = pickle.loads(pickle.dumps(prior))
    np.testing.assert_array_equal(clone.potential(x), prior.potential(x))
    assert as_prior(prior) is prior
    g = GaussianPrior(np.zeros(2), np.ones(2))
    assert as_prior(g).gaussian is g and as_prior(g).residual is None
    with pytest.raises(TypeError):
        as_prior("normal")
    with pytest.raises(ValueError, match="exactly once"):
        build_prior(3, [(np.arange(2), Normal())])
    with pytest.raises(ValueError, match="2 values for 3"):
        build_prior(3, [(np.arange(3), Normal(scale=[1.0, 2.0]))])


def test_specs_are_hashable_and_normalised():
    assert Normal([1, 2], 3) == Normal((1.0, 2.0), 3.0)
    assert hash(Normal(np.array([1.0, 2.0]))) == hash(Normal((1.0, 2.0)))
    assert Normal(np.float32(2.0)).mean == 2.0 and isinstance(Normal(np.float32(2.0)).mean, float)
    assert Normal(scale=[1.0, math.inf]).size == 2 and StudentT(3.0).size is None
    assert Flat().nig_shape() == (-0.5, 0.0) and Flat(log=True).nig_shape() == (0.0, 0.0)


@pytest.mark.parametrize(
    "make, argname",
    [
        (lambda: Normal(scale=-1.0), "scale"),
        (lambda: Normal(scale=0.0), "scale"),
        (lambda: Normal(scale=float("nan")), "scale"),
        (lambda: Normal(mean=math.inf), "mean"),
        (lambda: Normal(mean="zero"), "mean"),
        (lambda: Normal(mean=[[0.0]]), "mean"),
        (lambda: Normal(scale=[1.0, -1.0]), r"scale\[1\]"),
        (lambda: Normal(mean=[0.0, 1.0], scale=[1.0, 2.0, 3.0]), "length"),
        (lambda: StudentT(0.0), "nu"),
        (lambda: StudentT(3.0, scale=math.inf), "scale"),
        (lambda: HalfNormal(-1.0), "scale"),
        (lambda: HalfCauchy(0), "scale"),
        (lambda: HalfStudentT(-2.0, 1.0), "nu"),
        (lambda: Exponential(0.0), "rate"),
        (lambda: InverseGamma(0.0, 1.0), "a"),
        (lambda: InverseGamma(1.0, -1.0), "b"),
        (lambda: Flat(log="yes"), "log"),
        (lambda: HalfNormal(True), "scale"),
    ],
)
def test_bad_specs_name_the_argument(make, argname):
    with pytest.raises(ValueError, match=argname):
        make()
