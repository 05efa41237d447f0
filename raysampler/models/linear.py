"""Bayesian linear regression y = Xβ + N(0, σ²): with a known noise sd — one for every row, or one per row as in a
meta-analysis (θ = β, an exact Gaussian posterior) — or an unknown one (θ = (β, log σ), with a prior on σ)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import linalg, special

from ..errors import ArgumentError
from ..priors import Flat, GaussianPrior, HalfNormal, Normal, PositivePrior, check_positive_prior
from .common import (
    _GLM,
    RowTerms,
    RowValues,
    _check_positive,
    _check_Xy,
    _gram_lambda_max,
    _rows_of,
    renamed_arguments,
)
from .contract import ParamBlock, runs_own

__all__ = ["LinearRegression", "linear_posterior"]


@renamed_arguments(noise_prior="sigma_prior")
@dataclass(frozen=True)
class LinearRegression(_GLM):
    """y = Xβ + ε, ε ~ N(0, σ²).

    * ``noise_sd=<number>``: σ known, θ = β, U_i(β) = ‖y − Xβ‖²/(2σ²). The Hessian XᵀX/σ² does not depend on θ, so
      the posterior is exactly Gaussian (`posterior`, `linear_posterior`). Default coefficient prior N(0, 1).
    * ``noise_sd="<column>"`` or an array over the original rows: σ_j known per row (e.g. each study's standard
      error in a meta-analysis), U_i(β) = Σ_j (y_j − x_jᵀβ)²/(2σ_j²), again exactly Gaussian. The column is not a
      feature: it travels with the shard like an offset (see `_GLM` and `shard_data`).
    * ``noise_sd=None`` (default): σ unknown with prior `sigma_prior` (default HalfNormal(10)), sampled as
      τ = log σ: θ = (β, τ), U_i(θ) = n_i τ + ‖y − Xβ‖² e^{−2τ}/2 (the prior's log-Jacobian is in `prior()`).
      Default coefficient prior N(0, 10²). With a flat coefficient prior and an InverseGamma or Flat noise prior
      the posterior is Normal–Inverse-Gamma in closed form (raysampler.testing.exact.linear_regression_posterior).

    The constant (n/2)·log(2π) (and n·log σ when σ is known) is dropped.
    """

    name = "linear_regression"
    target_kind = "real"
    _takes_groups = True

    noise_sd: float | str | RowValues | None = field(
        default=None,
        metadata={
            "description": "known noise sd: a number (every row), a column name or an array (one per row); "
            "absent = σ unknown, sampled with sigma_prior"
        },
    )
    sigma_prior: PositivePrior | None = field(default=None, kw_only=True)
    #: multiplies the curvature scale `smoothness` gives when σ is unknown.
    smoothness_safety: float = field(default=2.0, kw_only=True)

    _extra = "noise_sd"

    def __post_init__(self) -> None:
        if self.noise_sd is not None:
            if self.sigma_prior is not None:
                raise ValueError(
                    f"sigma_prior: the noise sd is known (noise_sd={self.noise_sd!r}); give noise_sd "
                    "or sigma_prior, not both"
                )
        else:
            prior = HalfNormal(10.0) if self.sigma_prior is None else self.sigma_prior
            object.__setattr__(self, "sigma_prior", check_positive_prior(prior, "sigma_prior"))
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))
        super().__post_init__()

    def _default_coef_prior(self) -> Normal:
        return Normal(0.0, 1.0 if self.known_noise else 10.0)

    def _constant_extra(self, value: Any) -> bool:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            object.__setattr__(self, "noise_sd", _check_positive("noise_sd", value))
            return True
        return False

    def _check_extra_values(self, values: np.ndarray, name: str) -> None:
        _check_row_sds(values, name)

    def _resolve_extra(self) -> None:
        value = self.noise_sd
        if value is not None and not isinstance(value, (str, numbers.Real)):  # an array: name its first bad row
            arr = value.values if isinstance(value, RowValues) else np.asarray(value)
            if arr.dtype.kind in "biuf" and arr.ndim == 1:
                _check_row_sds(arr.astype(np.float64), "noise_sd")
        super()._resolve_extra()

    @property
    def known_noise(self) -> bool:
        return self.noise_sd is not None

    @property
    def per_row_noise(self) -> bool:
        """Whether σ is known per row (a column or an array) rather than one number for every row."""
        return self.noise_sd is not None and not isinstance(self.noise_sd, float)

    @property
    def _noise_var(self) -> float:
        """σ² of the known-noise model with one σ for every row."""
        if not isinstance(self.noise_sd, float):
            raise ValueError(f"the noise sd is not one known number (noise_sd={self.noise_sd!r})")
        return float(self.noise_sd) ** 2

    def _weights(self, X: np.ndarray) -> np.ndarray | float:
        """1/σ_j² of a shard's rows (n,) for per-row noise, else the scalar 1/σ²."""
        sd = self._extra_values(X)
        if sd is None:
            if self.per_row_noise:
                raise ValueError("the per-row noise sd needs a model bound to the data (model.bind(DataSpec(...)))")
            return 1.0 / self._noise_var
        return 1.0 / (sd * sd)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        if self._xcol is not None:
            _check_row_sds(X[:, self._xcol], f"{argname}: noise_sd")

    @property
    def dim(self) -> int:
        return self.n_coef + (0 if self.known_noise else 1)

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        blocks = super().param_blocks()
        return blocks if self.known_noise else blocks + (ParamBlock("sigma", 1, None, None, "exp"),)

    def _prior_parts(self) -> list:
        parts = super()._prior_parts()
        return parts if self.known_noise else parts + [(np.array([self.n_coef]), self.sigma_prior)]

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

    def _known_terms(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Known noise: (U (K,), W R (n, K)) with residuals R = X_c βᵀ − y and weights W = 1/σ_j²."""
        R = self._eta(X, x)
        R -= y[:, None]
        w = self._weights(X)
        WR = R * (w[:, None] if isinstance(w, np.ndarray) else w)
        return 0.5 * np.einsum("nk,nk->k", R, WR), WR

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            return self._known_terms(X, y, x)[0]
        return self.potential_and_grad(X, y, x)[0]

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.known_noise:
            return self._pull(X, self._known_terms(X, y, x)[1])
        return self.potential_and_grad(X, y, x)[1]

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.known_noise:
            U, WR = self._known_terms(X, y, x)
            return U, self._pull(X, WR)
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
            Xv = self._eta_dir(X, v)
            w = self._weights(X)
            return self._pull(X, Xv * (w[:, None] if isinstance(w, np.ndarray) else w))
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
            return self._weighted_gram(X)
        beta, s = self._split(np.asarray(x, dtype=np.float64)[None, :])
        R = self._resid(X, y, beta)[:, 0]
        p = self.n_coef
        H = np.empty((p + 1, p + 1))
        H[:p, :p] = (X.T @ X) * s[0]
        H[:p, p] = H[p, :p] = -2.0 * s[0] * (X.T @ R)
        H[p, p] = 2.0 * s[0] * (R @ R)
        return H

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`hessian` at the K points at once: known σ, the one constant matrix; unknown σ, one Gram matrix scaled per
        chain and the (β, log σ) column as one product over the chains."""
        if not runs_own(self, LinearRegression, "hessian"):
            return super().hessians(X, y, x)
        return self._closed_hessians(X, y, x)

    def _closed_hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`hessians`' closed form (what `hessian` gives at each point)."""
        x = np.asarray(x, dtype=np.float64)
        K = x.shape[0]
        if self.known_noise:
            G = self._weighted_gram(X)
            return np.broadcast_to(G, (K,) + G.shape).copy()
        beta, s = self._split(x)
        R = self._resid(X, y, beta)
        p = self.n_coef
        H = np.empty((K, p + 1, p + 1))
        H[:, :p, :p] = (X.T @ X)[None] * s[:, None, None]
        cross = (-2.0 * s)[:, None] * (R.T @ X)  # (K, p)
        H[:, :p, p] = cross
        H[:, p, :p] = cross
        H[:, p, p] = 2.0 * s * np.einsum("nk,nk->k", R, R)
        return H

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        if self.known_noise:
            Xc = self._coef_X(X)
            w = self._weights(X)
            diag = np.einsum("np,np->p", Xc, Xc * (w[:, None] if isinstance(w, np.ndarray) else w))
            return diag if single else np.broadcast_to(diag, x.shape).copy()
        xx = np.einsum("np,np->p", X, X)
        beta, s = self._split(x)
        R = self._resid(X, y, beta)
        diag = np.empty_like(x)
        diag[:, :-1] = s[:, None] * xx
        diag[:, -1] = 2.0 * s * np.einsum("nk,nk->k", R, R)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """Known σ: exact ‖∇²U_i‖ = λ_max(X_cᵀ W X_c), W = diag(1/σ_j²) (the Hessian is constant).

        Unknown σ: a curvature scale, *not* a bound (the Hessian grows without bound as σ → 0):
        smoothness_safety · max(λ_max(XᵀX)/σ̂², 2n_i), the Hessian's β-block and log σ entry at σ = σ̂, with σ̂² the
        shard's residual variance after least squares (the variance of y when the shard has no more rows than
        columns). Where the posterior puts σ far below σ̂ the true curvature is larger.
        """
        if self.known_noise:
            w = self._weights(X)
            if isinstance(w, np.ndarray):
                return _gram_lambda_max(self._coef_X(X) * np.sqrt(w)[:, None])
            return _gram_lambda_max(X) * w
        lam = _gram_lambda_max(X)
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

    def _sd(self, X: np.ndarray, psi: np.ndarray) -> np.ndarray | float:
        """σ of the rows: per row (n, 1), per draw (1, K) from psi = log σ (K, 1), or one number."""
        if self.known_noise:
            sd = self._extra_values(X)
            return sd[:, None] if sd is not None else float(np.sqrt(self._noise_var))
        return np.exp(psi[:, 0])[None, :]

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_log_likelihood(X, y, self._eta(X, x[:, : self.n_coef]), self._psi(x))

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._eta(X, np.asarray(x, dtype=np.float64)[:, : self.n_coef])

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_draw(X, self._eta(X, x[:, : self.n_coef]), self._psi(x), u)

    # ------------------------------------------------------------------ per row (group effects)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """Known σ_j: ℓ_j = w_j R_j²/2 with R = η − y, w = 1/σ_j². Unknown σ = e^τ (ψ = τ): ℓ_j = τ + s R_j²/2 with
        s = e^{−2τ}; ∂ℓ/∂τ = 1 − sR², ∂²ℓ/∂η∂τ = −2sR, ∂²ℓ/∂τ² = 2sR²."""
        R = eta - y[:, None]
        if self.known_noise:
            w = self._weights(X)
            wv = w[:, None] if isinstance(w, np.ndarray) else w
            WR = wv * R
            loss = 0.5 * R * WR
            if order == 0:
                return RowTerms(loss)
            if order == 1:
                return RowTerms(loss, WR, psi[:, :0])
            return RowTerms(loss, WR, psi[:, :0], np.broadcast_to(wv, R.shape))
        tau = psi[:, 0]
        with np.errstate(over="ignore"):
            s = np.exp(-2.0 * tau)
        sR = s * R
        loss = tau + 0.5 * R * sR
        if order == 0:
            return RowTerms(loss)
        sR2 = np.einsum("nk,nk->k", R, sR)
        g_psi = (R.shape[0] - sR2)[:, None]
        if order == 1:
            return RowTerms(loss, sR, g_psi)
        return RowTerms(
            loss, sR, g_psi, np.broadcast_to(s, R.shape), (-2.0 * sR)[:, :, None], (2.0 * sR2)[:, None, None]
        )

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        sd = self._sd(X, psi)
        z = (np.asarray(y, dtype=np.float64)[:, None] - eta) / sd
        return -0.5 * z * z - np.log(sd) - 0.5 * np.log(2.0 * np.pi)

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return eta

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        return eta + self._sd(X, psi) * special.ndtri(np.atleast_2d(u))

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        """As for every regression (flat coefficients need full-rank pooled columns), and with an improper noise prior
        Flat (density ∝ σ^(−k)) also n > p_F + 1 − k rows, p_F the number of flat coefficients (checked when n_rows is
        given). A perfect fit (zero residuals) with a Flat noise prior is improper too and is not detected."""
        super().check_proper(gram, n_rows)
        if isinstance(self.sigma_prior, Flat) and n_rows is not None:
            need = self._flat().size + 1 - self.sigma_prior.power
            if n_rows <= need:
                raise ValueError(
                    f"sigma_prior: {self.sigma_prior!r} with {self._flat().size} flat coefficients needs "
                    f"more than {need} rows for a proper posterior, the data have {n_rows}"
                )

    def _weighted_gram(self, X: np.ndarray) -> np.ndarray:
        """X_cᵀ W X_c, W = diag(1/σ_j²): the (constant) Hessian of a known-noise shard."""
        Xc = self._coef_X(X)
        w = self._weights(X)
        if not isinstance(w, np.ndarray):
            return (Xc.T @ Xc) * w
        G = Xc.T @ (Xc * w[:, None])
        return 0.5 * (G + G.T)

    def posterior(self, shards: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior (mean, covariance) of β given all shards [(X_1, y_1), …], for a known noise sd (one, or one
        per row) and a Normal coefficient prior. Shards are as the model reads them (`shard_data`); with σ given as an
        array, the whole data set without its column is accepted too."""
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
            y = np.asarray(y, dtype=np.float64)
            if (
                isinstance(self.noise_sd, RowValues)
                and self.n_features is not None
                and X.shape[1] == self.n_features - 1
            ):
                X, y = self.shard_data(X, y, None)
            XtX += self._weighted_gram(X)
            w = self._weights(X)
            Xty += self._coef_X(X).T @ (y * w)
        prior = self.prior()
        assert isinstance(prior, GaussianPrior)  # a Normal coefficient prior (checked above)
        return _gaussian_from_natural(prior, XtX, Xty)


def _check_row_sds(sd: np.ndarray, what: str) -> None:
    """Per-row noise sds must be finite and > 0; the error names the first bad row."""
    bad = np.flatnonzero(~(np.isfinite(sd) & (sd > 0)))
    if bad.size:
        j = int(bad[0])
        msg = f"{what} must be finite and > 0 in every row; row {j} has {sd[j]!r}"
        if what == "noise_sd":
            raise ArgumentError(("model", "noise_sd"), msg)
        raise ValueError(msg)


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
