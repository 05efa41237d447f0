"""Bayesian linear regression y = Xβ + N(0, σ²): with a known noise sd (θ = β, an exact Gaussian posterior) or an
unknown one (θ = (β, log σ), with a prior on σ)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

from ..priors import Flat, GaussianPrior, HalfNormal, Normal, PositivePrior, check_positive_prior
from .common import _GLM, _check_positive, _gram_lambda_max, _rows_of
from .contract import ParamBlock

__all__ = ["LinearRegression", "linear_posterior"]


@dataclass(frozen=True)
class LinearRegression(_GLM):
    """y = Xβ + ε, ε ~ N(0, σ²).

    * ``noise_sd=<number>``: σ known, θ = β, U_i(β) = ‖y − Xβ‖²/(2σ²). The Hessian XᵀX/σ² does not depend on θ, so
      the posterior is exactly Gaussian (`posterior`, `linear_posterior`). Default coefficient prior N(0, 1).
    * ``noise_sd=None`` (default): σ unknown with prior `noise_prior` (default HalfNormal(10)), sampled as
      τ = log σ: θ = (β, τ), U_i(θ) = n_i τ + ‖y − Xβ‖² e^{−2τ}/2 (the prior's log-Jacobian is in `prior()`).
      Default coefficient prior N(0, 10²). With a flat coefficient prior and an InverseGamma or Flat noise prior
      the posterior is Normal–Inverse-Gamma in closed form (raysampler.testing.exact.linear_regression_posterior).

    The constant (n/2)·log(2π) (and n·log σ when σ is known) is dropped.
    """

    name = "linear_regression"
    target_kind = "real"

    noise_sd: float | None = None
    noise_prior: PositivePrior | None = field(default=None, kw_only=True)
    #: multiplies the curvature scale `smoothness` gives when σ is unknown.
    smoothness_safety: float = field(default=2.0, kw_only=True)

    def __post_init__(self) -> None:
        if self.noise_sd is not None:
            object.__setattr__(self, "noise_sd", _check_positive("noise_sd", self.noise_sd))
            if self.noise_prior is not None:
                raise ValueError(
                    f"noise_prior: the noise sd is known (noise_sd={self.noise_sd!r}); give noise_sd "
                    "or noise_prior, not both"
                )
        else:
            prior = HalfNormal(10.0) if self.noise_prior is None else self.noise_prior
            object.__setattr__(self, "noise_prior", check_positive_prior(prior, "noise_prior"))
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))
        super().__post_init__()

    def _default_coef_prior(self) -> Normal:
        return Normal(0.0, 1.0 if self.known_noise else 10.0)

    @property
    def known_noise(self) -> bool:
        return self.noise_sd is not None

    @property
    def _noise_var(self) -> float:
        """σ² of the known-noise model."""
        if self.noise_sd is None:
            raise ValueError("the noise sd is unknown (noise_sd=None): it is sampled, not fixed")
        return float(self.noise_sd) ** 2

    @property
    def dim(self) -> int:
        return self.n_coef + (0 if self.known_noise else 1)

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        blocks = super().param_blocks()
        return blocks if self.known_noise else blocks + (ParamBlock("sigma", 1, None, None, "exp"),)

    def _prior_parts(self) -> list:
        parts = super()._prior_parts()
        return parts if self.known_noise else parts + [(np.array([self.n_coef]), self.noise_prior)]

    # residuals R = Xβ − y for all chains at once: (n, K)
    def _resid(self, X: np.ndarray, y: np.ndarray, beta: np.ndarray):
        R = X @ beta.T
        R -= y[:, None]
        return R

    def _split(self, x: np.ndarray):
        """(β (K, p), e^{−2τ} (K,)) for unknown σ."""
        p = self.n_coef
        with np.errstate(over="ignore"):
            return x[:, :p], np.exp(-2.0 * x[:, p])

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            R = self._resid(X, y, x)
            return np.einsum("nk,nk->k", R, R) * (0.5 / self._noise_var)
        return self.potential_and_grad(X, y, x)[0]

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            R = self._resid(X, y, x)
            return (R.T @ X) * (1.0 / self._noise_var)
        return self.potential_and_grad(X, y, x)[1]

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.known_noise:
            R = self._resid(X, y, x)
            s = 1.0 / self._noise_var
            return np.einsum("nk,nk->k", R, R) * (0.5 * s), (R.T @ X) * s
        beta, s = self._split(x)
        R = self._resid(X, y, beta)
        S = np.einsum("nk,nk->k", R, R)
        n = X.shape[0]
        g = np.empty_like(x, dtype=np.float64)
        g[:, :-1] = (R.T @ X) * s[:, None]
        g[:, -1] = n - s * S
        return n * x[:, -1] + 0.5 * s * S, g

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.known_noise:
            return ((X @ v.T).T @ X) * (1.0 / self._noise_var)
        beta, s = self._split(x)
        R = self._resid(X, y, beta)
        S = np.einsum("nk,nk->k", R, R)
        vb, vt = v[:, :-1], v[:, -1]
        Xvb = X @ vb.T  # (n, K)
        out = np.empty_like(v, dtype=np.float64)
        out[:, :-1] = s[:, None] * ((Xvb.T @ X) - 2.0 * vt[:, None] * (R.T @ X))
        out[:, -1] = 2.0 * s * (S * vt - np.einsum("nk,nk->k", R, Xvb))
        return out

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            return (X.T @ X) * (1.0 / self._noise_var)
        beta, s = self._split(np.asarray(x, dtype=np.float64)[None, :])
        R = self._resid(X, y, beta)[:, 0]
        p = self.n_coef
        H = np.empty((p + 1, p + 1))
        H[:p, :p] = (X.T @ X) * s[0]
        H[:p, p] = H[p, :p] = -2.0 * s[0] * (X.T @ R)
        H[p, p] = 2.0 * s[0] * (R @ R)
        return H

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        xx = np.einsum("np,np->p", X, X)
        if self.known_noise:
            diag = xx * (1.0 / self._noise_var)
            return diag if single else np.broadcast_to(diag, x.shape).copy()
        beta, s = self._split(x)
        R = self._resid(X, y, beta)
        diag = np.empty_like(x)
        diag[:, :-1] = s[:, None] * xx
        diag[:, -1] = 2.0 * s * np.einsum("nk,nk->k", R, R)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """Known σ: exact ‖∇²U_i‖ = λ_max(XᵀX)/σ² (the Hessian is constant).

        Unknown σ: a curvature scale, *not* a bound (the Hessian grows without bound as σ → 0):
        smoothness_safety · max(λ_max(XᵀX)/σ̂², 2n_i), the Hessian's β-block and log σ entry at σ = σ̂, with σ̂² the
        shard's residual variance after least squares (the variance of y when the shard has no more rows than
        columns). Where the posterior puts σ far below σ̂ the true curvature is larger.
        """
        lam = _gram_lambda_max(X)
        if self.known_noise:
            return lam / self._noise_var
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        n, p = X.shape
        if n > p:
            coef = np.linalg.lstsq(X, y, rcond=None)[0]
            r = y - X @ coef
            var = float(r @ r) / (n - p)
        else:
            var = float(np.var(y)) if n > 1 else 0.0
        var = var if var > 0 else 1.0
        return self.smoothness_safety * max(lam / var, 2.0 * n)

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        """As for every regression (flat coefficients need full-rank pooled columns), and with an improper noise prior
        Flat (density ∝ σ^(−k)) also n > p_F + 1 − k rows, p_F the number of flat coefficients (checked when n_rows is
        given). A perfect fit (zero residuals) with a Flat noise prior is improper too and is not detected."""
        super().check_proper(gram, n_rows)
        if isinstance(self.noise_prior, Flat) and n_rows is not None:
            need = self._flat().size + 1 - self.noise_prior.power
            if n_rows <= need:
                raise ValueError(
                    f"noise_prior: {self.noise_prior!r} with {self._flat().size} flat coefficients needs "
                    f"more than {need} rows for a proper posterior, the data have {n_rows}"
                )

    def posterior(self, shards: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior (mean, covariance) of β given all shards [(X_1, y_1), …], for a known noise sd and a Normal
        coefficient prior."""
        if not self.known_noise:
            raise ValueError(
                "posterior: the noise sd is unknown (noise_sd=None); the exact posterior of conjugate "
                "and flat priors is raysampler.testing.exact.linear_regression_posterior"
            )
        if not isinstance(self.coef_prior, Normal):
            raise ValueError(f"posterior: coef_prior={self.coef_prior!r} has no closed-form posterior (needs Normal)")
        d = self.dim
        XtX = np.zeros((d, d))
        Xty = np.zeros(d)
        for X, y in shards:
            X = np.asarray(X, dtype=np.float64)
            XtX += X.T @ X
            Xty += X.T @ np.asarray(y, dtype=np.float64)
        prior = self.prior()
        assert isinstance(prior, GaussianPrior)  # a Normal coefficient prior (checked above)
        return _gaussian_from_natural(prior, XtX / self._noise_var, Xty / self._noise_var)


def linear_posterior(model: LinearRegression, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior (mean, covariance) of a bound known-noise `LinearRegression` on pooled data (X, y)."""
    return model.posterior([(X, y)])


def _gaussian_from_natural(prior: GaussianPrior, Q_lik: np.ndarray, b_lik: np.ndarray):
    """Posterior N(μ, Q⁻¹) with Q = diag(prior precision) + Q_lik and Qμ = prior precision ⊙ m0 + b_lik."""
    Q = Q_lik + np.diag(prior.precision)
    b = prior.precision * prior.mean + b_lik
    try:
        cf = linalg.cho_factor(Q, lower=True)
    except linalg.LinAlgError:
        raise ValueError(
            "posterior: the posterior precision is singular (a flat prior on coefficients whose columns "
            "are linearly dependent): the posterior is improper"
        ) from None
    mean = linalg.cho_solve(cf, b)
    cov = linalg.cho_solve(cf, np.eye(Q.shape[0]))
    return mean, 0.5 * (cov + cov.T)
