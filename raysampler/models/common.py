"""Helpers shared by the built-in models: argument and data checks, λ_max(XᵀX), and `_GLM`, the common base of
the generalised linear models (θ ∈ R^p with a N(0, prior_scale² I) prior)."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

from .base import DataSpec, GaussianPrior, Model

def _check_positive(name: str, value, *, integer: bool = False):
    """Return `value` as float (or int) if it is a finite number > 0 (an integer ≥ 1 if `integer`), else raise."""
    if integer:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_optional_count(name: str, value, minimum: int):
    """None, or an integer ≥ `minimum` (used for the bound fields n_features / n_classes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} (or None before binding), got {value!r}")
    return int(value)


def _unbound(model: Model, what: str) -> ValueError:
    return ValueError(
        f"{type(model).__name__} is not bound to data ({what} is unknown): "
        f"call model.bind(DataSpec(...)) before asking for its dimension"
    )


def _as_numeric(a, what: str, argname: str) -> np.ndarray:
    try:
        arr = np.asarray(a)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{argname}: {what} cannot be converted to an array ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{argname}: {what} must hold real numbers, got dtype {arr.dtype}")
    return arr


def _check_Xy(X, y, argname: str, n_features: int | None, y_ndim: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Common data checks: shapes, row counts, feature count of a bound model, finiteness. Returns arrays."""
    X = _as_numeric(X, "X", argname)
    y = _as_numeric(y, "y", argname)
    if X.ndim != 2:
        raise ValueError(f"{argname}: X must be a 2-D array (n, p), got shape {X.shape}")
    if y.ndim != y_ndim:
        want = "a 1-D array (n,)" if y_ndim == 1 else "a 2-D array (n, p)"
        raise ValueError(f"{argname}: y must be {want}, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"{argname}: X has {X.shape[0]} rows but y has {y.shape[0]}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{argname}: X has {X.shape[1]} columns but the model is bound to n_features={n_features}")
    if not np.isfinite(X).all():
        raise ValueError(f"{argname}: X contains NaN or infinite values")
    if not np.isfinite(y).all():
        raise ValueError(f"{argname}: y contains NaN or infinite values")
    return X, y


def _check_labels(y: np.ndarray, n_classes: int | None, argname: str) -> None:
    """Class labels must be integers in {0, …, n_classes−1} (only ≥ 0 if the model is unbound)."""
    if y.size == 0:
        return
    if y.dtype.kind == "f" and not np.array_equal(y, np.floor(y)):
        raise ValueError(f"{argname}: class labels y must be integers")
    if y.min() < 0:
        raise ValueError(f"{argname}: class labels y must be >= 0, got {y.min()}")
    if n_classes is not None and y.max() >= n_classes:
        raise ValueError(f"{argname}: class label {int(y.max())} out of range for n_classes={n_classes}")


def _gram_lambda_max(X: np.ndarray) -> float:
    """λ_max(XᵀX), from the smaller of the two Gram matrices XᵀX (p×p) and XXᵀ (n×n)."""
    X = np.asarray(X, dtype=np.float64)
    n, p = X.shape
    if n == 0 or p == 0:
        return 0.0
    G = X.T @ X if p <= n else X @ X.T
    m = G.shape[0]
    lam = linalg.eigvalsh(G, subset_by_index=[m - 1, m - 1], check_finite=False)[0]
    return max(float(lam), 0.0)


def _rows_of(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """View a single point (d,) as one chain (1, d); report whether it was single."""
    x = np.asarray(x, dtype=np.float64)
    return (x[None, :], True) if x.ndim == 1 else (x, False)


@dataclass(frozen=True)
class _GLM(Model):
    """Common base of the models whose parameter is θ ∈ R^p (p = n_features) with a N(0, prior_scale² I) prior."""

    prior_scale: float = 1.0
    n_features: int | None = field(default=None, kw_only=True)

    def __post_init__(self):
        object.__setattr__(self, "prior_scale", _check_positive("prior_scale", self.prior_scale))
        object.__setattr__(self, "n_features", _check_optional_count("n_features", self.n_features, 1))

    @property
    def dim(self) -> int:
        if self.n_features is None:
            raise _unbound(self, "n_features")
        return self.n_features

    def prior(self) -> GaussianPrior:
        d = self.dim
        return GaussianPrior(mean=np.zeros(d), precision=np.full(d, 1.0 / self.prior_scale**2))

    def validate(self, X, y, argname: str = "data") -> None:
        _check_Xy(X, y, argname, self.n_features)


def _classifier_bind_fields(model: Model, spec: DataSpec) -> dict:
    """Fields a multiclass model takes from the data: the feature count and the number of labels."""
    if spec.n_classes is None:
        raise ValueError(f"{type(model).__name__} needs DataSpec.n_classes (the number of labels)")
    return {"n_features": spec.n_features, "n_classes": spec.n_classes}
