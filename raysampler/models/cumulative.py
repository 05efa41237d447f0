"""Bayesian ordinal regression, cumulative logit (brms' `cumulative("logit")`) and cumulative probit
(`cumulative("probit")`): y_j ∈ {1, …, K} with P(y_j ≤ k) = F(τ_k − η_j), F the logistic function or the standard
normal's distribution function Φ, ordered thresholds τ_1 < … < τ_{K−1}, η_j = x_jᵀβ (+ group effects) with no
intercept (the thresholds hold it). The thresholds are sampled as the first one and the log gaps between them,
θ = (β, τ_1, log δ_2, …, log δ_{K−1}), δ_k = τ_k − τ_{k−1} > 0, and reported as τ_1 and the gaps δ_k."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import expit, ndtr

from ..errors import ArgumentError
from ..priors import CoefPrior, HalfNormal, PositivePrior, StudentT
from .common import RowTerms, _check_positive, _check_Xy
from .contract import DataSpec, Model, ParamBlock
from .rowfamily import RowFamilyGLM

__all__ = ["CumulativeProbitRegression", "CumulativeRegression"]


def _logistic_density(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(f, f′) of the logistic distribution at x (0 at ±inf)."""
    F = expit(x)
    f = F * (1.0 - F)
    return f, f * (1.0 - 2.0 * F)


def _probit_parts(
    b: np.ndarray, a: np.ndarray, order: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """With p = Φ(b) − Φ(a) (a < b, ±inf at the end categories): −log p, −φ(b)/p, φ(a)/p, φ′(b)/p and φ′(a)/p,
    from logarithms (log Φ by `log_ndtr`), so that rows deep in a tail, where Φ(b) underflows, keep finite terms
    (φ(b)/Φ(b) → −b there). Below the median p = Φ(b)(1 − Φ(a)/Φ(b)); above it, by symmetry, with −a and −b."""
    from scipy.special import log_ndtr

    upper = a > 0
    hi, lo = np.where(upper, -a, b), np.where(upper, -b, a)  # p = Φ(hi) − Φ(lo), hi ≤ 0 side kept exact
    with np.errstate(divide="ignore", invalid="ignore"):
        log_hi, log_lo = log_ndtr(hi), log_ndtr(lo)
        log_p = log_hi + np.log1p(-np.exp(log_lo - log_hi))
    loss = -log_p
    if order == 0:
        return loss, loss, loss, loss, loss
    half_log_2pi = 0.5 * np.log(2.0 * np.pi)
    with np.errstate(invalid="ignore", over="ignore"):
        rb = np.where(np.isfinite(b), np.exp(-0.5 * b * b - half_log_2pi - log_p), 0.0)  # φ(b)/p
        ra = np.where(np.isfinite(a), np.exp(-0.5 * a * a - half_log_2pi - log_p), 0.0)  # φ(a)/p
        fpb = np.where(np.isfinite(b), -b * rb, 0.0)
        fpa = np.where(np.isfinite(a), -a * ra, 0.0)
    return loss, -rb, ra, fpb, fpa


@dataclass(frozen=True)
class CumulativeRegression(RowFamilyGLM):
    """Cumulative-logit ordinal regression (module docstring): per row, with b = τ_{y_j} − η_j and
    a = τ_{y_j − 1} − η_j (τ_0 = −∞, τ_K = +∞), ℓ_j = −log(F(b) − F(a)), F the logistic function: the whole −log
    probability of the row's category.

    `n_categories` is K ≥ 2 (a formula reads it from its response's levels over all shards; y is 1..K). Priors:
    `coef_prior` N(0, 10²) on β; `threshold_prior` StudentT(3, 0, 2.5) on τ_1 (brms' default on each threshold) and
    `gap_prior` HalfNormal(5) on each gap δ_k (brms puts its Student-t on every τ_k; a prior on the gaps keeps them
    ordered by construction). Reported: `Intercept` (τ_1, brms' `Intercept[1]`) and `delta[k]` (δ_k; brms'
    `Intercept[k]` is τ_1 + δ_2 + … + δ_k). `predict_mean` is E[y] = 1 + Σ_k P(y > k); draws are the category
    where u falls among the cumulative probabilities."""

    name = "cumulative_regression"
    target_kind = "count"
    #: F: "logit" (the logistic function) or "probit" (Φ)
    link = "logit"

    n_categories: int | None = field(
        default=None,
        kw_only=True,
        metadata={"description": "the number K of ordered categories of y (1..K); a formula reads it from the data"},
    )
    threshold_prior: CoefPrior | None = field(default=None, kw_only=True)
    gap_prior: PositivePrior | None = field(default=None, kw_only=True)

    _family_params = (
        ("Intercept", "threshold_prior", StudentT(3.0, 0.0, 2.5)),
        ("delta", "gap_prior", HalfNormal(5.0)),
    )
    _reals = frozenset({"Intercept"})

    def __post_init__(self) -> None:
        if self.n_categories is not None:
            k = _check_positive("n_categories", self.n_categories, integer=True)
            if k < 2:
                raise ArgumentError(("model", "n_categories"), f"n_categories must be >= 2 ordered categories, got {k}")
        super().__post_init__()
        if getattr(self.threshold_prior, "size", None) is not None:
            raise ArgumentError(("model", "threshold_prior"), "threshold_prior must be one prior (scalar arguments)")

    def bind(self, spec: DataSpec) -> Model:
        if self.n_categories is None:
            raise ArgumentError(
                ("model", "n_categories"),
                "n_categories: a cumulative model needs the number K of ordered categories (y in 1..K); a formula "
                "model reads it from its response's levels",
            )
        return super().bind(spec)

    # ------------------------------------------------------------------ layout

    @property
    def n_family(self) -> int:
        """K − 1 threshold coordinates: τ_1 and the K − 2 log gaps."""
        if self.n_categories is None:
            raise ValueError("CumulativeRegression needs n_categories before its dimension is known")
        return self.n_categories - 1

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        blocks = super(RowFamilyGLM, self).param_blocks() + (ParamBlock("Intercept", 1, None, None, "identity"),)
        gaps = self.n_family - 1
        if gaps:
            labels = tuple(str(k) for k in range(2, self.n_family + 1))
            blocks += (ParamBlock("delta", gaps, "threshold", labels, "exp"),)
        return blocks

    def _prior_parts(self) -> list:
        p = self.n_coef
        parts: list[Any] = super(RowFamilyGLM, self)._prior_parts() + [(np.array([p]), self.threshold_prior)]
        if self.n_family > 1:
            parts.append((np.arange(p + 1, p + self.n_family), self.gap_prior))
        return parts

    def thresholds(self, psi: np.ndarray) -> np.ndarray:
        """τ (K, K−1) from the sampler's (τ_1, log δ_2, …) (K, K−1)."""
        psi = np.asarray(psi, dtype=np.float64)
        return np.cumsum(np.concatenate([psi[:, :1], np.exp(psi[:, 1:])], axis=1), axis=1)

    def response_ok(self, y: np.ndarray) -> np.ndarray:
        K = self.n_categories
        return (y == np.floor(y)) & (y >= 1) & (y <= (np.inf if K is None else K))

    def check_response(self, y: np.ndarray, argname: str = "data", column: str = "y") -> None:
        y = np.asarray(y, dtype=np.float64)
        bad = np.flatnonzero(~self.response_ok(y))
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                f"{argname}: the cumulative family's response (column {column!r}) must be a category 1..."
                f"{self.n_categories} in every row; row {j} has {float(y[j])!r} ({bad.size} row(s) outside)"
            )

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        self.check_response(y, argname)

    # ------------------------------------------------------------------ the per-row terms

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j (class docstring); with p = F(b) − F(a) and f = F′: ∂ℓ/∂b = −f(b)/p, ∂ℓ/∂a = f(a)/p,
        ∂²ℓ/∂b² = −f′(b)/p + (f(b)/p)², ∂²ℓ/∂a² = f′(a)/p + (f(a)/p)², ∂²ℓ/∂a∂b = −f(a)f(b)/p². b and a move with η
        by −1 and with the threshold coordinates through J = ∂τ/∂ψ (τ_k = ψ_1 + Σ_{2≤i≤k} e^{ψ_i}), whose second
        derivatives are e^{ψ_i} on the diagonal (i ≥ 2)."""
        n, K = eta.shape
        m = self.n_family
        tau = self.thresholds(psi)
        full = np.concatenate([np.full((K, 1), -np.inf), tau, np.full((K, 1), np.inf)], axis=1)
        yi = y.astype(np.intp)
        b, a = full[:, yi].T - eta, full[:, yi - 1].T - eta
        if self.link == "probit":
            loss, lb, la, fpb, fpa = _probit_parts(b, a, order)
            if order == 0:
                return RowTerms(loss)
        else:
            p = np.where(a > 0, expit(-a) - expit(-b), expit(b) - expit(a))  # no cancellation above the median
            with np.errstate(divide="ignore"):
                loss = -np.log(p)
            if order == 0:
                return RowTerms(loss)
            fb, fpb = _logistic_density(b)
            fa, fpa = _logistic_density(a)
            lb, la = -fb / p, fa / p
            fpb, fpa = fpb / p, fpa / p
        d1 = -(lb + la)
        steps = np.concatenate([np.ones((K, 1)), np.exp(psi[:, 1:])], axis=1)  # ∂τ_k/∂ψ_i for i ≤ k: (K, m)
        idx = np.arange(m)
        Jb = ((idx[None, :] < yi[:, None]) & (yi[:, None] <= m))[:, None, :] * steps[None, :, :]  # (n, K, m)
        Ja = (idx[None, :] < (yi - 1)[:, None])[:, None, :] * steps[None, :, :]
        own = lb[:, :, None] * Jb + la[:, :, None] * Ja  # (n, K, m): ∂ℓ/∂ψ per row
        g_psi = own.sum(axis=0)
        if order == 1:
            return RowTerms(loss, d1, g_psi)
        lbb = -fpb + lb * lb
        laa = fpa + la * la
        lab = lb * la
        d2 = lbb + 2.0 * lab + laa
        h_eta = -(lbb + lab)[:, :, None] * Jb - (lab + laa)[:, :, None] * Ja
        h_psi = (
            np.einsum("nk,nki,nkj->kij", lbb, Jb, Jb)
            + np.einsum("nk,nki,nkj->kij", lab, Jb, Ja)
            + np.einsum("nk,nki,nkj->kij", lab, Ja, Jb)
            + np.einsum("nk,nki,nkj->kij", laa, Ja, Ja)
        )
        curv = g_psi.copy()  # Σ_j ∂ℓ/∂τ · ∂²τ/∂ψ_i²: the gaps' own e^{ψ_i}, none for τ_1
        curv[:, 0] = 0.0
        h_psi[:, idx, idx] += curv
        return RowTerms(loss, d1, g_psi, d2, h_eta, h_psi)

    def _cdf(self, x: np.ndarray) -> np.ndarray:
        return expit(x) if self.link == "logit" else ndtr(x)

    def _curvature_weights(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The binary case's curvature at p = 1/2: 1/4 with the logit link (the logistic density's largest value),
        4φ(0)² = 2/π with the probit."""
        return np.full(y.shape[0], 0.25 if self.link == "logit" else 2.0 / np.pi)

    # ------------------------------------------------------------------ checks of the fit

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return -self.row_terms(X, np.asarray(y, dtype=np.float64), eta, psi, 0).loss

    def cumulative_probabilities(self, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        """P(y ≤ k) (n, K, K−1), k = 1..K−1, at linear predictors eta (n, K) and threshold coordinates psi (K, m)."""
        return self._cdf(self.thresholds(psi)[None, :, :] - eta[:, :, None])

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return 1.0 + (1.0 - self.cumulative_probabilities(eta, psi)).sum(axis=2)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        u = np.broadcast_to(np.atleast_2d(u), eta.shape)
        return 1.0 + (u[:, :, None] > self.cumulative_probabilities(eta, psi)).sum(axis=2)


@dataclass(frozen=True)
class CumulativeProbitRegression(CumulativeRegression):
    """Cumulative-probit ordinal regression (brms' `cumulative("probit")`): `CumulativeRegression` with
    P(y_j ≤ k) = Φ(τ_k − η_j), a latent normal variable cut at the thresholds; the same parameters, priors and
    reported names."""

    name = "cumulative_probit_regression"
    link = "probit"
