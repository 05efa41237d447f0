"""Bayesian hurdle count regressions (brms' `hurdle_poisson` and `hurdle_negbinomial`, log link): a row is zero with
probability hu, else a draw of the count distribution truncated to y ≥ 1, with mean parameter μ_j = exp(η_j)
(η_j = x_jᵀβ + o_j, an optional offset o_j, log exposure). Unlike zero inflation, every zero comes from the hurdle
and the counts never do: hu is the share of zeros, and the likelihood splits into a Bernoulli part for "zero or
not" and a truncated count part for the positive rows.

Per row, with t = logit hu and L0 = log p0 the count distribution's log probability of a zero:
ℓ_j = log(1 + e^{−t}) for a zero, ℓ_j = log(1 + e^t) + ℓ_count(y_j) + log(1 − e^{L0}) for a count y_j ≥ 1 (the
whole −log likelihood). The truncation term T = log(1 − e^{L0}) has ∇T = −r ∇L0 and ∇²T = −r ∇²L0 − r(1 + r)
∇L0 ∇L0ᵀ, r = e^{L0}/(1 − e^{L0}) (`_truncation`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, gammaln

from ..priors import BetaPrior, HalfCauchy, PositivePrior
from .common import RowTerms, RowValues, _check_Xy
from .negbin import _Terms
from .poisson import _check_counts
from .rowfamily import RowFamilyGLM
from .zinb import nb_curvature_weights

__all__ = ["HurdleNegativeBinomialRegression", "HurdlePoissonRegression"]

_LOG_HALF = -np.log(2.0)


def _truncation(L0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, r) = (log(1 − e^{L0}), e^{L0}/(1 − e^{L0})) for L0 ≤ 0, each computed without cancellation: log(−expm1)
    near 0, log1p(−exp) further out. L0 = 0 (a mean that underflowed) gives T = −inf, r = inf: a positive count
    is then impossible, as it is in the limit."""
    with np.errstate(divide="ignore", over="ignore"):
        T = np.where(
            L0 > _LOG_HALF, np.log(-np.expm1(np.minimum(L0, 0.0))), np.log1p(-np.exp(np.minimum(L0, _LOG_HALF)))
        )
        r = 1.0 / np.expm1(-L0)
    return T, r


def _hurdle_terms(t: np.ndarray, zero: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hurdle's part of each row's terms at t = logit hu (1, K): (loss, ∂/∂t, ∂²/∂t²), each (n, K): −log hu
    for a zero, −log(1 − hu) for a count."""
    loss = np.where(zero, np.logaddexp(0.0, -t), np.logaddexp(0.0, t))
    hu = expit(t)
    return loss, np.where(zero, hu - 1.0, hu), np.broadcast_to(hu * (1.0 - hu), loss.shape)


def _truncated_ppf(ppf: Callable[..., np.ndarray], p0: np.ndarray, v: np.ndarray, *args: np.ndarray) -> np.ndarray:
    """The count distribution truncated to y ≥ 1 at level v ∈ [0, 1]: its quantile at p0 + v(1 − p0), at least 1."""
    level = np.clip(p0 + v * (1.0 - p0), 0.0, 1.0)
    return np.maximum(ppf(level, *args), 1.0)


@dataclass(frozen=True)
class HurdlePoissonRegression(RowFamilyGLM):
    """P(y_j = 0) = hu, P(y_j = k) = (1 − hu) Poisson(k; λ_j)/(1 − e^{−λ_j}) for k ≥ 1 (brms' `hurdle_poisson`, hu
    one probability for every row): per row, ℓ_j = log(1 + e^{−t}) for a zero, ℓ_j = log(1 + e^t) − y_j η_j + λ_j +
    log y_j! + log(1 − e^{−λ_j}) otherwise (module docstring, L0 = −λ). `offset` (log exposure) as for
    `PoissonRegression`.

    θ = (β, t), t = logit hu. Priors: `coef_prior` N(0, 10²), `hu_prior` BetaPrior(1, 1) (brms' beta(1, 1)). The
    mean is (1 − hu) λ_j/(1 − e^{−λ_j}); draws are 0 where u ≤ hu, else the truncated Poisson's quantile at
    (u − hu)/(1 − hu). Responses must be counts."""

    name = "hurdle_poisson_regression"
    target_kind = "count"
    _extra = "offset"

    offset: str | RowValues | None = field(default=None, kw_only=True)
    hu_prior: BetaPrior | None = field(default=None, kw_only=True)

    _family_params = (("hu", "hu_prior", BetaPrior(1.0, 1.0)),)
    _probabilities = frozenset({"hu"})

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_counts(y, argname)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring). A count k ≥ 1, with a = λ/(e^λ − 1) (= rλ): ∂ℓ/∂η = λ + a − k,
        ∂²ℓ/∂η² = λ + a(1 − λ − a) (the truncated Poisson's variance, > 0), no η–t cross term. A zero does not
        depend on η. In t: ∂ℓ/∂t = hu − 1 (a zero) or hu, ∂²ℓ/∂t² = hu(1 − hu)."""
        t = psi[:, 0][None, :]
        zero = (y == 0)[:, None]
        with np.errstate(over="ignore"):
            lam = np.exp(eta)
        T, r = _truncation(-lam)
        hurdle, g_t, h_t = _hurdle_terms(t, zero)
        counts = -y[:, None] * eta + lam + gammaln(y + 1.0)[:, None] + T
        loss = hurdle + np.where(zero, 0.0, counts)
        if order == 0:
            return RowTerms(loss)
        with np.errstate(invalid="ignore"):
            a = np.where(lam > 0.0, r * lam, 1.0)  # λ/(e^λ − 1) → 1 as λ → 0
        d1 = np.where(zero, 0.0, lam + a - y[:, None])
        g_psi = g_t.sum(axis=0)[:, None]
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        d2 = np.where(zero, 0.0, lam + a * (1.0 - lam - a))
        h_et = np.zeros_like(d2)
        return RowTerms(loss, d1, g_psi, d2, h_et[:, :, None], h_t.sum(axis=0)[:, None, None])

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """λ ≈ y_j for a count (the truncated Poisson's curvature at its fit), 0 for a zero (η does not enter it)."""
        return np.where(y > 0, np.maximum(y, 1.0), 0.0)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            lam = np.exp(eta)
            positive = np.where(lam > 0.0, lam / -np.expm1(-lam), 1.0)
        return (1.0 - expit(psi[:, 0]))[None, :] * positive

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        hu = expit(psi[:, 0])[None, :]
        u = np.atleast_2d(u)
        with np.errstate(over="ignore"):
            lam = np.exp(eta)
        v = np.clip((u - hu) / (1.0 - hu), 0.0, 1.0)
        return np.where(u <= hu, 0.0, _truncated_ppf(stats.poisson.ppf, np.exp(-lam), v, lam))


@dataclass(frozen=True)
class HurdleNegativeBinomialRegression(RowFamilyGLM):
    """P(y_j = 0) = hu, P(y_j = k) = (1 − hu) NB(k; μ_j, φ)/(1 − p0_j), p0_j = (φ/(μ_j + φ))^φ, for k ≥ 1 (brms'
    `hurdle_negbinomial`; NB2, Var = μ + μ²/φ): per row, with ρ = log φ and D = log(1 + μ/φ), L0 = −φD, ℓ_j =
    log(1 + e^{−t}) for a zero, ℓ_j = log(1 + e^t) + ℓ_NB(y_j) + log(1 − e^{L0}) otherwise, ℓ_NB the negative
    binomial's whole −log pmf (`NegativeBinomialRegression`). `offset` (log exposure) as for `PoissonRegression`.

    θ = (β, ρ, t). Priors: `coef_prior` N(0, 10²), `phi_prior` HalfCauchy(10) (the negative binomial's), `hu_prior`
    BetaPrior(1, 1). The mean is (1 − hu) μ_j/(1 − p0_j); draws are 0 where u ≤ hu, else the truncated NB's
    quantile at (u − hu)/(1 − hu). Responses must be counts."""

    name = "hurdle_negative_binomial_regression"
    target_kind = "count"
    _extra = "offset"

    offset: str | RowValues | None = field(default=None, kw_only=True)
    phi_prior: PositivePrior | None = field(default=None, kw_only=True)
    hu_prior: BetaPrior | None = field(default=None, kw_only=True)

    _family_params = (("phi", "phi_prior", HalfCauchy(10.0)), ("hu", "hu_prior", BetaPrior(1.0, 1.0)))
    _probabilities = frozenset({"hu"})

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_counts(y, argname)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring). A count k ≥ 1: the negative binomial's terms (`negbin._Terms`) plus the truncation's
        (module docstring), from ∂L0/∂η = −φq, ∂L0/∂ρ = φ(q − D), ∂²L0/∂η² = −φq(1 − q), ∂²L0/∂η∂ρ = −φq²,
        ∂²L0/∂ρ² = φ(q(1 + q) − D), q = μ/(μ + φ). A zero depends on t alone: ∂ℓ/∂t = hu − 1 (a zero) or hu,
        ∂²ℓ/∂t² = hu(1 − hu); no cross term with t."""
        rho, t = psi[:, 0], psi[:, 1][None, :]
        nb = _Terms(eta, rho, y, second=order == 2)
        phi = nb.phi[None, :]
        zero = (y == 0)[:, None]
        L0 = -phi * nb.D
        T, r = _truncation(L0)
        hurdle, g_t, h_t = _hurdle_terms(t, zero)
        nb_loss = -(
            gammaln(nb.yp) - gammaln(phi) - gammaln(y + 1.0)[:, None] + y[:, None] * (eta - rho[None, :]) - nb.yp * nb.D
        )
        loss = hurdle + np.where(zero, 0.0, nb_loss + T)
        if order == 0:
            return RowTerms(loss)
        q = nb.q
        L_e, L_r = -phi * q, phi * (q - nb.D)
        with np.errstate(invalid="ignore"):
            d1 = np.where(zero, 0.0, nb.yp * q - y[:, None] - r * L_e)
            g_rho = np.where(zero, 0.0, nb.g_rho_rows(y) - r * L_r)
        g_psi = np.stack([g_rho.sum(axis=0), g_t.sum(axis=0)], axis=1)
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        w_nb, h_er_nb, h_rr_nb = nb.hessian_rows()
        L_ee, L_er, L_rr = -phi * q * (1.0 - q), -phi * q * q, phi * (q * (1.0 + q) - nb.D)
        s = r * (1.0 + r)
        with np.errstate(invalid="ignore"):
            d2 = np.where(zero, 0.0, w_nb - r * L_ee - s * L_e * L_e)
            h_er = np.where(zero, 0.0, h_er_nb - r * L_er - s * L_e * L_r)
            h_rr = np.where(zero, 0.0, h_rr_nb - r * L_rr - s * L_r * L_r)
        h_psi = np.zeros((eta.shape[1], 2, 2))
        h_psi[:, 0, 0] = h_rr.sum(axis=0)
        h_psi[:, 1, 1] = h_t.sum(axis=0)
        return RowTerms(loss, d1, g_psi, d2, np.stack([h_er, np.zeros_like(h_er)], axis=2), h_psi)

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The negative binomial's (`zinb.nb_curvature_weights`) for a count, 0 for a zero (η does not enter it)."""
        return np.where(y > 0, nb_curvature_weights(y), 0.0)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        phi = np.exp(psi[:, 0])[None, :]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            mu = np.exp(eta)
            phiD = phi * np.logaddexp(0.0, eta - psi[:, 0][None, :])
            positive = np.where(phiD > 0.0, mu / -np.expm1(-phiD), 1.0)
        return (1.0 - expit(psi[:, 1]))[None, :] * positive

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        hu = expit(psi[:, 1])[None, :]
        phi = np.exp(psi[:, 0])[None, :]
        u = np.atleast_2d(u)
        z = eta - psi[:, 0][None, :]
        p0 = np.exp(-phi * np.logaddexp(0.0, z))
        v = np.clip((u - hu) / (1.0 - hu), 0.0, 1.0)
        return np.where(u <= hu, 0.0, _truncated_ppf(stats.nbinom.ppf, p0, v, phi, expit(-z)))
