"""Bayesian one-hidden-layer neural network classifier ([DG-LMC], sec. 5.3): h = act(X W1 + b1), logits = h W2 + b2.

Parameter packing (row-major, in this order), d = p·H + H + H·C + C:
    θ = [W1.ravel() (p, H), b1 (H,), W2.ravel() (H, C), b2 (C,)]
so W1[j, k] = θ[j·H + k], b1[k] = θ[p·H + k], W2[k, c] = θ[p·H + H + k·C + c], b2[c] = θ[p·H + H + H·C + c].
The K chains are processed together as batched (K, n, ·) arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy.special import expit

from ..priors import CoefPrior, GaussianPrior, Normal, Prior, build_prior
from .common import (
    _check_columns,
    _check_labels,
    _check_optional_count,
    _check_positive,
    _check_Xy,
    _classifier_bind_fields,
    _resolve_coef_prior,
    _rows_of,
    _unbound,
)
from .contract import DataSpec, Model, ParamBlock
from .softmax import _log_softmax_parts, categorical_draw

__all__ = ["MLPClassifier"]

_ACTIVATIONS = ("tanh", "sigmoid")


class _Forward(NamedTuple):
    W1: np.ndarray  # (K, p, H)
    W2: np.ndarray  # (K, H, C)
    h: np.ndarray  # (K, n, H) hidden activations
    g: np.ndarray | None  # (K, n, H) act'(A), when needed
    Z: np.ndarray  # (K, n, C) logits
    lse: np.ndarray  # (K, n) logsumexp of the logits
    P: np.ndarray  # (K, n, C) class probabilities


@dataclass(frozen=True)
class MLPClassifier(Model):
    """U_i(θ) = Σ_j [logsumexp(z_j) − z_{j, y_j}] with z_j the logits of row j; activation "tanh" or "sigmoid".

    `hvp` is the exact Hessian-vector product (Pearlmutter's R-operator applied to the backward pass);
    `hessian_diag` is the exact diagonal of the Gauss–Newton matrix Jᵀ(diag(p) − ppᵀ)J (PSD, no d×d matrix);
    `ggn_vp` multiplies by that Gauss–Newton matrix. `smoothness` is an estimate, not a bound (see there).
    """

    name = "mlp_classifier"
    target_kind = "multiclass"

    hidden: int = 16
    prior_scale: float | None = None
    activation: str = "tanh"
    #: multiplies the Gauss–Newton curvature estimate in `smoothness`.
    smoothness_safety: float = 2.0
    #: prior on every weight and bias (default N(0, 1)); a vector has one value per entry of θ, in the packing order.
    coef_prior: CoefPrior = field(default=None, kw_only=True)  # type: ignore[assignment]  # resolved in __post_init__
    n_features: int | None = field(default=None, kw_only=True)
    n_classes: int | None = field(default=None, kw_only=True)
    columns: tuple[str, ...] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", _check_positive("hidden", self.hidden, integer=True))
        _resolve_coef_prior(self, Normal(0.0, 1.0), allow_flat=False)
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {self.activation!r}")
        object.__setattr__(self, "smoothness_safety", _check_positive("smoothness_safety", self.smoothness_safety))
        object.__setattr__(self, "n_features", _check_optional_count("n_features", self.n_features, 1))
        object.__setattr__(self, "n_classes", _check_optional_count("n_classes", self.n_classes, 2))
        object.__setattr__(self, "columns", _check_columns(self.columns))
        if self.columns is not None and self.n_features is not None and len(self.columns) != self.n_features:
            raise ValueError(f"columns has {len(self.columns)} names but X has {self.n_features} columns")
        size = self.coef_prior.size
        if size is not None and self.n_features is not None and self.n_classes is not None and size != self.dim:
            raise ValueError(f"coef_prior has {size} values per argument but the network has {self.dim} parameters")

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
        (p, C), H = self._pc, self.hidden
        return p * H + H + H * C + C

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        """Blocks W1 ("feature,unit"), b1, W2 ("unit,class"), b2 in the packing order: W1[mean radius,0] or W1[0,0]."""
        (p, C), H = self._pc, self.hidden  # raises if unbound
        features = self.columns if self.columns is not None else [str(j) for j in range(p)]
        return (
            ParamBlock("W1", p * H, "W1_dim", tuple(f"{f},{k}" for f in features for k in range(H))),
            ParamBlock("b1", H, "b1_dim", None),
            ParamBlock("W2", H * C, "W2_dim", tuple(f"{k},{c}" for k in range(H) for c in range(C))),
            ParamBlock("b2", C, "b2_dim", None),
        )

    def prior(self) -> GaussianPrior | Prior:
        return build_prior(self.dim, [(np.arange(self.dim), self.coef_prior)])

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        X, y = _check_Xy(X, y, argname, self.n_features)
        _check_labels(y, self.n_classes, argname)

    # -------------------------------------------------------------- packing

    def _offsets(self):
        (p, C), H = self._pc, self.hidden
        o1 = p * H
        o2 = o1 + H
        o3 = o2 + H * C
        return o1, o2, o3

    def _unpack(self, x: np.ndarray):
        """Views (W1 (K,p,H), b1 (K,H), W2 (K,H,C), b2 (K,C)) of x (K, d)."""
        K = x.shape[0]
        (p, C), H = self._pc, self.hidden
        o1, o2, o3 = self._offsets()
        return x[:, :o1].reshape(K, p, H), x[:, o1:o2], x[:, o2:o3].reshape(K, H, C), x[:, o3:]

    def _pack(self, gW1, gb1, gW2, gb2):
        K = max(gW1.shape[0], gb1.shape[0], gW2.shape[0], gb2.shape[0])
        o1, o2, o3 = self._offsets()
        out = np.empty((K, self.dim))
        out[:, :o1] = gW1.reshape(gW1.shape[0], -1)
        out[:, o1:o2] = gb1
        out[:, o2:o3] = gW2.reshape(gW2.shape[0], -1)
        out[:, o3:] = gb2
        return out

    # -------------------------------------------------------------- passes

    def _forward(self, X: np.ndarray, x: np.ndarray, need_g: bool = True) -> _Forward:
        W1, b1, W2, b2 = self._unpack(np.asarray(x, dtype=np.float64))
        A = np.matmul(X, W1)
        A += b1[:, None, :]
        # In-place updates below keep the number of live (K, n, ·) temporaries low: on big shards fresh
        # large allocations (page faults) cost as much as the arithmetic.
        g = None
        if self.activation == "tanh":
            h = np.tanh(A, out=A)
            if need_g:
                g = np.multiply(h, h)
                np.subtract(1.0, g, out=g)
        else:
            h = expit(A, out=A)
            if need_g:
                g = np.subtract(1.0, h)
                g *= h
        Z = np.matmul(h, W2)
        Z += b2[:, None, :]
        lse, P = _log_softmax_parts(Z)
        return _Forward(W1, W2, h, g, Z, lse, P)

    def _act2(self, fw: _Forward) -> np.ndarray:
        """act''(A) from h and g = act'(A)."""
        assert fw.g is not None, "the forward pass was run without act'"
        if self.activation == "tanh":
            return -2.0 * fw.h * fw.g
        return fw.g * (1.0 - 2.0 * fw.h)

    def _backward(self, X: np.ndarray, fw: _Forward, dZ):
        """Gradient of Σ_j ⟨dZ_j, z_j⟩ w.r.t. θ (the transposed Jacobian Jᵀ dZ), packed (K, d)."""
        gW2 = np.matmul(fw.h.transpose(0, 2, 1), dZ)
        gb2 = dZ.sum(axis=1)
        dA = np.matmul(dZ, fw.W2.transpose(0, 2, 1))
        dA *= fw.g
        gW1 = np.matmul(X.T, dA)
        gb1 = dA.sum(axis=1)
        return self._pack(gW1, gb1, gW2, gb2)

    def _resid(self, fw: _Forward, y: np.ndarray, overwrite: bool = False):
        """∂U/∂Z = P − onehot(y), (K, n, C); overwrites fw.P if `overwrite`."""
        dZ = fw.P if overwrite else fw.P.copy()
        dZ[:, np.arange(dZ.shape[1]), y] -= 1.0
        return dZ

    def _jvp(self, X: np.ndarray, fw: _Forward, v: np.ndarray):
        """Directional derivatives (R{A}, R{h}, R{Z}) of the forward pass along v (K, d)."""
        V1, c1, V2, c2 = self._unpack(np.asarray(v, dtype=np.float64))
        RA = np.matmul(X, V1)
        RA += c1[:, None, :]
        Rh = fw.g * RA
        RZ = np.matmul(Rh, fw.W2)
        RZ += np.matmul(fw.h, V2)
        RZ += c2[:, None, :]
        return RA, Rh, RZ, V2

    @staticmethod
    def _softmax_jac(P, RZ):
        """(diag(p) − ppᵀ) RZ for every row and chain."""
        out = RZ - np.einsum("knc,knc->kn", P, RZ)[..., None]
        out *= P
        return out

    def _rop(self, X: np.ndarray, y: np.ndarray, fw: _Forward, v: np.ndarray):
        """Exact ∇²U v via Pearlmutter's R-operator; fw may hold one point (leading dim 1) for many v."""
        RA, Rh, RZ, V2 = self._jvp(X, fw, v)
        dZ = self._resid(fw, y)
        RdZ = self._softmax_jac(fw.P, RZ)
        W2T = fw.W2.transpose(0, 2, 1)
        RgW2 = np.matmul(Rh.transpose(0, 2, 1), dZ) + np.matmul(fw.h.transpose(0, 2, 1), RdZ)
        Rgb2 = RdZ.sum(axis=1)
        dh = np.matmul(dZ, W2T)
        Rdh = np.matmul(RdZ, W2T) + np.matmul(dZ, V2.transpose(0, 2, 1))
        RdA = Rdh * fw.g
        RdA += dh * self._act2(fw) * RA
        RgW1 = np.matmul(X.T, RdA)
        Rgb1 = RdA.sum(axis=1)
        return self._pack(RgW1, Rgb1, RgW2, Rgb2)

    def _ggn(self, X: np.ndarray, fw: _Forward, v: np.ndarray):
        """Gauss–Newton product Jᵀ (diag(p) − ppᵀ) J v."""
        _, _, RZ, _ = self._jvp(X, fw, v)
        return self._backward(X, fw, self._softmax_jac(fw.P, RZ))

    # -------------------------------------------------------------- contract

    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.intp)
        fw = self._forward(X, x, need_g=False)
        return fw.lse.sum(axis=1) - fw.Z[:, np.arange(fw.Z.shape[1]), y].sum(axis=1)

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = np.asarray(y, dtype=np.intp)
        fw = self._forward(X, x)
        U = fw.lse.sum(axis=1) - fw.Z[:, np.arange(fw.Z.shape[1]), y].sum(axis=1)
        return U, self._backward(X, fw, self._resid(fw, y, overwrite=True))

    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.potential_and_grad(X, y, x)[1]

    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.intp)
        return self._rop(X, y, self._forward(X, x), v)

    def ggn_vp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray):
        """Gauss–Newton-vector products Jᵀ(diag(p) − ppᵀ)J v_k for each chain k: (K, d). PSD; y unused."""
        return self._ggn(X, self._forward(X, x), v)

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Dense exact Hessian at one point (d,): one forward pass, then R-operator products in blocks of directions."""
        y = np.asarray(y, dtype=np.intp)
        d = self.dim
        fw = self._forward(X, np.asarray(x, dtype=np.float64)[None, :])
        per_dir = max(1, X.shape[0] * (self.hidden + self._pc[1]))
        block = int(max(1, min(d, 2**22 // per_dir)))
        H = np.empty((d, d))
        eye = np.eye(d)
        for s in range(0, d, block):
            H[s : s + block] = self._rop(X, y, fw, eye[s : s + block])
        return 0.5 * (H + H.T)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Exact diagonal of the Gauss–Newton matrix Σ_j J_jᵀ(diag(p_j) − p_j p_jᵀ)J_j (≥ 0), for (d,) or (K, d)."""
        x, single = _rows_of(x)
        fw = self._forward(X, x)
        P, h, g, W2 = fw.P, fw.h, fw.g, fw.W2
        assert g is not None  # _forward computes act' by default
        q = P * (1.0 - P)  # (K, n, C)
        d_b2 = q.sum(axis=1)
        d_W2 = np.matmul((h * h).transpose(0, 2, 1), q)  # Σ_j h_jk² p_jc(1 − p_jc)
        # ∂z_jc/∂b1[k] = g_jk W2[k, c]: the curvature is g_jk² · Var_{c ~ p_j}(W2[k, c]).
        W2T = W2.transpose(0, 2, 1)
        mean = np.matmul(P, W2T)  # (K, n, H)
        var = np.matmul(P, W2T * W2T)
        var -= mean * mean
        np.maximum(var, 0.0, out=var)
        var *= g * g
        d_b1 = var.sum(axis=1)
        d_W1 = np.matmul((X * X).T, var)  # ∂z_jc/∂W1[a, k] = X_ja g_jk W2[k, c]
        diag = self._pack(d_W1, d_b1, d_W2, d_b2)
        return diag[0] if single else diag

    def log_likelihood(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        fw = self._forward(X, x, need_g=False)
        picked = np.take_along_axis(fw.Z, np.asarray(y, dtype=np.intp)[None, :, None], axis=2)[..., 0]
        return (picked - fw.lse).T

    def predict_mean(self, X: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._forward(X, x, need_g=False).P.transpose(1, 0, 2)

    def predict_draw(self, X: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        return categorical_draw(self.predict_mean(X, x), u)

    def smoothness(self, X: np.ndarray, y: np.ndarray, n_iter: int = 100, tol: float = 1e-6) -> float:
        """M_i: an *estimate*, not a bound (the network's Hessian is unbounded over R^d).

        M_i = smoothness_safety × max over 5 reference points of λ_max(Gauss–Newton matrix), the points being
        θ = 0 and 4 draws mean + scale·N(0, I) of the coefficient prior (fixed seed: deterministic); λ_max by power
        iteration (vectorised over the points). Away from typical prior draws the Hessian can be larger.
        """
        d = self.dim
        rng = np.random.default_rng(0)
        cp = self.coef_prior
        scale = np.broadcast_to(np.asarray(cp.scale, dtype=np.float64), (d,))
        ref = np.vstack([np.zeros((1, d)), np.asarray(cp.mean, dtype=np.float64) + scale * rng.standard_normal((4, d))])
        fw = self._forward(np.asarray(X, dtype=np.float64), ref)
        v = rng.standard_normal(ref.shape)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        lam = np.zeros(ref.shape[0])
        for _ in range(n_iter):
            w = self._ggn(X, fw, v)
            new = np.einsum("kd,kd->k", v, w)  # Rayleigh quotients (‖v‖ = 1)
            norms = np.linalg.norm(w, axis=1, keepdims=True)
            if not np.any(norms):
                break
            v = w / np.where(norms > 0, norms, 1.0)
            done = np.max(np.abs(new - lam)) <= tol * max(np.max(np.abs(new)), 1e-300)
            lam = new
            if done:
                break
        return self.smoothness_safety * float(np.max(lam))
