"""The shared tuning step every gradient-based algorithm starts from, computed with no data leaving a worker:
the MAP, the Laplace preconditioner θ = θ* + Lφ, each shard's quadratic model of U_i at the MAP (its gradient and
Hessian in φ) and the curvature met there.

Each quantity is a sum over shards of something a worker computes from its own shard (`shards`, `curvature`); the
coordinator only adds the prior and sums. `laplace_step` returns it all as one `Laplace` value; algorithms derive
their default step sizes from it (`budget`, `laws`) and run on `Laplace.model(...)`, the model seen in φ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from ..diagnostics import superchain_ids, superchains_for
from ..models import Model
from ..reparam import Preconditioner, WhitenedModel
from ..streams import ChainNoise
from .curvature import local_curvatures
from .shards import (
    MarginalPoint,
    ShardPool,
    shard_grad_hessian_diag,
    shard_hessian,
    shard_local_quadratic,
    shard_marginal_trial,
    shard_newton_trial,
    shard_value_and_grad,
)

#: Above this dimension the Laplace preconditioner is diagonal (a dense d×d factor costs d² per step).
DENSE_PRECONDITIONER_MAX_DIM = 300
PRECONDITIONERS = ("auto", "laplace", "diag", None)


def prior_hessian(prior: Any, x: np.ndarray) -> np.ndarray:
    """The whole prior's Hessian (d, d) at one point x (d,): its Gaussian part plus the residual term's."""
    H = prior.gaussian.matrix().astype(float)
    if prior.residual is not None:
        d = x.shape[0]
        H = H + prior.residual.hvp(np.repeat(x[None, :], d, axis=0), np.eye(d))
    return 0.5 * (H + H.T)


def total_value_and_grad(model: Model, pool: ShardPool, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """U(θ) = Σ_i U_i(θ) + prior and its gradient, summed over the workers."""
    prior = model.prior()
    parts = pool.map(shard_value_and_grad, [(theta,)] * pool.num_shards)
    value = sum(p[0] for p in parts) + float(prior.potential(theta[None, :])[0])
    grad = np.sum([p[1] for p in parts], axis=0) + prior.grad(theta[None, :])[0]
    return value, grad


def total_hessian(model: Model, pool: ShardPool, theta: np.ndarray) -> np.ndarray:
    """∇²U(θ): the workers' Hessians summed, plus the prior's."""
    H = np.sum(pool.map(shard_hessian, [(theta,)] * pool.num_shards), axis=0) + prior_hessian(model.prior(), theta)
    return 0.5 * (H + H.T)


#: The MAP's Newton iteration (`newton_map`): it ends at a point whose Hessian was computed there once the Newton
#: decrement ½gᵀH⁻¹g is at most MAP_NEWTON_TOL (½‖θ − θ*‖² in the Laplace posterior's metric to second order: θ within
#: about 1.4e-9 posterior sd of the mode), or at most MAP_NEWTON_STALL with no further progress (rounding level), and
#: gives up (to L-BFGS) after MAP_NEWTON_TRIPS trips
MAP_NEWTON_TOL = 1e-18
MAP_NEWTON_STALL = 1e-12
MAP_NEWTON_TRIPS = 50
#: its line search's step lengths 1, ½, ¼, ... 2⁻¹⁹, evaluated together: all of them in the first iteration's trip,
#: then those down to a quarter of the last step length taken, MAP_SHORT_LADDER at least (each costs U and ∇U on every
#: shard; Newton's full step mostly passes), the rest in a trip of their own where none of these does
MAP_LADDER = 0.5 ** np.arange(20)
MAP_SHORT_LADDER = 4
#: where the Hessian is not positive definite, the step divides by its eigenvalues' absolute values, none taken below
#: this fraction of the largest
MAP_EIGEN_FLOOR = 1e-6
#: Armijo's sufficient decrease along the step, and the slack (relative to |U|) that lets a step pass where U only
#: changes by rounding
MAP_ARMIJO = 1e-4
MAP_SLACK = 1e-12


@dataclass(frozen=True)
class MapPoint:
    """Where `newton_map` ended: θ, U(θ), ∇U(θ) and ∇²U(θ) (the shards' sums plus the prior's), the lower Cholesky
    factor of that Hessian, each shard's (∇U_i(θ), ∇²U_i(θ)) and the Newton decrement ½gᵀH⁻¹g there."""

    theta: np.ndarray
    value: float
    grad: np.ndarray
    hessian: np.ndarray
    cholesky: np.ndarray
    shards: list[tuple[np.ndarray, np.ndarray]]
    decrement: float


def newton_map(model: Model, pool: ShardPool, x0: np.ndarray) -> MapPoint | None:
    """The MAP θ* = argmin U by Newton's method, one trip to the workers per iteration: each trip brings back U and ∇U
    at the line search's step lengths (`MAP_LADDER`; Armijo's rule picks the longest that passes) and ∇²U at the
    full step and at the step length the last iteration took, so the next direction is at hand where the step
    taken is one of those; after another, it uses the Hessian of the nearest of them (a descent direction still),
    and the next trip brings one at the step length taken. Where the Hessian is not positive definite (U not convex
    there), the step divides by its eigenvalues' absolute values. Ends where the Newton decrement at a point with
    its own, positive definite Hessian is below `MAP_NEWTON_TOL`, and returns the `MapPoint` there (its Hessian and
    the shards' quadratics are the Laplace step's, no further trip needed). None where Newton cannot go on (no step
    length that decreases U, non-finite values, or `MAP_NEWTON_TRIPS` spent): the caller then falls back to
    L-BFGS."""
    prior = model.prior()
    b = pool.num_shards

    def evaluate(points: np.ndarray, at: list[int]) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        parts = pool.map(shard_newton_trial, [(points, at)] * b)
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.sum([p[0] for p in parts], axis=0) + prior.potential(points)
            grads = np.sum([p[1] for p in parts], axis=0) + prior.grad(points)
        return np.asarray(values, dtype=float), np.asarray(grads, dtype=float), parts

    def hessian(parts: list[Any], j: int, theta: np.ndarray) -> np.ndarray:
        H = np.sum([p[2][j] for p in parts], axis=0) + prior_hessian(prior, theta)
        return 0.5 * (H + H.T)

    values, grads, parts = evaluate(x0[None, :], [0])
    theta, f, g, H = x0, float(values[0]), grads[0], hessian(parts, 0, x0)
    here: list[tuple[np.ndarray, np.ndarray]] | None = [(p[1][0], p[2][0]) for p in parts]  # θ's own, or None
    last = np.inf  # the decrement at the last point with its own Hessian
    taken = 1.0  # the step length the last iteration took
    ladder: np.ndarray | None = MAP_LADDER  # this trip's step lengths (None: those of a new direction)
    for _ in range(MAP_NEWTON_TRIPS):
        if not (np.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(H))):
            return None
        C: np.ndarray | None
        try:
            C = np.linalg.cholesky(H)
            step = scipy.linalg.cho_solve((C, True), g)
        except np.linalg.LinAlgError:  # not convex here (e.g. a noise scale far from its mode): |eigenvalues|
            C, (w, Q) = None, np.linalg.eigh(H)
            step = Q @ ((Q.T @ g) / np.maximum(np.abs(w), MAP_EIGEN_FLOOR * max(float(np.abs(w).max()), 1e-300)))
        dec = 0.5 * float(g @ step)
        if here is not None and C is not None:
            if dec <= MAP_NEWTON_TOL or (dec <= MAP_NEWTON_STALL and dec > 0.5 * last):
                return MapPoint(theta, f, g, H, C, here, dec)
            last = dec
        if ladder is None:  # a new direction: the step lengths down to a quarter of the last one taken
            ladder = MAP_LADDER[: max(MAP_SHORT_LADDER, int(round(-np.log2(taken))) + 3)]
        at = sorted({0, int(np.argmin(np.abs(np.log2(ladder / taken))))})  # Hessians: full step, last one's length
        points = theta[None, :] - ladder[:, None] * step[None, :]
        values, grads, parts = evaluate(points, at)
        with np.errstate(invalid="ignore"):
            ok = (
                np.isfinite(values)
                & np.all(np.isfinite(grads), axis=1)
                & (values <= f - MAP_ARMIJO * ladder * 2.0 * dec + MAP_SLACK * abs(f))
            )
        if not ok.any():
            rest = MAP_LADDER[int(np.flatnonzero(ladder[-1] == MAP_LADDER)[0]) + 1 :]
            if not rest.size:
                return None  # no step length decreases U
            ladder, here, taken = rest, None, float(rest[0])  # the same direction, the step lengths below these
            continue
        k = int(np.argmax(ok))
        theta, f, g, taken = points[k], float(values[k]), grads[k], float(ladder[k])
        j = int(np.argmin([abs(k - i) for i in at]))  # the Hessian nearest the step taken (its own where j's is k)
        H = hessian(parts, j, points[at[j]])
        here = [(p[1][k], p[2][j]) for p in parts] if at[j] == k else None
        ladder = None
    return None


def find_map(
    model: Model, pool: ShardPool, *, x0: np.ndarray, dense_hessian: bool, newton_steps: int = 20, gtol: float = 1e-8
) -> np.ndarray:
    """The MAP θ* = argmin U: with `dense_hessian`, Newton's method on the workers' summed gradients and Hessians
    (`newton_map`); else, or where Newton cannot go on, L-BFGS then Newton polish (`lbfgs_map`)."""
    if dense_hessian:
        point = newton_map(model, pool, x0)
        if point is not None:
            return point.theta
    return lbfgs_map(model, pool, x0=x0, dense_hessian=dense_hessian, newton_steps=newton_steps, gtol=gtol)


def lbfgs_map(
    model: Model, pool: ShardPool, *, x0: np.ndarray, dense_hessian: bool, newton_steps: int = 20, gtol: float = 1e-8
) -> np.ndarray:
    """The MAP θ* = argmin U: L-BFGS on the workers' summed gradients (one trip per evaluation), then (with
    `dense_hessian`) Newton polish with summed Hessians. Raises FloatingPointError where the search diverges."""
    # here, not at module level: the workers import this module and never optimise, and the import costs time
    # (docs/performance.md, "Measurements behind choices in the code")
    import scipy.optimize

    res = scipy.optimize.minimize(
        lambda t: total_value_and_grad(model, pool, t),
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 5000, "gtol": 1e-10},
    )
    theta = res.x
    if not np.all(np.isfinite(theta)):
        raise FloatingPointError("MAP search diverged: the posterior may be improper for this data and prior")
    if dense_hessian:
        value, grad = total_value_and_grad(model, pool, theta)
        for _ in range(newton_steps):
            if np.max(np.abs(grad)) < gtol:
                break
            H = total_hessian(model, pool, theta)
            try:
                step = scipy.linalg.solve(H, grad, assume_a="pos")
            except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
                break  # not positive definite here: keep the L-BFGS point
            t = 1.0
            while t > 1e-6:
                cand = theta - t * step
                cv, cg = total_value_and_grad(model, pool, cand)
                if np.isfinite(cv) and cv <= value + 1e-12 * abs(value):
                    theta, value, grad = cand, cv, cg
                    break
                t *= 0.5
            else:
                break
    return theta


def laplace_preconditioner(model: Model, pool: ShardPool, theta_map: np.ndarray, kind: str) -> Preconditioner:
    """θ = θ* + Lφ with L Lᵀ = (Σ_i ∇²U_i(θ*) + prior Hessian)⁻¹ (kind "laplace") or its diagonal ("diag").

    Falls back to the diagonal form when the summed Hessian is not positive definite (e.g. an MLP).
    """
    if kind == "laplace":
        precond = laplace_factor(theta_map, total_hessian(model, pool, theta_map))
        if precond is not None:
            return precond
    return diagonal_preconditioner(model, pool, theta_map)[0]


def laplace_factor(theta_map: np.ndarray, H: np.ndarray) -> Preconditioner | None:
    """The Laplace preconditioner θ = θ* + Lφ, L = C⁻ᵀ from the Cholesky factor C of the Hessian H (L Lᵀ = H⁻¹);
    None where H is not positive definite."""
    try:
        C = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        return None
    return Preconditioner(theta_map, scipy.linalg.solve_triangular(C, np.eye(H.shape[0]), lower=True).T, "laplace")


def diagonal_preconditioner(
    model: Model, pool: ShardPool, theta_map: np.ndarray
) -> tuple[Preconditioner, list[tuple[np.ndarray, np.ndarray]]]:
    """The diagonal preconditioner L = diag(Σ_i ∇²U_i(θ*) + prior Hessian)^(-1/2) and, from the same trip, every
    shard's diagonal quadratic model of U_i at the MAP in φ (what `shard_local_quadratic` gives with dense=False)."""
    parts = pool.map(shard_grad_hessian_diag, [(theta_map,)] * pool.num_shards)
    diag = np.sum([hd for _, hd in parts], axis=0) + np.diag(prior_hessian(model.prior(), theta_map))
    precond = Preconditioner(theta_map, 1.0 / np.sqrt(np.clip(diag, 1e-12, None)), "diag")
    return precond, [(precond.pull_grad(g[None, :])[0], precond.pull_diag(hd)) for g, hd in parts]


def local_quadratics(
    model: Model, pool: ShardPool, precond: Preconditioner, dense: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every worker's (gradient, Hessian) of U_i at the MAP in φ coordinates (`shard_local_quadratic`)."""
    return pool.map(shard_local_quadratic, [(precond, dense)] * pool.num_shards)


def map_start(seed: int, d: int) -> np.ndarray:
    """The MAP search's deterministic starting point (a tiny seeded perturbation of 0)."""
    return 0.01 * np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2**31,))).standard_normal(d)


@dataclass(frozen=True)
class Laplace:
    """What the shared tuning step found.

    `precond` maps φ → θ (identity under the papers' plain rules). The quadratic models are in z = φ − `centre`,
    `centre` the MAP in φ (0 when whitened): `quads[i]` = (g_i, P_i), shard i's gradient and Hessian (dense (d, d)
    or diagonal (d,)) of U_i at the MAP; the prior's quadratic is ½zᵀ prior_P z − prior_bᵀz (its Gaussian part plus
    the residual's second-order expansion at the MAP); `curvature[i]` = λ_max(P_i). Fields are None where the step
    was not asked for them.
    """

    theta_map: np.ndarray | None
    precond: Preconditioner
    centre: np.ndarray | None
    quads: list[tuple[np.ndarray, np.ndarray]] | None
    prior_P: np.ndarray | None
    prior_b: np.ndarray | None
    curvature: np.ndarray | None

    @property
    def whitened(self) -> bool:
        return self.precond.kind != "none"

    @property
    def dense(self) -> bool:
        return self.quads is not None and self.quads[0][1].ndim == 2

    def model(self, model: Model) -> Any:
        """The model the sampler runs on: `model` in φ (or `model` itself under the plain rules)."""
        return WhitenedModel(model, self.precond) if self.whitened else model

    def adopt(self, model: Model, pool: ShardPool) -> Any:
        """`model(model)`, handed to every worker when it differs from `model` (so later worker calls run in φ)."""
        wmodel = self.model(model)
        if wmodel is not model:
            pool.bind(wmodel)
        return wmodel

    def precision(self) -> np.ndarray:
        """Λ = prior_P + Σ_i P_i: the Laplace posterior's precision in the sampler's coordinates."""
        assert self.quads is not None and self.prior_P is not None
        return self.prior_P + sum(np.diag(P) if P.ndim == 1 else P for _, P in self.quads)

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean (in z = φ − centre) and covariance of the Gaussian (Laplace) model of the posterior."""
        assert self.quads is not None and self.prior_b is not None
        cov = np.linalg.inv(self.precision())
        cov = 0.5 * (cov + cov.T)
        return cov @ (self.prior_b - sum(g for g, _ in self.quads)), cov


def resolve_preconditioner(kind: str | None, d: int) -> str | None:
    """ "auto" → dense Laplace for d ≤ DENSE_PRECONDITIONER_MAX_DIM, diagonal above; others unchanged."""
    if kind not in PRECONDITIONERS:
        raise ValueError(f"preconditioner must be one of {PRECONDITIONERS}, got {kind!r}")
    if kind == "auto":
        return "laplace" if d <= DENSE_PRECONDITIONER_MAX_DIM else "diag"
    return kind


def laplace_step(
    model: Model,
    pool: ShardPool,
    *,
    seed: int,
    preconditioner: str | None,
    need_map: bool = True,
    quadratics: bool = True,
) -> Laplace:
    """The shared tuning step. With a preconditioner: MAP, Laplace L, every shard's quadratic in φ and its curvature.
    With `preconditioner=None` (the papers' plain rules): the MAP only if `need_map`, identity coordinates, and the
    quadratics only if `quadratics` (then at the MAP in θ)."""
    d = model.dim
    kind = resolve_preconditioner(preconditioner, d)
    if kind is None and not need_map:
        return Laplace(None, Preconditioner.identity(d), None, None, None, None, None)
    dense = kind != "diag" and d <= DENSE_PRECONDITIONER_MAX_DIM
    x0 = map_start(seed, d)
    point = newton_map(model, pool, x0) if dense else None
    found: list[tuple[np.ndarray, np.ndarray]] | None = None  # the shards' quadratics, where a trip brought them
    if point is not None:  # Newton's last trip brought the Hessian and every shard's quadratic at the MAP
        theta_map = point.theta
        if kind is None:  # the plain rules run in θ; the quadratic models are still taken at the MAP
            precond, at_map = Preconditioner.identity(d), Preconditioner(theta_map, None, "none")
        else:
            L = scipy.linalg.solve_triangular(point.cholesky, np.eye(d), lower=True).T  # L = C⁻ᵀ, L Lᵀ = H⁻¹
            precond = at_map = Preconditioner(theta_map, L, "laplace")
        found = [(at_map.pull_grad(g[None, :])[0], at_map.pull_matrix(H)) for g, H in point.shards]
    else:
        theta_map = lbfgs_map(model, pool, x0=x0, dense_hessian=dense)
        if kind is None:
            precond, at_map = Preconditioner.identity(d), Preconditioner(theta_map, None, "none")
        else:
            laplace = laplace_factor(theta_map, total_hessian(model, pool, theta_map)) if kind == "laplace" else None
            if laplace is None:  # asked for, or the Hessian is not positive definite (e.g. an MLP)
                laplace, found = diagonal_preconditioner(model, pool, theta_map)
            precond = at_map = laplace
            dense = dense and precond.kind == "laplace"
    centre = precond.to_phi(theta_map[None, :])[0]
    if not quadratics:
        return Laplace(theta_map, precond, centre, None, None, None, None)
    quads = found if found is not None else local_quadratics(model, pool, at_map, dense)
    curvature = np.array([np.linalg.eigvalsh(P)[-1] if P.ndim == 2 else float(np.max(P)) for _, P in quads])
    if not dense:
        curvature = np.maximum(curvature, local_curvatures(model, pool, at_map))
    prior = model.prior()
    prior_P, prior_b = at_map.prior_in_phi(np.asarray(prior.gaussian.mean, dtype=float), prior.gaussian.precision)
    if prior.residual is not None:  # its second-order expansion at the MAP joins the Gaussian part
        term = WhitenedModel(model, at_map).prior().residual
        assert term is not None  # the model's prior has a residual, so its whitened view has one
        origin = np.zeros((1, d))
        H = term.hvp(np.repeat(origin, d, axis=0), np.eye(d))
        prior_P = prior_P + 0.5 * (H + H.T)
        prior_b = prior_b - term.grad(origin)[0]
    return Laplace(theta_map, precond, centre, quads, prior_P, prior_b, np.maximum(curvature, 1e-12))


def laplace_for(model: Model, pool: ShardPool, *, seed: int, preconditioner: str | None, init: Any) -> Laplace:
    """The tuning step of the samplers that follow the shared defaults: the MAP where a preconditioner or the chains'
    start needs it, the shards' quadratics unless `preconditioner` is None (the papers' plain rules)."""
    return laplace_step(
        model,
        pool,
        seed=seed,
        preconditioner=preconditioner,
        need_map=starts_at_map(init),
        quadratics=preconditioner is not None,
    )


def starts_at_map(init: Any) -> bool:
    """Whether `init` asks for the MAP start (init="map"; arrays never do)."""
    return isinstance(init, str) and init == "map"


def initial_points(init: Any, lap: Laplace, chains: int, d: int, noise: ChainNoise | None = None) -> np.ndarray:
    """The chains' starting points (K, d) in the sampler's coordinates φ: "map" (the MAP; with a preconditioner plus
    one draw from the Laplace approximation per chain, an over-dispersed start for R-hat), "zeros" (θ = 0), or an
    array (d,) / (K, d) of θ values.

    From `diagnostics.MANY_CHAINS` chains on, "map" with a preconditioner starts the chains of each superchain
    (`diagnostics.superchains_for`, contiguous) at one point, the Laplace draw of its first chain, as the nested
    design that nested R-hat reads requires; every chain's stream still gives its one draw, so the numbers that
    follow are those of independent starts. Below that every chain has its own draw."""
    if isinstance(init, str):
        if init == "map":
            if lap.theta_map is None:
                raise ValueError("init='map' needs the MAP (laplace_step with need_map=True)")
            phi = lap.precond.to_phi(lap.theta_map[None, :])
            if lap.whitened and noise is not None:
                draw = noise.normal(1)[0]
                superchains = superchains_for(chains)
                if superchains > 1:
                    draw = draw[superchain_ids(chains, superchains) * (chains // superchains)]
                return phi + draw
            return np.repeat(phi, chains, axis=0)
        if init == "zeros":
            return np.repeat(lap.precond.to_phi(np.zeros((1, d))), chains, axis=0)
        raise ValueError(f"init must be 'map', 'zeros' or an array, got {init!r}")
    arr = np.asarray(init, dtype=float)
    if arr.shape == (d,):
        arr = np.repeat(arr[None, :], chains, axis=0)
    if arr.shape != (chains, d) or not np.all(np.isfinite(arr)):
        raise ValueError(f"init must have shape ({d},) or ({chains}, {d}) with finite values, got shape {arr.shape}")
    return lap.precond.to_phi(arr)


@dataclass(frozen=True)
class LocalLaplace:
    """The tuning step for a model with shard-local parameters (group effects): `lap` describes the global θ only
    (its centre is the mode of θ's Laplace-marginal posterior, its quadratics the shards' Laplace-marginal potentials
    V_i there, in φ; the preconditioner whitens θ and leaves the local η alone), `eta_map[i]` is shard i's
    conditional mode η̂_i at that θ and `local_dims[i]` = l_i."""

    lap: Laplace
    eta_map: list[np.ndarray]
    local_dims: list[int]


#: the Laplace-marginal mode's Newton steps at most, and the decrement ½ gᵀH⁻¹g that ends them
MARGINAL_NEWTON_MAX = 50
MARGINAL_NEWTON_TOL = 1e-10
#: no Newton step moves a coordinate of θ by more than this (the marginal need not be convex away from its mode,
#: where a negative curvature's direction is taken with its sign flipped)
MARGINAL_MAX_STEP = 1.0
#: the line search's step lengths 1, ½, ... 2⁻³³: the first MARGINAL_FIRST_LADDER with the full step's trip (the
#: capped step is nearly always taken whole, and each length costs its η̂ on every shard), then
#: MARGINAL_LADDER_TRIP per trip
MARGINAL_LADDER = 0.5 ** np.arange(34)
MARGINAL_FIRST_LADDER = 2
MARGINAL_LADDER_TRIP = 8
#: below this decrement the next point's Hessian is taken whole (the log-determinant's cross terms too), so that the
#: point where the iteration ends most likely has it already
MARGINAL_CROSS_AT = 1e-4

#: the prior plus the shards' Laplace-marginal potentials at one θ: value, gradient, Hessian, the shards' points
_MarginalAt = tuple[float, np.ndarray, np.ndarray, list[MarginalPoint]]


def marginal_mode(
    model: Model, pool: ShardPool, theta: np.ndarray, etas: list[np.ndarray] | None = None
) -> tuple[np.ndarray, list[np.ndarray], list[MarginalPoint]]:
    """The mode θ* of prior(θ) + Σ_i V_i(θ), the shards' Laplace-marginal potentials (`shards.shard_marginal`: the
    local η_i integrated out by Laplace's method), by damped Newton steps from θ (the η̂_i searched from `etas`, or
    from 0; the log-determinant's Hessian taken as diagonal on the way, whole near and at the end); returns θ*, each
    shard's η̂_i(θ*) and its `MarginalPoint` there. This, not the joint mode of (θ, η), is where θ's posterior lies:
    with many groups of weak data the joint mode puts a group scale far out in its tail (the effects' ½‖η‖² pulls
    η → 0 and the scale up), where its curvature is a fraction of the marginal's.

    One trip per iteration (`shards.shard_marginal_trial`): the marginal at the full step and V alone at the line
    search's step lengths; a shorter step takes one more trip, for the marginal there."""
    prior = model.prior()
    b = pool.num_shards

    def trial(
        points: np.ndarray, es: list[np.ndarray] | list[None], cross: bool, strict: bool
    ) -> tuple[np.ndarray, _MarginalAt | None]:
        parts = pool.map(shard_marginal_trial, [(points, es[i], cross, strict) for i in range(b)])
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.asarray(prior.potential(points), dtype=float) + np.sum([v for _, v in parts], axis=0)
        firsts = [m for m, _ in parts]
        if any(m is None for m in firsts):
            return values, None
        ms = [m for m in firsts if m is not None]
        th = points[0]
        grad = prior.grad(th[None, :])[0] + np.sum([m.grad for m in ms], axis=0)
        H = prior_hessian(prior, th) + np.sum([m.hessian for m in ms], axis=0)
        return values, (float(values[0]), grad, 0.5 * (H + H.T), ms)

    def at(th: np.ndarray, es: list[np.ndarray] | list[None], cross: bool = False) -> _MarginalAt:
        found = trial(th[None, :], es, cross, strict=True)[1]
        assert found is not None  # strict: a shard whose η̂ is not found raised
        return found

    value, grad, H, parts = at(theta, list(etas) if etas is not None else [None] * b)
    whole = False  # whether H has the log-determinant's cross terms
    for _ in range(MARGINAL_NEWTON_MAX):
        w, Q = np.linalg.eigh(H)
        step = Q @ ((Q.T @ grad) / np.maximum(np.abs(w), 1e-6 * max(np.abs(w).max(), 1e-12)))
        step *= min(1.0, MARGINAL_MAX_STEP / max(np.abs(step).max(), 1e-300))
        dec = float(grad @ step)
        if not 0.5 * dec > MARGINAL_NEWTON_TOL:
            break
        es = [m.eta for m in parts]
        cross = 0.5 * dec < MARGINAL_CROSS_AT
        ladder = MARGINAL_LADDER[:MARGINAL_FIRST_LADDER]
        k: int | None = None
        while True:
            points = theta[None, :] - ladder[:, None] * step[None, :]
            values, point = trial(points, es, cross, strict=False)
            with np.errstate(invalid="ignore"):
                ok = np.isfinite(values) & (values <= value - 1e-4 * ladder * dec)
            if ok.any():
                k = int(np.argmax(ok))
                break
            rest = MARGINAL_LADDER[int(np.flatnonzero(ladder[-1] == MARGINAL_LADDER)[0]) + 1 :]
            if not rest.size:
                break
            ladder = rest[:MARGINAL_LADDER_TRIP]
        if k is None:
            break  # no step length decreases the marginal: θ stays
        theta = points[k]
        if k == 0 and point is not None:
            (value, grad, H, parts), whole = point, cross
        else:
            (value, grad, H, parts), whole = at(theta, es), False
    if not whole:
        parts = at(theta, [m.eta for m in parts], cross=True)[3]
    return theta, [m.eta for m in parts], parts


def laplace_step_local(model: Model, pool: ShardPool, *, seed: int, preconditioner: str) -> LocalLaplace:
    """The mode of θ with the η_i integrated out by Laplace's method (`marginal_mode`, from the MAP search's seeded
    start and η = 0); there every shard's Laplace-marginal quadratic in θ (`shards.shard_marginal`), the Laplace
    preconditioner of θ from their sum plus the prior Hessian, and those quadratics in φ (`Laplace`, centre 0), as
    `laplace_step` gives them."""
    d = model.dim
    prior = model.prior()
    theta_map, eta_map, marg = marginal_mode(model, pool, map_start(seed, d))
    if not np.all(np.isfinite(theta_map)):
        raise FloatingPointError("MAP search diverged: the posterior may be improper for this data and prior")
    dims = [int(e.size) for e in eta_map]
    H = sum(m.hessian for m in marg) + prior_hessian(prior, theta_map)
    H = 0.5 * (H + H.T)
    precond = laplace_factor(theta_map, H) if resolve_preconditioner(preconditioner, d) == "laplace" else None
    if precond is None:
        precond = Preconditioner(theta_map, 1.0 / np.sqrt(np.clip(np.diag(H), 1e-12, None)), "diag")
    quads = [(precond.pull_grad(m.grad[None, :])[0], precond.pull_matrix(m.hessian)) for m in marg]
    curvature = np.array([np.linalg.eigvalsh(P)[-1] for _, P in quads])
    prior_P, prior_b = precond.prior_in_phi(np.asarray(prior.gaussian.mean, dtype=float), prior.gaussian.precision)
    if prior.residual is not None:
        term = WhitenedModel(model, precond).prior().residual
        assert term is not None
        origin = np.zeros((1, d))
        Hr = term.hvp(np.repeat(origin, d, axis=0), np.eye(d))
        prior_P = prior_P + 0.5 * (Hr + Hr.T)
        prior_b = prior_b - term.grad(origin)[0]
    lap = Laplace(theta_map, precond, np.zeros(d), quads, prior_P, prior_b, np.maximum(curvature, 1e-12))
    return LocalLaplace(lap, eta_map, dims)
