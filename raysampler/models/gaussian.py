"""The conjugate Gaussian toy ([DG-LMC], sec. 5.1): observations y_j ~ N(θ, Σ1), prior θ ~ N(m0, prior_scale² I).

Data convention: the observations are the *rows of y*, a 2-D array (n, p); X is ignored (it may be None,
an (n, 0) placeholder or any (n, ·) array, and must then have the same number of rows as y). The model's
dimension is d = p = y.shape[1], so bind it with DataSpec(n_features=y.shape[1]).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

from ..errors import ArgumentError
from ..priors import GaussianPrior, Normal, _number_or_vector
from .common import _GLM, _check_optional_count, _check_positive, _check_Xy, _resolve_coef_prior, _rows_of, _unbound
from .contract import DataSpec, ParamBlock, runs_own
from .linear import _gaussian_from_natural

__all__ = ["Gaussian", "gaussian_posterior"]


@dataclass(frozen=True)
class Gaussian(_GLM):
    """U_i(θ) = ½ Σ_j (y_j − θ)ᵀ Σ1⁻¹ (y_j − θ), Σ1 = noise_cov if given else noise_scale² I.

    Quadratic with constant Hessian n_i Σ1⁻¹: the posterior is Gaussian in closed form (`posterior`).
    `prior_mean` is a scalar (the same for every coordinate) or a length-d sequence; `noise_cov` is a
    symmetric positive-definite (p, p) matrix (give it *or* noise_scale, not both). `coef_prior` may replace
    prior_mean/prior_scale but must be Normal (scale=inf allowed). Array arguments are stored as tuples so that the
    model stays hashable.
    """

    name = "gaussian"
    #: y holds vector observations (n, p): the coordinator then takes n_features from y's width.
    target_kind = "vector"

    noise_scale: float = 1.0
    prior_mean: float | tuple | None = None
    noise_cov: tuple | None = None
    # cached in __post_init__ (recomputed on replace): the noise precision Σ1⁻¹ and its largest eigenvalue
    _noise_prec: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _noise_prec_max: float | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_scale", _check_positive("noise_scale", self.noise_scale))
        object.__setattr__(self, "n_features", _check_optional_count("n_features", self.n_features, 1))
        d = self.n_features

        if self.noise_cov is not None:
            if self.noise_scale != 1.0:
                raise ArgumentError(("model", "noise_cov"), "noise_cov: give either noise_scale or noise_cov, not both")
            try:
                S = np.array(self.noise_cov, dtype=np.float64)
            except (TypeError, ValueError):
                raise ArgumentError(
                    ("model", "noise_cov"), f"noise_cov must be a (p, p) array of numbers, got {self.noise_cov!r}"
                ) from None
            if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] == 0:
                raise ArgumentError(
                    ("model", "noise_cov"), f"noise_cov must be a square (p, p) matrix, got shape {S.shape}"
                )
            if not np.isfinite(S).all():
                raise ArgumentError(("model", "noise_cov"), "noise_cov contains NaN or infinite values")
            if not np.allclose(S, S.T, rtol=1e-10, atol=1e-12 * np.abs(S).max()):
                raise ArgumentError(("model", "noise_cov"), "noise_cov must be symmetric")
            S = 0.5 * (S + S.T)
            try:
                L = linalg.cholesky(S, lower=True)
            except linalg.LinAlgError:
                raise ArgumentError(("model", "noise_cov"), "noise_cov must be positive definite") from None
            if d is None:
                d = S.shape[0]
            elif S.shape[0] != d:
                raise ArgumentError(
                    ("model", "noise_cov"), f"noise_cov is {S.shape[0]}×{S.shape[0]} but n_features={d}"
                )
            object.__setattr__(self, "noise_cov", tuple(tuple(float(v) for v in row) for row in S))
            P = linalg.cho_solve((L, True), np.eye(d))
            P = 0.5 * (P + P.T)
        else:
            P = None

        # prior_mean and prior_scale are shorthand for coef_prior=Normal(prior_mean, prior_scale); afterwards all three
        # agree (prior_mean mirrors the Normal's mean), so that dataclasses.replace passes them back consistently.
        m0 = self.prior_mean
        if m0 is not None:
            try:
                m0 = _number_or_vector("Gaussian", "prior_mean", m0, positive=False)
            except ValueError as exc:
                raise ArgumentError(
                    ("model", "prior_mean"), f"prior_mean must be a number or a finite 1-D sequence ({exc})"
                ) from None
            if self.coef_prior is not None and not (isinstance(self.coef_prior, Normal) and self.coef_prior.mean == m0):
                raise ValueError(
                    f"give prior_mean or coef_prior, not both (prior_mean={m0!r}, coef_prior={self.coef_prior!r})"
                )
        _resolve_coef_prior(
            self, Normal(0.0 if m0 is None else m0, 1.0), allow_flat=True, default_mean=0.0 if m0 is None else m0
        )
        if not isinstance(self.coef_prior, Normal):
            raise ValueError(
                f"coef_prior: the Gaussian model's prior must be Normal (its posterior is closed form), "
                f"got {self.coef_prior!r}"
            )
        object.__setattr__(self, "prior_mean", self.coef_prior.mean)
        size = self.coef_prior.size
        if size is not None:
            if d is None:
                d = size
            elif size != d:
                raise ArgumentError(
                    ("model", "prior_mean"), f"prior_mean/coef_prior has length {size} but the model has d={d}"
                )

        object.__setattr__(self, "n_features", d)
        object.__setattr__(self, "columns", None)
        object.__setattr__(self, "_xcol", None)
        object.__setattr__(self, "_coef_cols", None if d is None else np.arange(d))
        if d is not None and P is None:
            P = np.eye(d) / self.noise_scale**2
        # Cached noise precision Σ1⁻¹ and its largest eigenvalue (not dataclass fields: recomputed on replace).
        object.__setattr__(self, "_noise_prec", P)
        object.__setattr__(self, "_noise_prec_max", None if P is None else float(linalg.eigvalsh(P)[-1]))

    def _bind_fields(self, spec: DataSpec) -> dict:
        return {"n_features": spec.n_features}

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        return (ParamBlock("theta", self.dim, "param", None, "identity"),)

    # ------------------------------------------------------------------ contract

    @property
    def noise_precision(self) -> np.ndarray:
        """Σ1⁻¹, shape (d, d)."""
        if self._noise_prec is None:
            raise _unbound(self, "n_features")
        return self._noise_prec

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        y_arr = np.asarray(y)
        if X is None or (isinstance(X, np.ndarray) and X.dtype == object and X.ndim == 0 and X.item() is None):
            X = np.empty((y_arr.shape[0] if y_arr.ndim else 0, 0))
        X, y_arr = _check_Xy(X, y, argname, None, y_ndim=2)
        if self.n_features is not None and y_arr.shape[1] != self.n_features:
            raise ValueError(
                f"{argname}: y has {y_arr.shape[1]} columns but the model is bound to n_features={self.n_features}"
            )

    def _stats(self, y: np.ndarray):
        """n, ȳ and the θ-free part ½ Σ_j (y_j − ȳ)ᵀ P (y_j − ȳ) of U_i."""
        n = y.shape[0]
        if n == 0:
            return 0, np.zeros(self.dim), 0.0
        ybar = y.mean(axis=0)
        Yc = y - ybar
        const = 0.5 * float(np.einsum("ij,ij->", Yc @ self.noise_precision, Yc))
        return n, ybar, const

    # U_i(θ) = ½ n (θ − ȳ)ᵀ P (θ − ȳ) + const: centred form, stable and O(np + Kp²).
    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        n, ybar, const = self._stats(y)
        D = x - ybar
        return (0.5 * n) * np.einsum("kp,kp->k", D @ self.noise_precision, D) + const

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        n = y.shape[0]
        if n == 0:
            return np.zeros_like(x, dtype=np.float64)
        return (n * (x - y.mean(axis=0))) @ self.noise_precision

    def grad_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if not runs_own(self, Gaussian, "grad") or y.shape[1] == 0:
            return super().grad_stacked(X, y, x)
        return (y.shape[1] * (x - y.mean(axis=1)[:, None, :])) @ self.noise_precision

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n, ybar, const = self._stats(y)
        D = x - ybar
        DP = D @ self.noise_precision
        return (0.5 * n) * np.einsum("kp,kp->k", DP, D) + const, n * DP

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        return y.shape[0] * (v @ self.noise_precision)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return y.shape[0] * self.noise_precision

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The constant n_i Σ1⁻¹ at each of the K points."""
        if not runs_own(self, Gaussian, "hessian"):
            return super().hessians(X, y, x)
        H = y.shape[0] * self.noise_precision
        return np.broadcast_to(H, (np.shape(x)[0],) + H.shape).copy()

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        diag = y.shape[0] * np.diag(self.noise_precision)
        return diag if single else np.broadcast_to(diag, x.shape).copy()

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """Exact ‖∇²U_i‖ = n_i·λ_max(Σ1⁻¹) (the Hessian is constant)."""
        if self._noise_prec_max is None:
            raise _unbound(self, "n_features")
        return np.asarray(y).shape[0] * self._noise_prec_max

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log N(y_j; θ_k, Σ1) of every observation (n, K)."""
        P = self.noise_precision
        D = np.asarray(y, dtype=np.float64)[:, None, :] - np.asarray(x, dtype=np.float64)[None, :, :]
        _, logdet = np.linalg.slogdet(P)
        return -0.5 * np.einsum("nkp,pq,nkq->nk", D, P, D) + 0.5 * logdet - 0.5 * P.shape[0] * np.log(2.0 * np.pi)

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        """θ_k for every row: (n, K, p) (the observations are vectors)."""
        return np.broadcast_to(np.asarray(x, dtype=np.float64)[None], (X.shape[0],) + np.shape(x)).copy()

    def posterior(self, shards: Iterable[tuple[np.ndarray | None, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior (mean, covariance) given all shards [(X_1, y_1), …] (X ignored) and the prior."""
        return gaussian_posterior(self, [y for _, y in shards])


def gaussian_posterior(model: Gaussian, ys: Iterable[np.ndarray] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior (mean, covariance) of a bound `Gaussian` given the observations: one (n, p) array or a list of
    them.

    Precision Q = diag(1/prior_scale²) + N Σ1⁻¹, mean Q⁻¹(m0/prior_scale² + Σ1⁻¹ Σ_j y_j).
    """
    if isinstance(ys, np.ndarray):
        ys = [ys]
    d = model.dim
    N = 0
    total = np.zeros(d)
    for y in ys:
        y = np.asarray(y, dtype=np.float64).reshape(-1, d)
        N += y.shape[0]
        total += y.sum(axis=0)
    P = model.noise_precision
    prior = model.prior()
    assert isinstance(prior, GaussianPrior)  # the Gaussian model's prior is Normal (checked at construction)
    return _gaussian_from_natural(prior, N * P, P @ total)
