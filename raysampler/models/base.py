"""The model contract: per-shard potential U_i, its gradient, Hessian-vector products and curvature, for K chains at
once.

Every method takes one shard's data (X, y) and a (K, d) array of parameter vectors and returns
per-chain values, so K chains cost one matrix-matrix product instead of K matrix-vector products.
The prior is *not* part of U_i: each algorithm decides where it lives (the coordinator, or split across workers).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..priors import Prior

#: What the sampler calls on a model; a model of your own must provide these (subclassing `Model` gives defaults
#: for `hessian`, `hessian_diag` and `validate`).
MODEL_METHODS = (
    "bind",
    "prior",
    "potential",
    "grad",
    "potential_and_grad",
    "hvp",
    "hessian",
    "hessian_diag",
    "smoothness",
    "param_names",
    "validate",
)
#: What the sampler calls on a model *if it has them* (`Model` gives defaults): the parameter layout
#: (`param_blocks`), per-row data the model holds (`shard_data`), and the improper-posterior check on the pooled data
#: (`gram` per shard, summed, then `check_proper`).
OPTIONAL_MODEL_METHODS = ("param_blocks", "shard_data", "gram", "check_proper")
#: How a parameter block is reported: as sampled, or exp of the sampled value (positive parameters, sampled on the
#: log scale).
TRANSFORMS = ("identity", "exp")


@dataclass(frozen=True)
class DataSpec:
    """What a model must know about the whole data set before it can fix its dimension."""

    n_features: int
    n_classes: int | None = None  # for classifiers: number of labels over all shards (max label + 1)
    n_rows: int | None = None
    columns: tuple[str, ...] | None = None  # names of X's columns (all shards agree), when the data have them


@dataclass(frozen=True)
class ParamBlock:
    """A named run of consecutive coordinates of θ: one model parameter as reported (an ArviZ variable).

    `dim` names the block's dimension (None: a scalar, size 1) and `labels` its coordinates (None: 0..size−1);
    `transform` says how a sampled value maps to the reported one ("exp": sampled as log σ, reported as σ).
    E.g. linear regression: ParamBlock("beta", p, "coef", ("(Intercept)", "age", …), "identity"),
    ParamBlock("sigma", 1, None, None, "exp"). Frozen and picklable; `as_dict`/`from_dict` for JSON stores.
    """

    name: str
    size: int
    dim: str | None = None
    labels: tuple[str, ...] | None = None
    transform: str = "identity"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ParamBlock: name must be a non-empty string, got {self.name!r}")
        if isinstance(self.size, bool) or not isinstance(self.size, (int, np.integer)) or self.size < 1:
            raise ValueError(f"ParamBlock {self.name!r}: size must be an integer >= 1, got {self.size!r}")
        object.__setattr__(self, "size", int(self.size))
        if self.dim is None and self.size != 1:
            raise ValueError(f"ParamBlock {self.name!r}: a block of size {self.size} needs a dim name")
        if self.labels is not None:
            labels = tuple(str(v) for v in self.labels)
            if len(labels) != self.size:
                raise ValueError(f"ParamBlock {self.name!r}: {len(labels)} labels for size {self.size}")
            object.__setattr__(self, "labels", labels)
        if self.transform not in TRANSFORMS:
            raise ValueError(f"ParamBlock {self.name!r}: transform must be one of {TRANSFORMS}, got {self.transform!r}")

    def coords(self) -> list[str]:
        """The labels of the block's coordinates (0..size−1 as strings when it has none)."""
        return list(self.labels) if self.labels is not None else [str(j) for j in range(self.size)]

    def names(self) -> list[str]:
        """Flat names of the block's coordinates: `name` for a scalar, else `name[label]`."""
        return [self.name] if self.dim is None else [f"{self.name}[{c}]" for c in self.coords()]

    def natural(self, values: np.ndarray) -> np.ndarray:
        """Sampled values → reported values (exp for a log-scale block)."""
        return np.exp(values) if self.transform == "exp" else values

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "size": self.size,
            "dim": self.dim,
            "labels": None if self.labels is None else list(self.labels),
            "transform": self.transform,
        }

    @classmethod
    def from_dict(cls, d) -> ParamBlock:
        return cls(
            d["name"],
            d["size"],
            d.get("dim"),
            None if d.get("labels") is None else tuple(d["labels"]),
            d.get("transform", "identity"),
        )


def natural_values(blocks: Sequence[ParamBlock], theta: np.ndarray) -> np.ndarray:
    """θ values (..., d) → the same array with every block on its natural scale (σ = exp(log σ)); θ itself when
    no block is transformed."""
    if all(b.transform == "identity" for b in blocks):
        return theta
    out = np.array(theta, dtype=np.float64, copy=True)
    start = 0
    for b in blocks:
        out[..., start : start + b.size] = b.natural(out[..., start : start + b.size])
        start += b.size
    return out


def block_names(blocks) -> list[str]:
    """Flat parameter names of a layout, in θ order."""
    return [n for b in blocks for n in b.names()]


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
    def gaussian(self) -> GaussianPrior:
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

    def bind(self, spec: DataSpec) -> Model:
        """Return a copy of the model fitted to the data's shape (n_features, n_classes)."""
        return dataclasses.replace(self, **self._bind_fields(spec))

    def _bind_fields(self, spec: DataSpec) -> dict:
        return {"n_features": spec.n_features}

    @property
    @abstractmethod
    def dim(self) -> int:
        """Number of parameters d (requires a bound model)."""

    def param_blocks(self) -> tuple[ParamBlock, ...]:
        """θ's layout as named parameters, in order (sizes sum to `dim`). Default: one block `theta`."""
        return (ParamBlock("theta", self.dim, "param", None, "identity"),)

    def param_names(self) -> list[str]:
        """One readable name per coordinate of θ, from `param_blocks`: e.g. `beta[age]`, `sigma`."""
        return block_names(self.param_blocks())

    @abstractmethod
    def prior(self) -> GaussianPrior | Prior:
        """The prior in θ's coordinates with the prior contract of `raysampler.priors` (`gaussian`, `residual`,
        `potential`, `grad`, `hvp`, `hessian_diag`): a GaussianPrior when it is all Gaussian, else a `Prior`."""

    def validate(self, X: np.ndarray, y: np.ndarray, argname: str = "data") -> None:
        """Raise ValueError naming `argname` if (X, y) cannot be data for this model."""

    def shard_data(self, X: np.ndarray, y: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The (X, y) every other method of this bound model expects for a shard holding `rows` of the original data
        (`Shard.index`; None when unknown). The runtime calls it once per shard after loading, before `validate`.
        Default: (X, y) unchanged; models holding per-row arrays (an offset, trial counts) append them to X."""
        return X, y

    def gram(self, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
        """This shard's contribution to the pooled matrix `check_proper` needs (summed over shards), or None when
        the prior alone makes the posterior proper. Default: None."""
        return None

    def check_proper(self, gram: np.ndarray | None, n_rows: int | None = None) -> None:
        """Raise ValueError (naming the prior argument) if the pooled data leave the posterior improper, given the
        sum of the shards' `gram` and the total row count. Default: nothing to check."""

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
