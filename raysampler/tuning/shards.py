"""What tuning asks of the workers: the `ShardPool` an algorithm's `prepare` may call, and the functions it maps over
the shards (each computed where the shard lives, from its own rows; module-level so Ray can ship them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..models import Model
from ..models.contract import ParamBlock
from ..reparam import Preconditioner, WhitenedModel


class ShardPool(Protocol):
    """What an algorithm's `prepare` may ask of the workers: run a pure function on every shard, and hand them
    the model they are to run (e.g. the model in whitened coordinates)."""

    num_shards: int

    def bind(self, model: Any) -> None:
        """Give every worker `model` (each checks its shards against it)."""
        ...

    def map(self, fn: Callable[..., Any], args: Sequence[tuple]) -> list[Any]:
        """Return [fn(model, X_i, y_i, *args[i]) for each shard i], computed where shard i lives."""
        ...


def shard_value_and_grad(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """U_i and ∇U_i at one point θ (d,) on one shard."""
    u, g = model.potential_and_grad(X, y, theta[None, :])
    return float(u[0]), g[0]


def shard_batch_value_and_grad(
    model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """U_i and ∇U_i at K points (K, d) on one shard."""
    return model.potential_and_grad(X, y, theta)


def shard_grad(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """∇U_i at K points (K, d) on one shard."""
    return model.grad(X, y, theta)


def shard_hessian(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """∇²U_i (d, d) at one point θ (d,)."""
    return model.hessian(X, y, theta)


def shard_hessian_diag(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """The diagonal of ∇²U_i (d,) at one point θ (d,)."""
    return model.hessian_diag(X, y, theta)


def shard_local_quadratic(
    model: Model, X: np.ndarray, y: np.ndarray, precond: Preconditioner, dense: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Worker i's quadratic model of U_i at the MAP (φ = 0) in φ coordinates: (∇_φU_i, ∇²_φU_i), the Hessian dense
    (d, d) or its diagonal (d,) (a PSD curvature estimate)."""
    wm = WhitenedModel(model, precond)
    origin = np.zeros(wm.dim)
    g = wm.grad(X, y, origin[None, :])[0]
    if dense:
        return g, wm.hessian(X, y, origin)
    return g, np.asarray(wm.hessian_diag(X, y, origin))


def shard_local_dim(model: Model, X: np.ndarray, y: np.ndarray) -> int:
    """l_i, the number of the shard's local parameters (group effects; 0 without)."""
    return int(model.local_dim(X, y)) if model.has_local_params() else 0


def shard_local_blocks(model: Model, X: np.ndarray, y: np.ndarray) -> tuple[ParamBlock, ...]:
    """The shard's local parameters as named blocks, in the order of its local coordinates (reported scale)."""
    return tuple(model.local_blocks(X, y)) if model.has_local_params() else ()


def shard_group_labels(model: Model, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """The shard's distinct group labels per grouping factor (a model with `group_labels`; else none)."""
    own = getattr(model, "group_labels", None)
    return tuple(own(X, y)) if own is not None else ()


def shard_schur(model: Model, X: np.ndarray, y: np.ndarray, x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """At one point x = (θ, η_i) (d + l_i,) at which ∇_η U_i = 0 (the joint MAP): the gradient in θ and the Schur
    complement S_i = H_θθ − H_θη H_ηη⁻¹ H_ηθ of the Hessian of U_i, i.e. the Hessian of the shard's Laplace-marginal
    potential −log ∫ exp(−U_i(θ, η)) dη in θ (d, d)."""
    g = model.grad(X, y, x[None, :])[0][:d]
    H = model.hessian(X, y, x)
    H = 0.5 * (H + H.T)
    S = H[:d, :d]
    if H.shape[0] > d:
        S = S - H[:d, d:] @ np.linalg.solve(H[d:, d:], H[d:, :d])
    return g, 0.5 * (S + S.T)
