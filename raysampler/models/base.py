"""The model contract: per-shard potential U_i, its gradient, Hessian-vector products and curvature, for K chains at once.

Every method takes one shard's data (X, y) and a (K, d) array of parameter vectors and returns
per-chain values, so K chains cost one matrix-matrix product instead of K matrix-vector products.
The prior is *not* part of U_i: each algorithm decides where it lives (the coordinator, or split across workers).
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


#: What the sampler calls on a model; a model of your own must provide these (subclassing `Model` gives defaults
#: for `hessian`, `hessian_diag` and `validate`).
MODEL_METHODS = ("bind", "prior", "potential", "grad", "potential_and_grad", "hvp", "hessian", "hessian_diag",
                 "smoothness", "param_names", "validate")


@dataclass(frozen=True)
class DataSpec:
    """What a model must know about the whole data set before it can fix its dimension."""

    n_features: int
    n_classes: int | None = None  # for classifiers: number of labels over all shards (max label + 1)
    n_rows: int | None = None
    columns: tuple[str, ...] | None = None  # names of X's columns (all shards agree), when the data have them


@dataclass(frozen=True)
class GaussianPrior:
    """N(mean, P⁻¹) prior: `precision` P is diagonal (shape (d,)) or a dense symmetric matrix (d, d) (a diagonal prior
    seen in whitened coordinates); zeros on the diagonal mean a flat prior on those coordinates.

    It is also the whole of an all-Gaussian prior: `gaussian` is itself and `residual` is None (the `Prior` contract
    of raysampler.priors).
    """

    mean: np.ndarray
    precision: np.ndarray

    @property
    def gaussian(self) -> "GaussianPrior":
        return self

    @property
    def residual(self) -> None:
        return None

    @property
    def dense(self) -> bool:
        return np.ndim(self.precision) == 2

    def matrix(self) -> np.ndarray:
        """P as a (d, d) matrix."""
        return np.asarray(self.precision) if self.dense else np.diag(self.precision)

    def max_precision(self) -> float:
        """The largest eigenvalue of P (the prior's curvature)."""
        return float(np.linalg.eigvalsh(self.precision)[-1]) if self.dense else float(np.max(self.precision))

    def potential(self, x: np.ndarray) -> np.ndarray:
        diff = x - self.mean
        if self.dense:
            return 0.5 * np.sum((diff @ self.precision) * diff, axis=-1)
        return 0.5 * np.sum(diff * diff * self.precision, axis=-1)

    def grad(self, x: np.ndarray) -> np.ndarray:
        diff = x - self.mean
        return diff @ self.precision if self.dense else diff * self.precision

    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """P v for each row of v."""
        return v @ self.precision if self.dense else v * self.precision

    def hessian(self, x: np.ndarray) -> np.ndarray:
        """P (d, d) at one point (constant)."""
        return self.matrix()

    def hessian_diag(self, x: np.ndarray) -> np.ndarray:
        """diag(P), broadcast to x's shape."""
        diag = np.diag(self.precision) if self.dense else np.asarray(self.precision)
        return np.broadcast_to(diag, np.shape(x)).copy()


@dataclass(frozen=True)
class Model(ABC):
    """A Bayesian model split into per-shard potentials U_i(x) = -log p(y_i | X_i, x).

    Subclasses are frozen dataclasses; `bind(spec)` returns a copy whose dimension is fixed by the data.
    Arrays: X (n_i, p) float64, y (n_i,), x (K, d). Returns: (K,) or (K, d).
    """

    name = "model"
    #: "binary" | "multiclass" | "real" | "count" — what y must hold (checked by `validate`).
    target_kind = "real"

    def bind(self, spec: DataSpec) -> "Model":
        """Return a copy of the model fitted to the data's shape (n_features, n_classes)."""
        return dataclasses.replace(self, **self._bind_fields(spec))

    def _bind_fields(self, spec: DataSpec) -> dict:
        return {"n_features": spec.n_features}

    @property
    @abstractmethod
    def dim(self) -> int:
        """Number of parameters d (requires a bound model)."""

    def param_names(self) -> list[str]:
        """One readable label per coordinate of θ (the ArviZ `param` coordinate; summaries show theta[label])."""
        return [str(j) for j in range(self.dim)]

    @abstractmethod
    def prior(self) -> GaussianPrior:
        """The Gaussian prior held by the coordinator."""

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        """Raise ValueError naming `argname` if (X, y) cannot be data for this model."""

    @abstractmethod
    def potential(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """U_i(x) for each of the K rows of x: shape (K,)."""

    @abstractmethod
    def grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """∇U_i(x): shape (K, d)."""

    def potential_and_grad(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(U_i(x), ∇U_i(x)) in one data pass where the model can share work."""
        return self.potential(X, y, x), self.grad(X, y, x)

    @abstractmethod
    def hvp(self, X: np.ndarray, y: np.ndarray, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Hessian-vector products ∇²U_i(x_k) v_k for each chain k: shape (K, d)."""

    def hessian(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Dense Hessian ∇²U_i(x) at one point x (d,): shape (d, d). Default: d Hessian-vector products."""
        d = x.shape[-1]
        eye = np.eye(d)
        H = self.hvp(X, y, np.broadcast_to(x, (d, d)).copy(), eye)
        return 0.5 * (H + H.T)

    def hessian_diag(self, X: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """A positive semi-definite diagonal curvature estimate at x (d,): shape (d,). Default: diag of `hessian`."""
        return np.clip(np.diag(self.hessian(X, y, x)), 0.0, None)

    @abstractmethod
    def smoothness(self, X: np.ndarray, y: np.ndarray) -> float:
        """M_i: an upper bound of ‖∇²U_i‖ over the whole space (the paper's worst case)."""
