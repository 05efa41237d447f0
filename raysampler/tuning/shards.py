"""What tuning asks of the workers: the `ShardPool` an algorithm's `prepare` may call, and the functions it maps over
the shards (each computed where the shard lives, from its own rows; module-level so Ray can ship them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..models import Model
from ..models.contract import LocalCurvature, ParamBlock
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


def shard_newton_trial(
    model: Model, X: np.ndarray, y: np.ndarray, points: np.ndarray, hessians: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """One Newton iteration of the MAP search, on one shard: U_i and ∇U_i at K points (K, d) (the line search's
    candidates) and ∇²U_i (d, d) at those whose indices `hessians` lists, all in one trip. Values or gradients that
    overflow at a candidate far out come back non-finite (the line search passes over them), without a warning."""
    with np.errstate(over="ignore", invalid="ignore"):
        u, g = model.potential_and_grad(X, y, points)
        H = [np.asarray(model.hessian(X, y, points[k]), dtype=float) for k in hessians]
    return np.asarray(u, dtype=float), np.asarray(g, dtype=float), H


def shard_grad_hessian_diag(
    model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """∇U_i (d,) and the diagonal of ∇²U_i (d,) at one point θ (d,): a diagonal preconditioner's curvature and the
    shard's diagonal quadratic model at the MAP, in one trip."""
    return model.grad(X, y, theta[None, :])[0], np.asarray(model.hessian_diag(X, y, theta))


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


def shard_centring(model: Model, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which coordinates of θ the shard's interweaving move may change (`Model.centring`; none without local
    parameters)."""
    return np.asarray(model.centring(X, y), dtype=bool)


def shard_gram(model: Model, X: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """The shard's contribution to the pooled matrix the model's properness check reads (`Model.gram`)."""
    return model.gram(X, y)


def shard_group_labels(model: Model, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """The shard's distinct group labels per grouping factor (a model with `group_labels`; else none)."""
    own = getattr(model, "group_labels", None)
    return tuple(own(X, y)) if own is not None else ()


#: the local parameters' conditional mode: Newton steps at most, the decrement ½ gᵀH⁻¹g (per block) that ends them
#: (rounding level), and the one below which steps are taken in full (no line search: Newton's quadratic phase, where
#: a block's potential changes by less than its rounding); two such rounds end the search
ETA_NEWTON_MAX = 100
ETA_NEWTON_TOL = 1e-20
ETA_FULL_STEP = 1e-8
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


def conditional_modes(
    model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray, eta: np.ndarray, parts: str = "eta"
) -> tuple[np.ndarray, LocalCurvature]:
    """η̂ = argmin_η U_i(θ, η) at K points θ (K, d) from starting values `eta` (K, l_i), and the `LocalCurvature`
    there (as far as `parts`): Newton steps on every block of η at once (`EtaHessian`: with group effects one block
    per group, independent given θ), each block with its own backtracking on its own potential, until every
    block's decrement ½ gᵀH⁻¹g is at rounding level. U_i is convex in η for the log-concave families (with the
    non-centred prior ½‖η‖² strictly so). Returns x = (θ, η̂) (K, d + l_i)."""
    K, d = theta.shape
    x = np.concatenate([theta, eta], axis=1)
    lc = model.local_curvature(X, y, x, "eta")
    final = 0
    for _ in range(ETA_NEWTON_MAX):
        g = lc.grad[:, d:]
        blocks = lc.eta.blocks
        B, e = blocks.shape[1], blocks.shape[2]
        step = lc.eta.solve(g).reshape(K, B, e)
        dec = 0.5 * np.einsum("kbe,kbe->kb", g.reshape(K, B, e), step)
        t = np.where(dec > ETA_NEWTON_TOL, 1.0, 0.0)
        final = final + 1 if dec.max() < ETA_FULL_STEP else 0
        if final > 2 or not t.any():
            return x, (lc if parts == "eta" else model.local_curvature(X, y, x, parts))
        while not final:  # backtracking, block by block
            trial = x.copy()
            trial[:, d:] -= (t[:, :, None] * step).reshape(K, B * e)
            with np.errstate(all="ignore"):
                tv = model.block_potential(X, y, trial)
                ok = (t == 0.0) | (np.isfinite(tv) & (tv <= lc.blocks - 2e-4 * t * dec))
            if ok.all():
                break
            t = np.where(ok, t, 0.5 * t)
            t[t < 1e-12] = 0.0  # no descent left at machine precision: that block stays
        x = x.copy()
        x[:, d:] -= (t[:, :, None] * step).reshape(K, B * e)
        lc = model.local_curvature(X, y, x, "eta")
    raise FloatingPointError(f"the local parameters' conditional mode was not found in {ETA_NEWTON_MAX} Newton steps")


def shard_marginal(
    model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray, eta: np.ndarray, cross: bool
) -> MarginalPoint:
    """Shard i's Laplace-marginal potential V_i at θ (`MarginalPoint`), computed on the shard. The profile part
    U_i(θ, η̂(θ)) has gradient ∇_θU_i (envelope theorem) and Hessian the Schur complement H_θθ − H_θη H_ηη⁻¹ H_ηθ
    (block by block); the log-determinant part by central differences in θ with η̂ followed (Newton from its
    first-order prediction η̂ − H_ηη⁻¹H_ηθ δ), all difference points in one batch. Without that part the curvature
    of a group scale is read off the profile alone, which where groups are many and their data weak can be many
    times too small. The log-determinant's mixed second differences (4 points per pair of coordinates) only where
    `cross` is true; else its Hessian is taken as diagonal."""
    d = theta.shape[0]
    x, lc = conditional_modes(model, X, y, theta[None, :], eta[None, :], "all")
    assert lc.theta is not None and lc.cross is not None
    U, G, Htt = float(lc.value[0]), lc.grad[0], lc.theta[0]
    eta0 = x[0, d:]
    Het = lc.cross[0]
    dirs = lc.eta.solve(Het[None])[0]  # H_ηη⁻¹H_ηθ (l, d): dη̂/dθ = −dirs
    S = Htt - Het.T @ dirs
    S = 0.5 * (S + S.T)
    if eta0.size == 0:
        return MarginalPoint(U, G[:d], S, eta0)
    L0 = float(lc.eta.half_logdet()[0])
    h = LOGDET_STEP / np.sqrt(np.maximum(np.diag(Htt), 1e-4))
    e = np.eye(d)
    deltas = [h[j] * e[j] for j in range(d)] + [-h[j] * e[j] for j in range(d)]
    pairs = [(j, k) for j in range(d) for k in range(j + 1, d)] if cross else []
    for j, k in pairs:
        deltas += [h[j] * e[j] + s * h[k] * e[k] for s in (1.0, -1.0)]
        deltas += [-h[j] * e[j] + s * h[k] * e[k] for s in (1.0, -1.0)]
    D = np.array(deltas)
    _, lcs = conditional_modes(model, X, y, theta[None, :] + D, eta0[None, :] - D @ dirs.T)
    logdet = lcs.eta.half_logdet()
    plus, minus = logdet[:d], logdet[d : 2 * d]
    HL = np.diag((plus - 2.0 * L0 + minus) / h**2)
    for n, (j, k) in enumerate(pairs):
        pp, pm, mp, mm = logdet[2 * d + 4 * n : 2 * d + 4 * n + 4]
        HL[j, k] = HL[k, j] = (pp - pm - mp + mm) / (4.0 * h[j] * h[k])
    return MarginalPoint(U + L0, G[:d] + (plus - minus) / (2.0 * h), S + HL, eta0)


def shard_marginal_value(model: Model, X: np.ndarray, y: np.ndarray, theta: np.ndarray, eta: np.ndarray) -> float:
    """V_i(θ) alone (see `shard_marginal`), for a line search: +∞ where η̂ is not found (a trial point too far out)."""
    try:
        x, lc = conditional_modes(model, X, y, theta[None, :], eta[None, :])
        return float(lc.value[0]) + (float(lc.eta.half_logdet()[0]) if x.shape[1] > theta.shape[0] else 0.0)
    except (FloatingPointError, np.linalg.LinAlgError):
        return float("inf")


def shard_marginal_trial(
    model: Model, X: np.ndarray, y: np.ndarray, points: np.ndarray, eta: np.ndarray | None, cross: bool, strict: bool
) -> tuple[MarginalPoint | None, np.ndarray]:
    """One Newton iteration of the Laplace-marginal mode, on one shard: its `MarginalPoint` at the first of K points θ
    (K, d) (the full step; the log-determinant's cross terms where `cross`) and V_i alone at every point (the line
    search's candidates), from the starting values `eta` (l_i,) (zeros where None). Where η̂ is not found at a point,
    its value is +∞ and, at the first, the point None, unless `strict` (the current point, not a candidate): then
    the error is raised as it is."""
    d = points.shape[1]
    start = np.zeros(shard_local_dim(model, X, y)) if eta is None else eta
    try:
        first: MarginalPoint | None = shard_marginal(model, X, y, points[0], start, cross)
    except (FloatingPointError, np.linalg.LinAlgError):
        if strict:
            raise
        first = None
    values = np.full(len(points), np.inf)
    if first is not None:
        values[0] = first.value
    rest = points[1:]
    if len(rest):
        try:  # every candidate at once; one that fails makes the batch fail, and then each is tried alone
            x, lc = conditional_modes(model, X, y, rest, np.repeat(start[None, :], len(rest), axis=0))
            logdet = lc.eta.half_logdet() if x.shape[1] > d else np.zeros(len(rest))
            values[1:] = np.asarray(lc.value, dtype=float) + logdet
        except (FloatingPointError, np.linalg.LinAlgError):
            values[1:] = [shard_marginal_value(model, X, y, th, start) for th in rest]
    return first, values


def shard_rows(model: Model, X: np.ndarray, y: np.ndarray) -> int:
    """The shard's row count: the one fact of its data the DP mode's set-up reads (treated as public)."""
    return int(X.shape[0])
