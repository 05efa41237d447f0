"""Bayesian Gamma regression (brms' `Gamma`, log link): y_j ~ Gamma(shape α, rate α/μ_j), μ_j = exp(η_j), so
E y_j = μ_j and Var y_j = μ_j²/α; θ = (β, log α)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import digamma, gammaincinv, gammaln, polygamma

from ..priors import Gamma, PositivePrior
from .common import RowTerms
from .rowfamily import RowFamilyGLM

__all__ = ["GammaRegression"]


@dataclass(frozen=True)
class GammaRegression(RowFamilyGLM):
    """y_j > 0 with mean μ_j = e^{η_j} and shape α (brms' `Gamma(link = "log")`): per row
    ℓ_j = −[α log α − α η_j − log Γ(α) + (α − 1) log y_j − α y_j e^{−η_j}], the whole −log density.

    θ = (β, ρ = log α). Priors: `coef_prior` N(0, 10²), `shape_prior` Gamma(0.01, 0.01) (brms' default on the
    shape: nearly flat on log α). Draws are μ_j/α · P⁻¹(α, u), P the regularised lower incomplete gamma function.
    Responses must be > 0."""

    name = "gamma_regression"
    target_kind = "real"

    shape_prior: PositivePrior | None = field(default=None, kw_only=True)

    _family_params = (("shape", "shape_prior", Gamma(0.01, 0.01)),)
    _support = ("Gamma", "> 0")

    def response_ok(self, y: np.ndarray) -> np.ndarray:
        return np.isfinite(y) & (y > 0)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring), with q = y e^{−η}: ∂ℓ/∂η = α(1 − q), ∂²ℓ/∂η² = αq, ∂ℓ/∂ρ =
        −α(ρ + 1 − η − ψ(α) + log y − q), ∂²ℓ/∂η∂ρ = α(1 − q), ∂²ℓ/∂ρ² = ∂ℓ/∂ρ − α + α² ψ′(α)."""
        rho = psi[:, 0][None, :]
        alpha = np.exp(rho)
        logy = np.log(y)[:, None]
        with np.errstate(over="ignore"):
            q = np.exp(logy - eta)
        loss = -(alpha * (rho - eta) - gammaln(alpha) + (alpha - 1.0) * logy - alpha * q)
        if order == 0:
            return RowTerms(loss)
        d1 = alpha * (1.0 - q)
        g_rows = -alpha * (rho + 1.0 - eta - digamma(alpha) + logy - q)
        g_psi = g_rows.sum(axis=0)[:, None]
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        h_rr = g_psi[:, 0] + y.shape[0] * (alpha[0] * alpha[0] * polygamma(1, alpha[0]) - alpha[0])
        return RowTerms(loss, d1, g_psi, alpha * q, d1[:, :, None], h_rr[:, None, None])

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """α̂ q ≈ α̂ at the fit, α̂ = 1/CV² of the shard's y (the moment estimate of the shape, at least 1)."""
        m, v = float(np.mean(y)) if y.size else 1.0, float(np.var(y)) if y.size > 1 else 0.0
        return np.full(y.shape[0], max(m * m / v, 1.0) if v > 0 else 1.0)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        alpha = np.exp(psi[:, 0])[None, :]
        with np.errstate(over="ignore"):
            return np.exp(eta) / alpha * gammaincinv(alpha, np.atleast_2d(u))
