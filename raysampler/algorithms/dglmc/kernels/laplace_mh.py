"""Kernel "laplace_mh" (the default): N_i Metropolis–Hastings steps on Π_ρ(z_i | θ) ([DG-LMC] Plassier et al., ICML
2021, eq. 4's target), proposing from the worker's Laplace approximation of it, fitted once.

With r = U_i − q the non-quadratic remainder of U_i beyond its Laplace model q(z) = gᵀ(z − c) + ½(z − c)ᵀP(z − c),
the round's proposal law is the Laplace conditional N(m, A⁻¹), A = P + I/ρ, re-centred (`recentre.py`) by r's
gradient at its mean m: N(m − A⁻¹ℓ, A⁻¹) with ℓ = ∇r(m) (the step scaled down to `RECENTRE_TRUST` sds where
longer), the Gaussian proportional to exp(−q(z) − ℓᵀz − ‖z − θ‖²/(2ρ)). It depends on θ only, so Π_ρ(z_i | θ) = that
Gaussian × exp(−r̃), r̃(z) = r(z) − ℓᵀz, and the acceptance ratio is exp(r̃(z) − r̃(z')): exact for Π_ρ(z_i | θ), and
nearly always accepted where r is close to linear on the conditional's scale √ρ (breast_cancer: 0.97, against 0.82
for the plain Laplace proposal). With over-relaxation β ≠ 0 the proposal is z' = m̃ + β(z − m̃) + √(1 − β²) ξ Cᵀ,
reversible with respect to that Gaussian, so the ratio keeps the same form; a rejection leaves z in place and weakens
the over-relaxation, which is why the re-centring matters (docs/algorithms.md, "DG-LMC over-relaxation").

Over a leading shard axis: B shards step as one batch, each matrix product a stacked one (one BLAS call per shard, as
alone), the rest elementwise, so a shard's numbers do not depend on its batch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ....models.contract import Model, ShardStack
from ....streams import StackedNoise
from ...mcmc import mh_accept
from ..recentre import recentre
from ..types import LocalRound, WorkerPayload
from .base import BatchKernel, OneShard, chain_slice, column, put, round_noise, start


class LocalGaussian(NamedTuple):
    """B workers' Laplace approximations of Π_ρ(z_i | θ): with U_i(z) ≈ gᵀ(z − c) + ½(z − c)ᵀP(z − c) (its own
    shard's gradient and Hessian at the MAP c), z | θ ≈ N(A⁻¹(θ/ρ − g + Pc), A⁻¹), A = P + I/ρ; C Cᵀ = A⁻¹. Each
    field has a leading shard axis: c, g, shift (B, d), P, a_inv, chol (B, d, d)."""

    c: np.ndarray
    g: np.ndarray
    P: np.ndarray
    a_inv: np.ndarray
    chol: np.ndarray
    shift: np.ndarray  # Pc − g: the θ-free part of the proposal mean


class LaplaceMHState(NamedTuple):
    """B shards' chains: ρ_i, β_i, √(1 − β_i²) (B, 1, 1), whether β = 0 (static: shards share a batch only with the
    same), their factored proposals, z_i (B, K, d), the cached U_i(z_i), the last round's mean acceptance and the
    remainder r(z_i) = U_i(z_i) − q(z_i) (B, K), so that a step evaluates q once per proposal only; and a pipelined
    round's numbers for the later chain group (normals, log-uniforms), shard axis first."""

    rho: np.ndarray
    beta: np.ndarray
    beta_c: np.ndarray
    plain: bool
    local: LocalGaussian
    z: np.ndarray
    pot: np.ndarray
    accept: np.ndarray
    remainder: np.ndarray
    pending: tuple[np.ndarray, np.ndarray] | None = None


class LaplaceMH(BatchKernel):
    name = "laplace_mh"
    with_local_params = False
    needs_quadratics = True
    overrelaxes = True
    recentres = True

    def init(self, payload: WorkerPayload, model: Model, X: np.ndarray, y: np.ndarray) -> LaplaceMHState:
        z, pot, _ = start(model, X, y, payload.z0)
        loc = local_gaussian(payload)
        beta = payload.overrelax
        remainder = pot - _quadratic(loc, z)
        return LaplaceMHState(
            column(payload.rho),
            column(beta),
            column(math.sqrt(1.0 - beta * beta)),
            beta == 0.0,
            LocalGaussian(*(v[None] for v in loc)),
            z[None],
            pot[None],
            np.ones((1, z.shape[0])),
            remainder[None],
        )

    def step(
        self, state: LaplaceMHState, rnd: LocalRound, model: Model, data: ShardStack, noise: StackedNoise | OneShard
    ) -> tuple[LaplaceMHState, np.ndarray, np.ndarray]:
        """N_i MH steps of the round's chains of every shard of the batch (the module's docstring)."""
        xi, logu, pending = round_noise(noise, rnd, state.pending, uniforms=True)
        assert logu is not None
        chains = chain_slice(rnd.chains)
        loc, u, pot = state.local, state.z[:, chains], state.pot[:, chains]
        rem = state.remainder[:, chains]
        chol_t = loc.chol.swapaxes(1, 2)
        acc_sum = np.zeros(u.shape[:2])
        with np.errstate(all="ignore"):  # once per round: entering it costs as much as a small product
            mean = (rnd.phi / state.rho + loc.shift[:, None, :]) @ loc.a_inv
            lin = tilt = None
            if rnd.recentre:
                lin = data.apply(model.grad_stacked, mean) - _quadratic_grad(loc, mean)
                mean, lin = recentre(mean, lin, loc.a_inv)
                tilt = rem - (lin * u).sum(axis=2)
            for k in range(rnd.n_steps):
                if state.plain:
                    prop = mean + xi[k] @ chol_t
                else:  # reversible w.r.t. the proposal's Gaussian, so α keeps the same form
                    prop = mean + state.beta * (u - mean) + state.beta_c * (xi[k] @ chol_t)
                pot_p = data.apply(model.potential_stacked, prop)
                rem_p = pot_p - _quadratic_stacked(loc, prop)
                if lin is None:
                    accept, alpha = mh_accept(rem - rem_p, logu[k])
                else:
                    tilt_p = rem_p - (lin * prop).sum(axis=2)
                    accept, alpha = mh_accept(tilt - tilt_p, logu[k])
                    tilt = np.where(accept, tilt_p, tilt)
                u = np.where(accept[:, :, None], prop, u)
                pot = np.where(accept, pot_p, pot)
                rem = np.where(accept, rem_p, rem)
                acc_sum += alpha
        acc = acc_sum / max(rnd.n_steps, 1)
        new = state._replace(
            z=put(state.z, rnd.chains, u),
            pot=put(state.pot, rnd.chains, pot),
            accept=put(state.accept, rnd.chains, acc),
            remainder=put(state.remainder, rnd.chains, rem),
            pending=pending,
        )
        return new, u, acc


def local_gaussian(p: WorkerPayload) -> LocalGaussian:
    """One worker's Gaussian proposal, factored once: A = P + I/ρ (P dense or its diagonal); fields without a shard
    axis."""
    assert p.quadratic is not None
    c, g, P = p.quadratic
    P = np.diag(P) if P.ndim == 1 else P
    a_inv = np.linalg.inv(P + np.eye(P.shape[0]) / p.rho)
    a_inv = 0.5 * (a_inv + a_inv.T)
    try:
        chol = np.linalg.cholesky(a_inv)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"local_kernel='laplace_mh' needs P + I/rho positive definite; rho={p.rho:g} is too large "
            "for this shard's curvature (use a smaller rho or local_kernel='mala')"
        ) from None
    return LocalGaussian(c, g, P, a_inv, chol, P @ c - g)


def _quadratic(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """q(z) = gᵀ(z − c) + ½(z − c)ᵀP(z − c) for each row of z (one shard's, without a shard axis)."""
    w = z - loc.c
    return w @ loc.g + 0.5 * ((w @ loc.P) * w).sum(axis=1)


def _quadratic_stacked(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """q of B shards at once: z (B, K, d), `loc` with a shard axis → (B, K)."""
    w = z - loc.c[:, None, :]
    return (w @ loc.g[:, :, None])[:, :, 0] + 0.5 * ((w @ loc.P) * w).sum(axis=2)


def _quadratic_grad(loc: LocalGaussian, z: np.ndarray) -> np.ndarray:
    """∇q(z) = g + P(z − c) of B shards at once (P symmetric): z (B, K, d) → (B, K, d)."""
    return loc.g[:, None, :] + (z - loc.c[:, None, :]) @ loc.P
