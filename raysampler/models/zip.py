"""Bayesian zero-inflated Poisson regression (brms' `zero_inflated_poisson`, log link): a row is a structural zero
with probability zi, else Poisson with mean λ_j = exp(η_j) (η_j = x_jᵀβ + o_j, an optional offset o_j, log
exposure); θ = (β, logit zi)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, gammaln

from ..priors import BetaPrior
from .common import RowTerms, RowValues, _check_Xy
from .poisson import _check_counts
from .rowfamily import RowFamilyGLM

__all__ = ["ZeroInflatedPoissonRegression"]


@dataclass(frozen=True)
class ZeroInflatedPoissonRegression(RowFamilyGLM):
    """P(y_j = 0) = zi + (1 − zi) e^{−λ_j}, P(y_j = k) = (1 − zi) Poisson(k; λ_j) for k ≥ 1 (brms'
    `zero_inflated_poisson`, zi one probability for every row): per row, with t = logit zi,
    ℓ_j = −log(zi + (1 − zi) e^{−λ_j}) for a zero, ℓ_j = log(1 + e^t) − y_j η_j + λ_j + log y_j! otherwise (the whole
    −log likelihood). `offset` (log exposure) as for `PoissonRegression`.

    θ = (β, t). Priors: `coef_prior` N(0, 10²), `zi_prior` BetaPrior(1, 1) (brms' beta(1, 1): uniform on zi). The
    mean is (1 − zi) λ_j; draws are 0 where u ≤ zi, else the Poisson quantile at (u − zi)/(1 − zi). Responses
    must be counts."""

    name = "zero_inflated_poisson_regression"
    target_kind = "count"
    _extra = "offset"

    offset: str | RowValues | None = field(default=None, kw_only=True)
    zi_prior: BetaPrior | None = field(default=None, kw_only=True)

    _family_params = (("zi", "zi_prior", BetaPrior(1.0, 1.0)),)
    _probabilities = frozenset({"zi"})

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_counts(y, argname)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring). A zero, with w = (1 − zi)e^{−λ}/(zi + (1 − zi)e^{−λ}) (the chance it is Poisson's):
        ∂ℓ/∂η = wλ, ∂²ℓ/∂η² = wλ(1 − λ(1 − w)), ∂ℓ/∂t = zi + w − 1, ∂²ℓ/∂η∂t = −λw(1 − w),
        ∂²ℓ/∂t² = zi(1 − zi) − w(1 − w). A count k ≥ 1: ∂ℓ/∂η = λ − k, ∂²ℓ/∂η² = λ, ∂ℓ/∂t = zi, ∂²ℓ/∂t² = zi(1 − zi)."""
        t = psi[:, 0][None, :]
        zi = expit(t)
        with np.errstate(over="ignore"):
            lam = np.exp(eta)
        zero = (y == 0)[:, None]
        log_zi, log_not = -np.logaddexp(0.0, -t), -np.logaddexp(0.0, t)
        log_p0 = np.logaddexp(log_zi, log_not - lam)
        counts = -log_not - y[:, None] * eta + lam + gammaln(y + 1.0)[:, None]
        loss = np.where(zero, -log_p0, counts)
        if order == 0:
            return RowTerms(loss)
        w = np.where(zero, np.exp(log_not - lam - log_p0), 0.0)
        d1 = np.where(zero, w * lam, lam - y[:, None])
        g_rows = np.where(zero, zi + w - 1.0, zi)
        g_psi = g_rows.sum(axis=0)[:, None]
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        d2 = np.where(zero, w * lam * (1.0 - lam * (1.0 - w)), lam)
        h_et = np.where(zero, -lam * w * (1.0 - w), 0.0)
        h_tt = (zi * (1.0 - zi) - np.where(zero, w * (1.0 - w), 0.0)).sum(axis=0)
        return RowTerms(loss, d1, g_psi, d2, h_et[:, :, None], h_tt[:, None, None])

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """λ ≈ max(y_j, 1) per row (the Poisson's curvature at its fit)."""
        return np.maximum(y, 1.0)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return (1.0 - expit(psi[:, 0]))[None, :] * np.exp(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        zi = expit(psi[:, 0])[None, :]
        u = np.atleast_2d(u)
        with np.errstate(over="ignore"):
            lam = np.exp(eta)
        rest = np.clip((u - zi) / (1.0 - zi), 0.0, 1.0)
        return np.where(u <= zi, 0.0, stats.poisson.ppf(rest, lam))
