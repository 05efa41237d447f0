"""Bayesian zero-inflated negative binomial regression (brms' `zero_inflated_negbinomial`, log link): a row is a
structural zero with probability zi, else NB2 with mean μ_j = exp(η_j) (η_j = x_jᵀβ + o_j, an optional offset) and
dispersion φ (Var = μ + μ²/φ); θ = (β, log φ, logit zi)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, gammaln

from ..priors import BetaPrior, HalfCauchy, PositivePrior
from .common import RowTerms, RowValues, _check_Xy
from .negbin import _Terms
from .poisson import _check_counts
from .rowfamily import RowFamilyGLM

__all__ = ["ZeroInflatedNegativeBinomialRegression", "nb_curvature_weights"]


def nb_curvature_weights(y: np.ndarray) -> np.ndarray:
    """μφ/(μ + φ) per row (the NB's ∂²ℓ/∂η² at its fit), μ ≈ max(y_j, 1) and φ̂ the moment estimate m²/(v − m) of
    the shard's nonzero counts (μ alone, the Poisson's, where they are not overdispersed)."""
    m = np.maximum(y, 1.0)
    pos = y[y > 0]
    mean, var = (float(np.mean(pos)), float(np.var(pos))) if pos.size > 1 else (1.0, 0.0)
    if var <= mean:
        return m
    phi = mean * mean / (var - mean)
    return m * phi / (m + phi)


@dataclass(frozen=True)
class ZeroInflatedNegativeBinomialRegression(RowFamilyGLM):
    """P(y_j = 0) = zi + (1 − zi) p0_j, p0_j = (φ/(μ_j + φ))^φ, P(y_j = k) = (1 − zi) NB(k; μ_j, φ) for k ≥ 1 (brms'
    `zero_inflated_negbinomial`): per row, with ρ = log φ, t = logit zi and D = log(1 + μ/φ), ℓ_j = −log(zi + (1 − zi)
    e^{−φD}) for a zero, ℓ_j = log(1 + e^t) + ℓ_NB(y_j) otherwise, ℓ_NB the negative binomial's whole −log pmf
    (`NegativeBinomialRegression`). `offset` (log exposure) as for `PoissonRegression`.

    θ = (β, ρ, t). Priors: `coef_prior` N(0, 10²), `phi_prior` HalfCauchy(10) (the negative binomial's),
    `zi_prior` BetaPrior(1, 1) (brms' beta(1, 1)). The mean is (1 − zi) μ_j; draws are 0 where u ≤ zi, else the
    NB quantile at (u − zi)/(1 − zi). Responses must be counts."""

    name = "zero_inflated_negative_binomial_regression"
    target_kind = "count"
    _extra = "offset"

    offset: str | RowValues | None = field(default=None, kw_only=True)
    phi_prior: PositivePrior | None = field(default=None, kw_only=True)
    zi_prior: BetaPrior | None = field(default=None, kw_only=True)

    _family_params = (("phi", "phi_prior", HalfCauchy(10.0)), ("zi", "zi_prior", BetaPrior(1.0, 1.0)))
    _probabilities = frozenset({"zi"})

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_counts(y, argname)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring). A count k ≥ 1: the negative binomial's terms (`negbin._Terms`), plus ∂ℓ/∂t = zi,
        ∂²ℓ/∂t² = zi(1 − zi). A zero: ℓ = −log Σ_c e^{A_c} over A₁ = log zi, A₂ = log(1 − zi) + L0, L0 = −φD, with
        weights π = (1 − w, w), w = e^{A₂ + ℓ}; ∇ℓ = −Σ π_c ∇A_c and ∇²ℓ = −[Σ π_c (∇²A_c + ∇A_c∇A_cᵀ) − m mᵀ],
        m = Σ π_c ∇A_c, from ∂L0/∂η = −φq, ∂L0/∂ρ = φ(q − D), ∂²L0/∂η² = −φq(1 − q), ∂²L0/∂η∂ρ = −φq²,
        ∂²L0/∂ρ² = φ(q(1 + q) − D), q = μ/(μ + φ)."""
        rho, t = psi[:, 0], psi[:, 1][None, :]
        nb = _Terms(eta, rho, y, second=order == 2)
        phi = nb.phi[None, :]
        zi = expit(t)
        log_zi, log_not = -np.logaddexp(0.0, -t), -np.logaddexp(0.0, t)
        zero = (y == 0)[:, None]
        L0 = -phi * nb.D
        log_p0 = np.logaddexp(log_zi, log_not + L0)
        nb_loss = -(
            gammaln(nb.yp) - gammaln(phi) - gammaln(y + 1.0)[:, None] + y[:, None] * (eta - rho[None, :]) - nb.yp * nb.D
        )
        loss = np.where(zero, -log_p0, nb_loss - log_not)
        if order == 0:
            return RowTerms(loss)
        w = np.where(zero, np.exp(log_not + L0 - log_p0), 0.0)
        q = nb.q
        L_e, L_r = -phi * q, phi * (q - nb.D)
        d1 = np.where(zero, -w * L_e, nb.yp * q - y[:, None])
        g_rho = np.where(zero, -w * L_r, nb.g_rho_rows(y))
        g_t = np.where(zero, zi + w - 1.0, zi)
        g_psi = np.stack([g_rho.sum(axis=0), g_t.sum(axis=0)], axis=1)
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        w_nb, h_er_nb, h_rr_nb = nb.hessian_rows()
        L_ee, L_er, L_rr = -phi * q * (1.0 - q), -phi * q * q, phi * (q * (1.0 + q) - nb.D)
        # a zero: −[w(∇²L0 + ∇A₂∇A₂ᵀ) + (1 − w)∇A₁∇A₁ᵀ − m mᵀ] − (Σ π_c) ∂²(log zi or log(1 − zi))/∂t², with
        # ∇A₁ = (0, 0, 1 − zi), ∇A₂ = (L_e, L_r, −zi), m = (w L_e, w L_r, 1 − zi − w); the t² term is zi(1 − zi)
        v = w * (1.0 - w)
        d2 = np.where(zero, -(w * L_ee + v * L_e * L_e), w_nb)
        h_er = np.where(zero, -(w * L_er + v * L_e * L_r), h_er_nb)
        h_rr = np.where(zero, -(w * L_rr + v * L_r * L_r), h_rr_nb)
        h_et = np.where(zero, v * L_e, 0.0)
        h_rt = np.where(zero, v * L_r, 0.0)
        h_tt = zi * (1.0 - zi) - np.where(zero, v, 0.0)
        h_psi = np.empty((eta.shape[1], 2, 2))
        h_psi[:, 0, 0] = h_rr.sum(axis=0)
        h_psi[:, 0, 1] = h_psi[:, 1, 0] = h_rt.sum(axis=0)
        h_psi[:, 1, 1] = h_tt.sum(axis=0)
        return RowTerms(loss, d1, g_psi, d2, np.stack([h_er, h_et], axis=2), h_psi)

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return nb_curvature_weights(y)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return (1.0 - expit(psi[:, 1]))[None, :] * np.exp(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        zi = expit(psi[:, 1])[None, :]
        phi = np.exp(psi[:, 0])[None, :]
        u = np.atleast_2d(u)
        rest = np.clip((u - zi) / (1.0 - zi), 0.0, 1.0)
        return np.where(u <= zi, 0.0, stats.nbinom.ppf(rest, phi, expit(psi[:, 0][None, :] - eta)))
