"""Bayesian negative binomial regression (log link, NB2): y_j ~ NB(mean μ_j, dispersion φ), Var y_j = μ_j + μ_j²/φ,
μ_j = exp(x_jᵀβ + o_j); θ = (β, log φ)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import digamma, expit, gammaln, polygamma

from ..priors import HalfCauchy, PositivePrior, check_positive_prior
from .common import (
    _GLM,
    RowTerms,
    RowValues,
    _check_positive,
    _check_Xy,
    _gram_lambda_max,
    _rows_of,
    renamed_arguments,
    weighted_grams,
)
from .contract import ParamBlock, runs_own
from .poisson import _check_counts

__all__ = ["NegativeBinomialRegression"]


class _Terms:
    """Per-row pieces of U_i at K points: q = μ/(μ + φ), D = log(1 + μ/φ), digamma differences; all (n, K)."""

    def __init__(self, eta: np.ndarray, rho: np.ndarray, y: np.ndarray, second: bool = False) -> None:
        self.phi = np.exp(rho)  # (K,)
        z = eta - rho[None, :]
        self.q = expit(z)
        self.D = np.logaddexp(0.0, z)
        self.yp = y[:, None] + self.phi[None, :]
        self.dpsi = digamma(self.yp) - digamma(self.phi)[None, :]
        if second:
            self.dtri = polygamma(1, self.yp) - polygamma(1, self.phi)[None, :]

    def g_rho_rows(self, y: np.ndarray) -> np.ndarray:
        """∂U/∂ρ per row: −[φ(ψ(y+φ) − ψ(φ) − D) − y + (y+φ)q]."""
        return -(self.phi * (self.dpsi - self.D) - y[:, None] + self.yp * self.q)

    def hessian_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-row (∂²U/∂η², ∂²U/∂η∂ρ, ∂²U/∂ρ²)."""
        phi = self.phi
        w = self.yp * self.q * (1.0 - self.q)
        h_er = phi * self.q - w
        h_rr = -(phi * (self.dpsi - self.D) + phi * phi * self.dtri + 2.0 * phi * self.q - w)
        return w, h_er, h_rr


@renamed_arguments(dispersion_prior="phi_prior")
@dataclass(frozen=True)
class NegativeBinomialRegression(_GLM):
    """U_i(β, ρ) = −Σ_j [lgamma(y_j + φ) − lgamma(φ) + y_j(η_j − ρ) − (y_j + φ) log(1 + e^{η_j − ρ})], φ = e^ρ,
    η_j = x_jᵀβ + o_j (the constants lgamma(y_j + 1) and y_j o_j dropped).

    `offset` (log exposure) as for `PoissonRegression`. The dispersion φ (large φ: close to Poisson) has the prior
    `phi_prior`, default HalfCauchy(10): weakly informative, and heavy-tailed so that nearly Poisson data are
    not pulled towards overdispersion (its tail in log φ decays like 1/φ, which keeps the posterior proper when the
    data cannot bound φ from above). `smoothness` is a curvature scale, not a bound (see there).
    """

    name = "negative_binomial_regression"
    target_kind = "count"
    _extra = "offset"
    _takes_groups = True

    #: multiplies the reference curvature in `smoothness`.
    smoothness_safety: float = 2.0
    offset: str | RowValues | None = field(default=None, kw_only=True)
    phi_prior: PositivePrior | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))
        prior = HalfCauchy(10.0) if self.phi_prior is None else self.phi_prior
        object.__setattr__(self, "phi_prior", check_positive_prior(prior, "phi_prior"))
        super().__post_init__()

    @property
    def dim(self) -> int:
        return self.n_coef + 1

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        return super().param_blocks() + (ParamBlock("phi", 1, None, None, "exp"),)

    def _prior_parts(self) -> list:
        return super()._prior_parts() + [(np.array([self.n_coef]), self.phi_prior)]

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_counts(y, argname)

    def _terms(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, second: bool = False) -> _Terms:
        x = np.asarray(x, dtype=np.float64)
        return _Terms(self._eta(X, x[:, :-1]), x[:, -1], np.asarray(y, dtype=np.float64), second)

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        eta = self._eta(X, x[:, :-1])
        rho = x[:, -1]
        phi = np.exp(rho)
        yp = y[:, None] + phi[None, :]
        ll = (
            gammaln(yp)
            - gammaln(phi)[None, :]
            + y[:, None] * (eta - rho[None, :])
            - yp * np.logaddexp(0.0, eta - rho[None, :])
        )
        return -ll.sum(axis=0)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        t = self._terms(X, y, x)
        out = np.empty_like(np.asarray(x, dtype=np.float64))
        out[:, :-1] = self._pull(X, t.yp * t.q - np.asarray(y, dtype=np.float64)[:, None])
        out[:, -1] = t.g_rho_rows(np.asarray(y, dtype=np.float64)).sum(axis=0)
        return out

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.potential(X, y, x), self.grad(X, y, x)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        w, h_er, h_rr = self._terms(X, y, x, second=True).hessian_rows()
        v = np.asarray(v, dtype=np.float64)
        Xv = self._eta_dir(X, v[:, :-1])
        vr = v[:, -1]
        out = np.empty_like(v)
        out[:, :-1] = self._pull(X, w * Xv + h_er * vr[None, :])
        out[:, -1] = np.einsum("nk,nk->k", h_er, Xv) + h_rr.sum(axis=0) * vr
        return out

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)[None, :]
        w, h_er, h_rr = (a[:, 0] for a in self._terms(X, y, x, second=True).hessian_rows())
        Xc = self._coef_X(X)
        p = self.n_coef
        H = np.empty((p + 1, p + 1))
        H[:p, :p] = (Xc * w[:, None]).T @ Xc
        H[:p, p] = H[p, :p] = Xc.T @ h_er
        H[p, p] = h_rr.sum()
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`hessian`'s blocks at the K points at once: the β block by `weighted_grams`, the (β, log φ) column as one
        product over the chains."""
        if not runs_own(self, NegativeBinomialRegression, "hessian"):
            return super().hessians(X, y, x)
        w, h_er, h_rr = self._terms(X, y, x, second=True).hessian_rows()
        Xc = self._coef_X(X)
        p = self.n_coef
        H = np.empty((w.shape[1], p + 1, p + 1))
        H[:, :p, :p] = weighted_grams(Xc, w)
        cross = h_er.T @ Xc  # (K, p)
        H[:, :p, p] = cross
        H[:, p, :p] = cross
        H[:, p, p] = h_rr.sum(axis=0)
        return H

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Exact diagonal: X_c² weighted by (y + φ)q(1 − q) ≥ 0 for β; for log φ the row sum, clipped at 0."""
        x, single = _rows_of(x)
        w, _, h_rr = self._terms(X, y, x, second=True).hessian_rows()
        Xc = self._coef_X(X)
        diag = np.empty_like(x)
        diag[:, :-1] = w.T @ (Xc * Xc)
        diag[:, -1] = np.clip(h_rr.sum(axis=0), 0.0, None)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """M_i = smoothness_safety · max(λ_max(X_cᵀ diag(max(y_j, 1)) X_c), n_i): a curvature scale, *not* a bound.

        The β-block weights (y+φ)q(1−q) average μφ/(μ+φ) ≤ μ_j ≈ y_j at the data-generating values (as for Poisson);
        log φ gets at most about one unit of information per row. Far from the data-generating values the true
        Hessian can be larger."""
        X = np.asarray(X, dtype=np.float64)
        w = np.maximum(np.asarray(y, dtype=np.float64), 1.0)
        Xc = self._coef_X(X)
        return self.smoothness_safety * max(_gram_lambda_max(Xc * np.sqrt(w)[:, None]), float(X.shape[0]))

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_log_likelihood(X, y, self._eta(X, x[:, :-1]), x[:, -1:])

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_mean(X, self._eta(X, x[:, :-1]), x[:, -1:])

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return self.eta_draw(X, self._eta(X, x[:, :-1]), x[:, -1:], u)

    # ------------------------------------------------------------------ per row (group effects)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """The per-row pieces of U (class docstring) and their derivatives in η_j and ρ = log φ (`_Terms`)."""
        y = np.asarray(y, dtype=np.float64)
        t = _Terms(eta, psi[:, 0], y, second=order == 2)
        loss = -(gammaln(t.yp) - gammaln(t.phi)[None, :] + y[:, None] * (eta - psi[:, 0][None, :]) - t.yp * t.D)
        if order == 0:
            return RowTerms(loss)
        d1 = t.yp * t.q - y[:, None]
        g_psi = t.g_rho_rows(y).sum(axis=0)[:, None]
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        w, h_er, h_rr = t.hessian_rows()
        return RowTerms(loss, d1, g_psi, w, h_er[:, :, None], h_rr.sum(axis=0)[:, None, None])

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        z = eta - psi[:, 0][None, :]
        phi = np.exp(psi[:, 0])
        yp = y[:, None] + phi[None, :]
        return (
            gammaln(yp) - gammaln(phi)[None, :] - gammaln(y + 1.0)[:, None] + y[:, None] * z - yp * np.logaddexp(0.0, z)
        )

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.exp(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        # here, not at import: scipy.stats is slow to import, and every worker process would pay for it
        # (docs/performance.md, "Measurements behind choices in the code")
        from scipy import stats

        phi = np.exp(psi[:, 0])[None, :]
        q = expit(psi[:, 0][None, :] - eta)  # φ/(φ + μ), NB's success probability
        return stats.nbinom.ppf(np.atleast_2d(u), phi, q)
