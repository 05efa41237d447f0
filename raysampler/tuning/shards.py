"""What tuning asks of the workers: the `ShardPool` an algorithm's `prepare` may call, and the functions it maps over
the shards (each computed where the shard lives, from its own rows; module-level so Ray can ship them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


#: the local parameters' conditional mode: steps at most, the Newton decrement ½ gᵀH⁻¹g that ends them (rounding
#: level), and the one below which steps reuse the last Hessian
ETA_NEWTON_MAX = 100
ETA_NEWTON_TOL = 1e-20
ETA_CHORD = 1e-6
#: the central differences of ½ log det ∇²_ηη U_i take steps of this fraction of θ_j's conditional sd (H_θθ's)
LOGDET_STEP = 1e-2


@dataclass(frozen=True)
class MarginalPoint:
    """Shard i's Laplace-marginal potential in θ at one point: V_i(θ) = U_i(θ, η̂) + ½ log det ∇²_ηη U_i(θ, η̂) with
    η̂ = argmin_η U_i(θ, η), i.e. −log ∫ exp(−U_i(θ, η)) dη up to a constant, its gradient and Hessian in θ, and η̂."""

    value: float
    grad: np.ndarray  # (d,)
    hessian: np.ndarray  # (d, d); the log-determinant's part diagonal unless its cross terms were asked for
    eta: np.ndarray  # (l_i,) η̂, the next point's starting guess


def _eta_mode(
    model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray, eta: np.ndarray
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """(x = (θ, η̂), U_i, ∇U_i, ∇²U_i at x): η̂ = argmin_η U_i(θ, η) from `eta` (U_i is convex in η for the
    log-concave families, with the non-centred prior ½‖η‖² making it strictly so). Newton steps with backtracking
    while the decrement ½ gᵀH⁻¹g is above ETA_CHORD; below it, full steps with the last Hessian (a chord method:
    from a good start, as in the central differences, one Hessian there and one at the end, not one per step)."""
    d = theta.shape[0]
    x = np.concatenate([theta, eta])
    u, g = model.potential_and_grad(X, y, x[None, :])
    U, G = float(u[0]), g[0]
    H = model.hessian(X, y, x)
    fresh = True
    for _ in range(ETA_NEWTON_MAX):
        step = np.linalg.solve(H[d:, d:], G[d:])
        half_dec = 0.5 * float(G[d:] @ step)
        if not half_dec > ETA_NEWTON_TOL:
            return x, U, G, (H if fresh else model.hessian(X, y, x))
        if half_dec < ETA_CHORD:
            x = x.copy()
            x[d:] -= step
            u, g = model.potential_and_grad(X, y, x[None, :])
            U, G, fresh = float(u[0]), g[0], False
            continue
        t = 1.0
        while t > 1e-12:
            xn = x.copy()
            xn[d:] -= t * step
            un, gn = model.potential_and_grad(X, y, xn[None, :])
            if np.isfinite(un[0]) and un[0] <= U - 2e-4 * t * half_dec:
                break
            t *= 0.5
        else:
            return x, U, G, (H if fresh else model.hessian(X, y, x))  # no descent left at machine precision
        x, U, G = xn, float(un[0]), gn[0]
        H, fresh = model.hessian(X, y, x), True
    raise FloatingPointError(f"the local parameters' conditional mode was not found in {ETA_NEWTON_MAX} Newton steps")


def _half_logdet(H: np.ndarray, d: int) -> float:
    """½ log det ∇²_ηη U_i (the η block of the Hessian H, positive definite at η̂)."""
    return float(np.sum(np.log(np.diag(np.linalg.cholesky(H[d:, d:])))))


def shard_marginal(
    model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray, eta: np.ndarray, cross: bool
) -> MarginalPoint:
    """Shard i's Laplace-marginal potential V_i at θ (`MarginalPoint`), computed on the shard. The profile part
    U_i(θ, η̂(θ)) has gradient ∇_θU_i (envelope theorem) and Hessian the Schur complement H_θθ − H_θη H_ηη⁻¹ H_ηθ;
    the log-determinant part, by central differences in θ with η̂ followed (Newton from its first-order prediction
    η̂ − H_ηη⁻¹H_ηθ δ). Without that part the curvature of a group scale is read off the profile alone, which where
    groups are many and their data weak can be many times too small. The log-determinant's mixed second differences
    (4 points per pair of coordinates) only where `cross` is true; else its Hessian is taken as diagonal."""
    d = theta.shape[0]
    x, U, G, H = _eta_mode(model, X, y, theta, eta)
    eta0 = x[d:]
    Het = H[d:, :d]
    dirs = np.linalg.solve(H[d:, d:], Het)  # H_ηη⁻¹H_ηθ: dη̂/dθ = −dirs
    S = H[:d, :d] - Het.T @ dirs
    S = 0.5 * (S + S.T)
    if eta0.size == 0:
        return MarginalPoint(U, G[:d], S, eta0)
    L0 = _half_logdet(H, d)
    h = LOGDET_STEP / np.sqrt(np.maximum(np.diag(H[:d, :d]), 1e-4))

    def logdet_at(delta: np.ndarray) -> float:
        _, _, _, Hd = _eta_mode(model, X, y, theta + delta, eta0 - dirs @ delta)
        return _half_logdet(Hd, d)

    e = np.eye(d)
    plus = np.array([logdet_at(h[j] * e[j]) for j in range(d)])
    minus = np.array([logdet_at(-h[j] * e[j]) for j in range(d)])
    HL = np.diag((plus - 2.0 * L0 + minus) / h**2)
    for j in range(d if cross else 0):
        for k in range(j + 1, d):
            pp = logdet_at(h[j] * e[j] + h[k] * e[k])
            pm = logdet_at(h[j] * e[j] - h[k] * e[k])
            mp = logdet_at(-h[j] * e[j] + h[k] * e[k])
            mm = logdet_at(-h[j] * e[j] - h[k] * e[k])
            HL[j, k] = HL[k, j] = (pp - pm - mp + mm) / (4.0 * h[j] * h[k])
    return MarginalPoint(U + L0, G[:d] + (plus - minus) / (2.0 * h), S + HL, eta0)


def shard_marginal_value(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray, eta: np.ndarray) -> float:
    """V_i(θ) alone (see `shard_marginal`), for a line search: +∞ where η̂ is not found (a trial point too far out)."""
    try:
        x, U, _, H = _eta_mode(model, X, y, theta, eta)
        return U + (_half_logdet(H, theta.shape[0]) if x.shape[0] > theta.shape[0] else 0.0)
    except (FloatingPointError, np.linalg.LinAlgError):
        return float("inf")
