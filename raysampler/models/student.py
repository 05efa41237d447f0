"""Bayesian Student-t regression (brms' `student`): y_j ~ t_ν(η_j, σ), identity link, θ = (β, log σ, log ν).
Robust regression: heavy tails let outlying rows pull the coefficients less than the Gaussian family would."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import digamma, gammaln, polygamma, stdtrit

from ..priors import Gamma, HalfNormal, PositivePrior
from .common import RowTerms
from .rowfamily import RowFamilyGLM

__all__ = ["StudentTRegression"]

_HALF_LOG_PI = 0.5 * np.log(np.pi)


@dataclass(frozen=True)
class StudentTRegression(RowFamilyGLM):
    """y_j = η_j + σ ε_j, ε_j ~ t_ν (brms' `student`, identity link on the location): per row
    ℓ_j = log Γ(ν/2) − log Γ((ν+1)/2) + ½ log(νπ) + log σ + (ν+1)/2 · log(1 + r_j²/ν), r_j = (y_j − η_j)/σ,
    the whole −log density (so `log_likelihood` is −ℓ_j).

    θ = (β, τ = log σ, ρ = log ν). Priors: `coef_prior` N(0, 10²) (as the Gaussian family's with σ unknown),
    `sigma_prior` HalfNormal(10), `nu_prior` Gamma(2, 0.1) (brms' gamma(2, 0.1); brms also bounds ν ≥ 1, here ν > 0,
    where that prior puts 0.5 % of its mass below 1). The mean of y is η (for ν > 1); draws are η + σ t_ν⁻¹(u)."""

    name = "student_t_regression"
    target_kind = "real"

    sigma_prior: PositivePrior | None = field(default=None, kw_only=True)
    nu_prior: PositivePrior | None = field(default=None, kw_only=True)

    _family_params = (("sigma", "sigma_prior", HalfNormal(10.0)), ("nu", "nu_prior", Gamma(2.0, 0.1)))

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring) and, with w = (ν+1)/(ν+r²): ∂ℓ/∂η = −w r/σ, ∂ℓ/∂τ = 1 − w r²,
        ∂ℓ/∂ρ = ν/2 (ψ(ν/2) − ψ((ν+1)/2)) + ½ + ν/2 log(1 + r²/ν) − w r²/2; the second derivatives below."""
        tau, rho = psi[:, 0], psi[:, 1]
        sigma, nu = np.exp(tau)[None, :], np.exp(rho)[None, :]
        r = (y[:, None] - eta) / sigma
        r2 = r * r
        A = np.log1p(r2 / nu)
        const = gammaln(0.5 * nu) - gammaln(0.5 * (nu + 1.0)) + 0.5 * rho[None, :] + _HALF_LOG_PI + tau[None, :]
        loss = const + 0.5 * (nu + 1.0) * A
        if order == 0:
            return RowTerms(loss)
        D = nu + r2
        w = (nu + 1.0) / D
        d1 = -w * r / sigma
        dpsi = digamma(0.5 * nu) - digamma(0.5 * (nu + 1.0))
        g_tau = 1.0 - w * r2
        g_rho = 0.5 * nu * dpsi + 0.5 + 0.5 * nu * A - 0.5 * w * r2
        g_psi = np.stack([g_tau.sum(axis=0), g_rho.sum(axis=0)], axis=1)
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        D2 = D * D
        d2 = (nu + 1.0) * (nu - r2) / (sigma * sigma * D2)
        h_et = 2.0 * nu * (nu + 1.0) * r / (sigma * D2)
        h_er = -nu * r * (r2 - 1.0) / (sigma * D2)
        h_tt = 2.0 * nu * (nu + 1.0) * r2 / D2
        h_tr = -nu * r2 * (r2 - 1.0) / D2
        tri = polygamma(1, 0.5 * nu) - polygamma(1, 0.5 * (nu + 1.0))
        h_rr = nu * (0.5 * dpsi + 0.25 * nu * tri + 0.5 * A - 0.5 * r2 / D - 0.5 * r2 * (r2 - 1.0) / D2)
        h_psi = np.empty((eta.shape[1], 2, 2))
        h_psi[:, 0, 0] = h_tt.sum(axis=0)
        h_psi[:, 0, 1] = h_psi[:, 1, 0] = h_tr.sum(axis=0)
        h_psi[:, 1, 1] = h_rr.sum(axis=0)
        return RowTerms(loss, d1, g_psi, d2, np.stack([h_et, h_er], axis=2), h_psi)

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """1/σ̂² (the Gaussian's, ∂²ℓ/∂η² at r = 0 for large ν), σ̂ the shard's least-squares residual sd."""
        Xc = self._coef_X(np.asarray(X, dtype=np.float64))
        n, p = Xc.shape
        if n > p:
            r = y - Xc @ np.linalg.lstsq(Xc, y, rcond=None)[0]
            var = float(r @ r) / (n - p)
        else:
            var = float(np.var(y)) if n > 1 else 0.0
        return np.full(n, 1.0 / var if var > 0 else 1.0)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        """The location η: y's mean where ν > 1 (brms' `posterior_epred` gives it for every ν too)."""
        return eta

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        sigma, nu = np.exp(psi[:, 0])[None, :], np.exp(psi[:, 1])[None, :]
        return eta + sigma * stdtrit(nu, np.atleast_2d(u))
