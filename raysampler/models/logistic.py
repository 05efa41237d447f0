"""Bayesian logistic regression: P(y = 1 | x, θ) = σ(xᵀθ), y ∈ {0, 1}; the intercept is a column of X."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from .common import RowTerms, _check_Xy, _EtaGLM, _gram_lambda_max, _rows_of, weighted_grams
from .contract import runs_own

__all__ = ["LogisticRegression"]


@dataclass(frozen=True)
class LogisticRegression(_EtaGLM):
    """U_i(θ) = Σ_j [log(1 + exp(x_jᵀθ)) − y_j x_jᵀθ], computed stably for all K chains with η = X Θᵀ (n, K).

    Gradient Xᵀ(σ(η) − y); Hessian Xᵀ diag(σ(η)(1 − σ(η))) X ≼ XᵀX/4, hence `smoothness` = λ_max(XᵀX)/4.
    """

    name = "logistic_regression"
    target_kind = "binary"
    _takes_groups = True

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        if y.size and not np.isin(y, (0, 1)).all():
            bad = np.unique(y[~np.isin(y, (0, 1))])[:5]
            raise ValueError(f"{argname}: labels y must be 0 or 1, found {bad.tolist()}")

    # Hot path (every local step): np.exp and np.log1p (SIMD) are much faster than np.logaddexp or scipy's expit, a
    # column sum over (n, K) is faster as a ones-vector product, and a masked copyto is slow. Hence the formulas
    # below (docs/performance.md, "Measurements behind choices in the code").

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        eta = X @ x.T
        return _softplus_sum(eta, np.ones(eta.shape[0])) - y @ eta

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        r = X @ x.T
        _sigmoid_inplace(r)
        r -= y[:, None]
        return r.T @ X

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eta = X @ x.T
        U = _softplus_sum(eta, np.ones(eta.shape[0])) - y @ eta
        _sigmoid_inplace(eta)
        eta -= y[:, None]
        return U, eta.T @ X

    # Several shards of one shape at once (X (B, n, p), y (B, n), x (B, K, p)): the same operations as above, each a
    # stacked matrix product (one BLAS call per shard, as above) or elementwise, so every shard gets the same bits.

    def potential_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if not runs_own(self, LogisticRegression, "potential"):
            return super().potential_stacked(X, y, x)
        eta = X @ x.swapaxes(1, 2)
        return _softplus_sum(eta, np.ones(eta.shape[1])) - (y[:, None, :] @ eta)[:, 0, :]

    def grad_stacked(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        if not runs_own(self, LogisticRegression, "grad"):
            return super().grad_stacked(X, y, x)
        r = X @ x.swapaxes(1, 2)
        _sigmoid_inplace(r)
        r -= y[:, :, None]
        return r.swapaxes(1, 2) @ X

    def _weights(self, X: np.ndarray, x: np.ndarray):
        """σ(η)(1 − σ(η)) for η = X Θᵀ: (n, K)."""
        s = expit(X @ x.T)
        return s * (1.0 - s)

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        Xv = X @ v.T
        Xv *= self._weights(X, x)
        return Xv.T @ X

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        w = self._weights(X, x[None, :])[:, 0]
        H = (X * w[:, None]).T @ X
        return 0.5 * (H + H.T)

    def hessians(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Xᵀ diag(σ(1 − σ)) X at the K points at once (`weighted_grams`)."""
        if not runs_own(self, LogisticRegression, "hessian"):
            return super().hessians(X, y, x)
        return weighted_grams(X, self._weights(X, np.asarray(x, dtype=np.float64)))

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        diag = self._weights(X, x).T @ (X * X)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """M_i = λ_max(XᵀX)/4, a global bound since σ(1 − σ) ≤ 1/4."""
        return 0.25 * _gram_lambda_max(X)

    # ------------------------------------------------------------------ per row (group effects)

    def row_terms(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
        """ℓ_j = log(1 + e^η) − yη; ∂ℓ/∂η = σ(η) − y; ∂²ℓ/∂η² = σ(1 − σ) — all from one t = e^{−|η|}:
        log(1 + e^η) = max(η, 0) + log(1 + t), σ = 1/(1 + t) for η ≥ 0 and t/(1 + t) below, σ(1 − σ) = t/(1 + t)²."""
        return logistic_rows(eta, y, np.ones(1), psi, order)

    def eta_log_likelihood(self, X: np.ndarray, y: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        ll = softplus(eta)
        np.subtract(np.asarray(y, dtype=np.float64)[:, None] * eta, ll, out=ll)
        return ll

    def eta_mean(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray) -> np.ndarray:
        return expit(eta)

    def eta_draw(self, X: np.ndarray, eta: np.ndarray, psi: np.ndarray, u: np.ndarray) -> np.ndarray:
        """1 where u_k > 1 − P(y = 1): Bernoulli's inverse distribution function."""
        return (np.atleast_2d(u) > 1.0 - expit(eta)).astype(np.float64)


def logistic_rows(eta: np.ndarray, y: np.ndarray, m: np.ndarray, psi: np.ndarray, order: int) -> RowTerms:
    """`RowTerms` of m_j log(1 + e^η) − y_j η (logistic: m = 1; binomial: m the trials, (n,) or (1,)), all from one
    t = e^{−|η|}: log(1 + e^η) = max(η, 0) + log(1 + t); with c = t/(1 + t) = σ(−|η|), σ(η) = max(c, sign(η)(1 − c))
    (c below 0, exact in its tail; 1 − c from 0) and σ(1 − σ) = c/(1 + t). No elementwise choice by η's sign (np.where
    on (n, K) costs three of these operations) and no second exponential."""
    t = np.abs(eta)
    np.negative(t, out=t)
    np.exp(t, out=t)
    inv = 1.0 + t  # 1 + t ∈ [1, 2]: log(1 + t) loses nothing that matters against the row's other terms
    loss = np.log(inv)
    tmp = np.maximum(eta, 0.0)
    loss += tmp
    scaled = m.size != 1 or float(m[0]) != 1.0  # per-row trials ((n,), n ≠ 1: none for a shard without rows)
    mm = (m[:, None] if m.size != 1 else float(m[0])) if scaled else 1.0
    if scaled:
        loss *= mm
    np.multiply(y[:, None], eta, out=tmp)
    loss -= tmp
    if order == 0:
        return RowTerms(loss)
    np.reciprocal(inv, out=inv)  # 1/(1 + t)
    c = np.multiply(t, inv, out=t)
    d1 = np.subtract(1.0, c, out=tmp)
    np.copysign(d1, eta, out=d1)
    np.maximum(d1, c, out=d1)  # σ(η): c below 0, 1 − c from 0
    if scaled:
        d1 *= mm
    d1 -= y[:, None]
    if order == 1:
        return RowTerms(loss, d1, psi[:, :0])
    w = np.multiply(c, inv, out=c)
    if scaled:
        w *= mm
    return RowTerms(loss, d1, psi[:, :0], w)


def softplus(eta: np.ndarray) -> np.ndarray:
    """log(1 + exp(η)) elementwise, stably: max(η, 0) + log1p(exp(−|η|)), the terms np.logaddexp(0, η) adds, from
    numpy's SIMD exp and log1p (faster than np.logaddexp on the LOO's (rows, draws) blocks: docs/performance.md,
    "Measurements behind choices in the code")."""
    t = np.abs(eta)
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    t += np.maximum(eta, 0.0)
    return t


def _softplus_sum(eta: np.ndarray, ones: np.ndarray) -> np.ndarray:
    """Σ_j log(1 + exp(η_jk)) per column k, stably: max(η, 0) + log(1 + exp(−|η|)) (η (n, K), or (B, n, K) stacked).

    log(1 + t) rather than log1p(t): t ∈ (0, 1], so rounding 1 + t costs at most 2⁻⁵³ per row, below the sum's own
    rounding, and where numpy's float64 transcendentals are not vectorised (no AVX-512, as on 2-core CI machines)
    log takes much less time than log1p, and this sum is faster on 25,000-row shards, within noise of a whole
    breast_cancer round (A/B in one process; docs/performance.md, "Measurements behind choices in the code")."""
    t = np.abs(eta)
    np.negative(t, out=t)
    np.exp(t, out=t)
    t += 1.0
    np.log(t, out=t)
    total = ones @ t
    np.maximum(eta, 0.0, out=t)
    total += ones @ t
    return total


def _sigmoid_inplace(eta: np.ndarray) -> None:
    """η ← 1/(1 + exp(−η)); exp overflows to inf for η ≪ 0, giving exactly 0."""
    with np.errstate(over="ignore"):
        np.negative(eta, out=eta)
        np.exp(eta, out=eta)
        eta += 1.0
        np.reciprocal(eta, out=eta)
