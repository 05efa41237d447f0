"""Prior specifications for the built-in models, and the bound prior in the sampler's coordinates.

Specs (what a user writes; frozen, hashable, validated at construction — errors name the argument):

* coefficients: `Normal(mean, scale)` (scalar or one value per coefficient; ``scale=inf`` is a flat, improper prior
  on that coefficient) and `StudentT(nu, mean, scale)`;
* positive parameters (a noise sd σ, a dispersion φ): `HalfNormal(scale)`, `HalfCauchy(scale)`,
  `HalfStudentT(nu, scale)`, `Exponential(rate)`, `Gamma(shape, rate)` (brms' prior on a Student-t's ν and on the
  Gamma, Beta and Weibull families' shape or precision), `InverseGamma(a, b)` (a prior on σ², not σ) and `Flat()`
  (uniform on σ > 0; ``Flat(log=True)`` is uniform on log σ, i.e. density ∝ 1/σ);
* probabilities (a zero-inflation probability): `BetaPrior(a, b)`, sampled on the logit scale;
* correlation matrices (correlated group effects): `LKJ(eta)`, sampled in its Cholesky factor's partial
  correlations (`PartialCorrelations`).

The samplers work in unconstrained coordinates θ: a positive parameter σ is sampled as t = log σ, and its prior
potential includes the log-Jacobian, U(t) = −log p_σ(eᵗ) − t (additive constants dropped). A bound model's
`prior()` returns an object with the *prior contract*:

* ``gaussian``: a `GaussianPrior` N(mean, diag(1/precision)), the exactly Gaussian factor; precision is 0 on
  coordinates whose prior is flat or not Gaussian;
* ``residual``: a `PriorTerm` (the rest: Student-t coefficients, priors on log σ, …) or None;
* ``potential(x)``, ``grad(x)``, ``hvp(x, v)``, ``hessian_diag(x)`` of the whole prior for (K, d) batches.

An all-Gaussian prior is returned as the `GaussianPrior` itself (it is its own ``gaussian`` part, with no residual);
otherwise a `Prior`. `as_prior` turns either (or a user model's own GaussianPrior) into a `Prior`.
"""

from .bound import GaussianPrior, Prior, PriorTerm, TermPiece, as_prior, build_prior
from .bound import term_hessians as term_hessians
from .specs import (
    LKJ,
    BetaPrior,
    CoefPrior,
    Exponential,
    Flat,
    Gamma,
    HalfCauchy,
    HalfNormal,
    HalfStudentT,
    InverseGamma,
    Normal,
    PartialCorrelations,
    PositivePrior,
    StudentT,
)

# the argument checks the models use
from .specs import _number_or_vector as _number_or_vector
from .specs import check_coef_prior as check_coef_prior
from .specs import check_positive_prior as check_positive_prior
from .specs import check_probability_prior as check_probability_prior

__all__ = [
    "LKJ",
    "BetaPrior",
    "CoefPrior",
    "Exponential",
    "Flat",
    "Gamma",
    "GaussianPrior",
    "HalfCauchy",
    "HalfNormal",
    "HalfStudentT",
    "InverseGamma",
    "Normal",
    "PartialCorrelations",
    "PositivePrior",
    "Prior",
    "PriorTerm",
    "StudentT",
    "TermPiece",
    "as_prior",
    "build_prior",
]
