"""Bayesian multinomial (softmax) regression: P(y = c | x, W) ∝ exp((xᵀW)_c), y ∈ {0, …, C−1}.

Parameter packing: θ = W.ravel() with W of shape (p, C), row-major, so θ[j·C + c] = W[j, c] ("w[j,c]").
Full parametrisation (one weight column per class): the likelihood is invariant to adding the same vector
to every column of W; the coefficient prior (never flat here) makes the posterior proper. A vector-valued
`coef_prior` has one value per entry of θ, in the packing order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .common import (
    _GLM,
    _check_labels,
    _check_optional_count,
    _check_Xy,
    _classifier_bind_fields,
    _gram_lambda_max,
    _rows_of,
    _unbound,
)
from .contract import DataSpec, ParamBlock

__all__ = ["SoftmaxRegression"]


def _log_softmax_parts(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(logsumexp over the last axis, softmax probabilities), overflow-free."""
    m = Z.max(axis=-1, keepdims=True)
    E = np.exp(Z - m)
    s = E.sum(axis=-1, keepdims=True)
    E /= s
    return (m + np.log(s))[..., 0], E


@dataclass(frozen=True)
class SoftmaxRegression(_GLM):
    """U_i(W) = Σ_j [logsumexp(x_jᵀW) − (x_jᵀW)_{y_j}] for K chains with one (n, p)×(p, K·C) product.

    Gradient Xᵀ(P − Y) (Y one-hot); Hessian Σ_j (x_j x_jᵀ) ⊗ (diag(p_j) − p_j p_jᵀ) ≼ ½ XᵀX ⊗ I,
    hence `smoothness` = λ_max(XᵀX)/2, a global bound.
    """

    name = "softmax_regression"
    target_kind = "multiclass"

    n_classes: int | None = field(default=None, kw_only=True)

    _allow_flat = False  # adding a vector to every column of W leaves the likelihood unchanged

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_classes", _check_optional_count("n_classes", self.n_classes, 2))
        super().__post_init__()

    def _bind_fields(self, spec: DataSpec) -> dict:
        return {**_classifier_bind_fields(self, spec), "columns": spec.columns}

    @property
    def _pc(self) -> tuple[int, int]:
        """(features p, classes C) of the bound model."""
        if self.n_features is None or self.n_classes is None:
            raise _unbound(self, "n_features" if self.n_features is None else "n_classes")
        return self.n_features, self.n_classes

    @property
    def dim(self) -> int:
        p, C = self._pc
        return p * C

    def _coef_count(self) -> int:
        return self.dim

    def _check_coef_prior_size(self) -> None:
        if self.n_classes is not None:
            super()._check_coef_prior_size()

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        """One block `w` (dim `coef`) labelled "feature,class" in the packing order: w[mean radius,0], or w[0,0]."""
        p, C = self._pc  # raises if unbound
        features = self.columns if self.columns is not None else [str(j) for j in range(p)]
        labels = tuple(f"{f},{c}" for f in features for c in range(C))
        return (ParamBlock("w", self.dim, "coef", labels, "identity"),)

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_labels(y, self.n_classes, argname)

    # -------------------------------------------------------------- K-chain layout helpers

    def _logits(self, X: np.ndarray, x: np.ndarray):
        """Z[j, k, c] = (x_jᵀ W_k)_c: one product X (n, p) @ (p, K·C); returns (n, K, C)."""
        K = x.shape[0]
        p, C = self._pc
        W = x.reshape(K, p, C).transpose(1, 0, 2).reshape(p, K * C)
        return (X @ W).reshape(X.shape[0], K, C)

    def _pullback(self, X: np.ndarray, R: np.ndarray):
        """Xᵀ R per chain for R (n, K, C), packed as (K, p·C)."""
        n, K, C = R.shape
        G = X.T @ R.reshape(n, K * C)
        return G.reshape(-1, K, C).transpose(1, 0, 2).reshape(K, -1)

    # -------------------------------------------------------------- contract

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.intp)
        Z = self._logits(X, x)
        lse, _ = _log_softmax_parts(Z)
        return lse.sum(axis=0) - Z[np.arange(Z.shape[0]), :, y].sum(axis=0)

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = np.asarray(y, dtype=np.intp)
        Z = self._logits(X, x)
        rows = np.arange(Z.shape[0])
        lse, P = _log_softmax_parts(Z)
        U = lse.sum(axis=0) - Z[rows, :, y].sum(axis=0)
        P[rows, :, y] -= 1.0
        return U, self._pullback(X, P)

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.potential_and_grad(X, y, x)[1]

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        _, P = _log_softmax_parts(self._logits(X, x))
        D = self._logits(X, v)  # directional change of the logits
        D -= np.einsum("nkc,nkc->nk", P, D)[..., None]
        D *= P
        return self._pullback(X, D)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Explicit Σ_j (x_j x_jᵀ) ⊗ (diag(p_j) − p_j p_jᵀ), O(n p² C²), without d Hessian-vector products."""
        p, C = self._pc
        n = X.shape[0]
        _, P = _log_softmax_parts(self._logits(X, x[None, :]))
        P = P[:, 0, :]  # (n, C)
        M = (X[:, :, None] * P[:, None, :]).reshape(n, p * C)
        H = -(M.T @ M)
        B = (X.T[None, :, :] * P.T[:, None, :]) @ X  # (C, p, p): Xᵀ diag(P[:, c]) X
        idx = np.arange(C)
        H.reshape(p, C, p, C)[:, idx, :, idx] += B
        return 0.5 * (H + H.T)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        x, single = _rows_of(x)
        _, P = _log_softmax_parts(self._logits(X, x))
        P *= 1.0 - P
        diag = self._pullback(X * X, P)
        return diag[0] if single else diag

    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """M_i = λ_max(XᵀX)/2, a global bound since ‖diag(p) − ppᵀ‖ ≤ 1/2."""
        return 0.5 * _gram_lambda_max(X)

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        Z = self._logits(X, x)
        lse, _ = _log_softmax_parts(Z)
        return Z[np.arange(Z.shape[0]), :, np.asarray(y, dtype=np.intp)] - lse

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        return _log_softmax_parts(self._logits(X, x))[1]

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return categorical_draw(self.predict_mean(X, x), u)


def categorical_draw(P: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The class whose cumulative probability first exceeds u_k (u (K,), or u_jk: u (n, K)), for probabilities
    P (n, K, C): (n, K) floats."""
    cum = np.cumsum(P, axis=-1)
    C = P.shape[-1]
    return np.minimum((cum < np.atleast_2d(u)[..., None]).sum(axis=-1), C - 1).astype(np.float64)
