"""Prior specifications: what a user writes (frozen, hashable, checked at construction, errors naming the
argument), each with its potential in the sampler's unconstrained coordinates (`_derivs`: t = log σ for a positive
parameter, the logit for a probability, partial correlations for an LKJ)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit

from ..errors import ArgumentError, PathPart

# --------------------------------------------------------------------------------------------- argument checks


def _number(
    owner: str, name: str, value: Any, *, positive: bool, allow_inf: bool = False, at: int | None = None
) -> float:
    """A real number (finite unless `allow_inf`; > 0 if `positive`), else ArgumentError with path (name,) or
    (name, at) for entry `at` of a vector argument."""
    path: tuple[PathPart, ...] = (name,) if at is None else (name, at)
    label = name if at is None else f"{name}[{at}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ArgumentError(path, f"{owner}: {label} must be a real number, got {value!r}")
    value = float(value)
    if math.isinf(value) and not (allow_inf and value > 0):
        raise ArgumentError(path, f"{owner}: {label} must be finite{' or +inf' if allow_inf else ''}, got {value!r}")
    if positive and value <= 0:
        raise ArgumentError(path, f"{owner}: {label} must be > 0, got {value!r}")
    return value


def _number_or_vector(owner: str, name: str, value: Any, *, positive: bool, allow_inf: bool = False):
    """A scalar (float) or a non-empty 1-D sequence (tuple of floats), each entry checked like `_number`."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _number(owner, name, value, positive=positive, allow_inf=allow_inf)
    if isinstance(value, (str, bytes)) or value is None:
        raise ArgumentError((name,), f"{owner}: {name} must be a number or a 1-D sequence of numbers, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentError(
            (name,), f"{owner}: {name} must be a number or a 1-D sequence of numbers, got {value!r}"
        ) from None
    if arr.ndim == 0:
        return _number(owner, name, float(arr), positive=positive, allow_inf=allow_inf)
    if arr.ndim != 1 or arr.size == 0:
        raise ArgumentError(
            (name,), f"{owner}: {name} must be a number or a non-empty 1-D sequence, got shape {arr.shape}"
        )
    for j, v in enumerate(arr):
        _number(owner, name, float(v), positive=positive, allow_inf=allow_inf, at=j)
    return tuple(float(v) for v in arr)


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, tuple) else None


def _common_size(owner: str, **values) -> int | None:
    """The length shared by the vector-valued arguments (None if all are scalars); ValueError if they differ."""
    sizes = {k: len(v) for k, v in values.items() if isinstance(v, tuple)}
    if len(set(sizes.values())) > 1:
        raise ArgumentError(
            tuple(sizes),
            f"{owner}: "
            + " and ".join(f"{k} has length {n}" for k, n in sizes.items())
            + ": vector arguments must have the same length",
        )
    return next(iter(sizes.values()), None)


def _vec(value: Any, m: int) -> np.ndarray:
    """A scalar or tuple parameter as an array broadcastable against (K, m)."""
    return np.asarray(value, dtype=np.float64) if isinstance(value, tuple) else np.full(m, float(value))


# ------------------------------------------------------------------------------------------ coefficient priors


@dataclass(frozen=True)
class Normal:
    """N(mean, scale²) on each coefficient; mean and scale are scalars or one value per coefficient.

    ``scale=inf`` (on all or some coefficients) is the flat, improper prior on those coefficients: the posterior
    must then be made proper by the data (see the model's `check_proper`).
    """

    mean: float | tuple[float, ...] = 0.0
    scale: float | tuple[float, ...] = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _number_or_vector("Normal", "mean", self.mean, positive=False))
        object.__setattr__(
            self, "scale", _number_or_vector("Normal", "scale", self.scale, positive=True, allow_inf=True)
        )
        _common_size("Normal", mean=self.mean, scale=self.scale)

    @property
    def size(self) -> int | None:
        """The number of coefficients the vector arguments describe (None: scalars, any number)."""
        return _common_size("Normal", mean=self.mean, scale=self.scale)

    def flat(self, m: int) -> np.ndarray:
        """Which of m coefficients have a flat prior (scale = inf): bool (m,)."""
        return np.isinf(_vec(self.scale, m))


@dataclass(frozen=True)
class StudentT:
    """Student-t with `nu` degrees of freedom, location `mean` and scale `scale` on each coefficient (scalars or one
    value per coefficient). Potential (ν+1)/2 · log(1 + z²/ν), z = (β − mean)/scale: heavier tails than Normal,
    not log-concave, so it is never part of the Gaussian factor."""

    nu: float | tuple[float, ...]
    mean: float | tuple[float, ...] = 0.0
    scale: float | tuple[float, ...] = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "nu", _number_or_vector("StudentT", "nu", self.nu, positive=True))
        object.__setattr__(self, "mean", _number_or_vector("StudentT", "mean", self.mean, positive=False))
        object.__setattr__(self, "scale", _number_or_vector("StudentT", "scale", self.scale, positive=True))
        _common_size("StudentT", nu=self.nu, mean=self.mean, scale=self.scale)

    @property
    def size(self) -> int | None:
        return _common_size("StudentT", nu=self.nu, mean=self.mean, scale=self.scale)

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = t.shape[-1]
        nu, s = _vec(self.nu, m), _vec(self.scale, m)
        r = t - _vec(self.mean, m)
        q = nu * s * s + r * r
        u = 0.5 * (nu + 1.0) * np.log1p(r * r / (nu * s * s))
        return u, (nu + 1.0) * r / q, (nu + 1.0) * (nu * s * s - r * r) / (q * q)


# --------------------------------------------------------------------------------- priors on positive parameters
# Each `_derivs(t)` gives, elementwise in t = log σ, the potential U(t) = −log p_σ(eᵗ) − t (up to a constant) and its
# first and second derivatives.


@dataclass(frozen=True)
class HalfNormal:
    """σ ~ |N(0, scale²)|: U(t) = e^{2t}/(2 scale²) − t."""

    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _number("HalfNormal", "scale", self.scale, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = np.exp(2.0 * t) / self.scale**2
        return 0.5 * w - t, w - 1.0, 2.0 * w


@dataclass(frozen=True)
class HalfStudentT:
    """σ ~ |t_ν(0, scale)|: U(t) = (ν+1)/2 · log(1 + e^{2t}/(ν scale²)) − t."""

    nu: float
    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "nu", _number("HalfStudentT", "nu", self.nu, positive=True))
        object.__setattr__(self, "scale", _number("HalfStudentT", "scale", self.scale, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _half_t_derivs(t, self.nu, self.scale)


@dataclass(frozen=True)
class HalfCauchy:
    """σ ~ |Cauchy(0, scale)| (the half-t with ν = 1): U(t) = log(1 + e^{2t}/scale²) − t."""

    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _number("HalfCauchy", "scale", self.scale, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _half_t_derivs(t, 1.0, self.scale)


def _half_t_derivs(t: np.ndarray, nu: float, scale: float):
    """U, U', U'' of the half-t prior on log σ, overflow-free through a = 2t − log(ν scale²)."""
    a = 2.0 * t - math.log(nu * scale * scale)
    p = expit(a)
    return 0.5 * (nu + 1.0) * np.logaddexp(0.0, a) - t, (nu + 1.0) * p - 1.0, 2.0 * (nu + 1.0) * p * (1.0 - p)


@dataclass(frozen=True)
class Exponential:
    """σ ~ Exponential(rate) (mean 1/rate): U(t) = rate·eᵗ − t."""

    rate: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _number("Exponential", "rate", self.rate, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = self.rate * np.exp(t)
        return w - t, w - 1.0, w


@dataclass(frozen=True)
class Gamma:
    """σ ~ Gamma(shape, rate) (density ∝ σ^(shape−1) e^(−rate·σ), mean shape/rate): brms' gamma(2, 0.1) on a
    Student-t's degrees of freedom ν, gamma(0.01, 0.01) on the Gamma family's shape and the Beta family's precision.
    In t = log σ: U(t) = rate·eᵗ − shape·t."""

    shape: float
    rate: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _number("Gamma", "shape", self.shape, positive=True))
        object.__setattr__(self, "rate", _number("Gamma", "rate", self.rate, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = self.rate * np.exp(t)
        return w - self.shape * t, w - self.shape, w


@dataclass(frozen=True)
class InverseGamma:
    """σ² ~ InverseGamma(a, b) (density ∝ (σ²)^(−a−1) e^(−b/σ²)) — a prior on the *variance*; conjugate for linear
    regression. In t = log σ: U(t) = 2a·t + b·e^{−2t}."""

    a: float
    b: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", _number("InverseGamma", "a", self.a, positive=True))
        object.__setattr__(self, "b", _number("InverseGamma", "b", self.b, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = self.b * np.exp(-2.0 * t)
        return 2.0 * self.a * t + w, 2.0 * self.a - 2.0 * w, 4.0 * w

    def nig_shape(self) -> tuple[float, float]:
        """(a, b) of the σ² prior, for the conjugate Normal–Inverse-Gamma formulas."""
        return self.a, self.b


@dataclass(frozen=True)
class Flat:
    """Improper flat prior on a positive parameter: uniform on σ > 0 (U(t) = −t), or with ``log=True`` uniform on
    log σ (density ∝ 1/σ on σ, U(t) = 0). The posterior must then be made proper by the data."""

    log: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.log, bool):
            raise ArgumentError(("log",), f"Flat: log must be True or False, got {self.log!r}")

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        zero = np.zeros_like(t)
        return (zero.copy(), zero.copy(), zero) if self.log else (-t, np.full_like(t, -1.0), zero)

    def nig_shape(self) -> tuple[float, float]:
        """The improper σ² prior as InverseGamma(a, 0): a = 0 for 1/σ², a = −1/2 for uniform on σ."""
        return (0.0, 0.0) if self.log else (-0.5, 0.0)

    @property
    def power(self) -> int:
        """k in the improper density p(σ) ∝ σ^(−k) (enters the properness condition of linear regression)."""
        return 1 if self.log else 0


# ------------------------------------------------------------------------------------------ priors on probabilities


@dataclass(frozen=True)
class BetaPrior:
    """A probability z ~ Beta(a, b) (brms' beta(1, 1), uniform, on a zero-inflation probability), sampled as
    t = logit z; with the log-Jacobian z(1 − z): U(t) = a·log(1 + e^{−t}) + b·log(1 + e^t)."""

    a: float
    b: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", _number("BetaPrior", "a", self.a, positive=True))
        object.__setattr__(self, "b", _number("BetaPrior", "b", self.b, positive=True))

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        z = expit(t)
        u = self.a * np.logaddexp(0.0, -t) + self.b * np.logaddexp(0.0, t)
        return u, (self.a + self.b) * z - self.a, (self.a + self.b) * z * (1.0 - z)


# --------------------------------------------------------------------------------- priors on correlation matrices


@dataclass(frozen=True)
class LKJ:
    """LKJ(eta) on a correlation matrix Ω, density ∝ det(Ω)^(eta − 1) (Lewandowski, Kurowicka & Joe 2009): eta = 1 is
    uniform over correlation matrices, eta > 1 favours weak correlations (brms' default for correlated group effects
    is lkj(1)). Sampled through Ω's Cholesky factor (`PartialCorrelations`)."""

    eta: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", _number("LKJ", "eta", self.eta, positive=True))

    def partial_correlations(self, q: int, columns: Sequence[int]) -> PartialCorrelations:
        """The prior's pieces for a q × q matrix whose Cholesky factor's canonical partial correlations, one per
        coordinate, sit in column `columns[i]` of the factor."""
        return PartialCorrelations(tuple(self.eta + 0.5 * (q - 2 - j) for j in columns))


@dataclass(frozen=True)
class PartialCorrelations:
    """LKJ in the coordinates y = atanh(z) of the canonical partial correlations z of Ω's Cholesky factor L
    (L[i, j] = z_ij Π_{k<j} √(1 − z_ik²)). Under LKJ(η) these are independent, z ~ Beta(β, β) on (−1, 1) with
    β = η + (q − 2 − j)/2 for column j (LKJ 2009, sec. 3.2); with tanh's Jacobian the potential of each y is
    U(y) = −β log(1 − tanh² y) = 2β log cosh y (a constant dropped), one β per coordinate."""

    beta: tuple[float, ...]

    @property
    def size(self) -> int:
        return len(self.beta)

    def _derivs(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = 2.0 * np.asarray(self.beta, dtype=np.float64)
        a = np.abs(t)
        th = np.tanh(t)
        return b * (a + np.log1p(np.exp(-2.0 * a)) - math.log(2.0)), b * th, b * (1.0 - th * th)


CoefPrior = Normal | StudentT
PositivePrior = HalfNormal | HalfCauchy | HalfStudentT | Exponential | Gamma | InverseGamma | Flat
COEF_PRIORS: tuple[type, ...] = (Normal, StudentT)
POSITIVE_PRIORS: tuple[type, ...] = (
    HalfNormal,
    HalfCauchy,
    HalfStudentT,
    Exponential,
    Gamma,
    InverseGamma,
    Flat,
)


def check_coef_prior(value: Any, argname: str = "coef_prior") -> CoefPrior:
    """`value` if it is a coefficient prior spec, else ArgumentError with path ("model", argname)."""
    if not isinstance(value, COEF_PRIORS):
        raise ArgumentError(
            ("model", argname),
            f"{argname} must be rs.priors.Normal(...) or rs.priors.StudentT(...) (Normal(scale=inf) "
            f"for a flat prior), got {value!r}",
        )
    return value  # type: ignore[return-value]  # narrowed by the isinstance check above


def check_probability_prior(value: Any, argname: str) -> BetaPrior:
    """`value` if it is a prior spec for a probability (a `BetaPrior`), else ArgumentError at ("model", argname)."""
    if not isinstance(value, BetaPrior):
        raise ArgumentError(
            ("model", argname), f"{argname} must be rs.priors.BetaPrior(a, b) (a prior on a probability), got {value!r}"
        )
    return value


def check_positive_prior(value: Any, argname: str) -> PositivePrior:
    """`value` if it is a prior spec for a positive parameter, else ArgumentError with path ("model", argname)."""
    if not isinstance(value, POSITIVE_PRIORS):
        names = ", ".join(c.__name__ for c in POSITIVE_PRIORS)
        raise ArgumentError(
            ("model", argname),
            f"{argname} must be one of rs.priors.{{{names}}} (a prior on a positive parameter), got {value!r}",
        )
    return value  # type: ignore[return-value]  # narrowed by the isinstance check above
